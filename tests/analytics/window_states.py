"""Window states built through the real classes, for the statistics tests: an accumulator fed sample
columns, or a book fed sample rows (one task per sample) that merges its hour buckets."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from meritlens.analytics._accumulate import DEFAULT_SCALE, WindowAccumulator, WindowBook
from meritlens.analytics._sample_columns import SampleColumns
from meritlens.analytics._time_buckets import HOUR_US, BucketCutoffs, bucketed
from meritlens.analytics._definitions import DEFINITIONS_BY_METRIC
from meritlens.analytics._samples import SAMPLE_ROW_COLUMNS, SAMPLE_VALUES

T0_US = 1_700_000_000_000_000 // HOUR_US * HOUR_US
"""An hour's start (2023-11-14T22:00Z)."""


def state_of(metric: str, values, *, end_us=None, scale: int = DEFAULT_SCALE) -> WindowAccumulator:
    """The window state of ``metric`` holding ``values`` (sample end times ``end_us``, default one µs apart)."""
    v = np.asarray(values, dtype=float)
    ends = np.asarray(end_us if end_us is not None else T0_US + np.arange(v.size), dtype=np.int64)
    if ends.shape != v.shape:
        ends = np.full(v.shape, int(ends.reshape(-1)[0]), dtype=np.int64)
    state = WindowAccumulator.empty(DEFINITIONS_BY_METRIC[metric], scale)
    state.apply(None, _columns(v, ends))
    return state


def sample_rows(metric: str, values, end_us, target: str = "bot") -> pa.Table:
    """Sample rows of one metric, one task each, ending at ``end_us``."""
    v = np.asarray(values, dtype=float)
    n = v.size
    ends = np.asarray(end_us, dtype=np.int64)
    columns = {name: pa.nulls(n, pa.float64()) for name in SAMPLE_VALUES}
    columns[metric] = pa.array(v)
    ints = np.arange(n, dtype=np.int64)
    columns.update(target_id=pa.array([target] * n), scope=pa.array(["all"] * n), first_end_us=pa.array(ends),
                   last_end_us=pa.array(ends), start_ns=pa.array(ints * 1000), end_ns=pa.array(ints * 1000 + 5),
                   success=pa.nulls(n, pa.bool_()), span_count=pa.array(np.ones(n, dtype=np.int64)),
                   key_high=pa.array((ints * 7919).astype(np.uint64)),
                   key_low=pa.array((ints * 104729).astype(np.uint64)))
    return pa.table({name: columns[name] for name in SAMPLE_ROW_COLUMNS})


def hour_book(rows: pa.Table, now_us: int) -> WindowBook:
    """A book of hour buckets (keys target, scope, bucket start, width) fed ``rows``, as the collector keeps them."""
    book = WindowBook()
    book.apply_delta(None, bucketed(rows, BucketCutoffs.at(now_us)),
                     key_columns=("target_id", "scope", "bucket_start_us", "bucket_us"))
    return book


def state_in(book: WindowBook, key: tuple, metric: str) -> WindowAccumulator:
    """The state a book holds for one window (read only)."""
    return book.state(key, metric)


def add_samples(state: WindowAccumulator, values, end_us: int) -> None:
    """Put samples ending at ``end_us`` into ``state``, as a delta of new tasks does."""
    v = np.asarray(values, dtype=float)
    state.apply(None, _columns(v, np.full(v.size, end_us, dtype=np.int64)))


def _columns(v: np.ndarray, ends: np.ndarray) -> SampleColumns:
    ints = np.arange(v.size, dtype=np.int64)
    return SampleColumns.of(v, ends, ends, ints * 1000, ints * 1000 + 5, key_high=int(ints.sum()) * 7919,
                            key_low=int(ints.sum()))
