"""DuckDB's share of the memory budget: its buffer pool plus what it holds outside its memory limit."""

from __future__ import annotations

import logging
import threading

import duckdb

from meritlens.collector._settings import (
    DUCKDB_BYTES_PER_STORED_SPAN,
    DUCKDB_EVICTION_QUEUE_BYTES,
    MIN_DUCKDB_POOL_DIVISOR,
)

log = logging.getLogger("meritlens.collector.store")

_STEP_BYTES = 1024 * 1024
"""The memory limit changes by whole MiB: a change is a statement, not one per commit."""


class DuckDBMemory:
    """Keeps DuckDB's memory inside ``share_bytes``: its memory limit (the buffer pool) is the share less
    its eviction queues' cap and its table metadata, which grows with the stored spans (a stored span
    costs `DUCKDB_BYTES_PER_STORED_SPAN` of the pool), down to a floor (`MIN_DUCKDB_POOL_DIVISOR`)."""

    def __init__(self, share_bytes: int):
        self.share_bytes = share_bytes
        self.floor_bytes = share_bytes // MIN_DUCKDB_POOL_DIVISOR // _STEP_BYTES * _STEP_BYTES
        self.pool_bytes = self.pool_for(0)
        self._lock = threading.Lock()
        self._warned = False

    def metadata_bytes(self, stored_rows: int) -> int:
        """DuckDB's estimated memory outside its pool with ``stored_rows`` spans in the file."""
        return DUCKDB_EVICTION_QUEUE_BYTES + stored_rows * DUCKDB_BYTES_PER_STORED_SPAN

    def pool_for(self, stored_rows: int) -> int:
        pool = self.share_bytes - self.metadata_bytes(stored_rows)
        return max(self.floor_bytes, pool // _STEP_BYTES * _STEP_BYTES)

    def follow(self, cursor: duckdb.DuckDBPyConnection, stored_rows: int) -> None:
        """Set DuckDB's memory limit for ``stored_rows`` when it changed (a failure keeps the old one:
        DuckDB refuses a limit it cannot evict down to at once, and the next call tries again)."""
        pool = self.pool_for(stored_rows)
        if pool == self.pool_bytes or not self._lock.acquire(blocking=False):
            return
        try:
            cursor.execute(f"SET memory_limit = '{pool // _STEP_BYTES}MiB'")
            self.pool_bytes = pool
        except duckdb.Error as exc:
            log.debug("DuckDB's memory limit stays at %d MiB: %s", self.pool_bytes >> 20, exc)
        finally:
            self._lock.release()
        if pool == self.floor_bytes and not self._warned:
            self._warned = True
            log.warning("DuckDB holds ~%d MiB of metadata for %d stored spans beside its pool, which is at its"
                        " floor (%d MiB): from here memory grows ~%d bytes a stored span beyond the budget;"
                        " set --retain, or a larger --memory-limit", self.metadata_bytes(stored_rows) >> 20,
                        stored_rows, pool >> 20, DUCKDB_BYTES_PER_STORED_SPAN)
