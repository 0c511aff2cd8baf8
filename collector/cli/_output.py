"""Printing query results as a table, CSV or JSON."""

from __future__ import annotations

import csv
import io
import json
import sys

from rich.console import Console
from rich.table import Table
from rich.text import Text

from meritlens.collector.store._results import QueryResult, json_default

FORMATS = ("table", "csv", "json")


def render(result: QueryResult, fmt: str, out=None) -> None:
    out = out or sys.stdout
    if fmt == "json":
        rows = [dict(zip(result.columns, row)) for row in result.rows]
        out.write(json.dumps(rows, default=json_default, indent=2) + "\n")
    elif fmt == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(result.columns)
        for row in result.rows:
            writer.writerow(["" if v is None else (json_default(v) if not isinstance(v, (str, int, float, bool)) else v) for v in row])
        out.write(buffer.getvalue())
    else:
        table = Table(show_lines=False)
        for index, column in enumerate(result.columns):
            numeric = any(v is not None for v in (r[index] for r in result.rows)) and all(
                v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)) for v in (r[index] for r in result.rows))
            table.add_column(column, justify="right" if numeric else "left")
        for row in result.rows:
            table.add_row(*(Text("NULL", style="dim") if v is None else Text(str(v)) for v in row))
        Console(file=out, width=max(120, Console().width)).print(table)
        out.write(f"{len(result.rows)} row{'s' if len(result.rows) != 1 else ''}\n")
