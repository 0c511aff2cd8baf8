"""The patterns a redaction policy masks or hashes: the built-in ones, and the checks a user's pattern passes.

Each pattern has two forms:

* ``regex``: the exact form (Python's ``re``, ASCII classes), searched in the text of one value;
* ``precheck``: a form in RE2's syntax that the collector searches in a span's JSON columns at once, where the
  text is still JSON-escaped. It matches wherever the exact form would match one of the decoded strings (a
  superset: it may also match where the exact form does not), so a span it does not match is left as it is
  without being decoded.

A JSON escape (``\\n``, ``\\"``, ``\\u00e9``; doubled inside a message JSON held in an attribute) stands where the
decoded text has one character. The built-ins' prechecks are written to allow for it; a user's pattern is
rewritten so that each part of it that could match an escaped character may also match an escape sequence.
A user's pattern is limited to what Python's re and RE2 both read the same way, and to searching (no anchors).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

Spans = Iterator[tuple[int, int]]

# RE2: what may stand before a match that must not follow a letter or digit, in JSON-escaped text: a
# character that is none, or an escape (the decoded character it stands for is none either).
_ESCAPE = r"\\+(?:[nrtbf]|u[0-9A-Fa-f]{4})"
_BOUNDARY = r"(?:^|[^0-9A-Za-z_]|" + _ESCAPE + ")"
# As _BOUNDARY, also not after a "." (a decimal fraction), nor after the ":" that follows a key in JSON
# (a number there is a JSON number, never text); a ":" inside text stays a boundary.
_NUMBER_BOUNDARY = r'(?:^:?|[^0-9A-Za-z_.:]|[^"]:|[:\[,]":|\\":|' + _ESCAPE + ")"
ESCAPES = _ESCAPE
"""RE2: one JSON escape standing for a control or non-ASCII character, at any depth of nesting."""


def _whole(match: re.Match) -> Spans:
    yield match.span()


def _luhn(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _card_spans(match: re.Match) -> Spans:
    """The longest run of whole digit groups (13 to 19 digits) that passes the Luhn check: a card number
    written next to another number is still found, and a long number failing the check is no card."""
    groups = [(m.start(), m.end()) for m in re.finditer(r"\d+", match.group())]
    best = None
    for i in range(len(groups)):
        digits = ""
        for j in range(i, len(groups)):
            digits += match.group()[groups[j][0]:groups[j][1]]
            if len(digits) > 19:
                break
            span = (groups[i][0], groups[j][1])
            if len(digits) >= 13 and _luhn(digits) and (best is None or span[1] - span[0] > best[1] - best[0]):
                best = span
    if best is not None:
        yield match.start() + best[0], match.start() + best[1]


def _phone_spans(match: re.Match) -> Spans:
    """The longest run of the match's first digit groups that holds as many digits as a phone number: 8 to 15
    for an international one (E.164), 9 to 13 for a national one from 0 (NNN-NNN-NNNN holds 10 by its regex)."""
    text = match.group()
    low, high = (8, 15) if text.startswith("+") else (9, 13)
    digits, end = 0, None
    for group in re.finditer(r"\d+", text):
        digits += len(group.group())
        if digits > high:
            break
        if digits >= low:
            end = group.end()
    if end is not None:
        yield match.start(), match.start() + end


def _ipv4_spans(match: re.Match) -> Spans:
    """Four numbers up to 255, none with a leading zero."""
    if all(int(part) <= 255 and (len(part) == 1 or part[0] != "0") for part in match.group().split(".")):
        yield match.span()


def _ipv6_spans(match: re.Match) -> Spans:
    text = match.group().rstrip(".")
    if any(ch in "0123456789abcdefABCDEF" for ch in text):
        try:
            if ipaddress.ip_address(text).version == 6:
                yield match.start(), match.start() + len(text)
        except ValueError:
            pass


@dataclass(frozen=True)
class Builtin:
    name: str
    regex: re.Pattern
    precheck: str
    spans: Callable[[re.Match], Spans]
    """The parts of a match to replace (none when the match fails a check the regex cannot make)."""
    hint: tuple[tuple[str, ...], ...]
    """Texts it needs: a text holding one of each group's strings, or it cannot match (a cheap first look)."""
    description: str


def _builtin(name: str, regex: str, precheck: str, hint: tuple[tuple[str, ...], ...], description: str,
             spans: Callable[[re.Match], Spans] = _whole) -> Builtin:
    return Builtin(name, re.compile(regex, re.ASCII), precheck, spans, hint, description)


_DIGITS = tuple("0123456789")
# A pattern led by its literal is found fast by Python's re; so the literal comes first and the look back at
# the character before it follows it (a lookbehind one literal wider). A precheck needs only enough of a
# pattern to be rare in text (fewer repeats compile faster); two equal prechecks are searched once.
BUILTINS: dict[str, Builtin] = {b.name: b for b in (
    _builtin("email", r"(?<![\w.%+-])[\w.%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}(?![A-Za-z0-9-])",
             r"@[A-Za-z0-9-]+\.[A-Za-z0-9-]", (("@",),), "e-mail addresses"),
    _builtin("phone",
             # +CC and 7 to 14 more digits; (NNN) NNN-NNNN or NNN-NNN-NNNN; a national number from 0 in groups.
             r"\+(?<![\w+]\+)\d(?:[ .-]?\(?\d++\)?)++"
             r"|(?:\((?<![\w(.+-]\()\d{3}\) ?|\d(?<![\w(.+-]\d)\d\d[ .-])\d{3}[ .-]\d{4}(?![\w-]|\.\d)"
             r"|0(?<![\w.+-]0)\d{1,4}(?:[ -]\d{2,8}){1,4}(?![\w-]|\.\d)",
             r"\+[0-9][0-9 ().-]{7}|(?:[0-9]{3}[ .-]|\) ?)[0-9]{3}[ .-][0-9]{4}|"
             + _BOUNDARY + r"0[0-9]{1,4}[ -][0-9]{2}",
             (_DIGITS,),
             "phone numbers: international (+CC …), (NNN) NNN-NNNN, NNN-NNN-NNNN, national from 0 in groups",
             _phone_spans),
    _builtin("payment_card", r"\d(?<![\w.]\d)(?:[ -]?\d){12,18}(?![\w])", _NUMBER_BOUNDARY + r"[0-9](?:[ -]?[0-9]){12}",
             (_DIGITS,), "payment card numbers: 13 to 19 digits, in groups or not, that pass the Luhn check",
             _card_spans),
    _builtin("ipv4", r"\d(?<![\w.]\d)\d{0,2}(?:\.\d{1,3}){3}(?![\w]|\.\d)",
             r"[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]", ((".",), _DIGITS), "IPv4 addresses", _ipv4_spans),
    _builtin("ipv6", r"(?<![\w:.])(?=[0-9A-Fa-f]{0,4}:)[0-9A-Fa-f:.]{2,45}+(?![\w:])",
             r"[0-9A-Fa-f]:[0-9A-Fa-f]{0,4}:|::[0-9A-Fa-f]", ((":",),), "IPv6 addresses", _ipv6_spans),
    _builtin("openai_key", r"sk-(?<![\w-]sk-)(?!ant-)[\w-]{20,}", r"sk-[A-Za-z0-9_-]{20}", (("sk-",),),
             "OpenAI API keys (sk-…, sk-proj-…)"),
    _builtin("anthropic_key", r"sk-ant-(?<![\w-]sk-ant-)[\w-]{20,}", r"sk-[A-Za-z0-9_-]{20}", (("sk-ant-",),),
             "Anthropic API keys (sk-ant-…)"),
    _builtin("aws_access_key", r"A(?<![A-Za-z0-9]A)(?:KIA|SIA)[0-9A-Z]{16}(?![A-Za-z0-9])",
             r"(?:AKIA|ASIA)[0-9A-Z]{16}", (("AKIA", "ASIA"),), "AWS access key ids (AKIA…, ASIA…)"),
    _builtin("github_token", r"g(?<!\wg)(?:h[pousr]_[A-Za-z0-9]{36,}|ithub_pat_\w{22,})",
             r"gh[pousr]_[A-Za-z0-9]{8}|github_pat_[A-Za-z0-9_]{8}",
             (("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),), "GitHub tokens (ghp_…, github_pat_…)"),
    _builtin("google_api_key", r"AIza(?<![\w-]AIza)[\w-]{35}", r"AIza[A-Za-z0-9_-]{8}", (("AIza",),),
             "Google API keys (AIza…)"),
    _builtin("jwt", r"eyJ(?<![\w-]eyJ)[\w-]{5,}\.eyJ[\w-]{5,}\.[\w-]*",
             r"eyJ[A-Za-z0-9_-]{5}[A-Za-z0-9_-]*\.eyJ[A-Za-z0-9_-]{5}", (("eyJ",),),
             "JSON Web Tokens (eyJ….eyJ….…)"),
    _builtin("bearer_token", r"(?:Bearer|bearer|BEARER)(?<!\w[Bb]earer)(?<!\wBEARER)\s+[\w.~+/=-]{16,}",
             r"(?:Bearer|bearer|BEARER)(?:\s|" + _ESCAPE + r")+[A-Za-z0-9._~+/=-]{8}", (("earer", "EARER"),),
             "Bearer tokens (Bearer …, bearer …, BEARER …)"),
)}


@dataclass(frozen=True)
class UserPattern:
    """A user's pattern, checked to mean the same in Python's re and in RE2."""

    regex: re.Pattern
    """The exact form; leading flags made a group of their own, so it can be one branch of many."""
    precheck: str
    """RE2: the pattern with each part that can match a character JSON escapes (a quote, a backslash, a control
    or non-ASCII character) also matching any escape sequence, so it matches JSON-escaped text wherever the
    pattern matches the decoded text."""


_FLAGS = re.compile(r"\(\?([a-zA-Z-]+)\)")
_ANY_ESCAPE = r"\\+(?:u[0-9A-Fa-f]{4}|.)"
_REPEAT = re.compile(r"\{(\d+)(?:,(\d*))?\}")
_MAX_REPEAT = 1000
_UNSUPPORTED_GROUPS = {"=": "lookahead", "!": "lookahead", "<=": "lookbehind", "<!": "lookbehind",
                       "P=": "a backreference", ">": "an atomic group", "(": "a conditional", "#": "a comment"}


def user_pattern(text: str) -> UserPattern:
    """Check a user's pattern; raise ValueError saying what is not supported."""
    if not isinstance(text, str) or not text:
        raise ValueError("a pattern must be a non-empty string")
    flags = _FLAGS.match(text)
    body = text[flags.end():] if flags else text
    source = f"(?{flags.group(1)}:{body})" if flags else text
    try:
        regex = re.compile(source, re.ASCII)
    except re.error as exc:
        raise ValueError(f"not a valid regular expression: {exc}") from None
    precheck = _precheck(body, flags.end() if flags else 0)
    if regex.fullmatch(""):
        raise ValueError("it matches the empty string")
    return UserPattern(regex, f"(?{flags.group(1)}:{precheck})" if flags else precheck)


def _or_escape(atom: str) -> str:
    return f"(?:{atom}|{_ANY_ESCAPE})"


def _precheck(text: str, offset: int) -> str:
    """The RE2 precheck of a pattern (see UserPattern); raise ValueError on what RE2 or searching cannot do."""
    out, i, n = [], 0, len(text)
    while i < n:
        ch, at = text[i], i + offset
        if ch == "\\":
            atom, i = _escape(text, i, at, in_class=False)
            out.append(atom)
            continue
        if ch == "[":
            atom, i = _class(text, i, at)
            out.append(atom)
            continue
        if ch in "^$":
            raise ValueError(f"the anchor {ch} (position {at}) is not supported: patterns are searched inside values; "
                             "to act on a whole value, drop or hash its attribute by key")
        if ch == "(" and text.startswith("?", i + 1) and not text.startswith("?P<", i + 1):
            for opener, what in _UNSUPPORTED_GROUPS.items():
                if text.startswith(opener, i + 2):
                    raise ValueError(f"{what} (position {at}) is not supported: RE2 has none")
            flags = re.match(r"[a-zA-Z-]*", text[i + 2:]).group()
            if set(flags) - set("ims-"):
                raise ValueError(f"the flags (?{flags}) (position {at}) are not supported: only i, m and s are")
        if ch in "*+?}" and text.startswith("+", i + 1):
            raise ValueError(f"a possessive quantifier (position {at}) is not supported: RE2 has none")
        if ch == "{" and text.startswith(",", i + 1):
            raise ValueError(f"{{,n}} (position {at}) is not supported: RE2 reads it as text; write {{0,n}}")
        counts = _REPEAT.match(text, i) if ch == "{" else None
        if counts and max(int(x or 0) for x in counts.groups()) > _MAX_REPEAT:
            raise ValueError(f"a repeat count above {_MAX_REPEAT} (position {at}) is not supported by RE2")
        out.append(_or_escape(ch) if ch in '."' or not 32 <= ord(ch) < 127 else ch)
        i += 1
    return "".join(out)


def _escape(text: str, i: int, at: int, in_class: bool) -> tuple[str, int]:
    """The RE2 form of the escape at ``text[i]`` (a backslash) and the index after it."""
    if i + 1 >= len(text):
        raise ValueError("the pattern ends with a lone backslash")
    ch = text[i + 1]
    if ch in "AZz":
        raise ValueError(f"the anchor \\{ch} (position {at}) is not supported: patterns are searched inside values; "
                         "to act on a whole value, drop or hash its attribute by key")
    if ch in "0123456789g":
        raise ValueError(f"\\{ch} (position {at}) is not supported: RE2 has no backreferences nor octal escapes")
    if ch == "N":
        raise ValueError(f"\\N{{…}} (position {at}) is not supported by RE2: write the character or \\x{{…}}")
    if ch in "uU":
        width = 4 if ch == "u" else 8
        digits = text[i + 2:i + 2 + width]
        if not re.fullmatch(f"[0-9A-Fa-f]{{{width}}}", digits):
            raise ValueError(f"\\{ch} (position {at}) needs {width} hex digits")
        atom, end = "\\x{" + digits + "}", i + 2 + width
    elif ch == "x":
        atom, end = text[i:i + 4], i + 4
    else:
        atom, end = text[i:i + 2], i + 2
    if ch in "bB" and not in_class:
        # A boundary next to an escape: the escape's last character stands where the decoded text has another.
        return f"(?:{atom}|{_ANY_ESCAPE})", end
    # What cannot match a character JSON escapes stays as it is; the rest may also match an escape sequence
    # (in a class, the caller widens the whole class).
    if in_class or ch in "dw" or (ch.isascii() and not ch.isalnum() and ch not in '\\"'):
        return atom, end
    return _or_escape(atom), end


def _class(text: str, i: int, at: int) -> tuple[str, int]:
    """The RE2 form of the character class at ``text[i]`` (a ``[``) and the index after it: the class as it is
    when it cannot match a character JSON escapes, else the class or any escape sequence."""
    out, n, widen = ["["], len(text), False
    i += 1
    if text.startswith("^", i):
        out.append("^")
        widen, i = True, i + 1
    first, previous = i, None
    while i < n and (text[i] != "]" or i == first):
        ch = text[i]
        if ch == "[" and text.startswith(":", i + 1):
            raise ValueError(f"[: (position {at}) is read differently by Python (characters) and RE2 (a POSIX class)")
        if ch == "\\":
            atom, i = _escape(text, i, at, in_class=True)
            widen |= not (atom in ("\\d", "\\w") or (len(atom) == 2 and not atom[1].isalnum() and atom[1] not in '\\"'))
            out.append(atom)
            previous = None
            continue
        if ch == "-" and previous is not None and i + 1 < n and text[i + 1] != "]":
            high = text[i + 1]
            if ord(previous) <= 0x22 <= ord(high) or ord(previous) <= 0x5C <= ord(high) or ord(previous) < 32:
                widen = True
        if ch == '"' or not 32 <= ord(ch) < 127:
            widen = True
        out.append(ch)
        previous, i = ch, i + 1
    if i >= n:
        raise ValueError(f"the class at position {at} is not closed")
    out.append("]")
    atom = "".join(out)
    return (_or_escape(atom) if widen else atom), i + 1
