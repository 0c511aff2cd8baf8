"""Retention: `serve --retain` moves spans past the horizon out of DuckDB into the archive's Parquet
segments, and every reader still sees each span once, with windows equal to a collector that kept
every span.

Each test runs the real collector with a horizon of a fraction of a second and, beside it where the
windows are compared, a second collector that keeps every span; both receive the same exports from
OpenTelemetry's own OTLP/HTTP exporter.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import duckdb
import httpx
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from meritlens.collector.store._archive import SpanArchive
from meritlens.instrumentation import conventions as c
from tests.collector.collector_proc import MERITLENS, assert_same_windows
from tests.conftest import CollectorProcess, run_cli

WINDOW_ROWS = ("SELECT target_id, metric, scope, aggregation, value, sample_count, evidence_digest FROM windows"
               " ORDER BY target_id, metric, scope, aggregation")
BY_TIME_ROWS = ("SELECT target_id, metric, scope, bucket_start, bucket_seconds, value, sample_count, evidence_digest"
                " FROM windows_by_time ORDER BY ALL")
RETAIN = ("--retain", "0.5s", "--stage-seconds", "0")


class Spans:
    """Finished SDK spans of LLM calls, made on demand and kept to be exported (and exported again)."""

    def __init__(self):
        self._memory = InMemorySpanExporter()
        self._provider = TracerProvider()
        self._provider.add_span_processor(SimpleSpanProcessor(self._memory))
        self._tracer = self._provider.get_tracer("tests")
        self.made = 0

    def tasks(self, first: int, count: int, spans_per_task: int = 3, target: str = "bot") -> list[ReadableSpan]:
        """``spans_per_task`` spans of each task ``first`` .. ``first + count - 1`` (each task one trace)."""
        self._memory.clear()
        for task in range(first, first + count):
            with self._tracer.start_as_current_span("task", attributes={c.TARGET_ID: target, c.TASK_ID: f"t{task}"}):
                for step in range(spans_per_task - 1):
                    self.made += 1
                    self._tracer.start_span("chat m", attributes={
                        c.TARGET_ID: target, c.TASK_ID: f"t{task}", c.GEN_AI_OPERATION_NAME: "chat",
                        c.GEN_AI_USAGE_INPUT_TOKENS: 10 + task + step, c.GEN_AI_USAGE_OUTPUT_TOKENS: 1 + step}).end()
            self.made += 1
        return list(self._memory.get_finished_spans())

    def late(self, task: int, target: str = "bot") -> list[ReadableSpan]:
        """One more span of task ``task``, in a trace of its own (its task's spans may have moved)."""
        self._memory.clear()
        self._tracer.start_span("chat m", attributes={
            c.TARGET_ID: target, c.TASK_ID: f"t{task}", c.GEN_AI_OPERATION_NAME: "chat",
            c.GEN_AI_USAGE_INPUT_TOKENS: 1000, c.GEN_AI_USAGE_OUTPUT_TOKENS: 7}).end()
        self.made += 1
        return list(self._memory.get_finished_spans())


def export(collectors: list[CollectorProcess], spans: list[ReadableSpan]) -> None:
    """Export ``spans`` to each collector with the SDK's OTLP/HTTP exporter; fail unless acknowledged."""
    for collector in collectors:
        exporter = OTLPSpanExporter(endpoint=collector.traces_url, timeout=10)
        try:
            assert exporter.export(spans) is SpanExportResult.SUCCESS
        finally:
            exporter.shutdown()


def endpoint_sql(collector: CollectorProcess, query: str) -> list[list]:
    with collector.client(timeout=30.0) as client:
        response = client.post("/api/sql", json={"sql": query})
    response.raise_for_status()
    return response.json()["rows"]


def wait_moved(collector: CollectorProcess, at_least: int, timeout: float = 60.0) -> int:
    deadline = time.monotonic() + timeout
    while (moved := endpoint_sql(collector, "SELECT spans_moved FROM span_archive")[0][0]) < at_least:
        assert time.monotonic() < deadline, f"only {moved} spans moved:\n{collector.log()}"
        time.sleep(0.1)
    return moved


def metric(collector: CollectorProcess, name: str) -> float:
    text = httpx.get(collector.url + "/metrics", timeout=30).text
    return float(next(line.split()[1] for line in text.splitlines() if line.startswith(name + " ")))


def span_counts(collector: CollectorProcess) -> tuple[int, int, int]:
    """(rows of `spans`, distinct spans among them, rows of `spans_hot`)."""
    [[rows, distinct, hot]] = endpoint_sql(collector, "SELECT count(*), count(DISTINCT (trace_id, span_id)),"
                                                      " (SELECT count(*) FROM spans_hot) FROM spans")
    return rows, distinct, hot


@pytest.fixture
def pair(tmp_path):
    """A collector with retention on and one that keeps every span."""
    with CollectorProcess(tmp_path / "retained.duckdb", args=RETAIN) as retained, \
            CollectorProcess(tmp_path / "kept.duckdb", args=("--stage-seconds", "0")) as kept:
        yield retained, kept


def test_moved_spans_are_read_once_retried_once_and_late_spans_of_moved_tasks_are_windowed(pair):
    retained, kept = pair
    spans = Spans()
    first = spans.tasks(0, 10)
    export([retained, kept], first)
    wait_moved(retained, len(first))
    assert span_counts(retained)[2] == 0  # every span of them left DuckDB
    export([retained, kept], first[:5])  # a retried export of moved spans
    export([retained, kept], spans.late(0))  # a late span of a task whose spans moved
    for batch in range(4):  # exports keep arriving while spans move
        export([retained, kept], spans.tasks(100 + 10 * batch, 10))
        time.sleep(0.2)
    assert span_counts(retained)[:2] == (spans.made, spans.made)
    assert span_counts(kept)[:2] == (spans.made, spans.made)
    assert_same_windows(endpoint_sql(retained, WINDOW_ROWS), endpoint_sql(kept, WINDOW_ROWS))
    assert metric(retained, "meritlens_spans_duplicates_dropped_total") == 5
    assert metric(retained, "meritlens_spans_stored_total") == spans.made
    assert metric(retained, "meritlens_spans_moved_total") >= len(first)


def test_the_drill_down_and_the_evidence_reach_archived_spans(pair):
    retained, kept = pair
    spans = Spans()
    first = spans.tasks(0, 4)
    export([retained, kept], first)
    wait_moved(retained, len(first))
    trace_id = format(first[0].context.trace_id, "032x")
    documents = []
    for collector in (retained, kept):
        with collector.client(timeout=30.0) as client:
            trace = client.get("/api/dashboard/trace", params={"trace": trace_id}).json()
            evidence = client.get("/api/dashboard/evidence", params={"target": "bot", "metric": "input_tokens"}).json()
        documents.append((trace, evidence))
    (trace, evidence), (kept_trace, kept_evidence) = documents
    assert len(trace["spans"]) == 3 and trace == kept_trace
    assert evidence["digest_matches"] is True and evidence["sample_count"] == 4
    named = [span.get("name") for sample in evidence["samples"] for span in sample["spans"]]
    assert named and all(named)  # every span an evidence sample names was found, in the archive
    assert evidence["samples"] == kept_evidence["samples"]


def test_kill_9_during_moves_loses_nothing_and_counts_nothing_twice(tmp_path):
    # staging on: a kill also finds acknowledged spans that only the staging log holds
    with CollectorProcess(tmp_path / "retained.duckdb", args=("--retain", "0.5s")) as retained, \
            CollectorProcess(tmp_path / "kept.duckdb") as kept:
        _kill_during_moves(retained, kept)


def _kill_during_moves(retained: CollectorProcess, kept: CollectorProcess) -> None:
    spans = Spans()
    task = 0
    for moment in (0.15, 0.55, 1.3):  # kills at varied moments of the moves
        started = time.monotonic()
        while time.monotonic() - started < moment:
            export([retained, kept], spans.tasks(task, 5))
            task += 5
        retained.kill9()
        retained.start()
    export([retained, kept], spans.late(0))
    wait_moved(retained, spans.made - 1)
    assert span_counts(retained)[:2] == (spans.made, spans.made)
    assert_same_windows(endpoint_sql(retained, WINDOW_ROWS), endpoint_sql(kept, WINDOW_ROWS))


def test_a_segment_whose_move_did_not_commit_is_never_read_and_is_removed_at_start(tmp_path):
    db = tmp_path / "retained.duckdb"
    spans = Spans()
    with CollectorProcess(db, args=("--retain", "1h", "--stage-seconds", "0")) as collector:
        export([collector], spans.tasks(0, 5))
    # what a move killed between its segment and its commit leaves: the segment, the rows still in DuckDB
    archive = SpanArchive(str(db) + ".archive")
    reader = duckdb.connect(str(db), read_only=True)
    try:
        archive.write(0, time.time_ns() // 1000, reader.sql("SELECT * FROM spans").to_arrow_reader(1000))
    finally:
        reader.close()
    assert len(archive.segments()) == 1
    looked = run_cli("sql", "--db", str(db), "--format", "csv", "SELECT count(*) FROM spans")
    assert looked.stdout.split()[-1] == str(spans.made)  # past the watermark: no reader takes it
    with CollectorProcess(db, args=("--retain", "1h")) as collector:
        assert span_counts(collector)[:2] == (spans.made, spans.made)
    assert archive.segments() == []


def test_sql_reads_the_archive_without_a_collector_and_forget_can_rewrite_its_segments(tmp_path):
    db = tmp_path / "retained.duckdb"
    spans = Spans()
    with CollectorProcess(db, args=RETAIN) as collector:
        first = spans.tasks(0, 6)
        export([collector], first)
        wait_moved(collector, len(first))
        export([collector], spans.tasks(10, 2))
    query = "SELECT (SELECT count(*) FROM spans), (SELECT count(*) FROM spans_hot)"
    total, hot = run_cli("sql", "--db", str(db), "--format", "csv", query).stdout.split()[-1].split(",")
    assert int(total) == spans.made and int(hot) < spans.made
    help_text = run_cli("sql", "--help").stdout
    assert "spans_hot" in help_text
    trace_id = format(first[0].context.trace_id, "032x")
    removed = SpanArchive(str(db) + ".archive").rewrite_without(lambda t: pc.equal(t.column("trace_id"), trace_id))
    assert removed == 3
    after = run_cli("sql", "--db", str(db), "--format", "csv", query).stdout.split()[-1].split(",")
    assert int(after[0]) == spans.made - 3


def _refused(db: Path, *args: str) -> str:
    result = subprocess.run([MERITLENS, "serve", "--db", str(db), "--no-grpc", "--http-port", "0", *args],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode != 0, result.stdout
    assert "Traceback" not in result.stderr, result.stderr
    last = result.stderr.strip().splitlines()[-1]  # a log line may come first: what the start was doing
    assert last.startswith("Error: "), result.stderr
    return last


def test_archive_none_drops_spans_keeps_the_windows_and_refuses_a_recompute(tmp_path):
    db = tmp_path / "dropped.duckdb"
    spans = Spans()
    with CollectorProcess(db, args=(*RETAIN, "--archive", "none")) as collector:
        first = spans.tasks(0, 4)
        export([collector], first)
        wait_moved(collector, len(first))
        assert span_counts(collector)[0] == 0
        windows = endpoint_sql(collector, "SELECT sample_count FROM windows WHERE target_id = 'bot'"
                                          " AND metric = 'input_tokens' AND scope = 'all'")
        assert windows == [[4]]  # the windows keep counting the dropped spans
    # other window definitions need every span again: refused rather than shrunk
    line = _refused(db, "--quantile-error", "0.02")
    assert "recomputing every window is refused" in line and "--archive none" in line
    line = _refused(db, "--archive", str(tmp_path / "elsewhere"))
    assert "were dropped (--archive none); give --archive none" in line


def test_retention_settings_are_checked_in_one_line(tmp_path):
    assert "--retain is not offered with --lake" in _refused(tmp_path / "x.duckdb", "--retain", "5m", "--lake",
                                                             str(tmp_path / "lake"))
    assert "is not a duration" in _refused(tmp_path / "x.duckdb", "--retain", "soon")


def _segment_spans(db: Path) -> dict[str, tuple[int, set[str]]]:
    """Each archive segment's file: its inode and the span ids it holds, read from the Parquet."""
    found = {}
    for path in sorted((Path(str(db) + ".archive") / "spans").glob("archive-*.parquet")):
        found[path.name] = (path.stat().st_ino, set(pq.read_table(path, columns=["span_id"]).column(0).to_pylist()))
    return found


def _span_id(span: ReadableSpan) -> str:
    return format(span.context.span_id, "016x")


def _windows_and_by_time(collector: CollectorProcess) -> tuple[list, list]:
    return endpoint_sql(collector, WINDOW_ROWS), endpoint_sql(collector, BY_TIME_ROWS)


def _assert_windows_of_a_collector_never_sent(db: Path, sent: list[list[ReadableSpan]], gone: set[str],
                                              windows: tuple[list, list]) -> None:
    """``windows`` (`_windows_and_by_time`) equal those of a collector sent the same exports without ``gone``."""
    with CollectorProcess(db, args=("--stage-seconds", "0")) as never:
        for batch in sent:
            export([never], [s for s in batch if _span_id(s) not in gone])
        expected = _windows_and_by_time(never)
    for got, want in zip(windows, expected, strict=True):
        assert_same_windows(got, want)


def test_forget_removes_spans_from_duckdb_and_rewrites_the_archive_segments_that_hold_them(tmp_path):
    spans = Spans()
    first, second = spans.tasks(0, 4), spans.tasks(4, 4)  # two moves: two segments
    late, hot = spans.late(0), spans.tasks(10, 3)
    sent = [first, second, late, hot]
    for name in ("forgetting", "never"):  # one file name: it is part of the windows' evidence URIs
        (tmp_path / name).mkdir()
    db = tmp_path / "forgetting" / "m.duckdb"
    with CollectorProcess(db, args=RETAIN) as collector:
        for batch in (first, second):
            export([collector], batch)
            wait_moved(collector, len(first) + (len(second) if batch is second else 0))
    partly = next(s for s in first if s.attributes.get(c.TASK_ID) == "t2" and s.name == "chat m")
    gone = {_span_id(s) for s in first + late + hot if s.attributes.get(c.TASK_ID) in ("t0", "t10")}
    gone.add(_span_id(partly))  # one call of a task whose other spans stay
    where = f"task_id IN ('t0', 't10') OR span_id = '{_span_id(partly)}'"
    segments = _segment_spans(db)
    assert len(segments) == 2
    [(held_first, (_, ids_first)), (held_second, (inode_second, ids_second))] = segments.items()
    assert gone & ids_first and not gone & ids_second
    # a horizon no span reaches during the test: the forget finds spans partly hot, partly archived
    with CollectorProcess(db, args=("--retain", "1h", "--stage-seconds", "0")) as collector:
        export([collector], late + hot)
        dry = run_cli("forget", "--url", collector.url, "--where", where)
        assert f"would remove {len(gone)} spans" in dry.stdout, dry.stdout + dry.stderr
        archived = len(gone & ids_first)  # task t0's trace and t2's call; the rest is hot
        assert 0 < archived < len(gone) and f"in the archive: {archived} of them" in dry.stdout, dry.stdout
        done = run_cli("forget", "--url", collector.url, "--where", where, "--yes")
        assert f"removed {len(gone)} spans" in done.stdout, done.stdout + done.stderr
        listed = ", ".join(f"'{i}'" for i in sorted(gone))
        assert endpoint_sql(collector, f"SELECT count(*) FROM spans WHERE span_id IN ({listed})") == [[0]]
        assert span_counts(collector)[:2] == (spans.made - len(gone), spans.made - len(gone))
        assert endpoint_sql(collector, "SELECT count(*) FROM span_forget_pending") == [[0]]
        after = _segment_spans(db)
        assert after[held_first][1] == ids_first - gone  # the other spans of the rewritten segment stay
        assert after[held_second] == (inode_second, ids_second)  # a segment holding none is not rewritten
        forgetting = _windows_and_by_time(collector)
    _assert_windows_of_a_collector_never_sent(tmp_path / "never" / "m.duckdb", sent, gone, forgetting)


def test_a_forget_cut_short_before_its_segments_are_rewritten_is_finished_at_start(tmp_path):
    db = tmp_path / "retained.duckdb"
    spans = Spans()
    with CollectorProcess(db, args=RETAIN) as collector:
        first = spans.tasks(0, 4)
        export([collector], first)
        wait_moved(collector, len(first))
    trace = [s for s in first if s.context.trace_id == first[0].context.trace_id]
    gone = {_span_id(s) for s in trace}
    [(name, (_, held))] = _segment_spans(db).items()
    assert gone <= held
    # what a forget killed between its commit and the rewrite leaves: the record, the segments as they were
    segment = pq.read_table(Path(str(db) + ".archive") / "spans" / name)
    con = duckdb.connect(str(db))
    try:
        con.register("segment", segment)
        con.execute("INSERT INTO span_forget_pending SELECT trace_id, span_id, received_at FROM segment"
                    " WHERE trace_id = ?", [format(first[0].context.trace_id, "032x")])
    finally:
        con.close()
    listed = ", ".join(f"'{i}'" for i in sorted(gone))
    looked = run_cli("sql", "--db", str(db), "--format", "csv",
                     f"SELECT count(*), count(*) FILTER (span_id IN ({listed})) FROM spans")
    assert looked.stdout.split()[-1] == f"{spans.made - len(gone)},0"  # invisible before any start
    with CollectorProcess(db, args=RETAIN) as collector:
        assert span_counts(collector)[:2] == (spans.made - len(gone), spans.made - len(gone))
        assert endpoint_sql(collector, "SELECT count(*) FROM span_forget_pending") == [[0]]
    assert _segment_spans(db)[name][1] == held - gone
    # with no collector holding the file, forget rewrites the segments itself
    other = format(first[-1].context.trace_id, "032x")
    done = run_cli("forget", "--db", str(db), "--trace-id", other, "--yes")
    assert "removed 3 spans" in done.stdout and "in the archive: 3 of them" in done.stdout, done.stdout
    assert not {_span_id(s) for s in first if format(s.context.trace_id, "032x") == other} & _segment_spans(db)[name][1]


def test_forgets_while_spans_move_leave_none_of_the_spans_anywhere(tmp_path):
    spans = Spans()
    sent: list[list[ReadableSpan]] = []
    forgotten: set[str] = set()
    for name in ("forgetting", "never"):
        (tmp_path / name).mkdir()
    db = tmp_path / "forgetting" / "m.duckdb"
    with CollectorProcess(db, args=RETAIN) as collector:
        for step in range(6):
            sent.append(spans.tasks(10 * step, 5))
            export([collector], sent[-1])
            # a task just sent (hot, or moving) and one of the step before (moving, or archived)
            named = [f"t{10 * step}"] + ([f"t{10 * step - 9}"] if step else [])
            forgotten.update(named)
            listed = ", ".join(f"'{t}'" for t in named)
            with collector.client(timeout=60.0) as client:
                response = client.post("/api/forget", json={"where": f"task_id IN ({listed})", "yes": True})
            assert response.status_code == 200 and response.json()["spans"] == 3 * len(named), response.text
            time.sleep(0.5)  # about a horizon: the step's spans start to move
        gone = {_span_id(s) for batch in sent for s in batch if s.attributes.get(c.TASK_ID) in forgotten}
        deadline = time.monotonic() + 60
        while span_counts(collector)[2]:  # every span left moves to the archive
            assert time.monotonic() < deadline, collector.log()
            time.sleep(0.1)
        assert span_counts(collector)[:2] == (spans.made - len(gone), spans.made - len(gone))
        forgetting = _windows_and_by_time(collector)
    held = set().union(*(ids for _, ids in _segment_spans(db).values()))
    assert len(held) == spans.made - len(gone) and not held & gone
    _assert_windows_of_a_collector_never_sent(tmp_path / "never" / "m.duckdb", sent, gone, forgetting)
