"""Experiments: the manifest every comparison and frontier refers to, how it is stored, and the checks
that an arm's spans are the ones the manifest describes.

An experiment runs one application revision over a fixed, comparable case set, in the order a
recorded seed produced, with a fixed number of repetitions, once per *arm*. An arm is one
assessment (``meritlens.assessment.id``): its windows are the windows whose scope is that
assessment id. The manifest records, per arm, the model alias it requested, the model identity the
provider reported (``gen_ai.response.model``) and its execution window [started_at, finished_at].

Everything here reads through a query function (see ``meritlens.analytics.QueryFunction``); writes
go through the collector's store (``meritlens.collector``), which applies ``check_update``.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
from dataclasses import dataclass
from typing import Annotated, Any, Iterable, Sequence

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from meritlens.analytics._profiles import ProfileError, TaskProfile, profile_from_dict
from meritlens.analytics._schema import (
    EXPERIMENT_ARM_COLUMN_NAMES,
    EXPERIMENT_ARMS_TABLE,
    EXPERIMENT_COLUMN_NAMES,
    EXPERIMENTS_TABLE,
    SPANS_TABLE,
    WINDOWS_TABLE,
)
from meritlens.analytics._sql import sql_string
from meritlens.analytics._tasks import APPLICATION_SPANS, TASK_KEY

SHUFFLE_METHOD = "cases ordered by sha256('<shuffle_seed>:<case_id>') hex digest"
"""How ``case_order`` follows from the seed: specified here, so anyone can re-derive it with any tool."""

_SLUG = r"^[A-Za-z0-9][A-Za-z0-9._:@/+-]{0,127}$"
_Slug = Annotated[str, Field(strict=True, pattern=_SLUG)]
_Text = Annotated[str, Field(strict=True, min_length=1, max_length=1000, pattern=r"^\S(.*\S)?$")]
_Seed = Annotated[int, Field(strict=True, ge=0, le=2**63 - 1)]


class ExperimentError(ValueError):
    """A manifest or an update that breaks a rule; the message names every problem."""

    def __init__(self, problems: Sequence[str], experiment_id: str | None = None):
        self.problems = list(problems)
        where = f"experiment {experiment_id!r}: " if experiment_id else ""
        if len(self.problems) == 1:
            super().__init__(where + self.problems[0])
        else:
            super().__init__(where + f"{len(self.problems)} problems\n" + "\n".join(f"  {p}" for p in self.problems))


class ExperimentNotFound(LookupError):
    """No experiment of that id is stored."""


def _utc(value: _dt.datetime | None) -> _dt.datetime | None:
    """Times are kept in UTC, so that a manifest read back (in any time zone) has the same digest."""
    return value.astimezone(_dt.timezone.utc) if value is not None else None


def shuffled_case_order(cases: Iterable[str], seed: int) -> tuple[str, ...]:
    """The case order ``seed`` produces (``SHUFFLE_METHOD``): independent of the order cases are given in."""
    return tuple(sorted(cases, key=lambda case: (hashlib.sha256(f"{seed}:{case}".encode()).hexdigest(), case)))


class Arm(BaseModel):
    """One arm of an experiment: one assessment of the target, with one model identity."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: _Slug
    assessment_id: _Text
    """The arm's spans carry this ``meritlens.assessment.id``; its windows have it as scope."""
    target_id: _Text | None = None
    """The target of the arm's spans, when it is not the experiment's."""
    request_model: _Text | None = None
    """The model (alias) the arm asked for."""
    response_models: tuple[_Text, ...] = ()
    """The model identities the provider reported; empty until the arm is finished."""
    started_at: AwareDatetime | None = None
    finished_at: AwareDatetime | None = None
    description: str | None = None

    @field_validator("started_at", "finished_at")
    @classmethod
    def _in_utc(cls, value: _dt.datetime | None) -> _dt.datetime | None:
        return _utc(value)

    @model_validator(mode="after")
    def _check(self) -> "Arm":
        if len(set(self.response_models)) != len(self.response_models):
            raise ValueError(f"arm {self.name!r}: response_models lists a model twice")
        if self.finished_at is not None and self.started_at is None:
            raise ValueError(f"arm {self.name!r}: finished_at needs started_at")
        if self.finished_at is not None and self.finished_at < self.started_at:
            raise ValueError(
                f"arm {self.name!r}: finished_at {self.finished_at.isoformat()} is before started_at "
                f"{self.started_at.isoformat()}"
            )
        return self

    @property
    def execution_window(self) -> tuple[_dt.datetime | None, _dt.datetime | None]:
        return self.started_at, self.finished_at


class ExperimentManifest(BaseModel):
    """What an experiment ran: the record every comparison and frontier refers to (by id and digest)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    experiment_id: _Slug
    target_id: _Text
    application_revision: _Text
    cases: tuple[_Text, ...] = Field(min_length=1)
    """The comparable case set (``meritlens.case.id`` values)."""
    shuffle_seed: _Seed
    case_order: tuple[_Text, ...]
    """The order ``shuffle_seed`` produced (``SHUFFLE_METHOD``); every arm runs the cases in it."""
    repetitions: Annotated[int, Field(strict=True, ge=1)]
    arms: tuple[Arm, ...] = ()
    baseline: _Slug | None = None
    profile: dict[str, Any] | None = None
    """The task profile of the decision (its TOML as JSON), when recorded."""
    description: str | None = None
    created_at: AwareDatetime | None = None
    updated_at: AwareDatetime | None = None

    @field_validator("created_at", "updated_at")
    @classmethod
    def _in_utc(cls, value: _dt.datetime | None) -> _dt.datetime | None:
        return _utc(value)

    @field_validator("profile")
    @classmethod
    def _valid_profile(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is None:
            return None
        try:
            return profile_from_dict(value, "profile").to_dict()
        except ProfileError as exc:
            raise ValueError(str(exc)) from None

    @model_validator(mode="after")
    def _check(self) -> "ExperimentManifest":
        problems = []
        if len(set(self.cases)) != len(self.cases):
            twice = sorted({c for c in self.cases if self.cases.count(c) > 1})
            problems.append(f"the case set lists {twice} more than once")
        elif self.case_order != shuffled_case_order(self.cases, self.shuffle_seed):
            problems.append(
                f"case_order is not the order seed {self.shuffle_seed} produces from the case set "
                f"({SHUFFLE_METHOD}); it is derived, never edited"
            )
        names = [a.name for a in self.arms]
        for name in sorted({n for n in names if names.count(n) > 1}):
            problems.append(f"arm name {name!r} is used twice")
        assessments = [a.assessment_id for a in self.arms]
        for assessment in sorted({a for a in assessments if assessments.count(a) > 1}):
            users = [a.name for a in self.arms if a.assessment_id == assessment]
            problems.append(f"assessment {assessment!r} is used by arms {users}; each arm is its own assessment")
        if self.baseline is not None and self.baseline not in names:
            problems.append(f"baseline {self.baseline!r} is not an arm (arms: {names or 'none yet'})")
        if self.profile is not None and self.profile.get("target") != self.target_id:
            problems.append(
                f"the profile is for target {self.profile.get('target')!r}, the experiment measures {self.target_id!r}"
            )
        if problems:
            raise ValueError("; ".join(problems))
        return self

    # --- construction ----------------------------------------------------------------------------
    @classmethod
    def new(
        cls,
        experiment_id: str,
        *,
        target_id: str,
        application_revision: str,
        cases: Sequence[str],
        shuffle_seed: int,
        repetitions: int,
        arms: Sequence[Arm] = (),
        baseline: str | None = None,
        profile: TaskProfile | dict[str, Any] | None = None,
        description: str | None = None,
    ) -> "ExperimentManifest":
        """A new manifest; the case order is derived from the seed. Raises ExperimentError."""
        if isinstance(profile, TaskProfile):
            profile = profile.to_dict()
        data = dict(
            experiment_id=experiment_id, target_id=target_id, application_revision=application_revision,
            cases=tuple(cases), shuffle_seed=shuffle_seed,
            case_order=shuffled_case_order(cases, shuffle_seed) if isinstance(shuffle_seed, int) else (),
            repetitions=repetitions, arms=tuple(arms), baseline=baseline, profile=profile, description=description,
        )
        return validate_manifest(data)

    def with_arm(self, arm: Arm, *, baseline: bool = False) -> "ExperimentManifest":
        """This manifest with ``arm`` added, or replacing the arm of the same name."""
        arms = [a for a in self.arms]
        for i, existing in enumerate(arms):
            if existing.name == arm.name:
                arms[i] = arm
                break
        else:
            arms.append(arm)
        data = self.model_dump()
        data["arms"] = [a.model_dump() for a in arms]
        if baseline:
            data["baseline"] = arm.name
        return validate_manifest(data)

    # --- reading ---------------------------------------------------------------------------------
    def arm(self, name: str) -> Arm:
        """The arm called ``name``; KeyError naming the arms there are."""
        for arm in self.arms:
            if arm.name == name:
                return arm
        raise KeyError(f"experiment {self.experiment_id!r} has no arm {name!r}; arms: {[a.name for a in self.arms]}")

    def target_of(self, arm: Arm) -> str:
        """The target whose spans are the arm's."""
        return arm.target_id or self.target_id

    @property
    def task_profile(self) -> TaskProfile | None:
        return profile_from_dict(self.profile, "manifest profile") if self.profile is not None else None

    @property
    def digest(self) -> str:
        """sha256 hex of the canonical JSON of the manifest (timestamps of the record itself excluded):
        results name the manifest state they were computed from."""
        body = self.model_dump(mode="json", exclude={"created_at", "updated_at"})
        return hashlib.sha256(canonical_json(body).encode()).hexdigest()

    def reference(self) -> dict[str, Any]:
        """How results refer to this manifest."""
        return {
            "experiment_id": self.experiment_id,
            "manifest_digest": self.digest,
            "application_revision": self.application_revision,
            "target_id": self.target_id,
            "cases": len(self.cases),
            "repetitions": self.repetitions,
            "shuffle_seed": self.shuffle_seed,
        }

    def to_json(self) -> dict[str, Any]:
        """The manifest as JSON, with its digest and the shuffle method."""
        out = self.model_dump(mode="json")
        out["manifest_digest"] = self.digest
        out["shuffle_method"] = SHUFFLE_METHOD
        return out


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no spaces: the text digests are computed over."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def validate_manifest(data: Any) -> ExperimentManifest:
    """A manifest from its JSON form; ExperimentError lists every problem, each naming its field."""
    if isinstance(data, dict) and "manifest_digest" in data:
        data = {k: v for k, v in data.items() if k not in ("manifest_digest", "shuffle_method")}
    try:
        return ExperimentManifest.model_validate(data)
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            where = ".".join(str(p) for p in error["loc"])
            message = error["msg"].removeprefix("Value error, ")
            if error["type"] == "string_pattern_mismatch" and where.endswith(("experiment_id", "name", "baseline")):
                message = "must be 1-128 characters: letters, digits and . _ : @ / + - (not starting with a symbol)"
            problems.append(f"{where}: {message}" if where else message)
        experiment_id = data.get("experiment_id") if isinstance(data, dict) else None
        raise ExperimentError(problems, experiment_id if isinstance(experiment_id, str) else None) from None


# --- update rules ---------------------------------------------------------------------------------
_FIXED_FIELDS = ("target_id", "application_revision", "cases", "shuffle_seed", "case_order", "repetitions")
_FIXED_ONCE_STARTED = ("assessment_id", "target_id", "request_model")


def check_update(stored: ExperimentManifest, new: ExperimentManifest) -> None:
    """Refuse an update that rewrites what already happened: the run design is fixed at creation;
    arms are never removed; an arm's assessment, target and requested model are fixed once it
    started; its start, end and reported models are fixed once recorded."""
    problems = []
    for name in _FIXED_FIELDS:
        before, after = getattr(stored, name), getattr(new, name)
        if before != after:
            problems.append(f"{name} is fixed at creation (stored {_short(before)}, got {_short(after)}); "
                            "create a new experiment instead")
    new_arms = {a.name: a for a in new.arms}
    for arm in stored.arms:
        updated = new_arms.get(arm.name)
        if updated is None:
            problems.append(f"arm {arm.name!r} cannot be removed (arms are never removed)")
            continue
        if arm.started_at is not None:
            for name in _FIXED_ONCE_STARTED:
                if getattr(arm, name) != getattr(updated, name):
                    problems.append(f"arm {arm.name!r}: {name} is fixed once the arm started "
                                    f"(stored {getattr(arm, name)!r}, got {getattr(updated, name)!r})")
        for name in ("started_at", "finished_at"):
            before = getattr(arm, name)
            if before is not None and getattr(updated, name) != before:
                problems.append(f"arm {arm.name!r}: {name} is already recorded ({before.isoformat()})")
        if arm.response_models and updated.response_models != arm.response_models:
            problems.append(f"arm {arm.name!r}: response_models are already recorded ({list(arm.response_models)})")
    if problems:
        raise ExperimentError(problems, stored.experiment_id)


def _short(value: Any) -> str:
    text = repr(list(value) if isinstance(value, tuple) else value)
    return text if len(text) <= 80 else text[:77] + "..."


# --- storage ----------------------------------------------------------------------------------------
def upsert_experiment_statements(manifest: ExperimentManifest) -> list[tuple[str, list[Any]]]:
    """The parameterised statements that store ``manifest`` (run them in one transaction)."""
    experiment = {
        "experiment_id": manifest.experiment_id,
        "target_id": manifest.target_id,
        "application_revision": manifest.application_revision,
        "case_set": list(manifest.cases),
        "shuffle_seed": manifest.shuffle_seed,
        "case_order": list(manifest.case_order),
        "repetitions": manifest.repetitions,
        "baseline_arm": manifest.baseline,
        # the profile's own key order is its metrics' order: kept as written
        "profile": json.dumps(manifest.profile) if manifest.profile is not None else None,
        "description": manifest.description,
        "manifest_digest": manifest.digest,
        "created_at": manifest.created_at,
        "updated_at": manifest.updated_at,
    }
    statements = [(
        f"INSERT OR REPLACE INTO {EXPERIMENTS_TABLE} ({', '.join(EXPERIMENT_COLUMN_NAMES)}) "
        f"VALUES ({', '.join('?' for _ in EXPERIMENT_COLUMN_NAMES)})",
        [experiment[name] for name in EXPERIMENT_COLUMN_NAMES],
    ), (f"DELETE FROM {EXPERIMENT_ARMS_TABLE} WHERE experiment_id = ?", [manifest.experiment_id])]
    for position, arm in enumerate(manifest.arms):
        row = {
            "experiment_id": manifest.experiment_id, "arm": arm.name, "position": position,
            "assessment_id": arm.assessment_id, "target_id": arm.target_id, "request_model": arm.request_model,
            "response_models": list(arm.response_models), "started_at": arm.started_at,
            "finished_at": arm.finished_at, "description": arm.description,
        }
        statements.append((
            f"INSERT INTO {EXPERIMENT_ARMS_TABLE} ({', '.join(EXPERIMENT_ARM_COLUMN_NAMES)}) "
            f"VALUES ({', '.join('?' for _ in EXPERIMENT_ARM_COLUMN_NAMES)})",
            [row[name] for name in EXPERIMENT_ARM_COLUMN_NAMES],
        ))
    return statements


def select_experiment_sql(experiment_id: str) -> str:
    return (f"SELECT {', '.join(EXPERIMENT_COLUMN_NAMES)} FROM {EXPERIMENTS_TABLE} "
            f"WHERE experiment_id = {sql_string(experiment_id)}")


def select_arms_sql(experiment_id: str) -> str:
    return (f"SELECT {', '.join(EXPERIMENT_ARM_COLUMN_NAMES)} FROM {EXPERIMENT_ARMS_TABLE} "
            f"WHERE experiment_id = {sql_string(experiment_id)} ORDER BY position")


def list_experiments_sql() -> str:
    """One row per stored experiment with its arms' names, newest first."""
    return f"""SELECT e.experiment_id, e.target_id, e.application_revision, len(e.case_set) AS cases,
  e.repetitions, e.baseline_arm, list(a.arm ORDER BY a.position) FILTER (WHERE a.arm IS NOT NULL) AS arms,
  e.manifest_digest, e.updated_at
FROM {EXPERIMENTS_TABLE} e LEFT JOIN {EXPERIMENT_ARMS_TABLE} a USING (experiment_id)
GROUP BY ALL ORDER BY e.updated_at DESC, e.experiment_id"""


def _time(value: Any) -> _dt.datetime | None:
    if value is None or isinstance(value, _dt.datetime):
        return value
    return _dt.datetime.fromisoformat(value)


def manifest_from_rows(
    experiment_columns: Sequence[str], experiment_row: Sequence[Any],
    arm_columns: Sequence[str], arm_rows: Sequence[Sequence[Any]],
) -> ExperimentManifest:
    """A manifest from its stored rows (as returned by a query function)."""
    e = dict(zip(experiment_columns, experiment_row))
    profile = e["profile"]
    arms = []
    for row in arm_rows:
        a = dict(zip(arm_columns, row))
        arms.append({
            "name": a["arm"], "assessment_id": a["assessment_id"], "target_id": a["target_id"],
            "request_model": a["request_model"], "response_models": tuple(a["response_models"] or ()),
            "started_at": _time(a["started_at"]), "finished_at": _time(a["finished_at"]),
            "description": a["description"],
        })
    return validate_manifest({
        "experiment_id": e["experiment_id"], "target_id": e["target_id"],
        "application_revision": e["application_revision"], "cases": tuple(e["case_set"]),
        "shuffle_seed": int(e["shuffle_seed"]), "case_order": tuple(e["case_order"]),
        "repetitions": int(e["repetitions"]), "arms": arms, "baseline": e["baseline_arm"],
        "profile": json.loads(profile) if isinstance(profile, str) else profile,
        "description": e["description"], "created_at": _time(e["created_at"]), "updated_at": _time(e["updated_at"]),
    })


def load_experiment(query, experiment_id: str) -> ExperimentManifest:
    """The stored manifest of ``experiment_id`` read through ``query``; ExperimentNotFound if none."""
    try:
        experiment = query(select_experiment_sql(experiment_id))
    except Exception as exc:
        if "does not exist" in str(exc) and EXPERIMENTS_TABLE in str(exc):
            raise ExperimentNotFound(
                f"no experiments are stored in this database (no {EXPERIMENTS_TABLE} table yet); "
                "create one with `meritlens experiment create`"
            ) from None
        raise
    if not experiment.rows:
        raise ExperimentNotFound(f"no experiment {experiment_id!r} is stored; `meritlens experiment list` shows them")
    arms = query(select_arms_sql(experiment_id))
    return manifest_from_rows(experiment.columns, experiment.rows[0], arms.columns, arms.rows)


# --- do the arm's spans match the manifest? ---------------------------------------------------------
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


def _ts(value: _dt.datetime) -> str:
    return f"TIMESTAMPTZ {sql_string(value.astimezone(_dt.timezone.utc).isoformat())}"


def arm_spans_sql(target_id: str, assessment_id: str) -> str:
    """Summary of the application spans of one arm: counts, time range, model identities."""
    return f"""SELECT count(*) AS spans, count(DISTINCT {TASK_KEY}) AS tasks,
  min(start_time) AS earliest_start, max(end_time) AS latest_end,
  coalesce(list(DISTINCT response_model ORDER BY response_model) FILTER (WHERE response_model IS NOT NULL), [])
    AS response_models,
  coalesce(list(DISTINCT request_model ORDER BY request_model) FILTER (WHERE request_model IS NOT NULL), [])
    AS request_models
FROM {SPANS_TABLE}
WHERE {APPLICATION_SPANS} AND target_id = {sql_string(target_id)} AND assessment_id = {sql_string(assessment_id)}"""


def observe_arm(query, target_id: str, assessment_id: str) -> dict[str, Any]:
    """The arm's span summary (``arm_spans_sql``) as a dict, timestamps parsed."""
    result = query(arm_spans_sql(target_id, assessment_id))
    row = dict(zip(result.columns, result.rows[0]))
    row["earliest_start"] = _time(row["earliest_start"])
    row["latest_end"] = _time(row["latest_end"])
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
            outside = query(
                f"SELECT count(*) FROM {SPANS_TABLE} WHERE {APPLICATION_SPANS} "
                f"AND target_id = {sql_string(target)} AND assessment_id = {sql_string(arm.assessment_id)} "
                f"AND (start_time < {_ts(start)} OR end_time > {_ts(end)})"
            ).rows[0][0]
            problems.append(
                f"{label}: {outside} of its {observed['spans']} spans fall outside its execution window {window} "
                f"(spans run from {observed['earliest_start'].isoformat()} to {observed['latest_end'].isoformat()})"
            )
        stray = query(
            f"SELECT metric, first_span_time, last_span_time FROM {WINDOWS_TABLE} "
            f"WHERE target_id = {sql_string(target)} AND scope = {sql_string(arm.assessment_id)} "
            f"AND (first_span_time < {_ts(start)} OR last_span_time > {_ts(end)}) ORDER BY metric"
        ).rows
        if stray:
            first = min(_time(r[1]) for r in stray)
            last = max(_time(r[2]) for r in stray)
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
    rows = query(
        f"SELECT case_id, count(*) FROM (SELECT {TASK_KEY} AS task, min(case_id) AS case_id "
        f"FROM {SPANS_TABLE} WHERE {APPLICATION_SPANS} AND target_id = {sql_string(target)} "
        f"AND assessment_id = {sql_string(arm.assessment_id)} GROUP BY 1) GROUP BY case_id"
    ).rows
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


# --- the arm lifecycle ----------------------------------------------------------------------------
def _now() -> _dt.datetime:
    return _dt.datetime.now(_dt.timezone.utc)


def _updated_arm(arm: Arm, **changes: Any) -> Arm:
    try:
        return Arm.model_validate({**arm.model_dump(), **changes})
    except ValidationError as exc:
        raise ExperimentError([e["msg"].removeprefix("Value error, ") for e in exc.errors()]) from None


def start_arm(manifest: ExperimentManifest, arm_name: str, *, at: _dt.datetime | None = None) -> ExperimentManifest:
    """The manifest with the arm's execution window opened at ``at`` (default: now)."""
    try:
        arm = manifest.arm(arm_name)
    except KeyError as exc:
        raise ExperimentError([exc.args[0]]) from None
    if arm.started_at is not None:
        raise ExperimentError([f"arm {arm_name!r} already started at {arm.started_at.isoformat()}"],
                              manifest.experiment_id)
    return manifest.with_arm(_updated_arm(arm, started_at=at or _now()))


def finish_arm(
    manifest: ExperimentManifest, arm_name: str, query, *, at: _dt.datetime | None = None,
    response_models: Sequence[str] = (),
) -> ExperimentManifest:
    """The manifest with the arm's execution window closed at ``at`` (default: now) and its model
    identity recorded: ``response_models`` if given, else the ones its spans report."""
    try:
        arm = manifest.arm(arm_name)
    except KeyError as exc:
        raise ExperimentError([exc.args[0]]) from None
    problems = []
    if arm.started_at is None:
        problems.append(f"arm {arm_name!r} was never started; `meritlens experiment start` it first "
                        "(or record both ends with `meritlens experiment arm --started-at/--finished-at`)")
    if arm.finished_at is not None:
        problems.append(f"arm {arm_name!r} already finished at {arm.finished_at.isoformat()}")
    if problems:
        raise ExperimentError(problems, manifest.experiment_id)
    target = manifest.target_of(arm)
    observed = observe_arm(query, target, arm.assessment_id)
    if observed["spans"] == 0:
        raise ExperimentError([
            f"no application spans of target {target!r} with assessment {arm.assessment_id!r} are stored; nothing "
            "ran in this arm, or its spans have not arrived yet (flush the exporter, then finish again)"
        ], manifest.experiment_id)
    models = tuple(response_models) or arm.response_models or observed["response_models"]
    return manifest.with_arm(_updated_arm(arm, finished_at=at or _now(), response_models=models))


def save_manifest(manifest: ExperimentManifest, query, execute, *, create: bool = False) -> ExperimentManifest:
    """Store ``manifest`` inside the caller's transaction: read the stored one with ``query``, refuse an
    update that rewrites the past (``check_update``) or, with ``create``, any existing experiment of
    that id; stamp the times; write with ``execute(sql, params)``."""
    try:
        stored = load_experiment(query, manifest.experiment_id)
    except ExperimentNotFound:
        stored = None
    now = _now()
    if stored is not None and create:
        raise ExperimentError([f"already exists (created {stored.created_at.isoformat()}); "
                               f"`meritlens experiment show {manifest.experiment_id}`"], manifest.experiment_id)
    if stored is not None:
        check_update(stored, manifest)
    final = manifest.model_copy(update={"created_at": _utc(stored.created_at) if stored else now, "updated_at": now})
    for sql, params in upsert_experiment_statements(final):
        execute(sql, params)
    return final
