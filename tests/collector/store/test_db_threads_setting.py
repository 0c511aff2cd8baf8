"""DuckDB's worker threads in `meritlens serve` (`--db-threads`, one by default)."""

from __future__ import annotations

import duckdb
import pytest

from meritlens.collector._settings import DEFAULT_DB_THREADS, SETTINGS, ServerSettings, SettingsError
from tests.store_under_test import StoreUnderTest
from tests.collector.collector_proc import CollectorProcess


def _threads(collector: CollectorProcess) -> int:
    return collector.sql("SELECT current_setting('threads')")["rows"][0][0]


def test_the_collector_runs_duckdb_on_the_configured_threads(tmp_path):
    assert ServerSettings().db_threads == DEFAULT_DB_THREADS == 1
    with CollectorProcess(tmp_path / "default.duckdb", args=("--no-grpc",)) as collector:
        assert _threads(collector) == 1
    with CollectorProcess(tmp_path / "two.duckdb", args=("--no-grpc", "--db-threads", "2")) as collector:
        assert _threads(collector) == 2
    with CollectorProcess(tmp_path / "env.duckdb", args=("--no-grpc",), env={SETTINGS["db_threads"].env: "3"}) as collector:
        assert _threads(collector) == 3


def test_a_store_opened_without_the_setting_keeps_duckdbs_default(tmp_path):
    store = StoreUnderTest(str(tmp_path / "s.duckdb"))
    store.start()
    try:
        default = duckdb.connect().execute("SELECT current_setting('threads')").fetchall()
        assert store.query("SELECT current_setting('threads')").rows == default
    finally:
        store.shutdown()


def test_threads_must_be_positive(monkeypatch):
    monkeypatch.setenv(SETTINGS["db_threads"].env, "0")
    with pytest.raises(SettingsError, match="DuckDB threads must be positive, got 0"):
        ServerSettings.from_env().validate()
