"""Support of the decide tests: a real collector process, the CLI, and a synthetic experiment whose
right answers are known by construction, sent with the OpenTelemetry SDK's OTLP/HTTP exporter."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import subprocess
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from meritlens.instrumentation import conventions as c
from tests.cli_runner import run_cli
from tests.conftest import CollectorProcess

TARGET = "support-bot/answer"


@contextlib.contextmanager
def running_collector(db: Path):
    """`meritlens serve` on free loopback ports (the shared CollectorProcess); yields its URL."""
    process = CollectorProcess(db).start()
    try:
        yield process.url
    finally:
        process.stop()


def meritlens(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """The real `meritlens` command line, without inherited MERITLENS_* settings."""
    return run_cli(*args, check=False, cwd=cwd)


def post_json(url: str, body) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"},
                                     method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


# --- sending spans with the OpenTelemetry SDK ----------------------------------------------------------
@dataclass(frozen=True)
class TaskSpan:
    """One task: one application LLM call span."""

    task_id: str
    case_id: str | None
    assessment_id: str
    request_model: str
    response_model: str
    start: dt.datetime
    latency_s: float
    cost_usd: float
    quality: float
    success: bool


def _ns(t: dt.datetime) -> int:
    return int(round(t.timestamp() * 1e6)) * 1000


def send_with_sdk(url: str, tasks: list[TaskSpan]) -> None:
    """Emit one CLIENT span per task through the SDK's OTLP/HTTP exporter, and flush."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.trace import SpanKind

    provider = TracerProvider(resource=Resource.create({c.SERVICE_NAME: "support-bot", c.TARGET_ID: TARGET}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=url + "/v1/traces"),
                                                   max_export_batch_size=128, schedule_delay_millis=50))
    tracer = provider.get_tracer("decide-tests")
    for task in tasks:
        attributes = {
            c.GEN_AI_OPERATION_NAME: c.OP_CHAT,
            c.GEN_AI_PROVIDER_NAME: "openai",
            c.GEN_AI_REQUEST_MODEL: task.request_model,
            c.GEN_AI_RESPONSE_MODEL: task.response_model,
            c.GEN_AI_USAGE_INPUT_TOKENS: 800,
            c.GEN_AI_USAGE_OUTPUT_TOKENS: 200,
            c.COST_USD: task.cost_usd,
            c.TASK_ID: task.task_id,
            c.ASSESSMENT_ID: task.assessment_id,
            c.QUALITY_SCORE: task.quality,
            c.OUTCOME_SUCCESS: task.success,
        }
        if task.case_id is not None:
            attributes[c.CASE_ID] = task.case_id
        span = tracer.start_span(f"chat {task.request_model}", kind=SpanKind.CLIENT, attributes=attributes,
                                 start_time=_ns(task.start))
        span.end(end_time=_ns(task.start + dt.timedelta(seconds=task.latency_s)))
    assert provider.force_flush(30_000)
    provider.shutdown()


# --- the synthetic experiment ------------------------------------------------------------------------
@dataclass(frozen=True)
class ArmDesign:
    name: str
    assessment_id: str
    request_model: str
    response_model: str
    cost_per_task: float
    quality_shift: float
    quality_noise: float
    """sd of the arm's own quality noise; 0 reproduces the baseline's scores exactly."""
    latency_s: float
    cases: int | None = None
    """Run only the first N cases of the order (None: all)."""


CASES = [f"ticket-{i:03d}" for i in range(30)]
REPETITIONS = 2
SHUFFLE_SEED = 11
T0 = dt.datetime(2025, 3, 3, 9, 0, tzinfo=dt.UTC)

ARMS = (
    ArmDesign("base", "exp-base", "gpt-4o", "gpt-4o-2024-08-06", 0.010, 0.0, 0.0, 2.0),
    ArmDesign("cheap", "exp-cheap", "gpt-4o-mini", "gpt-4o-mini-2024-07-18", 0.004, 0.0, 0.0, 1.0),
    ArmDesign("premium", "exp-premium", "o3", "o3-2025-04-16", 0.020, 0.10, 0.03, 3.0),
    ArmDesign("dominated", "exp-dominated", "legacy", "legacy-2023-01", 0.015, -0.10, 0.03, 2.5),
    ArmDesign("partial", "exp-partial", "gpt-4.1", "gpt-4.1-2025-04-14", 0.008, 0.0, 0.03, 1.5, cases=5),
)
"""base and cheap score exactly alike (equal quality by construction), cheap costs less; premium is
better and costs more; dominated is worse and costs more than base and cheap, and is slower than
both; partial ran 5 of 30 cases (too few samples for any verdict)."""


def arm_window(index: int) -> tuple[dt.datetime, dt.datetime]:
    start = T0 + dt.timedelta(hours=index)
    return start, start + dt.timedelta(minutes=50)


def arm_tasks(design: ArmDesign, index: int, case_order: list[str], *, seed: int = 5) -> list[TaskSpan]:
    """The arm's tasks: every case of the order (or its first N), REPETITIONS times, inside its window."""
    world = np.random.default_rng(seed)  # shared by every arm: the cases' difficulty and the judge's scores
    difficulty = {case: world.uniform(0.45, 0.75) for case in CASES}
    judge_noise = {(case, r): world.normal(0, 0.04) for case in CASES for r in range(REPETITIONS)}
    size = {case: world.uniform(0.7, 1.3) for case in CASES}
    own = np.random.default_rng([seed, index])
    start, _ = arm_window(index)
    tasks = []
    cases = case_order[: design.cases] if design.cases else case_order
    for n, (case, r) in enumerate((case, r) for r in range(REPETITIONS) for case in cases):
        quality = difficulty[case] + judge_noise[(case, r)] + design.quality_shift
        if design.quality_noise:
            quality += own.normal(0, design.quality_noise)
        tasks.append(TaskSpan(
            task_id=f"{design.name}-{case}-{r}", case_id=case, assessment_id=design.assessment_id,
            request_model=design.request_model, response_model=design.response_model,
            start=start + dt.timedelta(seconds=10 + 20 * n),
            latency_s=design.latency_s * own.uniform(0.8, 1.2),
            cost_usd=design.cost_per_task * size[case] * own.uniform(0.9, 1.1),
            quality=float(min(max(quality, 0.0), 1.0)),
            success=bool(quality >= 0.5),
        ))
    return tasks


PROFILE_TOML = f"""target = "{TARGET}"
description = "support answers: quality, cost and latency"

[metrics.task_quality]
direction = "higher"
strategy = "repeated_representative_task_set"
cases = 30
repetitions = 2
aggregation = "mean"
min_samples = 40
tolerance = 0.02
rationale = "judge score of each ticket answer, two runs per ticket"

[metrics.total_task_cost]
direction = "lower"
strategy = "repeated_representative_task_set"
cases = 30
repetitions = 2
aggregation = "sum"
min_samples = 40
tolerance = 0.05
constraint = 1.0
rationale = "the budget of one pass over the frozen ticket set"

[metrics.end_to_end_latency]
direction = "lower"
strategy = "repeated_representative_task_set"
cases = 30
repetitions = 2
aggregation = "percentile"
min_samples = 40
rationale = "p95 answer time"
"""
