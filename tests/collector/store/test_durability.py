"""Crash test: kill -9 the real collector while clients send 100k spans; nothing acknowledged is lost,
nothing is counted twice, and the windows equal a from-scratch recomputation."""

from __future__ import annotations

import gzip
import random
import threading
import time
from collections import Counter

import duckdb
import httpx
import pytest

from meritlens.analytics._schema import SPANS_DDL, WINDOW_COLUMN_NAMES, WINDOWS_DDL
from tests.collector.collector_proc import CollectorProcess, assert_same_windows, make_request
from tests.store_under_test import StoreUnderTest

BATCHES = 100
SPANS_PER_BATCH = 1000
CLIENTS = 4
KILLS_AT_FRACTION = (0.12, 0.3, 0.5, 0.7, 0.85)
RESEND_FRACTION = 0.1
PROTOBUF = {"Content-Type": "application/x-protobuf"}


class RetryingClient(threading.Thread):
    """Sends batches like the OTLP exporter: retries on connection errors, 429/502/503/504 (honouring
    Retry-After) and timeouts, until the collector answers 200. Records every acknowledged batch."""

    def __init__(self, url: str, work: list[int], bodies: dict[int, tuple[bytes, dict]], ledger: Ledger, seed: int):
        super().__init__(daemon=True)
        self.url, self.work, self.bodies, self.ledger = url, work, bodies, ledger
        self.rng = random.Random(seed)
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with httpx.Client(base_url=self.url, timeout=10.0) as client:
                while True:
                    batch = self.ledger.next_batch(self.work)
                    if batch is None:
                        return
                    self.send(client, batch)
                    if self.rng.random() < RESEND_FRACTION:
                        # A client that lost our answer sends the same batch again.
                        self.send(client, batch)
                        self.ledger.resent(batch)
        except BaseException as exc:  # reported by the test
            self.error = exc

    def send(self, client: httpx.Client, batch: int) -> None:
        body, headers = self.bodies[batch]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                response = client.post("/v1/traces", content=body, headers=headers)
            except httpx.TransportError:
                self.ledger.count("transport_error")
                time.sleep(self.rng.uniform(0.02, 0.1))
                continue
            if response.status_code == 200:
                assert response.content in (b"",), response.content  # no span refused
                self.ledger.acked(batch)
                return
            assert response.status_code in (429, 502, 503, 504), (response.status_code, response.content)
            self.ledger.count(f"http_{response.status_code}")
            time.sleep(min(float(response.headers.get("Retry-After", "1")), 1.0) * self.rng.uniform(0.1, 0.3))
        raise AssertionError(f"batch {batch} was never acknowledged")


class Ledger:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.acked_batches: Counter[int] = Counter()
        self.events: Counter[str] = Counter()
        self.resent_batches: set[int] = set()

    def next_batch(self, work: list[int]) -> int | None:
        with self._lock:
            return work.pop() if work else None

    def acked(self, batch: int) -> None:
        with self._lock:
            self.acked_batches[batch] += 1

    def resent(self, batch: int) -> None:
        with self._lock:
            self.resent_batches.add(batch)

    def count(self, event: str) -> None:
        with self._lock:
            self.events[event] += 1

    @property
    def distinct_acked(self) -> int:
        with self._lock:
            return len(self.acked_batches)


def _windows(path) -> list[tuple]:
    columns = [c for c in WINDOW_COLUMN_NAMES if c != "computed_at"]
    con = duckdb.connect(str(path), read_only=True)
    try:
        return con.execute(f"SELECT {', '.join(columns)} FROM windows ORDER BY target_id, metric, scope").fetchall()
    finally:
        con.close()


def _windows_from_scratch(spans, scratch_path) -> list[tuple]:
    con = duckdb.connect(str(scratch_path))
    con.execute(SPANS_DDL)
    con.execute(WINDOWS_DDL)
    con.register("all_spans", spans)
    con.execute("INSERT INTO spans SELECT * FROM all_spans")
    con.close()
    store = StoreUnderTest(str(scratch_path))
    store.start()
    store.refresh_all_windows()
    store.shutdown()
    return _windows(scratch_path)


@pytest.mark.slow
def test_kill9_at_random_moments_loses_no_acknowledged_span_and_counts_none_twice(tmp_path):
    rng = random.Random(20261130)
    requests = {b: make_request(b, SPANS_PER_BATCH) for b in range(BATCHES)}
    bodies = {}
    for batch, request in requests.items():
        raw = request.SerializeToString()
        if batch % 3 == 0:
            bodies[batch] = (gzip.compress(raw), {**PROTOBUF, "Content-Encoding": "gzip"})
        else:
            bodies[batch] = (raw, PROTOBUF)
    expected_ids = set()
    expected_input_tokens: Counter[str] = Counter()
    for request in requests.values():
        for span in request.resource_spans[0].scope_spans[0].spans:
            expected_ids.add((span.trace_id.hex(), span.span_id.hex()))
            attrs = {kv.key: kv.value for kv in span.attributes}
            target = attrs["meritlens.target.id"].string_value
            expected_input_tokens[target] += attrs["gen_ai.usage.input_tokens"].int_value
    assert len(expected_ids) == BATCHES * SPANS_PER_BATCH

    collector = CollectorProcess(tmp_path / "crash.duckdb")
    collector.start()
    ledger = Ledger()
    work = list(range(BATCHES))
    rng.shuffle(work)
    clients = [RetryingClient(collector.url, work, bodies, ledger, seed=i) for i in range(CLIENTS)]
    try:
        for client in clients:
            client.start()
        kills = 0
        for fraction in KILLS_AT_FRACTION:
            threshold = int(BATCHES * fraction) + rng.randint(-3, 3)
            while ledger.distinct_acked < threshold and any(c.is_alive() for c in clients):
                time.sleep(0.005)
            time.sleep(rng.uniform(0.0, 0.05))
            collector.kill9()
            kills += 1
            time.sleep(rng.uniform(0.0, 0.3))
            collector.start()
        for client in clients:
            client.join(timeout=120)
        errors = [c.error for c in clients if c.error is not None]
        assert not errors, errors
        assert all(not c.is_alive() for c in clients)
        # The last start answers while its windows catch up with what the killed runs stored; a query
        # waits for them (a stop would leave the rest to the next start).
        deadline = time.monotonic() + 120
        while collector.sql("SELECT count(*) FROM windows").get("windows_behind"):
            assert time.monotonic() < deadline, collector.log()
    finally:
        exit_code = collector.stop()
    assert exit_code == 0, collector.log()
    assert kills == len(KILLS_AT_FRACTION)
    assert set(ledger.acked_batches) == set(range(BATCHES))
    assert ledger.events["transport_error"] > 0, "no client ever hit a killed collector; the test did not test a crash"
    assert ledger.resent_batches

    con = duckdb.connect(str(collector.db), read_only=True)
    try:
        stored = con.execute("SELECT trace_id, span_id FROM spans").fetchall()
        spans = con.sql("SELECT * FROM spans").to_arrow_table()
        tokens = dict(con.execute(
            "SELECT target_id, value FROM windows WHERE metric = 'input_tokens' AND scope = 'all'"
        ).fetchall())
    finally:
        con.close()
    assert len(stored) == len(set(stored)), "a span is stored twice"
    assert set(stored) == expected_ids, "an acknowledged span is missing (or an unknown one is stored)"
    # A double-counted retry would show in the sums; these come straight from the generated data.
    assert tokens == {target: float(total) for target, total in expected_input_tokens.items()}

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    assert_same_windows(_windows(collector.db), _windows_from_scratch(spans, scratch / "crash.duckdb"))
