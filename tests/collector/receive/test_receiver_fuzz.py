"""Fuzzing the running OTLP/HTTP receiver with mutated protobuf, JSON and gzip bodies.

Every answer must be a 2xx/4xx with a parseable body (an ExportTraceServiceResponse, or a
google.rpc.Status naming the problem) and the server must stay up. The long run (>=100k bodies)
is tests/fuzz/fuzz_receiver.py; its result is in bench/README.md.
"""

from __future__ import annotations

import random

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.collector.collector_proc import CollectorProcess
from tests.collector.otlp_mutations import (
    SEED_JSON,
    SEED_PROTOBUF,
    case,
    check_response,
    encode_json,
    mutate_bytes,
    mutate_json,
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False) | st.text(max_size=40),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=12,
)


@pytest.fixture(scope="module")
def collector(tmp_path_factory):
    args = ("--max-body-bytes", "1MiB", "--max-attributes", "16", "--max-attribute-bytes", "4KiB")
    with CollectorProcess(tmp_path_factory.mktemp("fuzz") / "spans.duckdb", args=args) as running:
        with running.client(timeout=30) as client:
            running.http = client
            yield running
        assert running.proc.poll() is None, running.log()


def send(collector, body: bytes, headers: dict) -> str:
    response = collector.http.post("/v1/traces", content=body, headers=headers)
    return check_response(response.status_code, response.headers, response.content)


def test_seed_corpus_is_accepted(collector):
    for body in SEED_PROTOBUF:
        assert send(collector, body, {"Content-Type": "application/x-protobuf"}) == "200"
    rng = random.Random(0)
    for doc in SEED_JSON:
        assert send(collector, encode_json(doc, rng), {"Content-Type": "application/json"}) == "200"


@settings(max_examples=400, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(min_value=0, max_value=2**32))
def test_mutated_bodies_never_get_a_server_error(collector, seed):
    body, headers = case(random.Random(seed))
    send(collector, body, headers)


@settings(max_examples=200, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(min_value=0, max_value=2**32), value=json_values, which=st.sampled_from(range(len(SEED_JSON))))
def test_json_with_arbitrary_values_in_any_place_never_gets_a_server_error(collector, seed, value, which):
    rng = random.Random(seed)
    doc = mutate_json(SEED_JSON[which], rng, rounds=1, replacement=value)
    send(collector, encode_json(doc, rng), {"Content-Type": "application/json"})


@pytest.fixture(scope="module")
def grpc_export(collector):
    with grpc.insecure_channel(collector.grpc_target) as channel:
        yield channel.unary_unary("/opentelemetry.proto.collector.trace.v1.TraceService/Export")


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(min_value=0, max_value=2**32), compress=st.booleans())
def test_mutated_grpc_messages_get_ok_or_invalid_argument(grpc_export, seed, compress):
    rng = random.Random(seed)
    body = mutate_bytes(rng.choice(SEED_PROTOBUF), rng, rng.randrange(1, 6))
    compression = grpc.Compression.Gzip if compress else None
    try:
        grpc_export(body, timeout=30, compression=compression)
    except grpc.RpcError as error:
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, (error.code(), error.details())
        assert error.details()


def test_server_still_healthy_after_fuzzing(collector):
    assert collector.http.get("/healthz").status_code == 200
    assert collector.sql("SELECT count(*) > 0 FROM spans")["rows"] == [[True]]
