"""The memory limiter: above its soft limit the collector refuses exports (503 + Retry-After,
UNAVAILABLE + RetryInfo) before reading them, its anonymous memory stays under `--memory-limit`,
nothing acknowledged is lost, and exports are accepted again once the memory falls back."""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import time
from functools import partial

import duckdb
import grpc
import httpx
import pytest
from google.rpc import error_details_pb2, status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from prometheus_client.parser import text_string_to_metric_families

from meritlens.collector._settings import SETTINGS, MemoryBudget, MemoryLimiterConfig, ServerSettings, SettingsError
from meritlens.collector.receive._memory import MemoryLimiter, anonymous_resident_bytes
from tests.cli_runner import run_cli
from tests.collector.collector_proc import CollectorProcess, make_request

MiB = 1024 * 1024
PROTOBUF = {"Content-Type": "application/x-protobuf"}
EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
LIMIT = 493 * MiB
"""The smallest limit with DuckDB's share at twice the default checkpoint WAL bytes."""
SOFT_LIMIT = 288 * MiB
"""Between the collector's memory after the load (150-230 MiB measured) and under it (380-480 MiB)."""
SPANS = 40
PADDING = 36_000


def _request(batch: int) -> bytes:
    """~1.5 MiB: 40 spans, each with a 36 KB attribute that is stored (large spans are what make a
    collector's memory climb: the decoded copies, the staged rows, DuckDB's rows being stored)."""
    request = make_request(batch, SPANS)
    for span in request.resource_spans[0].scope_spans[0].spans:
        attr = span.attributes.add()
        attr.key, attr.value.string_value = "padding", f"{batch:06d}" * (PADDING // 6)
    return request.SerializeToString()


def _status_of(error: grpc.RpcError) -> status_pb2.Status:
    return status_pb2.Status.FromString(dict(error.trailing_metadata())["grpc-status-details-bin"])


class Sampler:
    """The collector's anonymous memory, read from /proc every few milliseconds in a thread."""

    def __init__(self, collector: CollectorProcess):
        self._collector = collector
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._collector.anonymous_bytes())
            self._stop.wait(0.005)

    def __enter__(self) -> "Sampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def test_above_the_soft_limit_exports_are_refused_memory_stays_under_the_limit_and_nothing_is_lost(tmp_path):
    args = ("--memory-limit", f"{LIMIT // MiB}MiB", "--max-body-bytes", "2MiB", "--max-spans-per-request", "200",
            "--max-attribute-bytes", "64KiB")
    env = {SETTINGS["memory_spike"].env: str(LIMIT - SOFT_LIMIT)}
    http_batches, grpc_batches = range(0, 8 * 20), range(1000, 1000 + 4 * 20)
    bodies = {b: _request(b) for b in (*http_batches, *grpc_batches)}
    acked: set[int] = set()
    http_refusals: list[httpx.Response] = []
    grpc_refusals: list[grpc.aio.AioRpcError] = []
    lock = threading.Lock()

    def http_client(batches) -> None:
        rng = random.Random(batches[0])
        with httpx.Client(base_url=collector.url, timeout=60) as http:
            for batch in batches:
                for _ in range(500):
                    response = http.post("/v1/traces", content=bodies[batch], headers=PROTOBUF)
                    if response.status_code == 200:
                        assert ExportTraceServiceResponse.FromString(response.content).partial_success.rejected_spans == 0
                        with lock:
                            acked.add(batch)
                        break
                    assert response.status_code == 503, response.content
                    with lock:
                        http_refusals.append(response)
                    time.sleep(float(response.headers["Retry-After"]) * rng.uniform(0.05, 0.3))

    async def grpc_clients() -> None:
        async with grpc.aio.insecure_channel(collector.grpc_target) as channel:
            export = channel.unary_unary(EXPORT)

            async def send(batches) -> None:
                rng = random.Random(batches[0])
                for batch in batches:
                    for _ in range(500):
                        try:
                            await export(bodies[batch], timeout=60)
                        except grpc.aio.AioRpcError as error:
                            assert error.code() == grpc.StatusCode.UNAVAILABLE, error
                            grpc_refusals.append(error)
                            await asyncio.sleep(rng.uniform(0.05, 0.3))
                            continue
                        with lock:
                            acked.add(batch)
                        break

            await asyncio.gather(*(send(grpc_batches[i::4]) for i in range(4)))

    with CollectorProcess(tmp_path / "pressed.duckdb", args=args, env=env) as collector:
        with Sampler(collector) as sampler:
            threads = [threading.Thread(target=http_client, args=(http_batches[i::8],)) for i in range(8)]
            threads.append(threading.Thread(target=asyncio.run, args=(grpc_clients(),)))
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=600)
            assert not any(t.is_alive() for t in threads)
        assert acked == set(bodies)

        # (b) once the memory falls back under the soft limit, exports are accepted again
        with collector.client(timeout=30) as http:
            for _ in range(600):
                memory = http.get("/healthz").json()["memory"]
                if not memory["refusing_exports"]:
                    break
                time.sleep(0.1)
            assert memory["soft_limit_bytes"] == SOFT_LIMIT and memory["limit_bytes"] == LIMIT
            assert not memory["refusing_exports"] and memory["anonymous_bytes"] <= SOFT_LIMIT, memory
            assert http.post("/v1/traces", content=_request(5000), headers=PROTOBUF).status_code == 200
            health = http.get("/healthz").json()
            metrics = http.get("/metrics").text

    print(f"peak {sampler.peak / MiB:.0f} MiB; refused {len(http_refusals)} HTTP, {len(grpc_refusals)} gRPC")
    assert sampler.peak < LIMIT, f"anonymous memory peaked at {sampler.peak / MiB:.0f} MiB"
    memory_refusals = [r for r in http_refusals if b"above its soft limit of 288MiB" in r.content]
    assert memory_refusals, f"{len(http_refusals)} refusals, none for memory"
    assert all(r.headers["Retry-After"] == "1" for r in memory_refusals)
    assert b"--memory-limit 493MiB" in memory_refusals[0].content
    refused_calls = [e for e in grpc_refusals if "above its soft limit" in e.details()]
    assert refused_calls, f"{len(grpc_refusals)} gRPC refusals, none for memory"
    retry = error_details_pb2.RetryInfo.FromString(dict(refused_calls[0].trailing_metadata())["google.rpc.retryinfo-bin"])
    assert retry.retry_delay.seconds == 1
    assert _status_of(refused_calls[0]).code == grpc.StatusCode.UNAVAILABLE.value[0]
    assert health["overloaded_exports"]["memory_limit"] >= len(memory_refusals) + len(refused_calls)
    samples = {(s.name, s.labels.get("reason")): s.value
               for family in text_string_to_metric_families(metrics) for s in family.samples}
    assert samples[("meritlens_exports_overloaded_total", "memory_limit")] == health["overloaded_exports"]["memory_limit"]
    assert samples[("meritlens_memory_soft_limit_bytes", None)] == SOFT_LIMIT
    assert samples[("meritlens_memory_refusing_exports", None)] == 0
    assert "held by requests in flight is above the soft limit 288MiB: refusing exports" in collector.log()

    con = duckdb.connect(str(collector.db), read_only=True)
    try:
        stored = {row[0] for row in con.execute("SELECT span_id FROM spans").fetchall()}
        assert con.execute("SELECT count(*) FROM spans").fetchone()[0] == len(stored)
    finally:
        con.close()
    expected = {bytes.hex(span.span_id) for batch in (*acked, 5000)
                for span in make_request(batch, SPANS).resource_spans[0].scope_spans[0].spans}
    assert stored == expected


def _status_file(tmp_path, kib: int | None):
    path = tmp_path / "status"
    path.write_text("Name:\tmeritlens\nVmRSS:\t  900000 kB\n" + (f"RssAnon:\t {kib} kB\n" if kib is not None else ""))
    return str(path)


def test_the_limiter_refuses_above_the_soft_limit_and_accepts_again_below_it(tmp_path):
    status = _status_file(tmp_path, 100 * 1024)
    limiter = MemoryLimiter(MemoryLimiterConfig(limit=400 * MiB, spike=100 * MiB), read=partial(anonymous_resident_bytes, status))
    limiter.check()
    assert not limiter.limited and limiter.usage == 100 * MiB
    _status_file(tmp_path, 301 * 1024)
    limiter.check()
    assert limiter.limited
    assert limiter.refusal() == ("the collector's anonymous memory 301MiB with 0MiB held by requests in flight is"
                                 " above its soft limit of 300MiB (--memory-limit 400MiB less 100MiB of headroom"
                                 " for spikes)")
    _status_file(tmp_path, 299 * 1024)
    limiter.check()
    assert not limiter.limited and limiter.usage == 299 * MiB


def test_what_requests_in_flight_hold_counts_before_they_allocate_it(tmp_path):
    held = [0]
    limiter = MemoryLimiter(MemoryLimiterConfig(limit=400 * MiB, spike=100 * MiB),
                            read=partial(anonymous_resident_bytes, _status_file(tmp_path, 250 * 1024)),
                            in_flight=lambda: held[0])
    limiter.check()
    assert not limiter.limited
    held[0] = 51 * MiB
    limiter.check()
    assert limiter.limited and "anonymous memory 250MiB with 51MiB held by requests in flight" in limiter.refusal()
    held[0] = 49 * MiB
    limiter.check()
    assert not limiter.limited


def test_where_the_anonymous_memory_is_not_reported_the_limiter_says_so_once_and_refuses_nothing(tmp_path, caplog):
    limiter = MemoryLimiter(MemoryLimiterConfig(limit=400 * MiB, spike=100 * MiB),
                            read=partial(anonymous_resident_bytes, _status_file(tmp_path, None)))
    with caplog.at_level(logging.WARNING, logger="meritlens.collector.memory"):
        limiter.start()
        limiter.check()
        limiter.shutdown()
    assert not limiter.limited and not limiter.available and limiter.usage is None
    assert [r.getMessage().split(":")[0] for r in caplog.records] == [
        "this system does not report the process's anonymous memory (RssAnon in /proc/self/status)"]
    assert anonymous_resident_bytes(str(tmp_path / "missing")) is None
    assert anonymous_resident_bytes() > 0  # this system reports it


@pytest.mark.parametrize("config, message", [
    (MemoryLimiterConfig(limit=0, spike=1), "the memory limiter's limit must be positive, got 0"),
    (MemoryLimiterConfig(limit=100, spike=0), "spike headroom must be positive and below its limit (100), got 0"),
    (MemoryLimiterConfig(limit=100, spike=100), "spike headroom must be positive and below its limit (100), got 100"),
    (MemoryLimiterConfig(limit=100, spike=10, check_interval_s=0), "check interval must be between 0.001 and 10"),
    (MemoryLimiterConfig(limit=100, spike=10, check_interval_s=float("nan")), "check interval must be between"),
    (MemoryLimiterConfig(limit=100, spike=10, check_interval_s=60), "seconds, got 60"),
])
def test_the_limiter_config_rejects_bad_values_in_one_line(config, message):
    with pytest.raises(SettingsError) as caught:
        MemoryLimiter(config)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_the_budget_keeps_every_part_inside_the_limit_with_the_caps_counted_from_the_start():
    for limit in (LIMIT, 512 * MiB, 1 << 30, (3 << 30) + 12345):
        budget = MemoryBudget.of(limit)
        parts = (budget.process, budget.in_flight, budget.duckdb, budget.window_state, budget.span_index,
                 budget.key_filter)
        assert all(part > 0 for part in parts)
        assert sum(parts) <= budget.soft_limit == limit - budget.spike
        assert budget.spike == limit // 8 and budget.in_flight == limit // 4
    default = ServerSettings().memory_budget()
    assert (default.duckdb, default.window_state, default.span_index, default.key_filter) == (
        135 * MiB, 45 * MiB, 45 * MiB, 15 * MiB)


@pytest.mark.parametrize("args, env, message", [
    (("--memory-limit", "400MiB"), {}, "the memory limit must be at least 493MiB, got 400MiB: a quarter of it holds"),
    (("--memory-limit", "1GiB", "--max-body-bytes", "64MiB"), {}, "the memory limit must be at least 1280MiB"),
    (("--memory-limit", "1GiB", "--checkpoint-wal-bytes", "256MiB"), {}, "DuckDB needs twice the checkpoint WAL"),
    ((), {SETTINGS["memory_spike"].env: "1MiB"}, "MERITLENS_MEMORY_SPIKE must be at least an eighth of the memory limit (64MiB)"),
    ((), {SETTINGS["memory_spike"].env: "512MiB"}, "spike headroom must be positive and below its limit"),
])
def test_a_memory_limit_that_cannot_hold_the_collector_is_refused_in_one_line(tmp_path, args, env, message):
    result = run_cli("serve", "--db", str(tmp_path / "x.duckdb"), *args, check=False, env=env)
    assert result.returncode == 2
    [line] = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert message in line, result.stderr
    assert not (tmp_path / "x.duckdb").exists()
