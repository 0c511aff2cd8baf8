"""The collector's one memory setting (`--memory-limit`, 512MiB by default): DuckDB's memory limit is
its share of it (135MiB at the default; `MemoryBudget`)."""

from __future__ import annotations

from meritlens.collector._settings import SETTINGS, MemoryBudget
from tests.collector.collector_proc import CollectorProcess


def _limit(collector: CollectorProcess) -> str:
    return collector.sql("SELECT current_setting('memory_limit')")["rows"][0][0]


def test_the_collector_gives_duckdb_its_share_of_the_limit(tmp_path):
    with CollectorProcess(tmp_path / "default.duckdb", args=("--no-grpc",)) as collector:
        assert _limit(collector) == "135.0 MiB"
        # what does not fit spills beside the file, not into the working directory
        spill = collector.sql("SELECT current_setting('temp_directory')")["rows"][0][0]
        assert spill == str(tmp_path / "default.duckdb") + ".tmp"
    with CollectorProcess(tmp_path / "flag.duckdb", args=("--no-grpc", "--memory-limit", "1GiB")) as collector:
        assert _limit(collector) == f"{MemoryBudget.of(1 << 30).duckdb >> 20}.0 MiB" == "315.0 MiB"
    env = {SETTINGS["memory_limit"].env: "768MiB"}
    with CollectorProcess(tmp_path / "env.duckdb", args=("--no-grpc",), env=env) as collector:
        assert _limit(collector) == "225.0 MiB"
