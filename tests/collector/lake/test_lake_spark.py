"""Windows computed by a real Spark standalone cluster (a master and two workers on loopback) from
three collectors on one lake equal, row by row, those of one DuckDB collector fed the same spans:
the same exports delivered twice to different collectors (an exporter retrying through a load
balancer), one collector killed with SIGKILL under load and restarted, real OTLP exporters."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pyarrow.parquet as pq
import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from meritlens.analytics._scale import DEFAULT_RELATIVE_ERROR, relative_error_of, scale_for
from meritlens.instrumentation import conventions as c
from tests.analytics.evidence_helpers import S, Span, continuous_calls
from tests.analytics.test_evidence_readiness import write_profile
from tests.conftest import CollectorProcess, run_cli
from tests.collector.lake.lake_helpers import lake_collector, lake_sql, post, varied_spans
from tests.collector.lake.spark_cluster import LOOPBACK_ENV, SparkCluster

_COMPARED = ("target_id", "scope", "metric", "aggregation", "value", "unit", "sample_count", "state", "count", "mean",
             "stddev", "min", "max", "p50", "p90", "p95", "p99", "quantile_error", "first_span_time", "last_span_time",
             "evidence_media_type", "evidence_digest")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    spark = SparkCluster(tmp_path_factory.mktemp("spark"))
    try:
        yield spark.launch()  # comes up while the spans are sent; `wait_ready` before the job
    finally:
        spark.stop()


def _send_until_acknowledged(collector: CollectorProcess, exports: list, acked: list, deadline_s: float = 90) -> None:
    """Send each export until it is acknowledged, retrying through connection failures, as an exporter does."""
    deadline = time.monotonic() + deadline_s
    for spans in exports:
        while True:
            try:
                if post(collector.url, spans).status_code == 200:
                    acked.append(spans)
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "an export was never acknowledged"
            time.sleep(0.05)


def _sdk_spans(endpoints: list) -> None:
    """Spans of an application made by the OTel SDK and exported by its real OTLP exporters to every endpoint."""
    provider = TracerProvider(resource=Resource.create({"service.name": "sdk-app"}))
    for exporter in endpoints:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("tests")
    for i in range(12):
        with tracer.start_as_current_span(f"chat m{i % 2}", attributes={
                c.TARGET_ID: "sdk-bot", c.GEN_AI_OPERATION_NAME: c.OP_CHAT, c.GEN_AI_USAGE_INPUT_TOKENS: 100 + i,
                c.COST_USD: 0.001 * (i + 1), c.OUTCOME_SUCCESS: i % 3 != 0}):
            pass
    provider.shutdown()


def _windows(*where: str) -> list[dict]:
    rows = json.loads(run_cli("windows", *where, "--format", "json").stdout)
    return sorted(({k: r[k] for k in _COMPARED} for r in rows), key=lambda r: (r["target_id"], r["scope"], r["metric"]))


def _joining(exports: list) -> list:
    """Spans that join tasks and traces of earlier exports: a late tool call under each of a few task roots."""
    roots = [s for spans in exports for s in spans if s.name == "task"][:8]
    return [Span(r.trace_id, f"{0x5000 + i:016x}", "execute_tool late", r.end_ns + S, r.end_ns + 2 * S,
                 {c.TARGET_ID: r.attributes[c.TARGET_ID], c.TASK_ID: r.attributes.get(c.TASK_ID),
                  c.ASSESSMENT_ID: r.attributes.get(c.ASSESSMENT_ID), c.GEN_AI_OPERATION_NAME: c.OP_EXECUTE_TOOL,
                  c.GEN_AI_TOOL_NAME: "search"}, parent_span_id=r.span_id, status_code=2 * (i % 2))
            for i, r in enumerate(roots)]


def _deliver_twice(collectors: list, exports: list, kill: int | None = None) -> None:
    """Each export to one collector and again to another (a retry through a load balancer); with
    ``kill``, that collector is killed with SIGKILL halfway through its share and restarted."""
    shares = [[e for n, e in enumerate(exports) if n % 3 == k] for k in range(3)]
    acked: list[list] = [[] for _ in range(3)]
    senders = [threading.Thread(target=_send_until_acknowledged,
                                args=(collectors[k], shares[k] + shares[(k + 1) % 3], acked[k])) for k in range(3)]
    for t in senders:
        t.start()
    if kill is not None:
        while len(acked[kill]) < len(shares[kill]) // 2:
            time.sleep(0.01)
        collectors[kill].kill9()
        time.sleep(0.3)
        collectors[kill].start()
    for t in senders:
        t.join()
    assert [len(a) for a in acked] == [len(shares[k]) + len(shares[(k + 1) % 3]) for k in range(3)]


@pytest.mark.timeout(900)  # two Spark runs on a 2-core machine: minutes when the machine is busy
def test_spark_windows_of_three_collectors_equal_one_node(tmp_path, cluster):
    lake = tmp_path / "lake"
    single = CollectorProcess(tmp_path / "single.duckdb").start()
    collectors = [lake_collector(tmp_path, lake, f"c{i}").start() for i in range(3)]
    try:
        # a target past the exact range: its distributions are histograms, which the incremental run extends
        bulk = continuous_calls(77, 1300, "bulk-bot")
        exports = varied_spans(range(500, 580))
        first = exports[:40] + [bulk[i:i + 100] for i in range(0, 700, 100)]
        later = [*exports[40:], *(bulk[i:i + 100] for i in range(700, 1300, 100)), _joining(exports[:40])]
        exports = first + later[:-1]
        for spans in exports + later[-1:]:  # the single node gets every export once
            assert post(single.url, spans).status_code == 200
        _deliver_twice(collectors, first)
        expected = len({(s.trace_id, s.span_id) for spans in first for s in spans})
        while lake_sql(lake, "select count(*) as n from spans") != [{"n": expected}]:  # published
            time.sleep(0.2)
        cluster.wait_ready()
        job = run_cli("lake", "windows", "--lake", str(lake), "--master", cluster.master_url, env=LOOPBACK_ENV)
        assert "(full:" in job.stdout, job.stdout
        assert job.stderr == "", job.stderr  # Spark's own log only with --debug
        _deliver_twice(collectors, later, kill=1)  # one collector is killed under load, then restarted
        _sdk_spans([GrpcExporter(endpoint=collectors[0].grpc_target, insecure=True),
                    HttpExporter(endpoint=collectors[2].url + "/v1/traces"),
                    HttpExporter(endpoint=single.url + "/v1/traces")])
    finally:
        for process in (single, *collectors):
            process.stop()

    # only the segments published since the first run are read
    job = run_cli("lake", "windows", "--lake", str(lake), "--master", cluster.master_url, env=LOOPBACK_ENV)
    assert "(incremental:" in job.stdout, job.stdout + job.stderr

    # spans: each once, the same as the single node's
    single_db = str(tmp_path / "single.duckdb")
    count = "select count(*) as n, count(distinct (trace_id, span_id)) as d from spans"
    assert lake_sql(lake, count) == json.loads(run_cli("sql", count, "--db", single_db, "--format", "json").stdout)
    tasks = "select * exclude (start_time, end_time) from tasks order by target_id, task_key"
    assert lake_sql(lake, tasks) == json.loads(run_cli("sql", tasks, "--db", single_db, "--format", "json").stdout)

    # windows: row by row, value, count, aggregation, state and evidence digest
    on_lake, on_node = _windows("--lake", str(lake)), _windows("--db", single_db)
    assert len(on_lake) == len(on_node) and {r["target_id"] for r in on_lake} >= {"bot-a", "bot-b", "sdk-bot"}
    assert {r["quantile_error"] for r in on_lake if r["target_id"] == "bulk-bot" and r["count"]} == {
        relative_error_of(scale_for(DEFAULT_RELATIVE_ERROR))}
    assert sum(r["state"] == "measured" for r in on_lake) > 40
    for lake_row, node_row in zip(on_lake, on_node):
        assert lake_row == node_row
    # windows by time: the same buckets and rows (evidence URIs name each store)
    by_time = ("select * exclude (computed_at, evidence_uri) from windows_by_time"
               " order by target_id, scope, metric, bucket_start")
    on_lake = lake_sql(lake, by_time)
    assert on_lake == json.loads(run_cli("sql", by_time, "--db", single_db, "--format", "json").stdout)
    assert len(on_lake) > 100 and {r["target_id"] for r in on_lake} >= {"bot-a", "bulk-bot"}
    # and the windows of a time range, merged from them
    ranged = [json.loads(run_cli("windows", "--between", "2023-01-01", "2024-01-01", *where, "--format", "json")
                         .stdout) for where in (("--lake", str(lake)), ("--db", single_db))]
    assert [{k: r[k] for k in _COMPARED} for r in ranged[0]] == [{k: r[k] for k in _COMPARED} for r in ranged[1]]
    assert sum(r["sample_count"] for r in ranged[0] if r["metric"] == "input_tokens") > 1300
    computed = lake_sql(lake, "select count(distinct computed_at) as runs, max(computed_at) is not null as dated "
                              "from windows")
    assert computed == [{"runs": 1, "dated": True}]  # one run's windows, never a mix
    with lake_collector(tmp_path, lake, "c0") as dashboard:  # the dashboard of a collector on the lake shows them
        shown = dashboard.client().get("/api/dashboard/windows", params={"target": "sdk-bot", "scope": "all"}).json()
    stored = lake_sql(lake, "select metric, value from windows where target_id = 'sdk-bot' and scope = 'all'")
    assert {r["metric"]: r["value"] for r in shown["windows"]} == {r["metric"]: r["value"] for r in stored}
    assert len(stored) > 5

    # readiness reasons exactly as on one node, and is recorded on the lake
    profile = write_profile(tmp_path / "p.toml", "bot-a", {"task_success": 3, "total_task_cost": 3,
                                                           "end_to_end_latency": 3, "hallucination_rate": 2})
    reports = [json.loads(run_cli("readiness", "--profile", str(profile), *where, "--format", "json",
                                  check=False).stdout) for where in (("--lake", str(lake)), ("--db", single_db))]
    keys = ("target", "scope", "required", "covered", "missing", "ready", "baseline_ready", "shortfalls")
    assert [{k: r[k] for k in keys} for r in reports][0] == [{k: r[k] for k in keys} for r in reports][1]
    assert reports[0]["covered"] and reports[0]["missing"] == ["hallucination_rate"]
    assert lake_sql(lake, "select target_id, ready from coverage") == [{"target_id": "bot-a", "ready": False}]

    # export: the spans once each, and the windows, as Parquet
    run_cli("export", "--parquet", str(tmp_path / "out"), "--lake", str(lake))
    assert pq.read_metadata(tmp_path / "out" / "spans.parquet").num_rows == lake_sql(lake, count)[0]["d"]
    assert pq.read_metadata(tmp_path / "out" / "windows.parquet").num_rows == len(
        lake_sql(lake, "select metric from windows"))
