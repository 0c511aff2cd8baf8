"""Values in SQL text, and values read back from query rows.

The query functions analytics reads through take SQL text alone (a collector's `/api/sql` takes no
parameters), so a statement written with ``?`` markers is bound here (``bind``), by one literal
writer, instead of formatting values into each statement."""

from __future__ import annotations

import datetime as _dt
import math
import re
from typing import Any, Sequence

_QUOTED_OR_MARKER = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|\?")


def sql_string(value: str) -> str:
    """``value`` as a SQL string literal."""
    return "'" + value.replace("'", "''") + "'"


def sql_literal(value: Any) -> str:
    """``value`` (None, a bool, an int, a finite float, a string, an aware datetime, or a list of
    these) as a DuckDB literal."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value!r} has no SQL literal")
        return repr(value)
    if isinstance(value, str):
        return sql_string(value)
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            raise ValueError(f"{value.isoformat()} has no time zone")
        return f"TIMESTAMPTZ {sql_string(value.astimezone(_dt.timezone.utc).isoformat())}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(sql_literal(v) for v in value) + "]"
    raise TypeError(f"no SQL literal for a {type(value).__name__}")


def bind(sql: str, params: Sequence[Any]) -> str:
    """``sql`` with each ``?`` outside quotes replaced by the literal of the next of ``params``."""
    values = iter(params)
    count = 0

    def replace(match: re.Match) -> str:
        nonlocal count
        if match.group() != "?":
            return match.group()
        count += 1
        try:
            return sql_literal(next(values))
        except StopIteration:
            raise ValueError(f"the statement has more ? markers than the {len(params)} parameters") from None

    bound = _QUOTED_OR_MARKER.sub(replace, sql)
    if count != len(params):
        raise ValueError(f"the statement has {count} ? markers for {len(params)} parameters")
    return bound


def row_time(value: Any) -> _dt.datetime | None:
    """A timestamp of a query row: a datetime, or ISO text (rows read through a collector)."""
    if value is None or isinstance(value, _dt.datetime):
        return value
    return _dt.datetime.fromisoformat(value)
