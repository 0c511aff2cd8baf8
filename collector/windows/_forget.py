"""Forgetting spans on request: `meritlens forget` and the collector's forget route.

The spans a request names (trace ids, or a SQL condition over `spans`) are found with the store's read-only
query (`_sqlguard`: a condition cannot write), so a dry run and the deletion name the same spans. Before
they are found, every acknowledged span is stored (the staging log is emptied into DuckDB) and windowed;
the deletion then goes through the window processor (`WindowProcessor.remove`), which brings the windows,
the windows by time and their evidence digests to what they would be without those spans.

Spans that retention moved to the archive are found through `spans` too, and their window rows read from there.
Crash safety: the transaction that deletes the hot rows and drops the saved windows' watermark also records
the archived spans' keys (`span_forget_pending`), which `spans` leaves out from that commit on; the segments
holding them are rewritten after it and the record cleared (`finish_forgets`). A crash before the commit changes
nothing; after it, the next start rewrites what is left, and the windows are the state saved without them or,
without that save, recomputed from `spans`, which leaves them out.
The store's `archive_lock` keeps moves out from the search to the rewrite, so no move archives a span meanwhile.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import asdict, dataclass, field

import duckdb
import pyarrow as pa

from meritlens.analytics.engine import SPANS_TABLE, sql_string
from meritlens.collector.store._archive import FORGET_TABLE, bind_spans, physical_spans
from meritlens.collector.store._database import count, timestamp_sql
from meritlens.collector.windows._delta import WINDOW_INPUT_SQL, conform

MAX_LISTED_TRACES = 20
"""Trace ids a report lists (it counts them all)."""
_TRACE_ID = re.compile(r"[0-9a-f]{32}")
_FORGET = "_meritlens_forget"
_FORGET_ROWS = "_meritlens_forget_rows"


class ForgetError(ValueError):
    """A request that names no spans the way it should; the text is one line saying what was wrong."""


def condition(trace_ids: list[str] | tuple[str, ...] = (), where: str | None = None) -> str:
    """The SQL condition over `spans` of a forget request: any of the trace ids, or the condition."""
    parts = []
    for trace_id in trace_ids:
        if not _TRACE_ID.fullmatch(trace_id):
            raise ForgetError(f"--trace-id {trace_id!r} is not a trace id (32 lowercase hex characters)")
    if trace_ids:
        parts.append(f"trace_id IN ({', '.join(sql_string(t) for t in trace_ids)})")
    if where is not None:
        if not where.strip():
            raise ForgetError("--where is empty: give a condition over spans, e.g. attributes->>'user.id' = 'u1'")
        try:  # one expression, so that it cannot add rows to the query it selects spans in (a UNION)
            expression = str(duckdb.SQLExpression(where))
        except duckdb.Error as exc:
            raise ForgetError(f"--where is not one SQL condition: {str(exc).splitlines()[0]}") from None
        parts.append(f"({expression})")
    if not parts:
        raise ForgetError("name the spans to forget: --trace-id ID (repeatable) or --where CONDITION")
    return " OR ".join(parts)


@dataclass
class ForgetReport:
    """What a forget request removed (``done``) or would remove (a dry run)."""

    condition: str
    done: bool
    spans: int = 0
    traces: int = 0
    trace_ids: list[str] = field(default_factory=list)
    """The first `MAX_LISTED_TRACES` of them."""
    spans_by_target: dict[str, int] = field(default_factory=dict)
    """Span counts by target id ("" for spans without one)."""
    archived: int = 0
    """Of ``spans``, those in the archive (the segments holding them are rewritten without them)."""
    windows_changed: int = 0

    def to_json(self) -> dict:
        return asdict(self)

    def lines(self) -> list[str]:
        """The report as the command prints it."""
        verb = "removed" if self.done else "would remove"
        head = f"{verb} {self.spans} span{'s' if self.spans != 1 else ''} of {self.traces} trace" \
               f"{'s' if self.traces != 1 else ''} matching {self.condition}"
        lines = [head]
        for target, spans in sorted(self.spans_by_target.items()):
            lines.append(f"  {target or '(no target)'}: {spans} span{'s' if spans != 1 else ''}")
        if self.archived:
            rewritten = "are" if self.done else "would be"
            lines.append(f"  in the archive: {self.archived} of them (the segments holding them {rewritten} rewritten)")
        if self.trace_ids:
            more = self.traces - len(self.trace_ids)
            lines.append("  traces: " + ", ".join(self.trace_ids) + (f" and {more} more" if more > 0 else ""))
        if self.done:
            lines.append(f"  windows recomputed without them: {self.windows_changed} (target, scope and time bucket)"
                         " keys changed")
        elif self.spans:
            lines.append("a dry run: nothing was removed; run again with --yes to remove them")
        return lines


def forget(processor, where: str, *, act: bool, wait_s: float | None = None) -> ForgetReport:
    """Find the spans matching the condition ``where`` among every acknowledged span, in DuckDB and the archive,
    and, with ``act``, delete them and bring the windows to what they would be without them. ForgetError when the
    condition cannot run."""
    store = processor.store
    if store.wait_committed(wait_s) is None or not processor.wait_for_windows(wait_s):
        raise ForgetError("the collector could not store and window every acknowledged span in time; try again")
    with store.archive_lock if act else contextlib.nullcontext():
        archived_until = timestamp_sql(store.archive_state.archived_until_us)
        try:
            with store.query_arrow(f"SELECT DISTINCT trace_id, span_id, coalesce(target_id, '') AS target_id,"
                                   f" received_at <= {archived_until} AS archived FROM {SPANS_TABLE}"
                                   f" WHERE {where}") as query:
                keys = query.reader.read_all()
        except (duckdb.Error, ValueError) as exc:
            raise ForgetError(f"the condition {where} cannot select spans: {str(exc).splitlines()[0]}") from None
        report = ForgetReport(condition=where, done=act, spans=keys.num_rows,
                              archived=sum(keys.column("archived").to_pylist()))
        traces = sorted(set(keys.column("trace_id").to_pylist()))
        report.traces, report.trace_ids = len(traces), traces[:MAX_LISTED_TRACES]
        for target in keys.column("target_id").to_pylist():
            report.spans_by_target[target] = report.spans_by_target.get(target, 0) + 1
        if act and keys.num_rows:
            report.windows_changed = len(_remove(processor, keys.select(["trace_id", "span_id"]), archived_until))
            store.finish_forgets()
    return report


def _remove(processor, keys: pa.Table, archived_until: str) -> set:
    """Remove the spans ``keys`` names from the windows and DuckDB, recording those in the archive."""
    con = processor.con
    con.register(_FORGET, keys)
    try:
        rows = conform(con.sql(f"SELECT {WINDOW_INPUT_SQL} FROM {SPANS_TABLE} s SEMI JOIN {_FORGET} f"
                               " ON s.trace_id = f.trace_id AND s.span_id = f.span_id").to_arrow_table())
        spans = physical_spans(con)

        def delete(con) -> None:
            con.execute(f"DELETE FROM {spans} USING {_FORGET} f"
                        f" WHERE {spans}.trace_id = f.trace_id AND {spans}.span_id = f.span_id")
            if count(con.execute(f"INSERT INTO {FORGET_TABLE} SELECT trace_id, span_id, received_at"
                                 f" FROM {_FORGET_ROWS} WHERE received_at <= {archived_until}")):
                # the windows' `spans` leaves them out from this commit on (the span writer's duplicate check
                # follows at the rewrite: a retried export of them meanwhile is taken as stored)
                bind_spans(con, processor.store.archive)

        con.register(_FORGET_ROWS, rows)
        try:
            return processor.remove(rows, delete)
        finally:
            con.unregister(_FORGET_ROWS)
    finally:
        con.unregister(_FORGET)
