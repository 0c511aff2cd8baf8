"""Experiments: the manifest every comparison and frontier refers to, and the rules an update of it
must keep. How it is stored is in ``_manifest_store``, the checks of an arm's spans against it in
``_arm_check``, starting and finishing an arm in ``_arm_lifecycle``.

An experiment runs one application revision over a fixed, comparable case set, in the order a
recorded seed produced, with a fixed number of repetitions, once per *arm*. An arm is one
assessment (``meritlens.assessment.id``): its windows are the windows whose scope is that
assessment id. The manifest records, per arm, the model alias it requested, the model identity the
provider reported (``gen_ai.response.model``) and its execution window [started_at, finished_at].

Reads go through a query function (see ``meritlens.analytics.QueryFunction``); writes go through
the collector's store (``meritlens.collector``), which applies ``check_update``.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
from typing import Annotated, Any, Iterable, Sequence

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from meritlens.analytics._profiles import ProfileError, TaskProfile, profile_from_dict

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
