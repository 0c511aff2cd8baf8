"""The window seam: spans in, window rows out.

Every engine computes windows in the same two steps. First the *samples* of the spans: one row per
task and per application span that gives a sample or a fact (`sample_rows_sql`, over the window
definitions of `meritlens.analytics`); an engine may compute them however it likes (DuckDB here, Spark on a
cluster) as long as the rows are those. Then the samples go into a `WindowBook` (the mergeable
aggregates of `meritlens.analytics._accumulate`), which gives the rows: exact sums, distributions
that are a function of the samples alone (exact while few, a fixed-scale histogram beyond) and
order-free evidence digests, so the rows are the same whatever the order and batching of the spans. The incremental processor (`_processor`) applies sample deltas to the same book.
"""

from __future__ import annotations

import datetime as _dt
from typing import Iterable, Iterator, Protocol
from urllib.parse import quote

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from meritlens.analytics.engine import (
    BUCKET_KEY_COLUMNS,
    DEFAULT_SCALE,
    SPANS_TABLE,
    WINDOW_INPUT_COLUMNS,
    BucketCutoffs,
    Window,
    WindowBook,
    bucket_range,
    bucketed,
    sample_rows_sql,
)
from meritlens.collector.windows._partitions import partition_spans

BATCH_ROWS = 65_536
"""Sample rows per Arrow batch read from an engine."""


class WindowEngine(Protocol):
    """Computes the window rows of every (target, scope) of a set of spans, each span counted once."""

    def samples(self) -> Iterator[pa.Table]:
        """The sample rows (`SAMPLE_ROW_COLUMNS`) of the spans, in batches of any size and order."""


def fill_book(book: WindowBook, samples: Iterable[pa.Table], targets: set[str] | None = None,
              cutoffs: BucketCutoffs | None = None) -> set[tuple]:
    """Add sample rows (of ``targets`` only, when given) to ``book``, and, with ``cutoffs``, to the
    time buckets they fall in; return the keys ((target, scope), and bucket keys)."""
    wanted = pa.array(sorted(targets)) if targets is not None else None
    keys: set[tuple] = set()
    for chunk in samples:
        if wanted is not None:
            chunk = chunk.filter(pc.is_in(chunk.column("target_id"), wanted))
        keys |= book.apply_delta(None, chunk)[0]  # additions alone never need a recomputation
        if cutoffs is not None:
            keys |= book.apply_delta(None, bucketed(chunk, cutoffs), BUCKET_KEY_COLUMNS)[0]
    return keys


def compute_windows(engine: WindowEngine, db_name: str, computed_at: _dt.datetime | None = None,
                    scale: int = DEFAULT_SCALE) -> list[Window]:
    """Every window row of the engine's spans, in (target, scope) order. ``db_name`` names the span
    store in the evidence URIs; ``scale``: the histograms' (`scale_for` of the quantiles' error)."""
    book = WindowBook(scale)
    keys = fill_book(book, engine.samples())
    now = computed_at or _dt.datetime.now(_dt.timezone.utc)
    return [w for key in sorted(keys) for w in book.windows(key, db_name, now)]


def bucket_rows(book: WindowBook, keys, db_name: str, computed_at: _dt.datetime) -> list[tuple]:
    """The `windows_by_time` rows of bucket ``keys``: (window, bucket start, bucket seconds) each; a
    window's evidence is its spans that ended in the bucket."""
    rows = []
    for key in sorted(keys):
        start, end = bucket_range(key)
        span = f"&from={quote(start.isoformat(), safe='')}&to={quote(end.isoformat(), safe='')}"
        rows.extend((w, start, key[3] // 1_000_000) for w in book.windows(key, db_name, computed_at, span))
    return rows


class DuckDBEngine:
    """Samples computed by DuckDB over a relation with the columns of `spans` (each span once), read
    in partitions of about ``rows_per_partition`` scoped rows, each a union of whole task/trace
    components (`_partitions`), so DuckDB's memory for one statement does not grow with the spans."""

    def __init__(self, con: duckdb.DuckDBPyConnection, source: str = SPANS_TABLE, *,
                 rows_per_partition: int = 1_000_000):
        self.con = con
        self.source = source
        self.rows_per_partition = rows_per_partition
        self.partitions = 0
        self.label_rounds = 0

    def samples(self) -> Iterator[pa.Table]:
        parts = partition_spans(self.con, self.source, self.rows_per_partition)
        try:
            parts.order_by_partition(WINDOW_INPUT_COLUMNS)
            self.partitions, self.label_rounds = parts.count, parts.rounds
            for p in range(parts.count):
                for batch in self.con.sql(sample_rows_sql(parts.source_of(p))).to_arrow_reader(BATCH_ROWS):
                    yield pa.Table.from_batches([batch])
        finally:
            parts.close()
