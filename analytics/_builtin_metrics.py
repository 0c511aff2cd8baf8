"""Built-in metrics that need more than a sum over span fields.

Each reads a target scope's application spans and recorded outcomes (`ScopeEvidence`) and either
measures or says why it does not apply. None of them turns a missing value into zero.
"""

from __future__ import annotations

import json
import logging
from collections import Counter, defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from meritlens.analytics._judge import JudgeSession
from meritlens.analytics._metric import (
    Measurement,
    Metric,
    MetricOptions,
    OptionError,
    ScopeEvidence,
    TaskRecord,
)
from meritlens.analytics._sidecar import KeyedObservation, read_sidecar, write_sidecar
from meritlens.instrumentation import conventions as c

log = logging.getLogger("meritlens.analytics.metrics")

NO_CASE = "(no case id)"


def _mean(values: Iterable[float]) -> float:
    values = list(values)
    return sum(values) / len(values)


def _per_case(pairs: Iterable[tuple[str | None, float]]) -> dict[str, float]:
    """Mean value per case id (tasks without one grouped under NO_CASE)."""
    grouped: dict[str, list[float]] = defaultdict(list)
    for case_id, value in pairs:
        grouped[case_id if case_id is not None else NO_CASE].append(value)
    return {case: _mean(values) for case, values in sorted(grouped.items())}


def _pct(value: float) -> str:
    return f"{value:.1%}"


# --- tool_use_performance ---------------------------------------------------------------------------
class ToolOutcomeRow(BaseModel):
    """Sidecar row: how many executions of one tool ended with one outcome (``ok`` or an error type)."""

    tool: str
    outcome: str
    calls: int


class ToolUsePerformance(Metric):
    """Share of tool executions that succeeded, read from tool spans only (harness traces)."""

    name = "tool_use_performance"

    def compute(self, evidence: ScopeEvidence, *, run_dir: Path, options: MetricOptions,
                judge: JudgeSession | None) -> list[Measurement]:
        tools = [s for s in evidence.spans if s.is_tool]
        if not tools:
            return self.not_applicable(
                evidence, f"no tool spans ({c.GEN_AI_OPERATION_NAME}={c.OP_EXECUTE_TOOL}) in the scope"
            )
        case_of_task = {t.key: t.case_id for t in evidence.tasks}
        succeeded = [0.0 if s.failed else 1.0 for s in tools]
        by_tool: dict[str, list[float]] = defaultdict(list)
        outcomes: Counter = Counter()
        for span, ok in zip(tools, succeeded, strict=True):
            tool = span.tool_name or "(unnamed tool)"
            by_tool[tool].append(ok)
            outcome = "ok" if ok else (span.error_type or "error")
            outcomes[(tool, outcome)] += 1
        write_sidecar(run_dir, self.name, [
            ToolOutcomeRow(tool=tool, outcome=outcome, calls=n) for (tool, outcome), n in sorted(outcomes.items())
        ])
        value = _mean(succeeded)
        return [self.measurement(
            value=value,
            summary=f"{int(sum(succeeded))} of {len(tools)} tool executions succeeded ({_pct(value)}) "
                    f"across {len(by_tool)} tools",
            tasks_or_spans=tools,
            sample_count=len(tools),
            per_case=_per_case((case_of_task.get(s.task_key), ok) for s, ok in zip(tools, succeeded, strict=True)),
            per_key={tool: _mean(v) for tool, v in sorted(by_tool.items())},
            sample_values=succeeded,
        )]

    def read_keyed_observations(self, run_dir: Path) -> list[KeyedObservation]:
        rows = read_sidecar(run_dir, self.name, ToolOutcomeRow) or []
        return [KeyedObservation(keys={"tool": r.tool, "outcome": r.outcome}, value=r.calls) for r in rows]


# --- structured_output_reliability ------------------------------------------------------------------
class OutputCheckRow(BaseModel):
    """Sidecar row: whether one task's output parsed and validated against its schema."""

    task: str
    case: str | None
    valid: bool
    failure: Literal["parse", "schema"] | None = None
    detail: str | None = None


def _load_schema(raw: Any, where: str) -> Any:
    import jsonschema

    schema = raw
    if isinstance(raw, str):
        try:
            schema = json.loads(raw)
        except ValueError as exc:
            raise ValueError(f"{where} is not JSON: {exc}") from None
    if not isinstance(schema, (dict, bool)):
        raise ValueError(f"{where} is not a JSON Schema (an object or a boolean)")
    validator_class = jsonschema.validators.validator_for(schema)
    try:
        validator_class.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise ValueError(f"{where} is not a valid JSON Schema: {exc.message}") from None
    return validator_class(schema)


class StructuredOutputReliability(Metric):
    """Share of task outputs that parse as JSON and validate against the task's JSON Schema.

    The schema comes from the task's ``meritlens.output.schema`` span attribute (JSON text), else
    from the ``schema`` option (``--schema FILE``). The output must be a JSON document as it
    stands (surrounding whitespace aside): text around it, code fences included, is a parse failure.
    """

    name = "structured_output_reliability"

    def compute(self, evidence: ScopeEvidence, *, run_dir: Path, options: MetricOptions,
                judge: JudgeSession | None) -> list[Measurement]:
        import jsonschema

        default_validator = None
        schema_file = options.get_path("schema")
        if schema_file is not None:
            try:
                default_validator = _load_schema(schema_file.read_text(encoding="utf-8"), f"schema file {schema_file}")
            except ValueError as exc:
                raise OptionError(str(exc)) from None
        checked: list[tuple[TaskRecord, OutputCheckRow]] = []
        without_schema = without_output = 0
        for task in evidence.tasks:
            validator = default_validator
            for span in task.spans:
                if span.attribute(c.OUTPUT_SCHEMA) is not None:
                    try:
                        validator = _load_schema(span.attribute(c.OUTPUT_SCHEMA),
                                                 f"{c.OUTPUT_SCHEMA} on span {span.key}")
                    except ValueError as exc:
                        log.warning("%s: task %s left out: %s", self.name, task.key, exc)
                        validator = None
                    break
            if validator is None:
                without_schema += 1
                continue
            output = task.output_text
            if output is None:
                without_output += 1
                continue
            try:
                document = json.loads(output.strip())
            except ValueError as exc:
                row = OutputCheckRow(task=task.key, case=task.case_id, valid=False, failure="parse", detail=str(exc))
            else:
                error = jsonschema.exceptions.best_match(validator.iter_errors(document))
                if error is None:
                    row = OutputCheckRow(task=task.key, case=task.case_id, valid=True)
                else:
                    where = "/".join(map(str, error.absolute_path)) or "(root)"
                    row = OutputCheckRow(task=task.key, case=task.case_id, valid=False, failure="schema",
                                         detail=f"{where}: {error.message}")
            checked.append((task, row))
        if not checked:
            if without_schema == len(evidence.tasks):
                return self.not_applicable(
                    evidence, f"no JSON Schema: pass --schema FILE or record {c.OUTPUT_SCHEMA} on the task's spans"
                )
            return self.not_applicable(
                evidence, f"no task with a schema recorded its output ({without_output} without output text)"
            )
        if without_output:
            log.info("%s: %d tasks with a schema recorded no output text and are left out", self.name, without_output)
        write_sidecar(run_dir, self.name, [row for _, row in checked])
        values = [1.0 if row.valid else 0.0 for _, row in checked]
        value = _mean(values)
        failures = Counter(row.failure for _, row in checked if row.failure)
        return [self.measurement(
            value=value,
            summary=f"{int(sum(values))} of {len(values)} outputs parsed and validated ({_pct(value)}); "
                    f"{failures['parse']} did not parse, {failures['schema']} violated the schema",
            tasks_or_spans=[task for task, _ in checked],
            sample_count=len(values),
            per_case=_per_case((task.case_id, v) for (task, _), v in zip(checked, values, strict=True)),
            per_key={"parse_failure": failures["parse"] / len(values),
                     "schema_violation": failures["schema"] / len(values)},
            sample_values=values,
        )]

    def read_keyed_observations(self, run_dir: Path) -> list[KeyedObservation]:
        rows = read_sidecar(run_dir, self.name, OutputCheckRow) or []
        return [
            KeyedObservation(keys={"task": r.task, "failure": r.failure or "none"}, value=1.0 if r.valid else 0.0)
            for r in rows
        ]


# --- consistency ------------------------------------------------------------------------------------
def comparable_output(text: str) -> str:
    """The form outputs are compared in: canonical JSON when the output is JSON, else the text
    with runs of whitespace collapsed."""
    stripped = text.strip()
    try:
        return "json:" + json.dumps(json.loads(stripped), sort_keys=True, separators=(",", ":"))
    except ValueError:
        return "text:" + " ".join(stripped.split())


def pairwise_agreement(outputs: list[str]) -> float:
    """Share of pairs of outputs that are equal (needs at least two outputs)."""
    n = len(outputs)
    pairs = n * (n - 1) / 2
    agreeing = sum(k * (k - 1) / 2 for k in Counter(outputs).values())
    return agreeing / pairs


class Consistency(Metric):
    """Agreement of outputs across repeated runs of the same input (tasks sharing a case id).

    Needs a `repeated_same_input` design: at least one case with two or more runs that recorded
    their output. Per case, the value is the share of pairs of runs whose outputs agree; the
    metric is the mean over cases.
    """

    name = "consistency"

    def compute(self, evidence: ScopeEvidence, *, run_dir: Path, options: MetricOptions,
                judge: JudgeSession | None) -> list[Measurement]:
        by_case: dict[str, list[tuple[TaskRecord, str]]] = defaultdict(list)
        for task in evidence.tasks:
            if task.case_id is None:
                continue
            output = task.output_text
            if output is not None:
                by_case[task.case_id].append((task, comparable_output(output)))
        repeated = {case: runs for case, runs in sorted(by_case.items()) if len(runs) >= 2}
        if not repeated:
            return self.not_applicable(
                evidence,
                "no case has two or more runs with a recorded output (needs repeated_same_input: "
                f"tasks sharing {c.CASE_ID})",
            )
        per_case = {case: pairwise_agreement([out for _, out in runs]) for case, runs in repeated.items()}
        tasks = [task for runs in repeated.values() for task, _ in runs]
        value = _mean(per_case.values())
        return [self.measurement(
            value=value,
            summary=f"mean pairwise agreement {_pct(value)} over {len(repeated)} repeated cases ({len(tasks)} runs)",
            tasks_or_spans=tasks,
            sample_count=len(tasks),
            per_case=per_case,
            sample_values=per_case.values(),
        )]


# --- recovery_ability -------------------------------------------------------------------------------
class RecoveryAbility(Metric):
    """Share of tasks that hit an error or a retry and still succeeded (recorded outcome)."""

    name = "recovery_ability"

    def compute(self, evidence: ScopeEvidence, *, run_dir: Path, options: MetricOptions,
                judge: JudgeSession | None) -> list[Measurement]:
        troubled = [t for t in evidence.tasks if t.hit_error_or_retry]
        if not troubled:
            return self.not_applicable(evidence, "no task hit an error or a retry")
        known = [t for t in troubled if t.success is not None]
        if not known:
            return self.not_applicable(
                evidence, f"{len(troubled)} tasks hit an error or retry but none recorded {c.OUTCOME_SUCCESS}"
            )
        if len(known) < len(troubled):
            log.info("%s: %d tasks without a recorded outcome are left out", self.name, len(troubled) - len(known))
        values = [1.0 if t.success else 0.0 for t in known]
        value = _mean(values)
        return [self.measurement(
            value=value,
            summary=f"{int(sum(values))} of {len(known)} tasks that hit an error or retry still succeeded "
                    f"({_pct(value)})",
            tasks_or_spans=known,
            sample_count=len(known),
            per_case=_per_case((t.case_id, v) for t, v in zip(known, values, strict=True)),
            sample_values=values,
        )]


# --- long_horizon_performance -----------------------------------------------------------------------
DEFAULT_STEP_THRESHOLD = 10


class StepOutcomeRow(BaseModel):
    """Sidecar row: tasks with a given step count and how many of them succeeded."""

    steps: int
    tasks: int
    successes: int


def task_steps(task: TaskRecord) -> int | None:
    """Distinct agent steps a task recorded (``meritlens.agent.step``), or None when it recorded none."""
    steps = {s.agent_step for s in task.spans if s.agent_step is not None}
    return len(steps) if steps else None


class LongHorizonPerformance(Metric):
    """Success rate of tasks that took more agent steps than a threshold (option ``step_threshold``)."""

    name = "long_horizon_performance"

    def compute(self, evidence: ScopeEvidence, *, run_dir: Path, options: MetricOptions,
                judge: JudgeSession | None) -> list[Measurement]:
        threshold = options.get_int("step_threshold", DEFAULT_STEP_THRESHOLD, minimum=0)
        stepped = [(t, task_steps(t)) for t in evidence.tasks]
        stepped = [(t, n) for t, n in stepped if n is not None]
        if not stepped:
            return self.not_applicable(evidence, f"no task recorded agent steps ({c.AGENT_STEP})")
        with_outcome = [(t, n) for t, n in stepped if t.success is not None]
        table: dict[int, list[int]] = defaultdict(lambda: [0, 0])
        for task, steps in with_outcome:
            table[steps][0] += 1
            table[steps][1] += 1 if task.success else 0
        if table:
            write_sidecar(run_dir, self.name, [
                StepOutcomeRow(steps=steps, tasks=n, successes=ok) for steps, (n, ok) in sorted(table.items())
            ])
        long_tasks = [(t, n) for t, n in stepped if n > threshold]
        if not long_tasks:
            return self.not_applicable(evidence, f"no task took more than {threshold} steps")
        known = [t for t, n in long_tasks if t.success is not None]
        if not known:
            return self.not_applicable(
                evidence,
                f"{len(long_tasks)} tasks took more than {threshold} steps but none recorded {c.OUTCOME_SUCCESS}",
            )
        values = [1.0 if t.success else 0.0 for t in known]
        value = _mean(values)
        return [self.measurement(
            value=value,
            summary=f"{int(sum(values))} of {len(known)} tasks with more than {threshold} steps succeeded "
                    f"({_pct(value)})",
            tasks_or_spans=known,
            sample_count=len(known),
            per_case=_per_case((t.case_id, v) for t, v in zip(known, values, strict=True)),
            sample_values=values,
        )]

    def read_keyed_observations(self, run_dir: Path) -> list[KeyedObservation]:
        rows = read_sidecar(run_dir, self.name, StepOutcomeRow) or []
        return [
            KeyedObservation(keys={"steps": str(r.steps)}, value=r.successes / r.tasks)
            for r in rows if r.tasks > 0
        ]


# --- scored metrics: recorded scores, else a judge --------------------------------------------------
class TaskScoreRow(BaseModel):
    """Sidecar row: one score of one task, recorded by the application/evaluator or given by a judge replica."""

    task: str
    case: str | None
    source: Literal["recorded", "judge"]
    score: float | None
    replica: int | None = None
    judge_model: str | None = None
    error: str | None = None


class ScoredMetric(Metric):
    """A 0..1 score per task: from recorded scores when the scope has any, else from a judge.

    Recorded scores are ``gen_ai.evaluation.score.value`` whose ``gen_ai.evaluation.name`` is one of
    ``evaluation_names`` (on a span or a span event), plus ``meritlens.quality.score`` when
    ``reads_quality_score``. A task's score is the mean of its scores. The judge path renders
    ``<name>.j2``, asks the judge several times per task (option ``judge_replicas``) and averages.
    """

    evaluation_names: tuple[str, ...] = ()
    reads_quality_score: bool = False
    score_meaning: str = "score"

    def recorded_scores(self, task: TaskRecord) -> list[float]:
        scores = list(task.scores_named(self.evaluation_names))
        if self.reads_quality_score:
            scores.extend(task.quality_scores)
        valid = [s for s in scores if 0.0 <= s <= 1.0]
        if len(valid) < len(scores):
            log.warning("%s: task %s has scores outside [0, 1], left out: %s",
                        self.name, task.key, [s for s in scores if not 0.0 <= s <= 1.0])
        return valid

    def compute(self, evidence: ScopeEvidence, *, run_dir: Path, options: MetricOptions,
                judge: JudgeSession | None) -> list[Measurement]:
        recorded = [(t, self.recorded_scores(t)) for t in evidence.tasks]
        recorded = [(t, s) for t, s in recorded if s]
        if recorded:
            rows = [TaskScoreRow(task=t.key, case=t.case_id, source="recorded", score=v)
                    for t, s in recorded for v in s]
            write_sidecar(run_dir, self.name, rows)
            if len(recorded) < len(evidence.tasks):
                log.info("%s: %d tasks have no recorded score and are left out",
                         self.name, len(evidence.tasks) - len(recorded))
            per_task = [(t, _mean(s)) for t, s in recorded]
            return [self._measure(per_task, f"recorded scores of {len(per_task)} tasks")]
        if judge is None:
            return self.not_applicable(evidence, "no recorded scores and no judge configured (--judge)")
        judgeable = [t for t in evidence.tasks if t.output_text is not None]
        if not judgeable:
            return self.not_applicable(evidence, "no recorded scores, and no task recorded an output to judge")
        rows = []
        per_task: list[tuple[TaskRecord, float]] = []
        for task in judgeable:
            context = {
                "metric": self.name,
                "input": task.input_text,
                "output": task.output_text,
                "instructions": task.system_instructions,
            }
            judged = judge.score_task(self.name, task.key, f"{self.name}.j2", context)
            for replica, score in enumerate(judged.replica_scores):
                rows.append(TaskScoreRow(
                    task=task.key, case=task.case_id, source="judge", score=score, replica=replica,
                    judge_model=judge.model, error=None if score is not None else "no usable reply",
                ))
            if judged.mean is not None:
                per_task.append((task, judged.mean))
        write_sidecar(run_dir, self.name, rows)
        if not per_task:
            raise RuntimeError(f"the judge {judge.model} gave no usable score for any of {len(judgeable)} tasks")
        return [self._measure(
            per_task, f"judge {judge.model} x{judge.replicas} replicas on {len(per_task)} tasks"
        )]

    def _measure(self, per_task: list[tuple[TaskRecord, float]], source: str) -> Measurement:
        values = [v for _, v in per_task]
        value = _mean(values)
        return self.measurement(
            value=value,
            summary=f"mean {self.score_meaning} {value:.3f} from {source}",
            tasks_or_spans=[t for t, _ in per_task],
            sample_count=len(per_task),
            per_case=_per_case((t.case_id, v) for t, v in per_task),
            sample_values=values,
        )

    def read_keyed_observations(self, run_dir: Path) -> list[KeyedObservation]:
        rows = read_sidecar(run_dir, self.name, TaskScoreRow) or []
        return [
            KeyedObservation(
                keys={"task": r.task, "source": r.source, "replica": "" if r.replica is None else str(r.replica)},
                value=r.score,
            )
            for r in rows if r.score is not None
        ]


class TaskQuality(ScoredMetric):
    """Quality of a task's result (0..1): ``meritlens.quality.score`` / evaluation ``task_quality``, else a judge."""

    name = "task_quality"
    evaluation_names = ("task_quality",)
    reads_quality_score = True
    score_meaning = "quality"


class HallucinationRate(ScoredMetric):
    """Share of tasks with unsupported claims: per task 1 = hallucinated, 0 = grounded (recorded
    evaluation ``hallucination_rate`` or ``hallucination``, else a judge)."""

    name = "hallucination_rate"
    evaluation_names = ("hallucination_rate", "hallucination")
    score_meaning = "hallucination share"


class InstructionFollowing(ScoredMetric):
    """How well a task's output follows its instructions (0..1): evaluation ``instruction_following``, else a judge."""

    name = "instruction_following"
    evaluation_names = ("instruction_following",)
    score_meaning = "instruction-following score"


BUILTIN_METRIC_CLASSES: tuple[type[Metric], ...] = (
    StructuredOutputReliability,
    Consistency,
    ToolUsePerformance,
    RecoveryAbility,
    LongHorizonPerformance,
    TaskQuality,
    HallucinationRate,
    InstructionFollowing,
)
"""The built-in metrics, in the order they run. The registry is derived from this list."""
