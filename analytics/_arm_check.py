"""Do an arm's spans and windows match its manifest entry? ``problems`` refuse the arm's evidence,
``warnings`` are worth knowing. Every statement is written with ``?`` markers, bound by ``bind``
(a query function takes SQL text)."""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from typing import Any

from meritlens.analytics._manifest import Arm, ExperimentManifest
from meritlens.analytics._schema import SPANS_TABLE, WINDOWS_TABLE
from meritlens.analytics._sql import bind, row_time
from meritlens.analytics._tasks import APPLICATION_SPANS, TASK_KEY


@dataclass(frozen=True)
class ArmCheck:
    """What the stored spans and windows of an arm say against its manifest entry.

    ``problems`` make the arm's evidence unusable (a result computed from it is refused);
    ``warnings`` are worth knowing but refuse nothing."""

    arm: str
    target_id: str
    assessment_id: str
    spans: int
    tasks: int
    earliest_start: _dt.datetime | None
    latest_end: _dt.datetime | None
    response_models: tuple[str, ...]
    request_models: tuple[str, ...]
    problems: tuple[str, ...]
    warnings: tuple[str, ...]

    @property
    def refused(self) -> bool:
        return bool(self.problems)

    def to_json(self) -> dict[str, Any]:
        return {
            "arm": self.arm, "target_id": self.target_id, "assessment_id": self.assessment_id,
            "spans": self.spans, "tasks": self.tasks,
            "earliest_span_start": _iso(self.earliest_start), "latest_span_end": _iso(self.latest_end),
            "observed_response_models": list(self.response_models),
            "observed_request_models": list(self.request_models),
            "refused": self.refused, "problems": list(self.problems), "warnings": list(self.warnings),
        }


def _iso(value: _dt.datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


_ARM_SPANS = f"{SPANS_TABLE} WHERE {APPLICATION_SPANS} AND target_id = ? AND assessment_id = ?"
"""The application spans of one arm: of its target (the first parameter), with its assessment id (the second)."""
ARM_SPANS_SQL = f"""SELECT count(*) AS spans, count(DISTINCT {TASK_KEY}) AS tasks,
  min(start_time) AS earliest_start, max(end_time) AS latest_end,
  coalesce(list(DISTINCT response_model ORDER BY response_model) FILTER (WHERE response_model IS NOT NULL), [])
    AS response_models,
  coalesce(list(DISTINCT request_model ORDER BY request_model) FILTER (WHERE request_model IS NOT NULL), [])
    AS request_models
FROM {_ARM_SPANS}"""
"""Summary of the application spans of one arm (target, assessment): counts, time range, model identities."""
_SPANS_OUTSIDE_SQL = f"SELECT count(*) FROM {_ARM_SPANS} AND (start_time < ? OR end_time > ?)"
_WINDOWS_OUTSIDE_SQL = (f"SELECT metric, first_span_time, last_span_time FROM {WINDOWS_TABLE} WHERE target_id = ? "
                        "AND scope = ? AND (first_span_time < ? OR last_span_time > ?) ORDER BY metric")
_RUNS_BY_CASE_SQL = (f"SELECT case_id, count(*) FROM (SELECT {TASK_KEY} AS task, min(case_id) AS case_id "
                     f"FROM {_ARM_SPANS} GROUP BY 1) GROUP BY case_id")


def observe_arm(query, target_id: str, assessment_id: str) -> dict[str, Any]:
    """The arm's span summary (``ARM_SPANS_SQL``) as a dict, timestamps parsed."""
    result = query(bind(ARM_SPANS_SQL, [target_id, assessment_id]))
    row = dict(zip(result.columns, result.rows[0]))
    row["earliest_start"] = row_time(row["earliest_start"])
    row["latest_end"] = row_time(row["latest_end"])
    row["response_models"] = tuple(row["response_models"] or ())
    row["request_models"] = tuple(row["request_models"] or ())
    return row


def check_arm(manifest: ExperimentManifest, arm: Arm, query) -> ArmCheck:
    """Check an arm's stored spans and windows against its manifest entry.

    Problems (the arm's evidence is refused): no execution window recorded; a span, or a window's
    first/last span time, outside [started_at, finished_at]; a reported response model, or a
    requested model, other than the manifest's. Warnings: tasks outside the case set, cases with
    fewer or more runs than the repetitions, no response model reported at all."""
    target = manifest.target_of(arm)
    observed = observe_arm(query, target, arm.assessment_id)
    problems: list[str] = []
    warnings: list[str] = []
    start, end = arm.execution_window
    label = f"arm {arm.name!r} (assessment {arm.assessment_id!r})"
    if start is None:
        problems.append(f"{label} has no execution window: it was never started "
                        f"(`meritlens experiment start {manifest.experiment_id} {arm.name}`)")
    elif end is None:
        problems.append(f"{label} has not finished: its execution window has no end "
                        f"(`meritlens experiment finish {manifest.experiment_id} {arm.name}`)")
    if observed["spans"] == 0:
        warnings.append(f"{label}: no application spans of target {target!r} yet")
    elif start is not None and end is not None:
        window = f"[{start.isoformat()}, {end.isoformat()}]"
        if observed["earliest_start"] < start or observed["latest_end"] > end:
            outside = query(bind(_SPANS_OUTSIDE_SQL, [target, arm.assessment_id, start, end])).rows[0][0]
            problems.append(
                f"{label}: {outside} of its {observed['spans']} spans fall outside its execution window {window} "
                f"(spans run from {observed['earliest_start'].isoformat()} to {observed['latest_end'].isoformat()})"
            )
        stray = query(bind(_WINDOWS_OUTSIDE_SQL, [target, arm.assessment_id, start, end])).rows
        if stray:
            first = min(row_time(r[1]) for r in stray)
            last = max(row_time(r[2]) for r in stray)
            problems.append(
                f"{label}: windows ({target!r}, {{{', '.join(r[0] for r in stray)}}}, {arm.assessment_id!r}) hold "
                f"spans from {first.isoformat()} to {last.isoformat()}, outside the execution window {window}; "
                "those windows are refused"
            )
    reported = observed["response_models"]
    if reported and not arm.response_models:
        problems.append(
            f"{label}: the manifest records no response model but its spans report {list(reported)}; record it "
            f"with `meritlens experiment finish` or `meritlens experiment arm ... --response-model`"
        )
    elif arm.response_models:
        unexpected = [m for m in reported if m not in arm.response_models]
        if unexpected:
            problems.append(
                f"{label}: spans report response model(s) {unexpected} but the manifest records "
                f"{list(arm.response_models)}"
            )
    elif observed["spans"]:
        warnings.append(f"{label}: no span reports a response model (gen_ai.response.model); "
                        "the model identity is unverified")
    if len(reported) > 1:
        warnings.append(f"{label}: its spans report {len(reported)} response models {list(reported)}; "
                        "the arm mixes model identities")
    if arm.request_model is not None:
        other = [m for m in observed["request_models"] if m != arm.request_model]
        if other:
            problems.append(f"{label}: spans requested model(s) {other}, the manifest records {arm.request_model!r}")
    if observed["spans"]:
        warnings += _case_warnings(manifest, arm, target, query)
    return ArmCheck(
        arm=arm.name, target_id=target, assessment_id=arm.assessment_id, spans=int(observed["spans"]),
        tasks=int(observed["tasks"]), earliest_start=observed["earliest_start"], latest_end=observed["latest_end"],
        response_models=reported, request_models=observed["request_models"],
        problems=tuple(problems), warnings=tuple(warnings),
    )


def _case_warnings(manifest: ExperimentManifest, arm: Arm, target: str, query) -> list[str]:
    rows = query(bind(_RUNS_BY_CASE_SQL, [target, arm.assessment_id])).rows
    runs = {case: int(n) for case, n in rows}
    label = f"arm {arm.name!r}"
    warnings = []
    without = runs.pop(None, 0)
    if without:
        warnings.append(f"{label}: {without} tasks carry no case id (meritlens.case.id); they cannot be paired")
    case_set = set(manifest.cases)
    outside = sorted(c for c in runs if c not in case_set)
    if outside:
        warnings.append(f"{label}: {sum(runs[c] for c in outside)} tasks of {len(outside)} cases outside the "
                        f"experiment's case set (e.g. {outside[:3]}) are left out of every result")
    missing = [c for c in manifest.case_order if c not in runs]
    if missing:
        warnings.append(f"{label}: {len(missing)} of {len(manifest.cases)} cases have no task yet "
                        f"(e.g. {missing[:3]})")
    off = [c for c in manifest.case_order if c in runs and runs[c] != manifest.repetitions]
    if off:
        warnings.append(f"{label}: {len(off)} cases ran a number of times other than the {manifest.repetitions} "
                        f"repetitions (e.g. {off[0]!r}: {runs[off[0]]})")
    return warnings
