"""Redaction policies: what is removed, masked or hashed in spans before they leave the application or are stored.

One TOML file (docs/redaction.md, examples/redaction.toml) is read by `load_policy`; a `Redactor` applies it to
attribute values and texts. Both sides use this module: the application's `RedactingSpanExporter` and the
collector's span redactor (collector/process/_redact.py), so a policy means the same wherever it runs. It needs
the standard library only.

What a value goes through, by its attribute key: a key meritlens measures by (`PROTECTED_KEYS`) is never
touched; a key a ``drop`` glob matches is removed; a key a ``hash`` glob matches has its whole value replaced by
``hmac:<hex>``; any other string has each match of the policy's patterns replaced by ``[redacted:NAME]`` (or
by ``hmac:<hex>`` for the ``hash`` patterns). A string holding a JSON array or object (chat messages) is decoded
and each string in it is treated so, so patterns see the text as written, never its JSON escapes.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import tomllib
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from meritlens.instrumentation import conventions as c
from meritlens.instrumentation._redaction_patterns import BUILTINS, UserPattern, user_pattern

MASKED, HASHED, DROPPED = "masked", "hashed", "dropped"
"""What a rule did to a value: the ``action`` of the counts."""
HASH_PREFIX = "hmac:"
MIN_KEY_BYTES = 16

PROTECTED_KEYS: frozenset[str] = frozenset({
    # identifiers
    c.TARGET_ID, c.TASK_ID, c.CASE_ID, c.RUN_ID, c.ASSESSMENT_ID, c.GEN_AI_RESPONSE_ID, c.GEN_AI_TOOL_CALL_ID,
    c.TOOL_CALL_IDS, c.GEN_AI_CONVERSATION_ID,
    # model names, and the names the collector counts by
    c.GEN_AI_REQUEST_MODEL, c.GEN_AI_RESPONSE_MODEL, c.OPENINFERENCE_MODEL_NAME, c.GEN_AI_PROVIDER_NAME,
    c.GEN_AI_SYSTEM_DEPRECATED, c.OPENINFERENCE_PROVIDER, c.OPENINFERENCE_SYSTEM, c.GEN_AI_OPERATION_NAME,
    c.OPENINFERENCE_SPAN_KIND, c.OPENLLMETRY_REQUEST_TYPE, c.ROLE, c.SPAN_TYPE, c.SERVICE_NAME, c.EVALUATOR,
    c.GEN_AI_TOOL_NAME, c.OPENINFERENCE_TOOL_NAME, c.TOOL_CALL_NAMES, c.ERROR_TYPE, c.GEN_AI_EVALUATION_NAME,
    c.GEN_AI_RESPONSE_FINISH_REASONS, c.COST_PRICED_BY, c.JUDGE_REPLICA,
    # the evidence itself: counts, cost, times, outcomes, scores
    c.GEN_AI_USAGE_INPUT_TOKENS, c.GEN_AI_USAGE_OUTPUT_TOKENS, c.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS,
    c.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS, c.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS,
    c.GEN_AI_USAGE_PROMPT_TOKENS_DEPRECATED, c.GEN_AI_USAGE_COMPLETION_TOKENS_DEPRECATED,
    c.OPENINFERENCE_TOKENS_PROMPT, c.OPENINFERENCE_TOKENS_COMPLETION, c.OPENINFERENCE_TOKENS_TOTAL,
    c.OPENINFERENCE_TOKENS_CACHE_READ, c.OPENINFERENCE_TOKENS_CACHE_WRITE, c.OPENINFERENCE_TOKENS_REASONING,
    c.OPENLLMETRY_USAGE_TOTAL_TOKENS, c.OPENLLMETRY_USAGE_PROMPT_TOKENS, c.OPENLLMETRY_USAGE_COMPLETION_TOKENS,
    c.OPENLLMETRY_USAGE_REASONING, c.OPENLLMETRY_USAGE_CACHE_READ, c.OPENLLMETRY_USAGE_CACHE_CREATION,
    c.COST_USD, c.RETRIES, c.TOOL_CALLS, c.AGENT_STEP, c.GEN_AI_REQUEST_STREAM, c.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK,
    c.GEN_AI_REQUEST_MAX_TOKENS, c.OUTCOME_SUCCESS, c.QUALITY_SCORE, c.HUMAN_INTERVENTION,
    c.GEN_AI_EVALUATION_SCORE_VALUE,
})
"""Attribute keys no rule touches: the identifiers and the evidence meritlens measures (a glob passes them by;
a rule naming one is refused)."""


class RedactionPolicyError(ValueError):
    """A policy that cannot be used; its text is one line naming the file and the rule."""


@dataclass(frozen=True)
class PatternRule:
    name: str
    """The built-in's name or the user's: what the counts and the replacement say."""
    action: str
    """MASKED or HASHED."""
    regex: re.Pattern
    precheck: str
    """RE2 form that matches JSON-escaped text wherever ``regex`` matches a string in it (`_redaction_patterns`)."""
    builtin: bool
    spans: Any = None
    """A built-in's check of a match (the parts to replace); None: the whole match."""
    hint: tuple[tuple[str, ...], ...] = ()
    """Strings a text must hold for the rule to match it: one of each group (`_redaction_patterns.Builtin`)."""

    @property
    def where(self) -> str:
        """Where the policy file names it."""
        return f"{'mask' if self.action == MASKED else 'hash'}.{'builtins' if self.builtin else 'patterns'}.{self.name}"


@dataclass(frozen=True)
class KeyRule:
    glob: str
    action: str
    """DROPPED or HASHED."""
    regex: re.Pattern = field(compare=False)

    @property
    def name(self) -> str:
        return f"key:{self.glob}"

    @property
    def where(self) -> str:
        return f"{'drop' if self.action == DROPPED else 'hash'}.keys {self.glob!r}"


@dataclass(frozen=True)
class RedactionPolicy:
    source: str
    key_rules: tuple[KeyRule, ...]
    """Drop rules first: a key matched by a drop glob and a hash glob is dropped."""
    pattern_rules: tuple[PatternRule, ...]
    hmac_key: bytes | None = field(default=None, repr=False)

    def hash_text(self, text: str) -> str:
        """``hmac:<hex>``: HMAC-SHA256 of ``text`` under the policy's key (how a hashed value is found again)."""
        if self.hmac_key is None:
            raise RedactionPolicyError(f"redaction policy {self.source}: it hashes nothing (no [hash] key_file)")
        return HASH_PREFIX + hmac.new(self.hmac_key, text.encode(), hashlib.sha256).hexdigest()

    @property
    def rule_names(self) -> tuple[tuple[str, str], ...]:
        """(rule, action) of every rule, in the policy's order: the labels of the counts."""
        return tuple((r.name, r.action) for r in (*self.key_rules, *self.pattern_rules))


# --- reading a policy ------------------------------------------------------------------------------------------

_SECTIONS = {"drop": {"keys"}, "mask": {"builtins", "patterns"}, "hash": {"key_file", "keys", "builtins", "patterns"}}
_NAME = re.compile(r"[a-z][a-z0-9_]*")


def load_policy(path: str | os.PathLike[str]) -> RedactionPolicy:
    """Read and check a policy file; raise RedactionPolicyError (one line) on anything wrong with it."""
    source = str(path)
    try:
        with open(path, "rb") as fh:
            document = tomllib.load(fh)
    except OSError as exc:
        raise RedactionPolicyError(f"redaction policy {source}: cannot read it: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise RedactionPolicyError(f"redaction policy {source}: not valid TOML: {exc}") from None
    return policy_from_dict(document, source, Path(path).parent)


def policy_from_dict(document: Mapping[str, Any], source: str, base: Path) -> RedactionPolicy:
    """The policy of a parsed TOML document; ``base``: the folder a relative ``key_file`` is read from."""
    def fail(where: str, what: str) -> RedactionPolicyError:
        return RedactionPolicyError(f"redaction policy {source}: {where}: {what}")

    for section, value in document.items():
        if section not in _SECTIONS:
            raise fail(section, f"unknown section (known: {', '.join(_SECTIONS)})")
        if not isinstance(value, dict):
            raise fail(section, "must be a table ([" + section + "])")
        for setting in value:
            if setting not in _SECTIONS[section]:
                raise fail(f"{section}.{setting}", f"unknown setting (known: {', '.join(sorted(_SECTIONS[section]))})")
    drop, mask, hashed = (document.get(s, {}) for s in ("drop", "mask", "hash"))
    key_rules = [_key_rule(glob, DROPPED, "drop.keys", fail) for glob in _strings(drop, "keys", "drop", fail)]
    key_rules += [_key_rule(glob, HASHED, "hash.keys", fail) for glob in _strings(hashed, "keys", "hash", fail)]
    pattern_rules: list[PatternRule] = []
    for section, action in ((mask, MASKED), (hashed, HASHED)):
        name = "mask" if action == MASKED else "hash"
        for builtin in _strings(section, "builtins", name, fail):
            if builtin not in BUILTINS:
                raise fail(f"{name}.builtins", f"unknown built-in pattern {builtin!r} (known: {', '.join(BUILTINS)})")
            b = BUILTINS[builtin]
            pattern_rules.append(PatternRule(b.name, action, b.regex, b.precheck, True, b.spans, b.hint))
        patterns = section.get("patterns", {})
        if not isinstance(patterns, dict):
            raise fail(f"{name}.patterns", "must be a table of NAME = 'regular expression'")
        for rule_name, text in patterns.items():
            where = f"{name}.patterns.{rule_name}"
            if not _NAME.fullmatch(rule_name) or rule_name in BUILTINS:
                raise fail(where, "a pattern's name is lowercase letters, digits and _, and no built-in's name")
            try:
                pattern: UserPattern = user_pattern(text)
            except ValueError as exc:
                raise fail(where, str(exc)) from None
            pattern_rules.append(PatternRule(rule_name, action, pattern.regex, pattern.precheck, False))
    seen: set[str] = set()
    for rule in pattern_rules:
        if rule.name in seen:
            raise fail(rule.where, "named twice (a pattern is masked or hashed, not both)")
        seen.add(rule.name)
    key = _read_key(hashed.get("key_file"), base, fail) if "key_file" in hashed else None
    if key is None and any(r.action == HASHED for r in (*key_rules, *pattern_rules)):
        raise fail("hash.key_file", "hashing needs a key: key_file = PATH (a file of at least "
                                    f"{MIN_KEY_BYTES} secret bytes, e.g. from head -c 32 /dev/urandom)")
    drops = [r for r in key_rules if r.action == DROPPED]
    return RedactionPolicy(source, tuple(drops + [r for r in key_rules if r.action == HASHED]),
                           tuple(pattern_rules), key)


def _strings(section: Mapping, setting: str, name: str, fail) -> list[str]:
    values = section.get(setting, [])
    if not isinstance(values, list) or not all(isinstance(v, str) and v for v in values):
        raise fail(f"{name}.{setting}", "must be a list of non-empty strings")
    if len(set(values)) != len(values):
        raise fail(f"{name}.{setting}", "lists a name twice")
    return values


def _key_rule(glob: str, action: str, where: str, fail) -> KeyRule:
    if "*" not in glob and "?" not in glob and glob in PROTECTED_KEYS:
        raise fail(where, f"{glob} is an identifier or evidence meritlens measures; it is never redacted")
    regex = re.compile("".join(".*" if ch == "*" else "." if ch == "?" else re.escape(ch) for ch in glob), re.S)
    return KeyRule(glob, action, regex)


def _read_key(value: Any, base: Path, fail) -> bytes:
    if not isinstance(value, str) or not value:
        raise fail("hash.key_file", "must be a path")
    path = Path(value).expanduser()
    path = path if path.is_absolute() else base / path
    try:
        key = path.read_bytes()
    except OSError as exc:
        raise fail("hash.key_file", f"cannot read {path}: {exc.strerror or exc} "
                                    f"(make one with: head -c 32 /dev/urandom > {path})") from None
    key = key.removesuffix(b"\n").removesuffix(b"\r")
    if len(key) < MIN_KEY_BYTES:
        raise fail("hash.key_file", f"{path} holds {len(key)} bytes; a key needs at least {MIN_KEY_BYTES}")
    return key


# --- applying a policy -----------------------------------------------------------------------------------------

DROP = object()
"""What `Redactor.value` returns for a value to remove."""
_KEY_DECISIONS_MAX = 16_384
# Short texts repeat (roles, finish reasons, model and tool names, part types): their results are kept.
_TEXTS_MAX, _TEXT_MAX_CHARS = 16_384, 256


class Redactor:
    """Applies a policy to attribute values and texts, counting in ``tally`` what each rule did:
    ``tally[(rule name, action)]`` grows by one per value dropped or hashed whole and per match replaced."""

    def __init__(self, policy: RedactionPolicy) -> None:
        self.policy = policy
        self._rules = policy.pattern_rules
        self._literals = tuple(sorted({part for rule in self._rules for group in rule.hint for part in group}))
        self._hints = [(i, [frozenset(group) for group in rule.hint]) for i, rule in enumerate(self._rules)]
        self._decisions: dict[str, KeyRule | bool] = {}
        self._texts: dict[str, tuple[str | None, tuple]] = {}

    def _decision(self, key: str) -> KeyRule | bool:
        """The key rule for ``key``, True when only the patterns apply, False when nothing does."""
        decision = self._decisions.get(key)
        if decision is None:
            if key in PROTECTED_KEYS:
                decision = False
            else:
                decision = next((r for r in self.policy.key_rules if r.regex.fullmatch(key)), bool(self._rules))
            if len(self._decisions) >= _KEY_DECISIONS_MAX:
                self._decisions.clear()
            self._decisions[key] = decision
        return decision

    def attributes(self, attributes: Mapping[str, Any], tally: Counter) -> dict[str, Any] | None:
        """The attributes with the policy applied, or None when it changes none of them."""
        changed: dict[str, Any] | None = None
        for key, value in attributes.items():
            new = self.value(key, value, tally)
            if new is not value:
                if changed is None:
                    changed = dict(attributes)
                if new is DROP:
                    del changed[key]
                else:
                    changed[key] = new
        return changed

    def value(self, key: str, value: Any, tally: Counter) -> Any:
        """``value`` (the same object when unchanged), its redacted copy, or DROP."""
        decision = self._decision(key)
        if decision is False:
            return value
        if decision is not True:
            tally[(decision.name, decision.action)] += 1
            return DROP if decision.action == DROPPED else self._hash_whole(value)
        return self._content(value, tally)

    def _content(self, value: Any, tally: Counter) -> Any:
        if isinstance(value, str):
            return self.text(value, tally)
        if isinstance(value, (list, tuple)):
            items = [self._content(v, tally) for v in value]
            return value if all(a is b for a, b in zip(items, value, strict=True)) else type(value)(items)
        if isinstance(value, dict):
            new = {k: self._content(v, tally) for k, v in value.items()}
            return value if all(new[k] is v for k, v in value.items()) else new
        return value

    def _hash_whole(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.policy.hash_text(value)
        if isinstance(value, (list, tuple)):
            return type(value)(self._hash_whole(v) for v in value)
        return self.policy.hash_text(json.dumps(value, sort_keys=True, separators=(",", ":")))

    def text(self, text: str, tally: Counter) -> str:
        """``text`` (the same object when unchanged) with every match of the patterns replaced; a JSON array or
        object is decoded, its strings treated so, and encoded again when one changed."""
        if len(text) > _TEXT_MAX_CHARS:
            return self._text(text, tally)
        # Shared by threads: single dict operations need no lock, and a lost race only computes twice.
        cached = self._texts.get(text)
        if cached is None:
            counted: Counter = Counter()
            new = self._text(text, counted)
            cached = (None if new is text else new, tuple(counted.items()))
            if len(self._texts) >= _TEXTS_MAX:
                self._texts.clear()
            self._texts[text] = cached
        for rule, n in cached[1]:
            tally[rule] += n
        return text if cached[0] is None else cached[0]

    def _text(self, text: str, tally: Counter) -> str:
        rules = self._applicable(text)
        if not rules:
            return text
        head = text[:1]
        if head in ("[", "{") or (head.isspace() and text.lstrip()[:1] in ("[", "{")):
            try:
                document = json.loads(text)
            except ValueError:
                pass
            else:
                if isinstance(document, (list, dict)):
                    new = self._content(document, tally)
                    return text if new is document else json.dumps(new, ensure_ascii=False, separators=(",", ":"))
        return self._replace(text, rules, tally)

    def _applicable(self, text: str) -> list[int]:
        """The rules whose hints the text holds: the only ones that can match it."""
        present = {part for part in self._literals if part in text}
        return [i for i, groups in self._hints if all(not group.isdisjoint(present) for group in groups)]

    def _replace(self, text: str, rules: list[int], tally: Counter) -> str:
        found: list[tuple[int, int, int]] = []
        for index in rules:
            rule = self._rules[index]
            for match in rule.regex.finditer(text):
                for start, end in (rule.spans(match) if rule.spans is not None else (match.span(),)):
                    if end > start:
                        found.append((start, -end, index))
        if not found:
            return text
        found.sort()
        parts, at = [], 0
        for start, negative_end, index in found:
            if start < at:
                continue  # overlaps a match taken already: the earlier (then the longer, then the first) wins
            rule, end = self._rules[index], -negative_end
            parts.append(text[at:start])
            parts.append(f"[redacted:{rule.name}]" if rule.action == MASKED else self.policy.hash_text(text[start:end]))
            tally[(rule.name, rule.action)] += 1
            at = end
        parts.append(text[at:])
        return "".join(parts)
