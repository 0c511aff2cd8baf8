"""Statements written with ? markers read the same values through a text-only query function as
DuckDB's own parameter binding gives."""

from __future__ import annotations

import datetime as _dt

import duckdb
import pytest

from meritlens.analytics._sql import bind

STATEMENT = "SELECT ? AS text, ? AS n, ? AS x, ? AS at, ? AS missing, ? AS names, '?' AS mark, 1 AS \"why?\""
VALUES = ["it's a '?'", 7, 0.25, _dt.datetime(2026, 1, 2, 3, 4, 5, 600_000, tzinfo=_dt.timezone(_dt.timedelta(hours=2))),
          None, ["a", "b'c"]]


def test_bound_text_reads_what_parameters_read():
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    bound = con.execute(bind(STATEMENT, VALUES))
    assert bound.fetchall() == con.execute(STATEMENT, VALUES).fetchall()
    assert bound.description[-1][0] == "why?"


def test_markers_and_parameters_must_match():
    with pytest.raises(ValueError, match="1 \\? markers for 2 parameters"):
        bind("SELECT ?", [1, 2])
    with pytest.raises(ValueError, match="more \\? markers than the 1 parameters"):
        bind("SELECT ?, ?, ?", [1])
    with pytest.raises(ValueError, match="no time zone"):
        bind("SELECT ?", [_dt.datetime(2026, 1, 1)])
