"""A delta's samples, column by column: the sample rows of many windows split into each window's
`SampleColumns`, with the sums a window adds up computed for all of them in a few vectorized passes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from meritlens.analytics._definitions import FACT_PREFIX
from meritlens.analytics._distribution import bucket_indices, exact_square_sum, exact_sum, segment_sums
from meritlens.analytics._samples import SAMPLE_VALUES

KEY_COLUMNS = ("target_id", "scope")
WindowKey = tuple
"""A key's values of its key columns: (target_id, scope), or a bucket's (`_time_buckets.BUCKET_KEY_COLUMNS`)."""
WindowId = tuple
"""A key and a metric: (target_id, scope, [bucket start, bucket width,] metric)."""


@dataclass
class SampleColumns:
    """The samples of one window in one delta: arrays (see ``SAMPLE_ROW_COLUMNS``), and the sums a
    window adds up, computed for every window of a delta at once (`group_samples`)."""

    v: np.ndarray
    first_end_us: np.ndarray
    last_end_us: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray
    key_high: int
    key_low: int
    total: int = 0
    squares: int = 0
    successes: int = 0
    spans: int = 0
    first_end_min: int | None = None
    last_end_max: int | None = None
    buckets: np.ndarray | None = None
    """The values' histogram bucket indices (of their magnitudes; zeros' are meaningless), when computed."""

    @classmethod
    def of(cls, v: np.ndarray, first_end_us: np.ndarray, last_end_us: np.ndarray, start_ns: np.ndarray,
           end_ns: np.ndarray, *, successes: int = 0, spans: int | None = None, key_high: int = 0,
           key_low: int = 0) -> "SampleColumns":
        """One window's samples with their sums computed here (`group_samples` computes them for many
        windows at once)."""
        v = np.asarray(v, dtype=float)
        return cls(v, first_end_us, last_end_us, start_ns, end_ns, key_high, key_low, exact_sum(v),
                   exact_square_sum(v), successes, v.size if spans is None else spans,
                   int(first_end_us.min()) if v.size else None, int(last_end_us.max()) if v.size else None)


_NO_SAMPLES = SampleColumns(*(np.empty(0, dtype=t) for t in (float, np.int64, np.int64, np.int64, np.int64)), 0, 0)


def group_samples(table: pa.Table, key_columns: tuple[str, ...] = KEY_COLUMNS,
                  scale: int | None = None) -> dict[WindowId, SampleColumns]:
    """Sample rows (``SAMPLE_ROW_COLUMNS``, and any other ``key_columns``) as the samples of each key
    and metric with any (a fact is a metric ``FACT_PREFIX + name`` here), each in the rows' order;
    with ``scale``, with the values' histogram bucket indices."""
    if table.num_rows == 0:
        return {}
    codes = np.zeros(table.num_rows, dtype=np.int64)
    for name in key_columns:  # one integer per distinct key
        encoded = table.column(name).combine_chunks().dictionary_encode()
        codes = codes * len(encoded.dictionary) + encoded.indices.to_numpy(zero_copy_only=False)
    order = np.argsort(codes, kind="stable")
    starts = np.flatnonzero(np.diff(codes[order], prepend=-1))
    keys = [tuple(table.column(n)[int(order[i])].as_py() for n in key_columns) for i in starts.tolist()]

    def column(name: str, dtype) -> np.ndarray:
        values = table.column(name)
        if name == "success":  # NULL: no outcome, not a success
            values = pc.fill_null(values, False)
        return values.to_numpy(zero_copy_only=False).astype(dtype, copy=False)[order]

    first_end, last_end = column("first_end_us", np.int64), column("last_end_us", np.int64)
    start, end = column("start_ns", np.int64), column("end_ns", np.int64)
    success, span_count = column("success", np.int64), column("span_count", np.int64)
    key_high, key_low = column("key_high", np.uint64), column("key_low", np.uint64)
    groups: dict[WindowId, SampleColumns] = {}
    for metric in SAMPLE_VALUES:
        values = table.column(metric)
        if values.null_count == len(values):
            continue
        rows = np.flatnonzero(pc.is_valid(values).to_numpy(zero_copy_only=False)[order])
        v = values.to_numpy(zero_copy_only=False)[order[rows]].astype(float, copy=False)
        lo = np.searchsorted(rows, starts)  # each key's first row among the samples
        hi = np.append(lo[1:], rows.size)
        held = np.flatnonzero(hi > lo)
        first = lo[held]
        # sums over consecutive non-empty runs (the key sums wrap at 2**64 like the digest), for all keys at once
        highs = np.add.reduceat(key_high[rows], first).tolist()
        lows = np.add.reduceat(key_low[rows], first).tolist()
        successes = np.add.reduceat(success[rows], first).tolist()
        spans = np.add.reduceat(span_count[rows], first).tolist()
        fact = metric.startswith(FACT_PREFIX)  # a fact is counted, not summed
        totals, squares = ([0] * first.size,) * 2 if fact else segment_sums(v, first)
        fe, le, st, en = first_end[rows], last_end[rows], start[rows], end[rows]
        # each key's first end and last end, and (vectorized) the values' buckets
        firsts = np.minimum.reduceat(fe, first).tolist()
        lasts = np.maximum.reduceat(le, first).tolist()
        magnitude = np.abs(v)
        buckets = None if fact or scale is None else bucket_indices(np.where(magnitude > 0, magnitude, 1.0), scale)
        for g, i, j, h, l, t, q, su, sp, f0, l1 in zip(held.tolist(), first.tolist(), hi[held].tolist(), highs, lows,
                                                       totals, squares, successes, spans, firsts, lasts):
            groups[(*keys[g], metric)] = SampleColumns(v[i:j], fe[i:j], le[i:j], st[i:j], en[i:j], int(h), int(l),
                                                       t, q, su, sp, f0, l1,
                                                       None if buckets is None else buckets[i:j])
    return groups


def delta_keys(*tables: pa.Table | None, key_columns: tuple[str, ...] = KEY_COLUMNS) -> set[WindowKey]:
    """The keys with a row in any of the sample tables."""
    keys: set[WindowKey] = set()
    for table in tables:
        if table is not None and table.num_rows:
            distinct = table.select(list(key_columns)).group_by(list(key_columns)).aggregate([])
            keys |= set(zip(*(distinct.column(name).to_pylist() for name in key_columns)))
    return keys
