"""DuckDB's memory limit in `meritlens serve` (`--db-memory-bytes`, 256MiB by default)."""

from __future__ import annotations

from meritlens.collector._settings import DEFAULT_DB_MEMORY_BYTES, ENV_DB_MEMORY_BYTES, ServerSettings
from tests.collector.collector_proc import CollectorProcess


def _limit(collector: CollectorProcess) -> str:
    return collector.sql("SELECT current_setting('memory_limit')")["rows"][0][0]


def test_the_collector_caps_duckdbs_memory_at_the_configured_limit(tmp_path):
    assert ServerSettings().db_memory_bytes == DEFAULT_DB_MEMORY_BYTES == 256 * 1024 * 1024
    with CollectorProcess(tmp_path / "default.duckdb", args=("--no-grpc",)) as collector:
        assert _limit(collector) == "256.0 MiB"
    with CollectorProcess(tmp_path / "flag.duckdb", args=("--no-grpc", "--db-memory-bytes", "512MiB")) as collector:
        assert _limit(collector) == "512.0 MiB"
    with CollectorProcess(tmp_path / "env.duckdb", args=("--no-grpc",), env={ENV_DB_MEMORY_BYTES: "192MiB"}) as collector:
        assert _limit(collector) == "192.0 MiB"
