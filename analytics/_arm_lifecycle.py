"""An arm's lifecycle: starting it opens its execution window, finishing it closes the window and
records the model identity its spans report."""

from __future__ import annotations

import datetime as _dt
from typing import Any, Sequence

from pydantic import ValidationError

from meritlens.analytics._arm_check import observe_arm
from meritlens.analytics._manifest import Arm, ExperimentError, ExperimentManifest


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
