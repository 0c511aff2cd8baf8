"""`meritlens import` and `meritlens export --parquet`: formats, round trips, through the file or
the running collector, exit codes and one-line errors."""

from __future__ import annotations

import gzip
import json

import duckdb
import httpx
import pyarrow.parquet as pq
import pytest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from meritlens.analytics._definitions import SPAN_WINDOW_METRICS
from meritlens.instrumentation import conventions as c
from tests.collector.collector_proc import CollectorProcess as TokenCollector
from tests.conftest import CollectorProcess, run_cli, run_sql
from tests.otlp_builders import any_value, json_request, json_span, make_request, make_span

T0 = 1_700_000_000 * 10**9
WINDOWS_PER_KEY = len(SPAN_WINDOW_METRICS)  # the processor stores one window per span metric and key
WINDOW_COLUMNS = ("target_id, metric, scope, aggregation, value, unit, sample_count, state, count, mean, min, max, "
                  "p50, p90, p95, p99, first_span_time, last_span_time, evidence_uri, evidence_media_type, "
                  "evidence_digest")


def _rich_spans() -> list[Span]:
    """Spans that exercise every column: promoted attributes of each kind, other attributes of
    every OTLP type, resource attributes, events, links, parents, status, tasks and assessments."""
    spans = []
    for i in range(6):
        attrs = {
            c.TARGET_ID: "bot" if i < 4 else "other/bot", c.GEN_AI_OPERATION_NAME: "chat",
            c.GEN_AI_REQUEST_MODEL: "m-1", c.GEN_AI_USAGE_INPUT_TOKENS: 100 + i, c.GEN_AI_USAGE_OUTPUT_TOKENS: 7 * i,
            c.COST_USD: 0.001 * (i + 1), c.RETRIES: i % 2, c.OUTCOME_SUCCESS: i % 3 != 0, c.QUALITY_SCORE: i / 10,
            "app.flag": True, "app.ratio": 0.25, "app.list": ["a", "b"], "app.count": 3,
        }
        if i % 2:
            attrs[c.ASSESSMENT_ID] = "a1"
        if i == 5:
            attrs[c.ROLE] = c.ROLE_ORCHESTRATION
        span = make_span(attrs, start_ns=T0 + i * 10**9, duration_s=0.5 + i)
        event = span.events.add(name="retry", time_unix_nano=T0 + i * 10**9 + 1)
        event.attributes.add(key="attempt", value=any_value(2))
        link = span.links.add(trace_id=bytes.fromhex("cd" * 16), span_id=bytes.fromhex("ef" * 8))
        link.attributes.add(key="why", value=any_value("follows"))
        span.status.code = 2 if i == 3 else 1
        span.status.message = "boom" if i == 3 else ""
        spans.append(span)
    parent = spans[0]
    spans.append(make_span({c.TARGET_ID: "bot", c.TASK_ID: "t-1", c.GEN_AI_USAGE_INPUT_TOKENS: 5},
                           trace_id=parent.trace_id, parent_span_id=parent.span_id, start_ns=T0, duration_s=0.1,
                           name="execute_tool search"))
    return spans


def _send(collector, spans, resource=None) -> None:
    r = httpx.post(collector.traces_url, content=make_request(spans, resource).SerializeToString(),
                   headers={"Content-Type": "application/x-protobuf"})
    assert r.status_code == 200, r.text


def _rows(db, sql: str) -> list[dict]:
    """Rows of a query on a DuckDB file no process holds (read-only). Floats are rounded to 12
    significant digits: sums over the same values in another row order may differ in the last bit."""
    with duckdb.connect(str(db), read_only=True) as con:
        cursor = con.execute(sql)
        names = [d[0] for d in cursor.description]
        return [{k: float(f"{v:.12g}") if isinstance(v, float) else v for k, v in zip(names, row)}
                for row in cursor.fetchall()]


def test_export_then_import_into_another_database_gives_identical_spans_and_windows(tmp_path):
    source = CollectorProcess((tmp_path / "a").joinpath("meritlens.duckdb"))
    source.db.parent.mkdir()
    source.start()
    try:
        _send(source, _rich_spans(), resource={"service.name": "svc", "deployment.environment": "test"})
    finally:
        source.stop()
    out = tmp_path / "export"
    proc = run_cli("export", "--parquet", str(out), "--db", str(source.db), "--format", "json")
    assert json.loads(proc.stdout) == [
        {"table": "spans", "file": str(out / "spans.parquet"), "rows": 7},
        {"table": "windows", "file": str(out / "windows.parquet"), "rows": 3 * WINDOWS_PER_KEY},
    ]
    target_db = tmp_path / "b" / "meritlens.duckdb"  # same file name: evidence URIs name the file
    target_db.parent.mkdir()
    proc = run_cli("import", str(out), "--db", str(target_db), "--format", "json")
    assert [(r["file"], r["format"], r["spans"], r["new"], r["refused"]) for r in json.loads(proc.stdout)] == [
        (str(out / "spans.parquet"), "meritlens-parquet", 7, 7, 0)]  # windows.parquet is left out
    assert "read 7 spans from 1 file" in proc.stderr and "7 new, 0 already stored" in proc.stderr

    span_columns = "* EXCLUDE (received_at)"
    order = " ORDER BY trace_id, span_id"
    assert _rows(target_db, f"select {span_columns} from spans{order}") == \
        _rows(source.db, f"select {span_columns} from spans{order}")
    windows_sql = f"select {WINDOW_COLUMNS} from windows order by target_id, metric, scope"
    before = _rows(source.db, windows_sql)
    assert _rows(target_db, windows_sql) == before
    assert len(before) == 3 * WINDOWS_PER_KEY, [(w["target_id"], w["scope"], w["metric"]) for w in before]
    assert {w["target_id"] for w in before} == {"bot", "other/bot"}

    # Importing again adds nothing: the same spans are recognised and the windows stay the same.
    proc = run_cli("import", str(out / "spans.parquet"), "--db", str(target_db), "--format", "json")
    assert (json.loads(proc.stdout)[0]["new"], json.loads(proc.stdout)[0]["duplicates"]) == (0, 7)
    assert _rows(target_db, windows_sql) == before


def test_export_through_the_running_collector_is_readable_by_duckdb_and_pyarrow(collector, tmp_path):
    _send(collector, _rich_spans())
    _send(collector, [make_span({c.TARGET_ID: "bot", c.GEN_AI_USAGE_INPUT_TOKENS: n}) for n in range(3000)])
    out = tmp_path / "parquet"
    # The collector holds the file: the CLI finds its URL beside it and reads /api/arrow.
    proc = run_cli("export", "--parquet", str(out), "--db", str(collector.db), "--format", "csv")
    assert proc.stdout.splitlines()[1:] == [f"spans,{out / 'spans.parquet'},3007",
                                            f"windows,{out / 'windows.parquet'},{3 * WINDOWS_PER_KEY}"]
    spans = pq.read_table(out / "spans.parquet")
    assert spans.num_rows == 3007
    assert str(spans.schema.field("end_time").type).startswith("timestamp[us, tz=")
    assert spans.schema.field("input_tokens").type == "int64"
    windows = pq.read_table(out / "windows.parquet")
    assert windows.num_rows == 3 * WINDOWS_PER_KEY and windows.column_names[:3] == ["target_id", "metric", "scope"]

    con = duckdb.connect()  # a plain DuckDB, as a user would open the files
    assert con.execute(f"select count(*) from read_parquet('{out}/spans.parquet')").fetchone()[0] == 3007
    assert con.execute(f"select sum(input_tokens) from '{out}/spans.parquet' where target_id = 'bot'").fetchone()[0] == \
        collector.sql("select sum(input_tokens) s from spans where target_id = 'bot'")[0]["s"]
    value = con.execute(f"select value from '{out}/windows.parquet' where target_id = 'bot' and metric = 'input_tokens' "
                    "and scope = 'all'").fetchone()[0]
    stored = collector.sql("select value from windows where target_id = 'bot' and metric = 'input_tokens' "
                           "and scope = 'all'")[0]["value"]
    assert value == stored
    # --url explicitly, one table, another codec
    proc = run_cli("export", "--parquet", str(tmp_path / "w"), "--url", collector.url, "--table", "windows",
                   "--compression", "zstd", "--format", "json")
    assert json.loads(proc.stdout) == [
        {"table": "windows", "file": str(tmp_path / "w" / "windows.parquet"), "rows": 3 * WINDOWS_PER_KEY}]
    assert not (tmp_path / "w" / "spans.parquet").exists()
    assert pq.ParquetFile(tmp_path / "w" / "windows.parquet").metadata.row_group(0).column(0).compression == "ZSTD"


def _files(tmp_path):
    """The same kind of spans in every accepted file format; returns {path: spans in it}."""
    def spans(n, prefix):
        return [json_span([{"key": c.TARGET_ID, "value": {"stringValue": "bot"}},
                           {"key": c.GEN_AI_USAGE_INPUT_TOKENS, "value": {"intValue": str(10)}}],
                          trace_id=f"{prefix:02x}" * 16, span_id=f"{i + 1:016x}", start_ns=T0 + i * 10**9)
                for i in range(n)]

    files = {}
    pretty = tmp_path / "request.json"
    pretty.write_text(json.dumps(json_request(spans(2, 1)), indent=2))
    files[pretty] = 2
    lines = tmp_path / "traces.jsonl"  # the OTel Collector's file exporter: one request per line
    lines.write_text("\n".join(json.dumps(json_request(spans(3, p))) for p in (2, 3)) + "\n")
    files[lines] = 6
    zipped = tmp_path / "traces.jsonl.gz"
    zipped.write_bytes(gzip.compress("\n".join(json.dumps(json_request(spans(1, p))) for p in (4, 5)).encode()))
    files[zipped] = 2
    proto = tmp_path / "request.binpb"
    proto.write_bytes(make_request([make_span({c.TARGET_ID: "bot", c.GEN_AI_USAGE_INPUT_TOKENS: 10}, start_ns=T0)
                                    for _ in range(4)]).SerializeToString())
    files[proto] = 4
    framed = tmp_path / "traces.pb"  # the file exporter's `format: proto`: 4-byte length before each message
    messages = [make_request([make_span({c.TARGET_ID: "bot", c.GEN_AI_USAGE_INPUT_TOKENS: 10}, start_ns=T0)
                              for _ in range(k)]).SerializeToString() for k in (1, 2, 3)]
    framed.write_bytes(b"".join(len(m).to_bytes(4, "big") + m for m in messages))
    files[framed] = 6
    framed_gz = tmp_path / "traces.pb.gz"
    framed_gz.write_bytes(gzip.compress(framed.read_bytes()))
    return files, framed_gz


@pytest.mark.parametrize("through_collector", [False, True], ids=["into-the-file", "through-the-collector"])
def test_import_reads_every_otlp_file_format(tmp_path, through_collector):
    files, framed_gz = _files(tmp_path)
    db = tmp_path / "meritlens.duckdb"
    collector = CollectorProcess(db).start() if through_collector else None
    try:
        proc = run_cli("import", *map(str, files), "--db", str(db), "--format", "json")
        results = json.loads(proc.stdout)
        assert [(r["format"], r["spans"], r["refused"]) for r in results] == [
            ("otlp-json", 2, 0), ("otlp-jsonl", 6, 0), ("otlp-jsonl+gzip", 2, 0),
            ("otlp-protobuf", 4, 0), ("otlp-protobuf-stream", 6, 0)]
        if through_collector:
            assert all(r["new"] is None for r in results)
            assert f"through the collector at {collector.url}: 20 accepted" in proc.stderr
        else:
            assert [r["new"] for r in results] == [2, 6, 2, 4, 6]
        # The gzipped framed stream repeats traces.pb: nothing is counted twice.
        proc = run_cli("import", str(framed_gz), "--db", str(db), "--format", "json")
        assert json.loads(proc.stdout)[0]["format"] == "otlp-protobuf-stream+gzip"
        rows = run_sql("select count(*) n, sum(input_tokens) t from spans", db=db)
        assert rows == [{"n": 20, "t": 200}]
        window = run_sql("select value, sample_count from windows where metric = 'input_tokens' and scope = 'all'", db=db)
        assert window == [{"value": 200.0, "sample_count": 15}]  # tasks: one per trace
    finally:
        if collector is not None:
            collector.stop()


def test_bad_input_is_reported_per_file_and_the_rest_is_kept(tmp_path):
    good = json.dumps(json_request([json_span([{"key": c.TARGET_ID, "value": {"stringValue": "bot"}}],
                                              start_ns=T0)]))
    bad_id = json.dumps(json_request([json_span([{"key": c.TARGET_ID, "value": {"stringValue": "bot"}}],
                                                trace_id="zz" * 16, start_ns=T0)]))
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text("\n".join([good, "{not json", bad_id, good]) + "\n")
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"\xff\xfe certainly not a trace")
    db = tmp_path / "meritlens.duckdb"
    proc = run_cli("import", str(mixed), str(junk), "--db", str(db), "--format", "json", check=False)
    assert proc.returncode == 2
    results = {r["file"]: r for r in json.loads(proc.stdout)}
    assert results[str(mixed)]["spans"] == 3 and results[str(mixed)]["refused"] == 1
    assert "line 2: not valid JSON" in results[str(mixed)]["problem"]
    assert "is not a hex string" in results[str(mixed)]["problem"]
    assert "not OTLP JSON, OTLP protobuf or a meritlens Parquet export" in results[str(junk)]["problem"]
    assert proc.stderr.strip().splitlines() == [  # an error (exit status 2) in one line, with the summary
        f"Error: read 3 spans from 2 files into {db}: 1 new, 1 already stored, 1 refused; 2 files could not be "
        "fully read"]
    assert run_sql("select count(*) n from spans", db=db) == [{"n": 1}]  # the good span stays


def test_a_windows_export_is_refused_with_the_reason(collector, tmp_path):
    _send(collector, [make_span({c.TARGET_ID: "bot", c.GEN_AI_USAGE_INPUT_TOKENS: 1})])
    run_cli("export", "--parquet", str(tmp_path / "x"), "--db", str(collector.db))
    proc = run_cli("import", str(tmp_path / "x" / "windows.parquet"), "--db", str(tmp_path / "other.duckdb"),
                   "--format", "json", check=False)
    assert proc.returncode == 2
    assert "windows are recomputed from spans" in json.loads(proc.stdout)[0]["problem"]


def test_exit_codes_and_one_line_errors(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    usage = [
        ("import",),  # no files
        ("import", str(tmp_path / "missing.json")),
        ("export",),  # --parquet is required
        ("export", "--parquet", str(tmp_path), "--format", "xml"),
        ("sql",),
        ("no-such-command",),
        ("import", str(empty)),  # a directory with no files in it
    ]
    for args in usage:
        proc = run_cli(*args, check=False)
        assert proc.returncode == 2, (args, proc.stderr)
        assert "Traceback" not in proc.stderr and "Error:" in proc.stderr
    failures = [
        (("export", "--parquet", str(tmp_path / "o"), "--db", str(tmp_path / "none.duckdb")), "no database at"),
        (("export", "--parquet", str(tmp_path / "o"), "--url", "http://127.0.0.1:9"), "no collector reachable"),
    ]
    (tmp_path / "one.json").write_text(json.dumps(json_request([json_span([], start_ns=T0)])))
    failures.append((("import", str(tmp_path / "one.json"), "--url", "http://127.0.0.1:9"), "no collector reachable"))
    for args, needle in failures:
        proc = run_cli(*args, check=False)
        assert proc.returncode == 2, (args, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and needle in lines[0] and lines[0].startswith("Error: "), (args, proc.stderr)
    assert run_cli("import", str(tmp_path / "one.json"), "--url", "http://127.0.0.1:9", check=False).returncode == 2
    assert run_cli("--version").stdout.startswith("meritlens ")
    # --debug keeps the traceback for errors that are not the user's
    proc = run_cli("--debug", "export", "--parquet", str(tmp_path / "o"), "--db", str(tmp_path / "none.duckdb"),
                   check=False)
    assert proc.returncode == 2 and "no database at" in proc.stderr
    assert not (tmp_path / "o").exists()  # a failed export leaves nothing behind


def test_every_command_has_help_and_the_common_options():
    commands = run_cli("--help").stdout
    for name in ("serve", "sql", "import", "export"):
        assert name in commands
    for name, options in (("sql", ("--db", "--url", "--format")), ("import", ("--db", "--url", "--format", "--progress")),
                          ("export", ("--parquet", "--db", "--url", "--format", "--table", "--compression"))):
        text = run_cli(name, "--help").stdout
        for option in options:
            assert option in text, (name, option)


def test_progress_bar_on_request_and_quiet_when_piped(tmp_path):
    files, _ = _files(tmp_path)
    db = tmp_path / "meritlens.duckdb"
    quiet = run_cli("import", *map(str, files), "--db", str(db))
    assert "━" not in quiet.stderr and "%" not in quiet.stderr
    shown = run_cli("import", *map(str, files), "--db", str(tmp_path / "again.duckdb"), "--progress")
    assert "━" in shown.stderr and "100%" in shown.stderr and "20 spans" in shown.stderr
    assert "file" in shown.stdout and "otlp-jsonl" in shown.stdout  # the table goes to stdout


def test_a_large_request_goes_to_the_collector_in_parts(collector, tmp_path):
    big = tmp_path / "big.binpb.gz"
    spans = [make_span({c.TARGET_ID: "bot", c.GEN_AI_USAGE_INPUT_TOKENS: 1}, start_ns=T0 + i) for i in range(5000)]
    request = make_request(spans[:2500], resource={"service.name": "a"})
    request.resource_spans.extend(make_request(spans[2500:], resource={"service.name": "b"}).resource_spans)
    big.write_bytes(gzip.compress(request.SerializeToString()))
    proc = run_cli("import", str(big), "--db", str(collector.db), "--format", "json")
    assert [(r["format"], r["spans"], r["refused"]) for r in json.loads(proc.stdout)] == [("otlp-protobuf+gzip", 5000, 0)]
    assert collector.sql("select service_name, count(*) n from spans group by all order by all") == [
        {"service_name": "a", "n": 2500}, {"service_name": "b", "n": 2500}]


def test_import_and_export_send_the_collectors_token(tmp_path):
    db = tmp_path / "meritlens.duckdb"
    collector = TokenCollector(db, args=("--token", "s3cret-token"), token="s3cret-token").start()
    try:
        files, _ = _files(tmp_path)
        request_json = next(path for path in files if path.name == "request.json")
        refused = run_cli("import", str(request_json), "--db", str(db), check=False)
        assert refused.returncode == 2 and "HTTP 401" in refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1
        proc = run_cli("import", str(request_json), "--db", str(db), "--format", "json", "--token", "s3cret-token")
        assert json.loads(proc.stdout)[0]["spans"] == 2
        out = tmp_path / "out"
        refused = run_cli("export", "--parquet", str(out), "--db", str(db), check=False)
        assert refused.returncode == 2 and "HTTP 401: missing or wrong bearer token" in refused.stderr
        proc = run_cli("export", "--parquet", str(out), "--db", str(db), "--format", "json",
                       env={"MERITLENS_TOKEN": "s3cret-token"})
        assert json.loads(proc.stdout)[0] == {"table": "spans", "file": str(out / "spans.parquet"), "rows": 2}
    finally:
        collector.stop()
