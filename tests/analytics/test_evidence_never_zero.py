"""Property: no combination of missing (or malformed) fields produces a 0 that was not observed.

Every value the generated spans *do* carry is non-zero (tokens >= 1, cost > 0, retries >= 1,
success and intervention true, tool executions that succeed, ...). Any field may be missing,
malformed (wrong type, negative, not finite) or carried by an orchestration span full of zeros.
So a window value of 0 could only come from turning something missing into zero.
"""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from meritlens.analytics import METRICS, SPAN_WINDOW_METRICS, Window
from meritlens.analytics._schema import WINDOW_COLUMN_NAMES
from meritlens.instrumentation import conventions as c
from tests.analytics.evidence_helpers import T0, Ids, S, Span, store_spans
from tests.store_under_test import StoreUnderTest

_targets = itertools.count()

# A field is absent, malformed, or present with a non-zero value.
MALFORMED = st.sampled_from(["0", -1, float("nan"), float("-inf"), True, ""])


def field(present):
    return st.one_of(st.none(), MALFORMED, present)


positive_int = st.integers(min_value=1, max_value=10_000)
positive_float = st.floats(min_value=1e-6, max_value=100, allow_nan=False)

call_attributes = st.fixed_dictionaries({
    c.GEN_AI_OPERATION_NAME: st.sampled_from([None, c.OP_CHAT, "generate_content"]),
    c.GEN_AI_USAGE_INPUT_TOKENS: field(positive_int),
    c.GEN_AI_USAGE_OUTPUT_TOKENS: field(positive_int),
    c.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS: field(positive_int),
    c.COST_USD: field(positive_float),
    c.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK: field(st.floats(min_value=0.001, max_value=0.5)),
    c.RETRIES: field(positive_int),
    c.TOOL_CALLS: field(positive_int),
    c.AGENT_STEP: field(positive_int),
})
root_attributes = st.fixed_dictionaries({
    c.OUTCOME_SUCCESS: field(st.just(True)),
    c.QUALITY_SCORE: field(st.floats(min_value=0.01, max_value=1.0)),
    c.HUMAN_INTERVENTION: field(st.just(True)),
    c.AGENT_STEP: field(positive_int),
})
# An orchestration span carrying zeros everywhere: never evidence of the application.
ORCHESTRATION_ZEROS = {
    c.ROLE: c.ROLE_ORCHESTRATION, c.GEN_AI_OPERATION_NAME: c.OP_CHAT, c.GEN_AI_USAGE_INPUT_TOKENS: 0,
    c.GEN_AI_USAGE_OUTPUT_TOKENS: 0, c.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS: 0, c.COST_USD: 0.0, c.RETRIES: 0,
    c.TOOL_CALLS: 0, c.AGENT_STEP: 0, c.OUTCOME_SUCCESS: False, c.QUALITY_SCORE: 0.0, c.HUMAN_INTERVENTION: False,
    c.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK: 0.0,
}

task_strategy = st.fixed_dictionaries({
    "root": root_attributes,
    "calls": st.lists(call_attributes, max_size=3),
    "tools": st.integers(min_value=0, max_value=2),
    "orchestration": st.booleans(),
    "task_id": st.booleans(),
    "assessment": st.sampled_from([None, "a1"]),
})


def build_spans(target: str, tasks: list[dict], ids: Ids) -> list[Span]:
    spans = []
    for n, task in enumerate(tasks):
        trace, root = ids.trace(), ids.span()
        common = {c.TARGET_ID: target, c.ASSESSMENT_ID: task["assessment"],
                  c.TASK_ID: f"task-{n}" if task["task_id"] else None}
        start = T0 + n * 10 * S
        cursor = start + S // 10
        for attributes in task["calls"]:
            spans.append(Span(trace, ids.span(), "call", cursor, cursor + S // 2, {**common, **attributes},
                              parent_span_id=root, kind=3))
            cursor += S
        for _ in range(task["tools"]):
            spans.append(Span(trace, ids.span(), "execute_tool t", cursor, cursor + S // 10,
                              {**common, c.GEN_AI_OPERATION_NAME: c.OP_EXECUTE_TOOL, c.GEN_AI_TOOL_NAME: "t"},
                              parent_span_id=root))
            cursor += S // 5
        spans.append(Span(trace, root, "task", start, cursor + S // 10, {**common, **task["root"]}))
        if task["orchestration"]:
            spans.append(Span(trace, ids.span(), "judge", cursor, cursor + 2 * S, {**common, **ORCHESTRATION_ZEROS},
                              parent_span_id=root))
    return spans


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    store = StoreUnderTest(str(tmp_path_factory.mktemp("never-zero") / "property.duckdb"))
    store.start()
    yield store
    store.shutdown()


@settings(max_examples=50, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tasks=st.lists(task_strategy, min_size=1, max_size=4), split=st.integers(min_value=0, max_value=4))
def test_rule_missing_is_never_zero(store, tasks, split):
    target = f"target-{next(_targets)}"
    spans = build_spans(target, tasks, Ids(seed=next(_targets) + 100))
    store_spans(store, spans[:split])  # two batches: incremental refresh must agree
    store_spans(store, spans[split:])
    result = store.query(f"SELECT {', '.join(WINDOW_COLUMN_NAMES)} FROM windows WHERE target_id = '{target}'")
    windows = [Window.from_row(row, result.columns) for row in result.rows]
    assert {w.metric for w in windows} == set(SPAN_WINDOW_METRICS)
    for w in windows:
        summary = [w.mean, w.min, w.max, w.p50, w.p90, w.p95, w.p99]
        for number in [w.value, *summary]:
            assert number is None or (math.isfinite(number) and number != 0), (w.metric, w)
        if w.value is not None and METRICS[w.metric].ratio:
            assert 0 <= w.value <= 1
        if w.state == "measured":
            assert w.value is not None and w.has_evidence and w.sample_count >= 1
        if w.value is None:
            assert w.state != "measured"
        if w.state in ("not_configured", "not_applicable"):
            assert w.sample_count == 0 and not w.has_evidence and w.value is None
    tasks_view = store.query(
        "SELECT input_tokens, output_tokens, reasoning_tokens, cost_usd, agent_steps, retries, tool_calls, "
        f"quality_score, time_to_first_useful_output_s FROM tasks WHERE target_id = '{target}'"
    )
    for row in tasks_view.rows:
        assert all(v is None or v != 0 for v in row), dict(zip(tasks_view.columns, row, strict=True))
