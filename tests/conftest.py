"""Shared fixtures: a real `meritlens serve` process on a free loopback port, and the CLI."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from meritlens.collector._settings import TRACES_PATH
from tests.collector.collector_proc import MERITLENS, free_port
from tests.collector.collector_proc import CollectorProcess as _ServerProcess

__all__ = ["MERITLENS", "CollectorProcess", "free_port", "run_cli", "run_sql"]


class CollectorProcess(_ServerProcess):
    """The shared `meritlens serve` test process (tests/collector/collector_proc.py), whose `sql()`
    returns rows as the `meritlens sql` CLI prints them (JSON), rather than the endpoint's body."""

    def __init__(self, db: Path, args: tuple[str, ...] = (), **options):
        super().__init__(db, args=args, **options)

    @property
    def traces_url(self) -> str:
        return self.url + TRACES_PATH

    def sql(self, query: str) -> list[dict]:
        """Rows of a read-only query, through the `meritlens sql` CLI (JSON output)."""
        return run_sql(query, db=self.db)


def run_cli(*args: str, check: bool = True, env: dict | None = None, cwd=None) -> subprocess.CompletedProcess:
    proc = subprocess.run([MERITLENS, *args], capture_output=True, text=True, env={**os.environ, **(env or {})}, cwd=cwd)
    if check and proc.returncode != 0:
        raise AssertionError(f"meritlens {' '.join(args)} exited {proc.returncode}: {proc.stderr}")
    return proc


def run_sql(query: str, *, db: Path) -> list[dict]:
    return json.loads(run_cli("sql", query, "--db", str(db), "--format", "json").stdout)


@pytest.fixture
def collector(tmp_path):
    """A running collector on a fresh DuckDB file; stopped (SIGTERM) after the test."""
    proc = CollectorProcess(tmp_path / "meritlens.duckdb").start()
    yield proc
    proc.stop()
