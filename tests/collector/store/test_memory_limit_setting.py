"""The collector's one memory setting (`--memory-limit`, 512MiB by default): DuckDB's memory limit is
its share of it (135MiB at the default; `MemoryBudget`) less what DuckDB holds beside its pool: its
eviction queues' cap and its table metadata, which grows with the stored spans (`DuckDBMemory`)."""

from __future__ import annotations

import logging

from meritlens.collector._settings import (
    DUCKDB_BYTES_PER_STORED_SPAN,
    DUCKDB_EVICTION_QUEUE_BYTES,
    SETTINGS,
    MemoryBudget,
)
from meritlens.collector.store._database import Database, DatabaseOptions
from meritlens.collector.store._duckdb_memory import DuckDBMemory
from tests.collector.collector_proc import CollectorProcess

MIB = 1 << 20


def _limit(collector: CollectorProcess) -> str:
    return collector.sql("SELECT current_setting('memory_limit')")["rows"][0][0]


def _pool_mib(share: int) -> int:
    return (share - DUCKDB_EVICTION_QUEUE_BYTES) >> 20


def test_the_collector_gives_duckdb_its_share_of_the_limit(tmp_path):
    with CollectorProcess(tmp_path / "default.duckdb", args=("--no-grpc",)) as collector:
        assert _limit(collector) == f"{_pool_mib(135 * MIB)}.0 MiB" == "103.0 MiB"
        # what does not fit spills beside the file, not into the working directory
        spill = collector.sql("SELECT current_setting('temp_directory')")["rows"][0][0]
        assert spill == str(tmp_path / "default.duckdb") + ".tmp"
    with CollectorProcess(tmp_path / "flag.duckdb", args=("--no-grpc", "--memory-limit", "1GiB")) as collector:
        assert _limit(collector) == f"{_pool_mib(MemoryBudget.of(1 << 30).duckdb)}.0 MiB" == "283.0 MiB"
    env = {SETTINGS["memory_limit"].env: "768MiB"}
    with CollectorProcess(tmp_path / "env.duckdb", args=("--no-grpc",), env=env) as collector:
        assert _limit(collector) == "193.0 MiB"


def test_duckdbs_pool_shrinks_as_its_table_grows_down_to_a_floor(tmp_path, caplog):
    memory = DuckDBMemory(135 * MIB)
    db = Database(str(tmp_path / "s.duckdb"), DatabaseOptions(memory.pool_bytes, row_group_rows=16_384))
    con = db.con  # the store's own connection, as the collector opens it
    limit = lambda: con.execute("SELECT current_setting('memory_limit')").fetchall()[0][0]  # noqa: E731
    memory.follow(con, 0)
    assert limit() == "103.0 MiB" == f"{memory.pool_bytes >> 20}.0 MiB"
    spans = 10 * MIB // DUCKDB_BYTES_PER_STORED_SPAN
    memory.follow(con, spans)
    assert limit() == "93.0 MiB" == f"{memory.pool_bytes >> 20}.0 MiB"
    with caplog.at_level(logging.WARNING, logger="meritlens.collector.store"):
        memory.follow(con, 100 * spans)
        memory.follow(con, 200 * spans)
    assert memory.pool_bytes == memory.floor_bytes == 33 * MIB and limit() == "33.0 MiB"
    [warning] = [r.getMessage() for r in caplog.records]
    assert "set --retain" in warning and f"{100 * spans} stored spans" in warning
    memory.follow(con, 0)  # spans moved out (retention): the pool grows back
    assert limit() == "103.0 MiB"
    db.close(checkpoint=False)
