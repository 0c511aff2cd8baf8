"""The samples a batch of committed spans changes.

A batch can change the samples of every task and trace it touches, so they are computed from the
batch's *closure*: the stored spans of every task and trace the batch's application spans touch,
closed over (every span of each such task and of every trace in it). The samples of the closure
before the batch (up to the windows' watermark) are taken out, those after it put in; samples the
batch did not change cancel out. A filter of the trace and task keys seen answers "can this key have
stored spans?" without reading the table, so a batch of new tasks reads nothing back; keys it may
have seen are read from the commit-time ranges the store's `KeyLocator` gives.
"""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from meritlens.analytics.engine import SCOPE_ALL, SPANS_TABLE, WINDOW_INPUT_COLUMNS, sample_rows_sql
from meritlens.collector.process._walk import _ARROW_TYPES
from meritlens.collector.store._database import timestamp_sql
from meritlens.collector.store._keyfilter import GrowingKeyFilter
from meritlens.collector.store._keyhash import string_hashes
from meritlens.collector.store._rows import first_of_each_span, ranges_sql
from meritlens.collector.store._store import SpanStore
from meritlens.instrumentation.conventions import ROLE_APPLICATION

WINDOW_INPUT_SQL = ", ".join(WINDOW_INPUT_COLUMNS)
INCOMING_SCHEMA = pa.schema([(name, _ARROW_TYPES.get(name, pa.timestamp("us", tz="UTC")))
                             for name in WINDOW_INPUT_COLUMNS])
"""The Arrow types of committed batches (the normalizer's rows plus received_at; `WINDOW_INPUT_COLUMNS`)."""


class SampleDelta:
    """Computes sample deltas on the processor's connection ``con`` (statements prepared once)."""

    def __init__(self, store: SpanStore, con: duckdb.DuckDBPyConnection, seen: GrowingKeyFilter):
        self._store = store
        self._con = con
        self.seen = seen
        """Trace and task keys of the spans the windows include."""
        self._prepared: dict[str, str] = {}
        self.stats = {"closure_lookups": 0, "closure_keys": 0, "closure_ranges": 0}

    def of_batch(self, table: pa.Table, hashes: pa.Table, until_us: int,
                 windowed_us: int) -> tuple[pa.Table | None, pa.Table]:
        """(samples removed, samples added) by ``table`` (the batches committed after ``windowed_us``,
        up to ``until_us``; ``hashes`` its `key_hashes` columns). Changes no state."""
        closure = self._closure(table, hashes, until_us)
        committed_us = pc.cast(closure.column("received_at"), pa.int64())
        before = closure.filter(pc.less_equal(committed_us, windowed_us))
        if closure.num_rows:
            after = first_of_each_span(pa.concat_tables([closure, table]))  # stored rows win over retries
        else:
            after = first_of_each_span(table, hashes.column("s").to_numpy())
        return self._delta(before, after)

    def of_removal(self, rows: pa.Table, hashes: pa.Table, until_us: int) -> tuple[pa.Table | None, pa.Table]:
        """(samples removed, samples added) by deleting the stored ``rows`` (``hashes``: their `key_hashes`
        columns): the samples of their closure (committed up to ``until_us``) out, those of the closure
        without them in. Changes no state."""
        closure = self._closure(rows, hashes, until_us)
        gone = pc.is_in(_span_keys(closure), value_set=_span_keys(rows).combine_chunks())
        return self._delta(closure, closure.filter(pc.invert(gone)))

    def fill_seen(self, until_us: int | None = None) -> None:
        """The filter holds the trace and task keys of the stored spans (committed up to ``until_us``)."""
        self.seen.clear()
        committed = f"received_at <= {timestamp_sql(until_us)}" if until_us is not None else "true"
        for batch in self._con.sql(
            f"SELECT trace_id AS key FROM {SPANS_TABLE} WHERE {committed}"
            f" UNION ALL SELECT task_id FROM {SPANS_TABLE} WHERE task_id IS NOT NULL AND {committed}"
        ).to_arrow_reader(65_536):
            self.seen.add(string_hashes(batch.column(0)))

    def _closure(self, table: pa.Table, hashes: pa.Table, until_us: int) -> pa.Table:
        app = application_mask(table)
        trace = hashes.column("t").to_numpy()[app]
        no_task = hashes.column("no_task").to_numpy(zero_copy_only=False)[app]
        task_or_trace = np.where(no_task, trace, hashes.column("k").to_numpy()[app])
        rows = application_rows(table, app)
        candidates = set(rows.column("trace_id").filter(self.seen.may_contain(trace)).to_pylist()) | set(
            pc.coalesce(rows.column("task_id"), rows.column("trace_id")).filter(
                self.seen.may_contain(task_or_trace)).to_pylist())
        fetched = table.schema.empty_table()
        looked_up: set[str] = set()
        while candidates - looked_up:
            todo = candidates - looked_up
            looked_up |= todo
            rows = self._lookup(todo, until_us)
            if rows.num_rows == 0:
                continue
            rows = conform(rows, table.schema)
            fetched = pa.concat_tables([fetched, rows]) if fetched.num_rows else rows
            candidates |= set(rows.column("trace_id").to_pylist()) | {
                k for k in rows.column("task_id").to_pylist() if k is not None}
        return first_of_each_span(fetched)

    def _lookup(self, keys: set[str], until_us: int) -> pa.Table:
        """Stored spans, committed up to ``until_us``, whose trace_id or task_id is one of ``keys``."""
        con = self._con
        self.stats["closure_keys"] += len(keys)
        listed = pa.table({"k": sorted(keys)})
        # trace and task keys: the filter of seen keys gated them already
        ranges = [(a, min(b, until_us)) for a, b in self._store.ranges(string_hashes(listed.column("k")), until_us,
                                                                     gated=False)]
        if not ranges:
            return con.sql(f"SELECT {WINDOW_INPUT_SQL} FROM {SPANS_TABLE} LIMIT 0").to_arrow_table()
        self.stats["closure_lookups"] += 1
        self.stats["closure_ranges"] += len(ranges)
        con.register("_keys", listed)
        try:
            return con.sql(f"SELECT * FROM ({ranges_sql(ranges, WINDOW_INPUT_SQL)}) WHERE trace_id IN"
                           " (SELECT k FROM _keys) OR task_id IN (SELECT k FROM _keys)").to_arrow_table()
        finally:
            con.unregister("_keys")

    def _delta(self, before: pa.Table, after: pa.Table) -> tuple[pa.Table | None, pa.Table]:
        added = self._samples_of(after, "_after")
        if before.num_rows == 0:  # only new tasks: nothing to take out
            return None, added
        removed = self._samples_of(before, "_before")
        # samples of closure tasks the batch did not change cancel out; equal rows have equal keys, so
        # only the few rows whose key is on both sides are compared
        old_shared = _key_in(removed, added)
        if not old_shared.any():
            return removed, added
        new_shared = _key_in(added, removed)
        con = self._con
        con.register("_old", removed.filter(old_shared))
        con.register("_new", added.filter(new_shared))
        try:
            gone = self._select("SELECT * FROM _old EXCEPT ALL SELECT * FROM _new")
            came = self._select("SELECT * FROM _new EXCEPT ALL SELECT * FROM _old")
            return _concat(removed.filter(~old_shared), gone), _concat(added.filter(~new_shared), came)
        finally:
            con.unregister("_old")
            con.unregister("_new")

    def _samples_of(self, rows: pa.Table, name: str) -> pa.Table:
        self._con.register(name, rows)
        try:
            return self._select(sample_rows_sql(name))
        finally:
            self._con.unregister(name)

    def _select(self, sql: str) -> pa.Table:
        """A SELECT run on every batch (over relations registered anew each time), prepared once:
        `con.sql` of a SELECT binds it twice, once to describe the relation (~15 ms of a window pass)."""
        name = self._prepared.get(sql)
        if name is None:
            name = f"_meritlens_{len(self._prepared)}"
            self._con.execute(f"PREPARE {name} AS {sql}")
            self._prepared[sql] = name
        return self._con.sql(f"EXECUTE {name}").to_arrow_table()


def _key_in(samples: pa.Table, other: pa.Table) -> np.ndarray:
    """Whether each sample row's key (its spans' digest, high half) is also a key of ``other``."""
    found = pc.is_in(samples.column("key_high"), value_set=other.column("key_high").combine_chunks())
    return pc.fill_null(found, False).to_numpy(zero_copy_only=False)


def _concat(kept: pa.Table, compared: pa.Table) -> pa.Table:
    return pa.concat_tables([kept, compared.cast(kept.schema)]) if compared.num_rows else kept


def _span_keys(table: pa.Table) -> pa.ChunkedArray:
    return pc.binary_join_element_wise(table.column("trace_id"), table.column("span_id"), ":")


def touched_keys(table: pa.Table) -> set[tuple[str, str]]:
    """The (target_id, scope) window keys that a batch of span rows can change."""
    app = application_rows(table.select(["role", "target_id", "assessment_id"]))
    keys = {(target, SCOPE_ALL) for target in pc.unique(app.column("target_id")).to_pylist()}
    assessed = app.filter(pc.is_valid(app.column("assessment_id")))
    pairs = assessed.group_by(["target_id", "assessment_id"]).aggregate([])
    keys |= set(zip(pairs.column("target_id").to_pylist(), pairs.column("assessment_id").to_pylist(), strict=True))
    return keys


def sample_targets(samples: pa.Table | None) -> set[str]:
    return set() if samples is None else set(pc.unique(samples.column("target_id")).to_pylist())


def application_mask(table: pa.Table) -> np.ndarray:
    mask = pc.and_(pc.equal(table.column("role"), ROLE_APPLICATION), pc.is_valid(table.column("target_id")))
    return pc.fill_null(mask, False).to_numpy(zero_copy_only=False)


def application_rows(table: pa.Table, mask: np.ndarray | None = None) -> pa.Table:
    """The application rows of ``table``; the table itself when every row is one (a filter copies)."""
    mask = application_mask(table) if mask is None else mask
    return table if mask.all() else table.filter(mask)


def conform(rows: pa.Table, schema: pa.Schema = INCOMING_SCHEMA) -> pa.Table:
    """Rows read back from DuckDB in the Arrow types of the incoming batches (JSON columns as text)."""
    columns = []
    for f in schema:
        column = rows.column(f.name)
        if isinstance(column.type, pa.ExtensionType):
            column = pa.chunked_array([c.storage for c in column.chunks], column.type.storage_type)
        columns.append(column.cast(f.type))
    return pa.table(columns, schema=schema)
