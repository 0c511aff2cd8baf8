"""Printing query results: tables for people (rounded, with units, nothing cut), CSV and JSON exact."""

from __future__ import annotations

import csv
import inspect
import io
import json
import re
import sys
from typing import Sequence

from rich.console import Console
from rich.table import Table
from rich.text import Text

from meritlens.analytics.engine import EVALUATED_SUFFIX, METRICS, WINDOW_COLUMNS, format_value
from meritlens.collector.store._results import QueryResult, json_default

FORMATS = ("table", "csv", "json")

# Window columns with a unit of their own: the quantiles' bound is relative to the value.
_OWN_UNITS = {"quantile_error": "ratio"}
# The windows' other numeric columns (value, the distribution summary, and any added later) hold
# numbers in the row's metric's unit: the row's `unit` when selected, else the catalogue's unit of its `metric`.
_IN_METRIC_UNIT = frozenset(c.name for c in WINDOW_COLUMNS
                            if c.sql_type.split()[0] in ("DOUBLE", "FLOAT", "REAL")) - set(_OWN_UNITS)
# A column named for its unit holds it whatever the table: `cost_usd`, `duration_s`, `ttft_s`.
_UNIT_SUFFIXES = (("_usd", "USD"), ("_s", "s"))
# A percentile window's value is its p95 (Window.value): the table names the statistic.
_AGGREGATION_SHOWN = {"percentile": "p95"}


def unit_of(column: str, row: dict) -> str | None:
    """The unit of ``column``'s value in ``row`` (a result row as a dict), when it is known."""
    for suffix, unit in _UNIT_SUFFIXES:
        if column.endswith(suffix):
            return unit
    if column in _OWN_UNITS:
        return _OWN_UNITS[column]
    if column not in _IN_METRIC_UNIT:
        return None
    if isinstance(row.get("unit"), str):
        return row["unit"]
    spec = METRICS.get(str(row.get("metric", "")).removesuffix(EVALUATED_SUFFIX))
    return spec.unit if spec is not None else None


def _cell(column: str, value, row: dict) -> Text:
    if value is None:
        return Text("NULL", style="dim")
    if column == "aggregation" and value in _AGGREGATION_SHOWN:
        return Text(_AGGREGATION_SHOWN[value])
    return Text(format_value(value, unit_of(column, row)))


def first_paragraph(doc: str | None) -> str:
    """A docstring's first paragraph on one line: whole sentences, never its first line cut off."""
    return " ".join(inspect.cleandoc(doc or "").split("\n\n")[0].split())


def first_sentence(doc: str | None) -> str:
    """The first sentence of a docstring's first paragraph, whole."""
    return re.split(r"(?<=\.)\s+(?=[A-Z`])", first_paragraph(doc), maxsplit=1)[0]


def render(result: QueryResult, fmt: str, out=None, *, shown: Sequence[str] | None = None) -> None:
    """``result`` as a table (only the ``shown`` columns, when given), CSV or JSON (every column)."""
    out = out or sys.stdout
    if fmt == "json":
        rows = [dict(zip(result.columns, row)) for row in result.rows]
        out.write(json.dumps(rows, default=json_default, indent=2) + "\n")
    elif fmt == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(result.columns)
        for row in result.rows:
            writer.writerow(["" if v is None else (json_default(v) if not isinstance(v, (str, int, float, bool)) else v)
                             for v in row])
        out.write(buffer.getvalue())
    else:
        print_table(result.columns, result.rows, out, shown=shown)
        out.write(f"{len(result.rows)} row{'s' if len(result.rows) != 1 else ''}\n")


def print_table(columns: list[str], rows: list[tuple], out=None, title: str | None = None, *,
                shown: Sequence[str] | None = None) -> None:
    """A table as wide as its widest cells need (wrapped on a terminal narrower than that, never cut).
    Each number is shown with its unit, read from the whole row (``shown`` may leave `unit` out)."""
    out = out or sys.stdout
    shown = list(shown or columns)
    records = [dict(zip(columns, row)) for row in rows]
    cells = [[_cell(c, record[c], record) for c in shown] for record in records]
    table = Table(show_lines=False, title=title)
    widths = []
    for index, column in enumerate(shown):
        values = [record[column] for record in records]
        numeric = any(v is not None for v in values) and all(
            v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)) for v in values)
        table.add_column(column, justify="right" if numeric else "left", overflow="fold")
        widths.append(max([len(column), *(c[index].cell_len for c in cells)]))
    for row in cells:
        table.add_row(*row)
    needed = sum(widths) + 3 * len(widths) + 1
    terminal = getattr(out, "isatty", lambda: False)()
    width = Console().width if terminal else max(80, needed)
    Console(file=out, width=width).print(table)
