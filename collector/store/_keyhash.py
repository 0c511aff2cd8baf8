"""Key hashes of span rows: the input of the store's key filters and locator.

Every span row has three keys: its span (trace ID and span ID), its trace and its task (none when
the row has no task ID). The filters and the locator hold one 64-bit hash per key; a wrong match
costs a read of stored spans, never a wrong answer, so the hash only has to be well mixed and the
same for the same string within one process (nothing hashed here is written to the database).

With the native extension the hashes are computed in C over the Arrow buffers (no DuckDB statement
per batch); without it, by DuckDB's ``hash``. A process uses one of the two for every key.
"""

from __future__ import annotations

import threading

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from meritlens.collector.process._native import native as _spanscan

KEY_HASH_COLUMNS = ("s", "t", "k", "no_task")
"""The columns of `key_hashes`: span, trace and task key hashes, and whether the row has no task."""

_MIX = np.uint64(0x9E3779B97F4A7C15)
_fallback = threading.local()


def string_hashes(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """One uint64 hash per string of ``column`` (0 for a null)."""
    if isinstance(column, pa.ChunkedArray):
        if column.num_chunks == 1:
            return string_hashes(column.chunk(0))
        if column.num_chunks == 0:
            return np.zeros(0, dtype=np.uint64)
        return np.concatenate([string_hashes(chunk) for chunk in column.chunks])
    if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
        column = pc.cast(column, pa.string())
    if _spanscan is None:
        return _duckdb_hashes(column)
    validity, offsets, data = column.buffers()
    if data is None:  # every value is empty or null
        data = b""
    raw = _spanscan.hash_strings(validity, offsets, data, column.offset, len(column),
                                 pa.types.is_large_string(column.type))
    return np.frombuffer(raw, dtype=np.uint64)


def key_hashes(table: pa.Table) -> pa.Table:
    """The `KEY_HASH_COLUMNS` of span rows (``trace_id``, ``span_id``, ``task_id``), in row order."""
    trace = string_hashes(table.column("trace_id"))
    span = string_hashes(table.column("span_id"))
    with np.errstate(over="ignore"):
        combined = (trace * _MIX) ^ span
        combined ^= combined >> np.uint64(31)
        combined *= _MIX
    task_ids = table.column("task_id")
    return pa.table({
        "s": combined,
        "t": trace,
        "k": string_hashes(task_ids),
        "no_task": pc.is_null(task_ids),
    })


def _duckdb_hashes(column: pa.Array) -> np.ndarray:
    con = getattr(_fallback, "con", None)
    if con is None:
        con = _fallback.con = duckdb.connect(config={"threads": 1})
    hashed = con.from_arrow(pa.table({"v": column})).select("hash(v) AS h").to_arrow_table().column(0)
    hashes = hashed.to_numpy().astype(np.uint64, copy=True)
    hashes[column.is_null().to_numpy(zero_copy_only=False)] = 0
    return hashes
