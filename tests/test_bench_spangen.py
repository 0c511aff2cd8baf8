"""The benchmarks' span generator (bench/spangen.py): its hand-written protobuf parses with the official
OTLP classes into the shape it documents, it is deterministic, and its tally is what the window
definitions make of its spans, however the requests are cut."""

from __future__ import annotations

import collections
import datetime as _dt
import os
import sys

import duckdb
import pyarrow as pa
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))

import spangen
from _tally import Tally
from meritlens.analytics._schema import SPANS_DDL
from meritlens.collector.windows import DuckDBEngine, compute_windows
from meritlens.instrumentation import conventions as c


def _spans(requests):
    """(request number, resource attributes, span) of every span."""
    for number, request in enumerate(requests):
        message = ExportTraceServiceRequest.FromString(request.body)
        for rs in message.resource_spans:
            resource = {kv.key: kv.value.string_value for kv in rs.resource.attributes}
            for ss in rs.scope_spans:
                for span in ss.spans:
                    yield number, resource, span


def _attributes(span) -> dict:
    return {kv.key: kv.value for kv in span.attributes}


def test_requests_parse_into_agent_tasks_with_unique_ids():
    requests = list(spangen.SpanStream(3).requests(6000, 500))
    spans = list(_spans(requests))
    tally = Tally(20)
    for request in requests:
        tally += request.tally
    assert len(spans) == sum(r.spans for r in requests) == tally.total("spans") >= 6000
    assert len({(s.trace_id, s.span_id) for _, _, s in spans}) == len(spans)
    targets = collections.Counter(_attributes(s)[c.TARGET_ID].string_value for _, _, s in spans)
    assert dict(targets) == tally.by_target("spans") and len(targets) == 20
    tasks = collections.defaultdict(list)
    for number, resource, span in spans:
        attributes = _attributes(span)
        assert resource[c.SERVICE_NAME] == attributes[c.TARGET_ID].string_value + "-app"
        tasks[attributes[c.TASK_ID].string_value].append((number, span, attributes))
    response_ids, calls, errors = set(), 0, 0
    for task in tasks.values():
        assert 3 <= len(task) <= 10 and len({s.trace_id for _, s, _ in task}) == 1
        roots = [s for _, s, a in task if a.get(c.SPAN_TYPE) and a[c.SPAN_TYPE].string_value == c.SPAN_TYPE_TASK]
        assert len(roots) == 1 and not roots[0].parent_span_id
        assert all(s.parent_span_id == roots[0].span_id for _, s, _ in task if s is not roots[0])
        assert all(roots[0].start_time_unix_nano <= s.start_time_unix_nano < s.end_time_unix_nano
                   <= roots[0].end_time_unix_nano for _, s, _ in task)
        for _, span, attributes in task:
            operation = attributes.get(c.GEN_AI_OPERATION_NAME)
            errors += c.ERROR_TYPE in attributes
            if operation and operation.string_value == c.OP_CHAT:
                calls += 1
                assert len(span.events) == 1
                if c.ERROR_TYPE not in attributes:
                    assert len(attributes) >= 18
                    response_ids.add(attributes[c.GEN_AI_RESPONSE_ID].string_value)
            elif operation and operation.string_value == c.OP_EXECUTE_TOOL:
                assert span.name == f"execute_tool {attributes[c.GEN_AI_TOOL_NAME].string_value}"
    failed_calls = calls - len(response_ids)  # every call that did not fail has a response id of its own
    assert calls == tally.total("llm_calls") and errors == tally.total("error_spans") > failed_calls > 0
    continued = sum(1 for task in tasks.values() if len({n for n, _, _ in task}) > 1)
    assert 0.25 < continued / len(tasks) < 0.42  # a third of the tasks, less those the last requests keep whole
    assert continued == tally.total("continued_tasks")


def test_the_same_seed_gives_the_same_bytes():
    def bodies(seed):
        return [r.body for r in spangen.SpanStream(seed, targets=4).requests(2000, 300)]

    assert bodies(5) == bodies(5)
    assert bodies(5) != bodies(6)


@pytest.mark.parametrize("batch", [97, 1000])
def test_the_tally_is_what_the_windows_count_wherever_the_requests_stop(batch):
    stream = spangen.SpanStream(1, targets=5)
    tally = Tally(5)
    tables = []
    for _ in range(12):  # the stream goes on after these: some tasks are still unfinished
        request = stream.next_request(batch)
        tally += request.tally
        tables.append(spangen.rows(request))
    con = duckdb.connect()
    con.execute(SPANS_DDL)
    con.register("_new", pa.concat_tables(tables))
    con.execute("INSERT INTO spans BY NAME SELECT *, now() AS received_at FROM _new")
    windows = compute_windows(DuckDBEngine(con), "test", _dt.datetime.now(_dt.UTC))
    held = {(w.target_id, w.metric): w for w in windows if w.scope == "all"}
    for metric, column, field in (("end_to_end_latency", "sample_count", "tasks"),
                                  ("retry_rate", "sample_count", "llm_calls"),
                                  ("tool_use_performance", "sample_count", "tool_spans"),
                                  ("input_tokens", "sample_count", "token_tasks"),
                                  ("input_tokens", "value", "input_tokens"),
                                  ("output_tokens", "value", "output_tokens")):
        assert {t: getattr(held[(t, metric)], column) for t in tally.by_target(field)} == tally.by_target(field)
    for target, cost in tally.by_target("cost_usd").items():
        assert held[(target, "total_task_cost")].value == pytest.approx(cost, rel=1e-9)
    assert tally.total("continued_spans") > 0
