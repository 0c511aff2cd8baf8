"""--lake on the reading commands goes through the one resolver (collector/cli/_resolve.py): a lake is a
third source beside a DuckDB file and a collector, and $MERITLENS_LAKE, like $MERITLENS_URL, never
redirects a command that was given --db or --url."""

from __future__ import annotations

import json

import duckdb

from meritlens.collector.cli._resolve import ResolveError, resolve
from tests.conftest import run_cli


def _empty_lake(tmp_path):
    lake = tmp_path / "lake"
    (lake / "spans").mkdir(parents=True)
    return lake


def test_the_resolver_names_a_lake_source(tmp_path, monkeypatch):
    lake = _empty_lake(tmp_path)
    monkeypatch.delenv("MERITLENS_URL", raising=False)
    source = resolve(None, None, lake=str(lake), lake_allowed=True)
    assert source.is_lake and not source.is_file and not source.is_collector
    assert source.where == f"the lake {lake}"
    monkeypatch.setenv("MERITLENS_LAKE", str(lake))
    assert resolve(None, None, lake_allowed=True).is_lake
    db = tmp_path / "x.duckdb"
    duckdb.connect(str(db)).close()
    assert resolve(str(db), None, lake_allowed=True).is_file  # an explicit --db wins over the environment
    assert resolve(str(db), None).is_file  # commands that read no lake never look at it
    try:
        resolve(str(db), None, lake=str(lake), lake_allowed=True)
    except ResolveError as exc:
        assert "--lake" in str(exc) and "--db" in str(exc)
    else:
        raise AssertionError("--lake with --db was accepted")


def test_reading_commands_take_lake_from_the_options_and_the_environment(tmp_path):
    lake = _empty_lake(tmp_path)
    both = run_cli("sql", "select 1", "--lake", str(lake), "--db", str(tmp_path / "x.duckdb"), check=False)
    assert both.returncode == 2
    assert both.stderr.strip().splitlines() == ["Error: --lake reads the lake's files: give it without --db and --url"]
    rows = json.loads(run_cli("sql", "select count(*) as n from spans", "--format", "json",
                              env={"MERITLENS_LAKE": str(lake)}).stdout)
    assert rows == [{"n": 0}]
    windows = run_cli("windows", "--lake", str(lake), "--format", "json")
    assert json.loads(windows.stdout) == []
    exported = run_cli("export", "--parquet", str(tmp_path / "out"), "--lake", str(lake), "--format", "json")
    assert {r["table"]: r["rows"] for r in json.loads(exported.stdout)} == {"spans": 0, "windows": 0}
    for command in ("sql", "windows", "readiness", "export", "profile"):
        args = (command, "check") if command == "profile" else (command,)
        assert "--lake" in run_cli(*args, "--help").stdout, command
    assert "--lake" not in run_cli("import", "--help").stdout
