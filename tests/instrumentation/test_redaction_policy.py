"""Redaction policies read from real TOML files, and what they do to values: every built-in pattern (and the
near misses it must leave), user patterns, keyed hashing, drop and hash by key, JSON messages, identifiers."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections import Counter

import pytest

from meritlens.instrumentation import conventions as c
from meritlens.instrumentation.redaction import (
    DROP,
    PROTECTED_KEYS,
    RedactionPolicyError,
    Redactor,
    load_policy,
)
from tests.redaction_support import EVERY_BUILTIN, KEY, example_policy, policy, write_policy

# (built-in, text that holds one, the part it must replace)
POSITIVES = [
    ("email", "write to jane.doe+tag@mail.example.co.uk today", "jane.doe+tag@mail.example.co.uk"),
    ("email", "from: a_b@x-y.io.", "a_b@x-y.io"),
    ("phone", "call +1 (555) 123-4567 now", "+1 (555) 123-4567"),
    ("phone", "call +44 20 7946 0958.", "+44 20 7946 0958"),
    ("phone", "or +4915112345678", "+4915112345678"),
    ("phone", "office 555-123-4567", "555-123-4567"),
    ("phone", "office (555) 123-4567", "(555) 123-4567"),
    ("phone", "office 555.123.4567", "555.123.4567"),
    ("phone", "Paris 01 42 68 53 00", "01 42 68 53 00"),
    ("phone", "London 020 7946 0958", "020 7946 0958"),
    ("payment_card", "card 4111 1111 1111 1111 exp 12/29", "4111 1111 1111 1111"),
    ("payment_card", "card 4111-1111-1111-1111", "4111-1111-1111-1111"),
    ("payment_card", "card 5500005555555559.", "5500005555555559"),
    ("payment_card", "amex 3782 822463 10005", "3782 822463 10005"),
    ("payment_card", "qty 24 4111111111111111", "4111111111111111"),
    ("ipv4", "from 192.168.10.254:8080", "192.168.10.254"),
    ("ipv4", "host 8.8.8.8.", "8.8.8.8"),
    ("ipv6", "from 2001:db8:85a3::8a2e:370:7334 ok", "2001:db8:85a3::8a2e:370:7334"),
    ("ipv6", "loopback ::1.", "::1"),
    ("ipv6", "full 2001:0db8:0000:0000:0000:ff00:0042:8329", "2001:0db8:0000:0000:0000:ff00:0042:8329"),
    ("ipv6", "mapped ::ffff:192.0.2.128 here", "::ffff:192.0.2.128"),
    ("openai_key", "key sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8t", "sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8t"),
    ("openai_key", "OPENAI_API_KEY=sk-abcdefghijklmnopqrstuvwx", "sk-abcdefghijklmnopqrstuvwx"),
    ("anthropic_key", "key sk-ant-api03-AbCdEfGhIjKlMnOpQrStUv_w", "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUv_w"),
    ("aws_access_key", "aws AKIAIOSFODNN7EXAMPLE secret", "AKIAIOSFODNN7EXAMPLE"),
    ("aws_access_key", "sts ASIAY34FZKBOKMUTVV7A", "ASIAY34FZKBOKMUTVV7A"),
    ("github_token", "token ghp_" + "a1B2" * 9, "ghp_" + "a1B2" * 9),
    ("github_token", "token github_pat_11ABCDEFG0123456789_abcdefghij", "github_pat_11ABCDEFG0123456789_abcdefghij"),
    ("google_api_key", "key AIzaSyA-1234567890abcdefghijklmnopqrstu", "AIzaSyA-1234567890abcdefghijklmnopqrstu"),
    ("jwt", "t=eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
     "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"),
    ("bearer_token", "Authorization: Bearer abcDEF123456ghiJKL789", "Bearer abcDEF123456ghiJKL789"),
    ("bearer_token", "authorization: bearer\tabcDEF123456ghiJKL789", "bearer\tabcDEF123456ghiJKL789"),
]

# Texts near each built-in that must stay as they are.
NEAR_MISSES = [
    "no address in user@localhost or @handle.",
    "order 4111111111111112 fails the Luhn check",  # 16 digits, not a card
    "invoice 123456789012, ticket 98765432, 1234567890123456789 units",  # ordinary long numbers
    "dated 2024-01-15 at 10:30:00, version 1.2.3, price 0.000315, ratio 3.14159265358979",
    "score +5 points, build 10.0.19041.1, 999.123.4567.1 is no address",
    "span 1a2b3c4d5e6f7a8b, trace 4bf92f3577b34da6a3ce929d0e0e4736, uuid 123e4567-e89b-12d3-a456-426614174000",
    "the mac 00:1a:2b:3c:4d:5e and c++ std::vector and a::b::c",
    "task-abcdefghijklmnopqrstuvwxyz, desk-1234 and sk-short",
    "AKIA in lowercase akiaiosfodnn7example, ghp_short, AIza too short",
    "a bearer of news; Bearer short",
    "eyJ alone, eyJhbGciOiJIUzI1NiJ9 without a payload",
    "+1 2 is arithmetic, call extension 1234",
]


@pytest.fixture
def redactor(tmp_path) -> Redactor:
    return Redactor(policy(tmp_path, EVERY_BUILTIN))


@pytest.mark.parametrize("name, text, secret", POSITIVES)
def test_each_builtin_masks_what_it_names(redactor, name, text, secret):
    tally = Counter()
    out = redactor.text(text, tally)
    assert out == text.replace(secret, f"[redacted:{name}]")
    assert tally == {(name, "masked"): 1}


@pytest.mark.parametrize("text", NEAR_MISSES)
def test_near_misses_are_left_as_they_are(redactor, text):
    tally = Counter()
    assert redactor.text(text, tally) is text
    assert not tally


def test_a_card_number_must_pass_the_luhn_check(redactor):
    assert redactor.text("4111111111111111", Counter()) == "[redacted:payment_card]"
    for last in "023456789":
        assert redactor.text("411111111111111" + last, Counter()) == "411111111111111" + last


def test_user_patterns_mask_their_matches_and_read_as_written(tmp_path):
    r = Redactor(policy(tmp_path, r"""
[mask.patterns]
customer_number = '\bCUST-[0-9]{6}\b'
password_field = '(?i)password"?\s*[:=]\s*"?[^",\s]+'
surname = 'Müller'
"""))
    tally = Counter()
    assert r.text("ids CUST-123456 and XCUST-123456 and CUST-1234567", tally) == \
        "ids [redacted:customer_number] and XCUST-123456 and CUST-1234567"
    assert r.text('{"note": "PASSWORD: hunter2, ok"}', tally) == '{"note":"[redacted:password_field], ok"}'
    assert r.text("Herr Müller", tally) == "Herr [redacted:surname]"
    assert tally == {("customer_number", "masked"): 1, ("password_field", "masked"): 1, ("surname", "masked"): 1}


def test_hashing_is_stable_keyed_and_recognizable(tmp_path):
    text = """
[hash]
key_file = "redaction.key"
keys = ["enduser.id"]
builtins = ["email"]
"""
    one = Redactor(policy(tmp_path, text))
    tally = Counter()
    hashed = one.attributes({"enduser.id": "u-42", "note": "mail jane@example.com"}, tally)
    expected = "hmac:" + hmac.new(KEY, b"u-42", hashlib.sha256).hexdigest()
    assert hashed["enduser.id"] == expected == one.policy.hash_text("u-42")
    assert hashed["note"] == "mail hmac:" + hmac.new(KEY, b"jane@example.com", hashlib.sha256).hexdigest()
    assert one.attributes({"enduser.id": "u-42"}, tally)["enduser.id"] == expected  # stable
    assert tally == {("key:enduser.id", "hashed"): 2, ("email", "hashed"): 1}
    other = tmp_path / "other"
    other.mkdir()
    two = Redactor(policy(other, text, key=b"another-secret-key-of-32-bytes!!"))
    assert two.attributes({"enduser.id": "u-42"}, Counter())["enduser.id"] != expected  # keyed
    # A number is hashed as its JSON text, an array element by element.
    assert one.value("enduser.id", 42, Counter()) == one.policy.hash_text("42")
    assert one.value("enduser.id", ("a", "b"), Counter()) == (one.policy.hash_text("a"), one.policy.hash_text("b"))


def test_a_key_file_ending_in_a_line_break_gives_the_same_key(tmp_path):
    text = '[hash]\nkey_file = "redaction.key"\nkeys = ["user.id"]\n'
    assert policy(tmp_path, text, key=KEY + b"\n").hmac_key == KEY


def test_drop_and_hash_by_key_glob_and_identifiers_stay(tmp_path):
    r = Redactor(policy(tmp_path, """
[drop]
keys = ["*.password", "http.request.header.*", "gen_ai.*"]
[hash]
key_file = "redaction.key"
keys = ["user.?d", "*.password"]
[mask]
builtins = ["email"]
"""))
    protected = {key: "bob@example.com" for key in PROTECTED_KEYS}
    tally = Counter()
    out = r.attributes({**protected, "db.password": "x", "http.request.header.cookie": ["a", "b"], "user.id": "u1",
                        "gen_ai.input.messages": "[]", "note": "bob@example.com", "count": 3}, tally)
    assert {k: out[k] for k in PROTECTED_KEYS} == protected  # neither dropped, hashed nor masked
    assert "db.password" not in out and "http.request.header.cookie" not in out and "gen_ai.input.messages" not in out
    assert out["user.id"] == r.policy.hash_text("u1")  # a drop glob wins over a hash glob, others hash
    assert out["note"] == "[redacted:email]" and out["count"] == 3
    assert tally == {("key:*.password", "dropped"): 1, ("key:http.request.header.*", "dropped"): 1,
                     ("key:gen_ai.*", "dropped"): 1, ("key:user.?d", "hashed"): 1, ("email", "masked"): 1}
    assert r.value("db.password", "x", Counter()) is DROP


def test_message_json_is_decoded_masked_and_stays_json(tmp_path):
    r = Redactor(policy(tmp_path, EVERY_BUILTIN))
    messages = [{"role": "user", "parts": [{"type": "text", "content": "Hi,\nI am \"Jane\" (jane@example.com),"
                                                                          " café +1 555 123 4567"}]},
                {"role": "assistant", "parts": [{"type": "tool_call", "id": "call_1", "name": "lookup", "arguments":
                                                 json.dumps({"email": "jane@example.com", "n": 4111111111111111})}]}]
    tally = Counter()
    for encoded in (json.dumps(messages), json.dumps(messages, ensure_ascii=False, indent=2)):
        out = json.loads(r.text(encoded, tally))
        assert out[0]["parts"][0]["content"] == 'Hi,\nI am "Jane" ([redacted:email]), café [redacted:phone]'
        arguments = json.loads(out[1]["parts"][0]["arguments"])  # a JSON string inside the JSON: decoded too
        assert arguments == {"email": "[redacted:email]", "n": 4111111111111111}  # numbers are no text
        assert out[1]["parts"][0]["id"] == "call_1"
    assert tally == {("email", "masked"): 4, ("phone", "masked"): 2}
    untouched = json.dumps(messages[:1]).replace("jane@example.com", "jane").replace("+1 555 123 4567", "")
    assert r.text(untouched, tally) is untouched


def test_text_that_only_looks_like_json_is_treated_as_text(tmp_path):
    r = Redactor(policy(tmp_path, EVERY_BUILTIN))
    assert r.text("[note] jane@example.com", Counter()) == "[note] [redacted:email]"
    assert r.text("{broken jane@example.com", Counter()) == "{broken [redacted:email]"


def test_the_example_policy_loads_and_applies(tmp_path):
    r = Redactor(load_policy(example_policy(tmp_path)))
    tally = Counter()
    out = r.attributes({"user.id": "u1", "db.password": "p", "note": "CUST-1234567 jane@example.com",
                        c.GEN_AI_RESPONSE_ID: "CUST-1234567"}, tally)
    assert out == {"user.id": r.policy.hash_text("u1"), "note": "[redacted:customer_number] [redacted:email]",
                   c.GEN_AI_RESPONSE_ID: "CUST-1234567"}


# (policy text, what the one-line error must name)
INVALID = [
    ("[mask\nbuiltins = 1", "not valid TOML"),
    ("[masks]\nbuiltins = []", "masks: unknown section"),
    ("[mask]\nbuiltin = ['email']", "mask.builtin: unknown setting"),
    ("[mask]\nbuiltins = ['email', 'ssn']", "mask.builtins: unknown built-in pattern 'ssn'"),
    ("[mask]\nbuiltins = 'email'", "mask.builtins: must be a list"),
    ("[mask.patterns]\nbad = 'CUST-(['", "mask.patterns.bad: not a valid regular expression"),
    ("[mask.patterns]\nwhole = '^[0-9]{9}$'", "mask.patterns.whole: the anchor ^"),
    ("[mask.patterns]\nlook = '(?<=id=)[0-9]+'", "mask.patterns.look: lookbehind"),
    ("[mask.patterns]\nagain = '(a)\\1'", "mask.patterns.again: \\1"),
    ("[mask.patterns]\nbig = 'x{2000}'", "mask.patterns.big: a repeat count above 1000"),
    ("[mask.patterns]\nempty = 'x*'", "mask.patterns.empty: it matches the empty string"),
    ("[mask.patterns]\nemail = 'x'", "mask.patterns.email: a pattern's name"),
    ("[mask]\nbuiltins = ['email']\n[hash]\nkey_file = 'redaction.key'\nbuiltins = ['email']",
     "email: named twice"),
    ("[hash]\nkeys = ['user.id']", "hash.key_file: hashing needs a key"),
    ("[hash]\nkey_file = 'missing.key'\nkeys = ['user.id']", "hash.key_file: cannot read"),
    ("[drop]\nkeys = ['gen_ai.response.id']", "drop.keys: gen_ai.response.id is an identifier"),
]


@pytest.mark.parametrize("text, named", INVALID)
def test_an_invalid_policy_is_refused_in_one_line_naming_the_rule(tmp_path, text, named):
    path = write_policy(tmp_path, text)
    with pytest.raises(RedactionPolicyError) as raised:
        load_policy(path)
    message = str(raised.value)
    assert len(message.splitlines()) == 1, message
    assert message.startswith(f"redaction policy {path}: ") and named in message, message


def test_a_short_key_and_a_missing_file_are_refused(tmp_path):
    path = write_policy(tmp_path, "[hash]\nkey_file = 'redaction.key'\nkeys = ['user.id']", key=b"short")
    with pytest.raises(RedactionPolicyError, match="holds 5 bytes; a key needs at least 16"):
        load_policy(path)
    with pytest.raises(RedactionPolicyError, match="cannot read it"):
        load_policy(tmp_path / "nowhere.toml")
