"""Span rows as the store handles them: stamped with their commit time, one row a span, and the key
hashes its `KeyLocator` and the window processor's filter take."""

from __future__ import annotations

import threading
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from meritlens.analytics.engine import SPANS_TABLE, SPAN_COLUMN_NAMES
from meritlens.collector.store._database import timestamp_sql


class CommitClock:
    """Commit times in µs since the epoch, each later than every earlier one (and than ``last``):
    the windows' watermark and the lake's readers order batches by them."""

    def __init__(self, last: int = 0):
        self.last = last
        self._lock = threading.Lock()

    def next(self) -> int:
        with self._lock:
            self.last = max(time.time_ns() // 1000, self.last + 1)
            return self.last


def stamp_received_at(rows: pa.Table, received_us: int) -> pa.Table:
    """Normalized span rows as rows of `spans`: its columns, in its order, committed at ``received_us``."""
    received_at = pa.array(np.full(rows.num_rows, received_us, dtype=np.int64)).cast(pa.timestamp("us", tz="UTC"))
    return rows.append_column("received_at", received_at).select(list(SPAN_COLUMN_NAMES))


def first_of_each_span(table: pa.Table, span_hashes: np.ndarray | None = None) -> pa.Table:
    """The table without repeated (trace_id, span_id): the first row of each is kept. The table
    itself when no span repeats; ``span_hashes`` (the rows' span key hashes, `key_hashes` column `s`) shows
    that without comparing the keys when no two hashes are equal."""
    if table.num_rows < 2:
        return table
    if span_hashes is not None and np.unique(span_hashes).size == table.num_rows:
        return table
    keys = pc.binary_join_element_wise(table.column("trace_id"), table.column("span_id"), ":")
    if pc.count_distinct(keys).as_py() == table.num_rows:
        return table
    first = pa.table({"k": keys, "i": pa.array(np.arange(table.num_rows))}).group_by("k").aggregate([("i", "min")])
    return table.take(np.sort(first.column("i_min").to_numpy()))


def trace_task_hashes(keys: pa.Table) -> np.ndarray:
    """The hashes (`string_hashes`, the key filters' input) of the distinct trace and task keys
    of span rows, given their `key_hashes` columns."""
    no_task = keys.column("no_task").to_numpy(zero_copy_only=False)
    return np.concatenate([np.unique(keys.column("t").to_numpy()), np.unique(keys.column("k").to_numpy()[~no_task])])


def row_key_hashes(keys: pa.Table) -> np.ndarray:
    """The locator's hashes of span rows (`key_hashes` columns): every span key, every
    distinct trace key, every distinct task key."""
    return np.concatenate([keys.column("s").to_numpy(), trace_task_hashes(keys)])


def ranges_sql(ranges: list[tuple[int, int]], columns: str = "trace_id, span_id") -> str:
    """The stored spans committed in any of ``ranges`` (µs, both ends included): one read per
    range, each pruned by the min/max of `received_at` (the table is in commit order)."""
    return " UNION ALL ".join(
        f"SELECT {columns} FROM {SPANS_TABLE} WHERE received_at BETWEEN {timestamp_sql(a)} AND {timestamp_sql(b)}"
        for a, b in ranges)


def concat(tables: list[pa.Table]) -> pa.Table:
    return pa.concat_tables(tables) if len(tables) > 1 else tables[0]
