"""Partitions of stored spans that a window rebuild can read one at a time.

A sample is exact only when the statement computing it sees every application span of its task
and every application span of each of that task's traces (`meritlens.analytics._tasks`). So
traces and tasks form a bipartite graph (an edge per application span: its trace — its task key),
and a partition must be a union of its connected components.

Almost every trace is a component of its own (its tasks lie inside it). Only the traces of tasks
that span several traces need a label: the smallest trace id of their component, found in DuckDB
(so it can spill) by min-label propagation with pointer jumping over the distinct (trace, task)
edges of those tasks. A span then falls in partition ``hash(coalesce(label, trace_id)) % count``; only the
labelled traces whose partition differs from their own id's are kept in a table (``_rebuild_moved``).
When the propagation does not settle within ``max_rounds``, every labelled trace gets one common
label instead: all multi-trace components share a partition, which is coarser but still exact.

The temporary tables live on the caller's connection (DuckDB temp tables are per connection) and
are dropped by `TracePartitions.close`.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import duckdb

from meritlens.analytics.engine import APPLICATION_SPANS

log = logging.getLogger("meritlens.collector.partitions")

DEFAULT_MAX_LABEL_ROUNDS = 64
"""Rounds of label propagation before falling back to one partition for every multi-trace component."""

_EDGES = "_rebuild_edges"
_LABELS = "_rebuild_labels"
_TASK_LABELS = "_rebuild_task_labels"
_NEXT = "_rebuild_next_labels"
_MOVED = "_rebuild_moved"
"""Labelled traces whose partition (their label's) is not their own trace id's: (trace_id, part)."""
_ORDERED = "_rebuild_ordered"
"""`TracePartitions.order_by_partition`'s copy of the source's columns, sorted by partition."""
_PART = "_rebuild_part"
_TABLES = (_EDGES, _LABELS, _TASK_LABELS, _NEXT, _MOVED, _ORDERED)
MIN_PARTITIONS_TO_ORDER = 8
"""From this many partitions a rebuild copies the spans once, sorted by partition, rather than
scanning the source once per partition (a copy costs about five scans)."""
_FALLBACK_LABEL = ""
"""The common label of every multi-trace trace when propagation did not settle (no trace id is empty)."""


@dataclass
class TracePartitions:
    """``count`` partitions of ``source``; `source_of(p)` is the relation of partition ``p``."""

    con: duckdb.DuckDBPyConnection
    source: str
    count: int
    scoped_rows: int
    labelled_traces: int = 0
    rounds: int = 0
    converged: bool = True
    columns: tuple[str, ...] | None = None
    """Set by `order_by_partition`: the columns `source_of` then has."""

    def order_by_partition(self, columns: tuple[str, ...] | list[str]) -> None:
        """From `MIN_PARTITIONS_TO_ORDER` partitions on, copy ``columns`` of ``source`` once into a
        temporary table sorted by partition, so that `source_of(p)` reads only partition ``p``'s
        rows (DuckDB's zone maps skip the others) instead of scanning ``source`` again: the stored
        spans are read once, not once per partition. The sort spills to DuckDB's temporary
        directory beyond its memory limit (~150-400 bytes a span). Fewer partitions keep reading ``source``, and so does a copy that fails (a full
        disk, `max_temp_directory_size`): slower, without temporary disk. Inside a transaction the
        failure aborted, it is raised."""
        if self.count < MIN_PARTITIONS_TO_ORDER:
            return
        selected = ", ".join(f"s.{column}" for column in columns)
        try:
            self.con.execute(  # _MOVED holds a trace at most once (it comes from the labels, one per trace)
                f"CREATE TEMP TABLE {_ORDERED} AS SELECT {selected},"
                f" coalesce(m.part, hash(s.trace_id) % {self.count}) AS {_PART} FROM {self.source} s"
                f" LEFT JOIN {_MOVED} m ON m.trace_id = s.trace_id ORDER BY {_PART}")
        except duckdb.Error as exc:
            try:
                self.con.execute(f"DROP TABLE IF EXISTS {_ORDERED}")
            except duckdb.TransactionException:
                raise exc from None
            log.warning("copying the spans sorted by partition failed (%s); each of the %d partitions is read from"
                        " the stored spans instead", str(exc).splitlines()[0], self.count)
            return
        self.columns = tuple(columns)

    def source_of(self, partition: int) -> str:
        """A relation with the rows of ``source`` in partition ``partition``: all its columns, or
        after `order_by_partition` those columns."""
        if self.count == 1:
            return self.source
        p = int(partition)
        if self.columns is not None:
            return f"(SELECT {', '.join(self.columns)} FROM {_ORDERED} WHERE {_PART} = {p})"
        # A join with the labels in the scan is ~3x slower than these two filters (measured at 3M spans).
        return (f"(SELECT * FROM {self.source} WHERE hash(trace_id) % {self.count} = {p}"
                f" AND trace_id NOT IN (SELECT trace_id FROM {_MOVED})"
                f" UNION ALL SELECT * FROM {self.source}"
                f" WHERE trace_id IN (SELECT trace_id FROM {_MOVED} WHERE part = {p}))")

    def close(self) -> None:
        """Drop the temporary tables. Inside a transaction an error aborted, nothing can run (the
        rollback drops them), so that failure is not raised over the error being handled."""
        try:
            drop_tables(self.con)
        except duckdb.TransactionException:
            log.debug("temporary tables of a rebuild left to the rollback", exc_info=True)


def drop_tables(con: duckdb.DuckDBPyConnection) -> None:
    for table in _TABLES:
        con.execute(f"DROP TABLE IF EXISTS {table}")


def partition_spans(con: duckdb.DuckDBPyConnection, source: str, rows_per_partition: int,
                    max_rounds: int = DEFAULT_MAX_LABEL_ROUNDS) -> TracePartitions:
    """Partition ``source`` (a relation with the columns of `spans`) so that each partition holds
    about ``rows_per_partition`` scoped rows (application spans, those with an assessment counted
    twice: the per-task aggregation has a group per scope) and every component of traces and tasks lies in
    one partition. Creates temporary tables on ``con``; close the result to drop them."""
    if rows_per_partition < 1:
        raise ValueError(f"rows_per_partition must be at least 1, not {rows_per_partition}")
    rows = con.execute(f"SELECT count(*) + count(assessment_id) FROM {source} WHERE {APPLICATION_SPANS}").fetchall()[0][0]
    count = max(1, math.ceil(rows / rows_per_partition))
    parts = TracePartitions(con, source, count, rows)
    if count == 1:
        return parts
    drop_tables(con)
    try:
        _label_components(con, source, parts, max_rounds)
        con.execute(f"""CREATE TEMP TABLE {_MOVED} AS SELECT trace_id, hash(label) % {count} AS part
FROM {_LABELS} WHERE hash(label) % {count} <> hash(trace_id) % {count}""")
        for table in (_EDGES, _TASK_LABELS, _NEXT):
            con.execute(f"DROP TABLE IF EXISTS {table}")
    except BaseException:
        drop_tables(con)
        raise
    return parts


def _label_components(con: duckdb.DuckDBPyConnection, source: str, parts: TracePartitions, max_rounds: int) -> None:
    # Edges of tasks with a task id; a task id equal to the id of a trace whose spans have none joins
    # that trace's own task (its key is its trace id), so such traces count as an edge too.
    con.execute(f"""CREATE TEMP TABLE {_EDGES} AS
WITH app AS (SELECT trace_id, task_id FROM {source} WHERE {APPLICATION_SPANS}),
named AS (SELECT DISTINCT trace_id, task_id AS task_key FROM app WHERE task_id IS NOT NULL),
unnamed AS (
  SELECT DISTINCT trace_id, trace_id AS task_key FROM app
  WHERE task_id IS NULL AND trace_id IN (SELECT task_key FROM named)
),
edges AS (SELECT * FROM named UNION SELECT * FROM unnamed)
SELECT trace_id, task_key FROM edges
WHERE task_key IN (SELECT task_key FROM edges GROUP BY task_key HAVING count(*) > 1)""")
    con.execute(f"CREATE TEMP TABLE {_LABELS} AS SELECT DISTINCT trace_id, trace_id AS label FROM {_EDGES}")
    parts.labelled_traces = con.execute(f"SELECT count(*) FROM {_LABELS}").fetchall()[0][0]
    while parts.labelled_traces:
        if parts.rounds >= max_rounds:
            log.warning("trace labels did not settle in %d rounds; %d traces of multi-trace tasks share one "
                        "partition", max_rounds, parts.labelled_traces)
            parts.converged = False
            con.execute(f"UPDATE {_LABELS} SET label = '{_FALLBACK_LABEL}'")
            break
        parts.rounds += 1
        con.execute(f"""CREATE OR REPLACE TEMP TABLE {_TASK_LABELS} AS
SELECT e.task_key, min(l.label) AS label FROM {_EDGES} e JOIN {_LABELS} l USING (trace_id) GROUP BY e.task_key""")
        con.execute(f"""CREATE OR REPLACE TEMP TABLE {_NEXT} AS
SELECT e.trace_id, min(t.label) AS label FROM {_EDGES} e JOIN {_TASK_LABELS} t USING (task_key) GROUP BY e.trace_id""")
        # pointer jumping: a trace takes its label's label when smaller (both lie in its component)
        con.execute(f"""CREATE OR REPLACE TEMP TABLE {_NEXT} AS
SELECT n.trace_id, least(n.label, coalesce(j.label, n.label)) AS label
FROM {_NEXT} n LEFT JOIN {_NEXT} j ON j.trace_id = n.label""")
        changed = con.execute(f"SELECT count(*) FROM {_NEXT} n JOIN {_LABELS} l USING (trace_id)"
                              " WHERE n.label <> l.label").fetchall()[0][0]
        con.execute(f"DROP TABLE {_LABELS}")
        con.execute(f"ALTER TABLE {_NEXT} RENAME TO {_LABELS}")
        if not changed:
            break
