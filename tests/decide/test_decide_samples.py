"""The samples a comparison resamples are exactly the evidence of the windows it cites: for every
span-window metric, the samples read from the spans give the window's value and its evidence digest."""

from __future__ import annotations

import math

import numpy as np
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind, Status, StatusCode, set_span_in_context

from meritlens.analytics import Arm, ExperimentManifest
from meritlens.analytics._arm_samples import load_arm_data
from meritlens.analytics._rules import default_rule, statistic_for
from meritlens.analytics._definitions import SPAN_WINDOW_METRICS
from meritlens.analytics._windows import Window
from meritlens.collector import reader
from meritlens.instrumentation import conventions as c
from tests.decide.decide_support import TARGET, running_collector

T0 = 1_750_000_000_000_000_000


def _send_agent_tasks(url: str) -> None:
    """Eight agent tasks (a task span, two LLM calls, a tool execution), some with retries and failures."""
    provider = TracerProvider(resource=Resource.create({c.SERVICE_NAME: "agent", c.TARGET_ID: TARGET}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=url + "/v1/traces")))
    tracer = provider.get_tracer("decide-samples")
    for i in range(8):
        start = T0 + i * 60_000_000_000
        common = {c.TASK_ID: f"task-{i}", c.ASSESSMENT_ID: "samples", c.CASE_ID: f"case-{i % 4}"}
        task = tracer.start_span("invoke_agent support", start_time=start, attributes={
            **common, c.GEN_AI_OPERATION_NAME: c.OP_INVOKE_AGENT, c.AGENT_STEP: 2 + i % 3,
            c.OUTCOME_SUCCESS: i % 3 != 0, c.QUALITY_SCORE: 0.5 + i / 20,
        })
        context = set_span_in_context(task)
        for call in range(2):
            llm = tracer.start_span("chat gpt-4o", context=context, kind=SpanKind.CLIENT,
                                    start_time=start + (1 + call * 3) * 10**9, attributes={
                                        **common, c.GEN_AI_OPERATION_NAME: c.OP_CHAT,
                                        c.GEN_AI_REQUEST_MODEL: "gpt-4o", c.GEN_AI_RESPONSE_MODEL: "gpt-4o-2024-08-06",
                                        c.GEN_AI_USAGE_INPUT_TOKENS: 500 + 10 * i, c.GEN_AI_USAGE_OUTPUT_TOKENS: 80 + i,
                                        c.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS: 20 + i, c.COST_USD: 0.002 + i * 1e-4,
                                        c.RETRIES: 1 if (i + call) % 4 == 0 else 0, c.TOOL_CALLS: 1 - call,
                                        c.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK: 0.3 + 0.05 * i,
                                    })
            llm.end(end_time=start + (2 + call * 3) * 10**9 + i * 10**8)
        tool = tracer.start_span("execute_tool lookup", context=context, start_time=start + 2_500_000_000,
                                 attributes={**common, c.GEN_AI_OPERATION_NAME: c.OP_EXECUTE_TOOL,
                                             c.GEN_AI_TOOL_NAME: "lookup"})
        if i % 4 == 1:
            tool.set_status(Status(StatusCode.ERROR, "lookup failed"))
        tool.end(end_time=start + 3 * 10**9)
        task.end(end_time=start + 6 * 10**9 + i * 10**8)
    assert provider.force_flush(30_000)
    provider.shutdown()


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    db = tmp_path_factory.mktemp("samples") / "samples.duckdb"
    with running_collector(db) as url:
        _send_agent_tasks(url)
    manifest = ExperimentManifest.new(
        "samples", target_id=TARGET, application_revision="r", cases=[f"case-{i}" for i in range(4)],
        shuffle_seed=1, repetitions=2, arms=[Arm(name="only", assessment_id="samples")],
    )
    with reader(db=str(db)) as query:
        windows = {w.metric: w for w in (Window.from_row(r, query("SELECT * FROM windows").columns)
                                         for r in query("SELECT * FROM windows WHERE scope = 'samples'").rows)}
        data = {metric: load_arm_data(query, manifest, "only", metric) for metric in SPAN_WINDOW_METRICS}
    return windows, data


def test_every_windowed_metric_has_samples_here(stored):
    windows, data = stored
    empty = [m for m in SPAN_WINDOW_METRICS if not data[m].samples and m != "human_intervention_rate"]
    assert empty == []
    assert data["retry_rate"].samples[0].key.count(":") == 1  # a call metric: one sample per LLM call
    assert len(data["retry_rate"].samples) == 16 and len(data["tool_use_performance"].samples) == 8
    assert len(data["task_quality"].samples) == 8


@pytest.mark.parametrize("metric", [m for m in SPAN_WINDOW_METRICS if m != "human_intervention_rate"])
def test_samples_are_the_window_evidence_and_give_its_value(stored, metric):
    windows, data = stored
    window, arm = windows[metric], data[metric]
    assert arm.window.evidence_digest == window.evidence_digest
    assert arm.window.samples_digest == window.evidence_digest, metric
    assert len(arm.samples) == window.sample_count
    values = np.array([s.value for s in arm.samples])
    statistic, _ = statistic_for(default_rule(metric))
    if statistic is None:  # throughput: no per-sample value
        return
    expected = {
        "sum": values.sum(), "mean": values.mean(), "rate": values.mean(), "percentile": np.quantile(values, 0.95),
    }.get(window.aggregation)
    if statistic.value == "per_success":
        expected = values.sum() / sum(1 for s in arm.samples if s.success)
    assert math.isclose(expected, window.value, rel_tol=1e-9), (metric, expected, window.value)
