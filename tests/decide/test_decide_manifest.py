"""The experiment manifest's rules, its update rules, and the verdict rules (no server needed)."""

from __future__ import annotations

import datetime as dt
import hashlib

import pytest

from meritlens.analytics._catalogue import Direction
from meritlens.analytics._rules import MetricRule, Verdict, constraint_met, judge
from meritlens.analytics._catalogue import Aggregation
from meritlens.analytics._manifest import (
    Arm,
    ExperimentError,
    ExperimentManifest,
    check_update,
    shuffled_case_order,
    validate_manifest,
)

UTC = dt.timezone.utc
T = dt.datetime(2025, 5, 1, 12, 0, tzinfo=UTC)
PROFILE = {
    "target": "bot",
    "metrics": {"task_quality": {"direction": "higher", "strategy": "representative_task_set", "cases": 3,
                                 "repetitions": 1, "aggregation": "mean", "min_samples": 3,
                                 "rationale": "three tickets"}},
}


def manifest(**changes) -> ExperimentManifest:
    fields = dict(target_id="bot", application_revision="r1", cases=["a", "b", "c", "d"], shuffle_seed=42,
                  repetitions=2)
    fields.update(changes)
    return ExperimentManifest.new("exp-1", **fields)


def test_the_case_order_is_the_documented_function_of_the_seed_whatever_the_input_order():
    m = manifest()
    rederived = sorted(m.cases, key=lambda c: hashlib.sha256(f"42:{c}".encode()).hexdigest())
    assert list(m.case_order) == rederived
    assert shuffled_case_order(["d", "c", "b", "a"], 42) == m.case_order
    ten = [f"case-{i}" for i in range(10)]
    assert shuffled_case_order(ten, 43) != shuffled_case_order(ten, 42)
    assert shuffled_case_order(ten, 42) != tuple(ten)


def test_an_edited_case_order_is_refused_naming_the_rule():
    data = manifest().model_dump(mode="json")
    data["case_order"] = ["a", "b", "c", "d"] if data["case_order"] != ["a", "b", "c", "d"] else ["d", "c", "b", "a"]
    with pytest.raises(ExperimentError, match="case_order is not the order seed 42 produces"):
        validate_manifest(data)


@pytest.mark.parametrize("changes, message", [
    (dict(cases=["a", "b", "a"]), r"lists \['a'\] more than once"),
    (dict(cases=[]), "cases"),
    (dict(repetitions=0), "repetitions"),
    (dict(shuffle_seed=-1), "shuffle_seed"),
    (dict(application_revision=" "), "application_revision"),
    (dict(arms=[Arm(name="x", assessment_id="A"), Arm(name="x", assessment_id="B")]), "arm name 'x' is used twice"),
    (dict(arms=[Arm(name="x", assessment_id="A"), Arm(name="y", assessment_id="A")]),
     r"assessment 'A' is used by arms \['x', 'y'\]"),
    (dict(arms=[Arm(name="x", assessment_id="A")], baseline="y"), "baseline 'y' is not an arm"),
    (dict(profile={**PROFILE, "target": "other"}), "the profile is for target 'other'"),
    (dict(profile={**PROFILE, "metrics": {"task_qualty": {}}}), "did you mean 'task_quality'"),
])
def test_invalid_manifests_are_refused_with_what_is_wrong(changes, message):
    with pytest.raises(ExperimentError, match=message):
        manifest(**changes)


def test_ids_and_times_are_checked():
    with pytest.raises(ExperimentError, match="letters, digits"):
        ExperimentManifest.new("bad id!", target_id="bot", application_revision="r", cases=["a"], shuffle_seed=1,
                               repetitions=1)
    with pytest.raises(ValueError, match="timezone"):
        Arm(name="x", assessment_id="A", started_at=dt.datetime(2025, 1, 1))
    with pytest.raises(ValueError, match="before started_at"):
        Arm(name="x", assessment_id="A", started_at=T, finished_at=T - dt.timedelta(seconds=1))
    with pytest.raises(ValueError, match="needs started_at"):
        Arm(name="x", assessment_id="A", finished_at=T)


def test_the_digest_names_the_content_not_the_record_times():
    m = manifest(arms=[Arm(name="base", assessment_id="A")], baseline="base", profile=PROFILE)
    assert m.digest == manifest(arms=[Arm(name="base", assessment_id="A")], baseline="base", profile=PROFILE).digest
    stamped = m.model_copy(update={"created_at": T, "updated_at": T})
    assert stamped.digest == m.digest
    assert m.with_arm(Arm(name="base", assessment_id="A", started_at=T)).digest != m.digest
    round_trip = validate_manifest(m.to_json())
    assert round_trip == m and round_trip.to_json()["manifest_digest"] == m.digest


def test_updates_may_add_and_complete_but_never_rewrite():
    stored = manifest(arms=[Arm(name="base", assessment_id="A", request_model="gpt-4o", started_at=T,
                                finished_at=T + dt.timedelta(hours=1), response_models=("gpt-4o-2024-08-06",))])
    grown = stored.with_arm(Arm(name="cheap", assessment_id="B"), baseline=True)
    check_update(stored, grown)  # a new arm and a baseline are fine
    started = grown.with_arm(Arm(name="cheap", assessment_id="B", started_at=T + dt.timedelta(hours=2)))
    check_update(grown, started)

    with pytest.raises(ExperimentError) as refused:
        check_update(stored, manifest(application_revision="r2", repetitions=3, arms=[]))
    text = str(refused.value)
    assert "application_revision is fixed at creation (stored 'r1', got 'r2')" in text
    assert "repetitions is fixed at creation" in text
    assert "arm 'base' cannot be removed" in text

    base = stored.arm("base")
    for change, message in [
        (dict(assessment_id="Z"), "assessment_id is fixed once the arm started"),
        (dict(request_model="gpt-4o-mini"), "request_model is fixed once the arm started"),
        (dict(finished_at=T + dt.timedelta(hours=2)), "finished_at is already recorded"),
        (dict(response_models=("other",)), "response_models are already recorded"),
    ]:
        rewritten = stored.with_arm(Arm.model_validate({**base.model_dump(), **change}))
        with pytest.raises(ExperimentError, match=message):
            check_update(stored, rewritten)


@pytest.mark.parametrize("direction, tolerance, low, high, verdict, meets", [
    (Direction.HIGHER, 0.02, 0.05, 0.10, Verdict.BETTER, True),
    (Direction.HIGHER, 0.02, -0.01, 0.01, Verdict.EQUIVALENT, True),
    (Direction.HIGHER, 0.02, -0.01, 0.08, Verdict.NON_INFERIOR, True),
    (Direction.HIGHER, 0.02, -0.05, 0.08, Verdict.INCONCLUSIVE, None),
    (Direction.HIGHER, 0.02, -0.09, -0.03, Verdict.WORSE, False),
    (Direction.HIGHER, None, 0.0, 0.0, Verdict.EQUIVALENT, True),
    (Direction.HIGHER, None, -0.01, 0.02, Verdict.INCONCLUSIVE, None),
    # lower is better: a negative difference (cheaper) is the better one
    (Direction.LOWER, 0.05, -0.40, -0.30, Verdict.BETTER, True),
    (Direction.LOWER, 0.05, 0.30, 0.60, Verdict.WORSE, False),
    (Direction.LOWER, 0.05, -0.02, 0.04, Verdict.EQUIVALENT, True),
    (Direction.LOWER, 0.05, 0.01, 0.07, Verdict.INCONCLUSIVE, None),
])
def test_verdicts_follow_the_interval_direction_and_tolerance(direction, tolerance, low, high, verdict, meets):
    assert judge(direction, tolerance, low, high) == (verdict, meets)


def test_constraints_are_met_only_when_the_whole_interval_is_on_the_right_side():
    floor = MetricRule("task_quality", Direction.HIGHER, Aggregation.MEAN, 10, constraint=0.8)
    ceiling = MetricRule("total_task_cost", Direction.LOWER, Aggregation.SUM, 10, constraint=1.0)
    assert constraint_met(floor, 0.81, 0.9) is True
    assert constraint_met(floor, 0.7, 0.79) is False
    assert constraint_met(floor, 0.75, 0.85) is None
    assert constraint_met(ceiling, 0.5, 0.99) is True
    assert constraint_met(ceiling, 1.01, 1.2) is False
    assert constraint_met(ceiling, 0.9, 1.1) is None
    assert constraint_met(MetricRule("task_quality", Direction.HIGHER, Aggregation.MEAN, 10), 0.1, 0.2) is None
