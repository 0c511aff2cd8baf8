"""Shared fixtures: a real `meritlens serve` process on a free loopback port, and the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest

from meritlens.collector._paths import TRACES_PATH
from tests.cli_runner import MERITLENS, run_cli, run_sql
from tests.collector.collector_proc import free_port
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


@pytest.fixture
def collector(tmp_path):
    """A running collector on a fresh DuckDB file; stopped (SIGTERM) after the test."""
    proc = CollectorProcess(tmp_path / "meritlens.duckdb").start()
    yield proc
    proc.stop()
