"""Window state recomputed from the stored spans: at a first start, after new window definitions or a
bulk load, and in the rare cases a delta cannot be followed (`WindowProcessor._recompute`)."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import duckdb
import pyarrow as pa

from meritlens.analytics.engine import SPANS_TABLE, BucketCutoffs, WindowBook
from meritlens.collector.store._database import timestamp_sql
from meritlens.collector.windows._engine import DuckDBEngine, fill_book

_REBUILD_TRACES = "_rebuild_traces"
TARGETED_REBUILD_FRACTION = 0.25
"""A rebuild of targets holding more of the stored spans than this reads every span (`SpanRebuild._few_rows_of`)."""


class SpanRebuild:
    """Fills window books from the stored spans of some targets, on the processor's connection, in
    partitions of about ``rows_per_partition`` scoped rows (`DuckDBEngine`)."""

    def __init__(self, con: duckdb.DuckDBPyConnection, rows_per_partition: int):
        self.con = con
        self.rows_per_partition = rows_per_partition
        self.partitions = 0
        self.label_rounds = 0

    def book(self, targets: set[str] | None, until_us: int, scale: int,
             cutoffs: BucketCutoffs) -> tuple[WindowBook, set[tuple]]:
        """A book of the state of ``targets`` (None: all) from every span committed up to
        ``until_us``, cumulative and by time; and its keys."""
        fresh = WindowBook(scale)
        with self._spans_of(targets, until_us) as source:
            engine = DuckDBEngine(self.con, source, rows_per_partition=self.rows_per_partition)
            keys = fill_book(fresh, engine.samples(), targets, cutoffs)
        self.partitions, self.label_rounds = engine.partitions, engine.label_rounds
        return fresh, keys

    @contextmanager
    def _spans_of(self, targets: set[str] | None, until_us: int) -> Iterator[str]:
        """A relation of the spans committed up to ``until_us`` that the samples of ``targets`` (None:
        all) need: every span of their traces, or every span when they hold most of them."""
        con = self.con
        committed = f"received_at <= {timestamp_sql(until_us)}"
        if targets is None or not self._few_rows_of(targets, committed):
            yield f"(SELECT * FROM {SPANS_TABLE} WHERE {committed})"
            return
        con.register("_targets", pa.table({"t": sorted(targets)}))
        try:
            con.execute(f"CREATE OR REPLACE TEMP TABLE {_REBUILD_TRACES} AS SELECT DISTINCT trace_id"
                        f" FROM {SPANS_TABLE} WHERE target_id IN (SELECT t FROM _targets) AND {committed}")
        finally:
            con.unregister("_targets")
        try:
            yield (f"(SELECT * FROM {SPANS_TABLE} WHERE {committed}"
                   f" AND trace_id IN (SELECT trace_id FROM {_REBUILD_TRACES}))")
        finally:
            try:
                con.execute(f"DROP TABLE IF EXISTS {_REBUILD_TRACES}")
            except Exception:  # noqa: BLE001 - an aborted transaction: its rollback drops it
                pass

    def _few_rows_of(self, targets: set[str], committed: str) -> bool:
        """Whether ``targets`` hold at most a fraction of the stored spans, so that a rebuild reads
        only their traces; else it reads every span (the trace filter would cost more than it saves)."""
        con = self.con
        con.register("_targets", pa.table({"t": sorted(targets)}))
        try:
            theirs, total = con.execute(
                f"SELECT count(*) FILTER (WHERE target_id IN (SELECT t FROM _targets)), count(*)"
                f" FROM {SPANS_TABLE} WHERE {committed}").fetchall()[0]
        finally:
            con.unregister("_targets")
        return theirs <= TARGETED_REBUILD_FRACTION * total
