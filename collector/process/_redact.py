"""A redaction policy applied to normalized span rows before they are stored.

`SpanRedactor.redact` takes the rows as `SpanBatch.to_arrow()` gives them and returns them with the policy
applied (docs/redaction.md): in the JSON columns ``attributes`` and ``resource`` (objects of attributes),
``events`` and ``links`` (each item's ``attributes``), and in the text columns ``name`` and ``status_message``.
No other column is touched: ids, target, model and provider names, and the numbers are evidence.

How it stays cheap: most spans hold nothing a policy acts on. The six columns of a span are joined into one
text and searched once, in Arrow, with one RE2 expression joining every rule's precheck (`_redaction_patterns`);
only the spans it matches are decoded and given to the shared `Redactor`, which decides exactly. The prechecks
match JSON-escaped text wherever a rule could act on a decoded value, so a span they pass by is one the policy
leaves as it is. Arrow compiles the expression on every call (~0.3 ms): one call per batch keeps that small.
"""

from __future__ import annotations

import os
import threading
from collections import Counter
from collections.abc import Callable

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from meritlens.instrumentation.redaction import RedactionPolicy, RedactionPolicyError, Redactor, load_policy

TEXT_COLUMNS = ("name", "status_message")
OBJECT_COLUMNS = ("attributes", "resource")
"""JSON objects of attributes."""
LIST_COLUMNS = ("events", "links")
"""JSON lists of items, each with an ``attributes`` object."""
REDACTED_COLUMNS = TEXT_COLUMNS + OBJECT_COLUMNS + LIST_COLUMNS
# Joins a span's columns for the search: a character no JSON column holds, and a boundary for every precheck.
_SEPARATOR = "\n"
_JOIN = pc.JoinOptions(null_handling="replace", null_replacement="")


def _key_precheck(glob: str) -> str:
    """RE2 for the glob's key as it stands in a JSON object: "key":"""
    body = "".join('[^"]*' if ch == "*" else '[^"]' if ch == "?" else
                   "\\" + ch if ch.isascii() and not ch.isalnum() else ch for ch in glob)
    return f'"{body}":'


class SpanRedactor:
    """Applies one policy to batches of span rows and keeps what each rule did (`counts`).

    Safe to call from several threads at once; the counts only grow.
    """

    def __init__(self, policy: RedactionPolicy) -> None:
        self.policy = policy
        self._redactor = Redactor(policy)
        prechecks = [(rule.where, rule.precheck) for rule in policy.pattern_rules]
        prechecks += [(rule.where, _key_precheck(rule.glob)) for rule in policy.key_rules]
        for where, precheck in prechecks:
            _check_re2(policy, where, precheck)
        self._precheck = "|".join(f"(?:{p})" for p in dict.fromkeys(p for _, p in prechecks)) or None
        self._counts: Counter = Counter()
        self._lock = threading.Lock()

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> SpanRedactor:
        """The redactor of a policy file; RedactionPolicyError (one line naming the rule) when it is invalid."""
        return cls(load_policy(path))

    def counts(self) -> dict[tuple[str, str], int]:
        """Values changed since this redactor was made, by (rule, action): "masked" and "hashed" count matches
        replaced and values hashed whole, "dropped" attributes removed."""
        with self._lock:
            return dict(self._counts)

    def redact(self, table: pa.Table) -> pa.Table:
        """``table`` (span rows, `SpanBatch.to_arrow()`) with the policy applied; the same table when the policy
        changes nothing in it."""
        if self._precheck is None or table.num_rows == 0:
            return table
        names = [name for name in REDACTED_COLUMNS if name in table.column_names]
        joined = pc.binary_join_element_wise(*(table.column(name) for name in names), _SEPARATOR, options=_JOIN)
        candidates = pc.indices_nonzero(pc.match_substring_regex(joined, self._precheck))
        if len(candidates) == 0:
            return table
        rows = candidates.to_pylist()
        tally: Counter = Counter()
        for name in names:
            index = table.schema.get_field_index(name)
            new = self._column(name, table.column(index), rows, candidates, tally)
            if new is not None:
                table = table.set_column(index, table.field(index), new)
        if tally:
            with self._lock:
                self._counts.update(tally)
        return table

    def _column(self, name: str, column: pa.ChunkedArray, rows: list[int], candidates: pa.Array,
                tally: Counter) -> pa.Array | None:
        """The column with the candidate rows' values redacted, or None when none changes."""
        redact = self._value_redactor(name)
        # A value repeated in the batch (a resource) is decoded once, and counted for each row.
        results: dict[str, tuple[bool, str | None, Counter]] = {}
        changed_at: list[int] = []
        changed: list[str | None] = []
        for row, value in zip(rows, column.take(candidates).to_pylist(), strict=True):
            if value is None:
                continue
            result = results.get(value)
            if result is None:
                value_tally: Counter = Counter()
                new = redact(value, value_tally)
                result = results[value] = (new is not value, new, value_tally)
            tally.update(result[2])
            if result[0]:
                changed_at.append(row)
                changed.append(result[1])
        if not changed_at:
            return None
        flags = [False] * len(column)
        for row in changed_at:
            flags[row] = True
        array = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
        return pc.replace_with_mask(array, pa.array(flags, pa.bool_()), pa.array(changed, array.type))

    def _value_redactor(self, name: str) -> Callable[[str, Counter], str | None]:
        """What redacts one value of the column: returns the value itself when nothing changes."""
        redactor = self._redactor
        if name in TEXT_COLUMNS:
            return redactor.text

        def redact_object(value: str, tally: Counter) -> str | None:
            attributes = redactor.attributes(orjson.loads(value), tally)
            if attributes is None:
                return value
            return orjson.dumps(attributes).decode() if attributes else None  # no attributes left: NULL, as stored

        def redact_list(value: str, tally: Counter) -> str:
            items = orjson.loads(value)
            changed = False
            for item in items:
                attributes = redactor.attributes(item.get("attributes") or {}, tally)
                if attributes is not None:
                    item["attributes"] = attributes
                    changed = True
            return orjson.dumps(items).decode() if changed else value

        return redact_object if name in OBJECT_COLUMNS else redact_list


def _check_re2(policy: RedactionPolicy, where: str, pattern: str) -> None:
    """Refuse, naming the rule, a precheck that Arrow's regular expressions (RE2) cannot compile."""
    try:
        pc.match_substring_regex(pa.array([""]), pattern)
    except pa.ArrowInvalid as exc:
        raise RedactionPolicyError(f"redaction policy {policy.source}: {where}: RE2 cannot compile it: "
                                   f"{str(exc).splitlines()[0]}") from None
