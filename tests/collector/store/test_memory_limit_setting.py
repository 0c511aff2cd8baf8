"""The collector's one memory setting (`--memory-limit`, 512MiB by default): half of it is DuckDB's
memory limit, the rest bounds the window state and the key filters."""

from __future__ import annotations

from meritlens.collector._settings import DEFAULT_MEMORY_LIMIT, ENV_MEMORY_LIMIT, MemoryBudget, ServerSettings
from tests.collector.collector_proc import CollectorProcess


def _limit(collector: CollectorProcess) -> str:
    return collector.sql("SELECT current_setting('memory_limit')")["rows"][0][0]


def test_the_budget_splits_the_limit_and_never_exceeds_it():
    for limit in (256 << 20, DEFAULT_MEMORY_LIMIT, 3 << 30, (1 << 30) + 12345):
        budget = MemoryBudget.of(limit)
        parts = (budget.duckdb, budget.window_state, budget.span_index, budget.key_filter)
        assert all(part > 0 for part in parts) and sum(parts) <= limit
        assert budget.duckdb == limit // 2
    assert ServerSettings().memory_budget().duckdb == 256 << 20


def test_the_collector_caps_duckdbs_memory_at_half_the_limit(tmp_path):
    with CollectorProcess(tmp_path / "default.duckdb", args=("--no-grpc",)) as collector:
        assert _limit(collector) == "256.0 MiB"
    with CollectorProcess(tmp_path / "flag.duckdb", args=("--no-grpc", "--memory-limit", "1GiB")) as collector:
        assert _limit(collector) == "512.0 MiB"
    with CollectorProcess(tmp_path / "env.duckdb", args=("--no-grpc",), env={ENV_MEMORY_LIMIT: "384MiB"}) as collector:
        assert _limit(collector) == "192.0 MiB"
