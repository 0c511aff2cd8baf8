"""Shared helpers of the evidence tests: spans described per task, a real collector, the CLI."""

from __future__ import annotations

import contextlib
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from meritlens.instrumentation import conventions as c
from tests.conftest import CollectorProcess, run_cli
from tests.otlp_builders import make_request, make_span

T0 = 1_700_000_000_000_000_000  # ns


@dataclass
class Span:
    trace_id: str
    span_id: str
    name: str
    start_ns: int
    end_ns: int
    attributes: dict = field(default_factory=dict)
    parent_span_id: str | None = None
    status_code: int = 0
    kind: int = 1

    def to_proto(self):
        """The span as an OTLP protobuf message (attributes whose value is None are left out)."""
        span = make_span({k: v for k, v in self.attributes.items() if v is not None},
                         trace_id=bytes.fromhex(self.trace_id), span_id=bytes.fromhex(self.span_id),
                         start_ns=self.start_ns, duration_s=(self.end_ns - self.start_ns) / 1e9, name=self.name,
                         parent_span_id=bytes.fromhex(self.parent_span_id) if self.parent_span_id else b"")
        span.end_time_unix_nano = self.end_ns
        span.kind = self.kind
        span.status.code = self.status_code
        return span


def export_body(spans: list[Span], service: str = "support-bot") -> bytes:
    """An OTLP protobuf ExportTraceServiceRequest holding ``spans``."""
    return make_request([s.to_proto() for s in spans], {c.SERVICE_NAME: service}).SerializeToString()


class Ids:
    """Deterministic, distinct trace and span ids."""

    def __init__(self, seed: int = 1):
        self.n = seed * 1_000_000

    def trace(self) -> str:
        self.n += 1
        return f"{self.n:032x}"

    def span(self) -> str:
        self.n += 1
        return f"{self.n:016x}"


def continuous_calls(seed: int, count: int, target: str = "bot", spread: float = 1.0, start: int = 0) -> list[Span]:
    """``count`` one-call tasks with log-normal latencies, token counts and costs (continuous values,
    so windows beyond the exact range hold many distinct samples)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    ids = Ids(seed)
    spans = []
    for i in range(count):
        begin = T0 + (start + i) * S // 10
        latency_ns = int(rng.lognormal(-1.0, spread) * 1e9) + 1000
        spans.append(Span(ids.trace(), ids.span(), "chat", begin, begin + latency_ns, {
            c.TARGET_ID: target, c.GEN_AI_OPERATION_NAME: c.OP_CHAT,
            c.GEN_AI_USAGE_INPUT_TOKENS: int(rng.lognormal(6, spread)) + 1,
            c.COST_USD: float(rng.lognormal(-9, spread))}, kind=3))
    return spans


# --- a real collector ---------------------------------------------------------------------------
@contextlib.contextmanager
def running_collector(db: Path):
    """A real `meritlens serve` on free loopback ports (see tests/conftest.py); yields its URL."""
    process = CollectorProcess(Path(db)).start()
    try:
        yield process.url
    finally:
        process.stop()


def post_spans(url: str, spans: list[Span]) -> None:
    response = httpx.post(url + "/v1/traces", content=export_body(spans),
                          headers={"Content-Type": "application/x-protobuf"}, timeout=30)
    assert response.status_code == 200, response.text


def meritlens(*args: str) -> subprocess.CompletedProcess:
    """Run the real `meritlens` command line; the caller checks the exit status."""
    return run_cli(*args, check=False)


# --- writing straight into a store (for the property test) ---------------------------------------
def span_rows(spans: list[Span]):
    """``spans`` decoded and normalized exactly as the receiver does: an Arrow table of span rows."""
    from meritlens.collector.process._normalize import normalize
    from meritlens.collector.process._otlp import PROTOBUF, decode

    batch = normalize(decode(export_body(spans), PROTOBUF).request)
    assert not batch.refused, batch.refused
    return batch.to_arrow()


def store_spans(store, spans: list[Span]) -> None:
    """Write ``spans`` to ``store`` as the receiver would (spans and their windows)."""
    store.write(span_rows(spans))


# --- a task-level description of spans, with its own (Python) expected values ----------------------
S = 1_000_000_000  # ns per second


@dataclass
class CallSpec:
    input_tokens: int | None = 100
    output_tokens: int | None = 20
    reasoning_tokens: int | None = None
    cost: float | None = 0.001
    ttft: float | None = None
    retries: int | None = 0
    tool_calls: int | None = 0
    duration: float = 0.8
    error: bool = False
    model: str = "gpt-4o-mini"
    wrapped: bool = False
    """Inside an @observe-style wrapper span (operation chat, no usage) of the application."""
    start_ns: int = 0
    key: str = ""


@dataclass
class ToolSpec:
    ok: bool = True
    duration: float = 0.1
    key: str = ""


@dataclass
class TaskSpec:
    target: str
    start: float
    calls: list[CallSpec]
    tools: list[ToolSpec] = field(default_factory=list)
    task_id: str | None = None
    assessment: str | None = None
    success: bool | None = None
    quality: float | None = None
    intervention: bool | None = None
    steps: int | None = None
    split_traces: bool = False
    """The second half of the calls runs in a second trace sharing the task id."""
    judge: bool = False
    """An orchestration judge call (tokens, cost) in the task's trace, after the task ends."""
    # filled by spans():
    start_ns: int = 0
    end_ns: int = 0
    app_keys: list[str] = field(default_factory=list)
    app_end_times: list[int] = field(default_factory=list)

    def spans(self, ids: Ids) -> list[Span]:
        common = {c.TARGET_ID: self.target, c.TASK_ID: self.task_id, c.ASSESSMENT_ID: self.assessment}
        trace = ids.trace()
        second_trace = ids.trace() if self.split_traces else trace
        root = ids.span()
        out: list[Span] = []
        cursor = T0 + int(self.start * S) + S // 20
        for i, call in enumerate(self.calls):
            in_second = self.split_traces and i >= len(self.calls) // 2
            parent = None if in_second else root
            trace_of_call = second_trace if in_second else trace
            call.start_ns = cursor
            end = cursor + int(call.duration * S)
            if call.wrapped:
                wrapper = ids.span()
                out.append(Span(trace_of_call, wrapper, "chat", cursor - S // 100, end + S // 100,
                                {**common, c.GEN_AI_OPERATION_NAME: c.OP_CHAT}, parent_span_id=parent, kind=3))
                parent = wrapper
            span_id = ids.span()
            call.key = f"{trace_of_call}:{span_id}"
            out.append(Span(trace_of_call, span_id, f"chat {call.model}", cursor, end, {
                **common,
                c.GEN_AI_OPERATION_NAME: c.OP_CHAT,
                c.GEN_AI_REQUEST_MODEL: call.model,
                c.GEN_AI_USAGE_INPUT_TOKENS: call.input_tokens,
                c.GEN_AI_USAGE_OUTPUT_TOKENS: call.output_tokens,
                c.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS: call.reasoning_tokens,
                c.COST_USD: call.cost,
                c.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK: call.ttft,
                c.RETRIES: call.retries,
                c.TOOL_CALLS: call.tool_calls,
                c.ERROR_TYPE: "RateLimitError" if call.error else None,
                c.AGENT_STEP: i + 1 if self.steps else None,
            }, parent_span_id=parent, status_code=2 if call.error else 0, kind=3))
            cursor = end + S // 20
        for tool in self.tools:
            end = cursor + int(tool.duration * S)
            span_id = ids.span()
            tool.key = f"{trace}:{span_id}"
            out.append(Span(trace, span_id, "execute_tool search", cursor, end, {
                **common, c.GEN_AI_OPERATION_NAME: c.OP_EXECUTE_TOOL, c.GEN_AI_TOOL_NAME: "search",
                c.ERROR_TYPE: None if tool.ok else "TimeoutError",
            }, parent_span_id=root, status_code=0 if tool.ok else 2))
            cursor = end + S // 20
        self.start_ns = T0 + int(self.start * S)
        self.end_ns = cursor
        out.insert(0, Span(trace, root, f"task {self.target}", self.start_ns, self.end_ns, {
            **common,
            c.OUTCOME_SUCCESS: self.success,
            c.QUALITY_SCORE: self.quality,
            c.HUMAN_INTERVENTION: self.intervention,
            c.AGENT_STEP: self.steps,
        }))
        self.app_keys = [f"{s.trace_id}:{s.span_id}" for s in out]
        self.app_end_times = [s.end_ns for s in out]
        if self.judge:
            out.append(Span(trace, ids.span(), "chat judge-model", self.end_ns + S // 10, self.end_ns + 3 * S, {
                **common, c.ROLE: c.ROLE_ORCHESTRATION, c.GEN_AI_OPERATION_NAME: c.OP_CHAT,
                c.GEN_AI_USAGE_INPUT_TOKENS: 5000, c.GEN_AI_USAGE_OUTPUT_TOKENS: 300, c.COST_USD: 0.5,
                c.RETRIES: 3,
            }, kind=3))
        return out


def quantile_cont(values: list[float], q: float) -> float:
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@dataclass
class Expected:
    value: float | None
    samples: int
    keys: list[str]
    """trace_id:span_id of the spans that fed it."""
    end_times: list[int]
    configured: bool | None = None
    """Whether the metric's sources were observed; None: exactly when there are samples."""


def _mean(values):
    return sum(values) / len(values) if values else None


def expected_windows(tasks: list[TaskSpec]) -> dict[str, Expected]:
    """What each span-sourced metric's window must hold for ``tasks``, computed without SQL."""
    def over(samples: list[tuple[TaskSpec, float]], value):
        return Expected(value, len(samples), [k for t, _ in samples for k in t.app_keys],
                        [e for t, _ in samples for e in t.app_end_times])

    def task_metric(pick, aggregate):
        samples = [(t, v) for t in tasks if (v := pick(t)) is not None]
        return over(samples, aggregate([v for _, v in samples]) if samples else None)

    def all_calls(t, attr):
        values = [getattr(call, attr) for call in t.calls]
        return sum(values) if values and all(v is not None for v in values) else None

    def per_success(pick):
        samples = [(t, v) for t in tasks if t.success is not None and (v := pick(t)) is not None]
        successes = sum(1 for t, _ in samples if t.success)
        expected = over(samples, sum(v for _, v in samples) / successes if successes else None)
        expected.configured = any(pick(t) is not None for t in tasks) and outcomes_known
        return expected

    def failed_or_retried(t):
        return any(c.error or (c.retries or 0) > 0 for c in t.calls) or any(not tool.ok for tool in t.tools)

    def first_output(t):
        outputs = [c.start_ns + round(c.ttft * S) for c in t.calls if c.ttft is not None]
        return (min(outputs) - t.start_ns) / S if outputs else None

    outcomes_known = any(t.success is not None for t in tasks)
    calls = [c for t in tasks for c in t.calls if c.retries is not None]
    tools = [tool for t in tasks for tool in t.tools]
    start, end = min(t.start_ns for t in tasks), max(t.end_ns for t in tasks)
    recovery = task_metric(
        lambda t: float(t.success) if t.success is not None and failed_or_retried(t) else None, _mean)
    recovery.configured = outcomes_known
    return {
        "task_quality": task_metric(lambda t: t.quality, _mean),
        "task_success": task_metric(lambda t: None if t.success is None else float(t.success), _mean),
        "human_intervention_rate": task_metric(
            lambda t: None if t.intervention is None else float(t.intervention), _mean),
        "input_tokens": task_metric(lambda t: all_calls(t, "input_tokens"), sum),
        "output_tokens": task_metric(lambda t: all_calls(t, "output_tokens"), sum),
        "total_task_cost": task_metric(lambda t: all_calls(t, "cost"), sum),
        "cost_per_successful_task": per_success(lambda t: all_calls(t, "cost")),
        "reasoning_efficiency": per_success(lambda t: all_calls(t, "reasoning_tokens")),
        "recovery_ability": recovery,
        "agent_steps": task_metric(lambda t: t.steps, _mean),
        "end_to_end_latency": task_metric(lambda t: (t.end_ns - t.start_ns) / S, lambda v: quantile_cont(v, 0.95)),
        "time_to_first_useful_output": task_metric(first_output, lambda v: quantile_cont(v, 0.95)),
        "throughput": Expected(len(tasks) / ((end - start) / S) if len(tasks) >= 2 else None, len(tasks),
                               [k for t in tasks for k in t.app_keys], [e for t in tasks for e in t.app_end_times]),
        "retry_rate": Expected(_mean([float(c.retries > 0) for c in calls]) if calls else None, len(calls),
                               [c.key for c in calls], []),
        "tool_use_performance": Expected(_mean([float(tool.ok) for tool in tools]) if tools else None, len(tools),
                                         [tool.key for tool in tools], []),
    }


def support_bot_dataset() -> list[TaskSpec]:
    """A realistic dataset: a support bot measured in a baseline and a challenger assessment, plus
    unassessed traffic and a second target. Every task-level situation the windows handle appears."""
    bot = "support-bot/answer"
    tasks: list[TaskSpec] = []
    for i in range(12):  # the baseline: 12 tickets
        tasks.append(TaskSpec(
            bot, start=i * 4.0, task_id=f"baseline-ticket-{i}", assessment="baseline-1",
            calls=[
                CallSpec(input_tokens=900 + 10 * i, output_tokens=120 + i, reasoning_tokens=40 + i,
                         cost=0.002 + 0.0001 * i, ttft=0.3 + 0.01 * i, retries=1 if i % 5 == 0 else 0,
                         tool_calls=1, duration=1.0 + 0.05 * i, wrapped=i % 4 == 1),
                CallSpec(input_tokens=1200, output_tokens=200, reasoning_tokens=10, cost=0.003,
                         retries=0, tool_calls=0, duration=0.7, error=i == 7),
            ],
            tools=[ToolSpec(ok=i % 6 != 3)],
            success=None if i == 11 else i not in (3, 8),  # ticket 11 completed without a known outcome
            quality=None if i in (10, 11) else round(0.6 + 0.03 * i, 3),
            intervention=i == 8 if i != 11 else None,
            steps=2,
            split_traces=i == 2,
            judge=i % 3 == 0,
        ))
    for i in range(6):  # a challenger: 6 tickets, one call on a model no price table knows
        tasks.append(TaskSpec(
            bot, start=100 + i * 3.0, task_id=f"challenger-ticket-{i}", assessment="challenger-1",
            calls=[CallSpec(input_tokens=800, output_tokens=150, cost=None if i == 4 else 0.001,
                            model="in-house-llm" if i == 4 else "gpt-4o-mini",
                            ttft=0.2, retries=None if i == 5 else 0, tool_calls=0, duration=0.5 + 0.1 * i)],
            success=i != 2, quality=0.7 + 0.02 * i, intervention=False, steps=1, judge=True,
        ))
    for i in range(2):  # unassessed traffic: no task id, no outcomes
        tasks.append(TaskSpec(bot, start=200 + i * 2.0, calls=[CallSpec(retries=None, tool_calls=None)]))
    for i in range(3):  # another target, never uses tools, no outcomes
        tasks.append(TaskSpec("router/classify", start=300 + i, task_id=f"route-{i}",
                              calls=[CallSpec(input_tokens=50, output_tokens=1, cost=0.0001, tool_calls=0)]))
    return tasks
