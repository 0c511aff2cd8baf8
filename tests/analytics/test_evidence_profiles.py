"""Task profiles: one test per rule of the sampling and aggregation contract."""

from __future__ import annotations

import copy
import textwrap

import pytest
from pydantic import ValidationError

from meritlens.analytics import (
    Aggregation,
    MetricPlan,
    ProfileError,
    SamplingStrategy,
    TaskProfile,
    load_profile,
    profile_from_dict,
)
from tests.analytics.evidence_helpers import meritlens

TASK_SUCCESS = {
    "direction": "higher",
    "strategy": "representative_task_set",
    "cases": 30,
    "repetitions": 1,
    "aggregation": "rate",
    "min_samples": 30,
    "tolerance": 0.02,
    "constraint": 0.9,
    "rationale": "one run per support ticket of the frozen set",
}


def profile(**metrics) -> dict:
    return {"target": "support-bot/answer", "metrics": metrics}


def plan(base=TASK_SUCCESS, **changes) -> dict:
    out = copy.deepcopy(base)
    for key, value in changes.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def problems(data: dict) -> list[str]:
    with pytest.raises(ProfileError) as caught:
        profile_from_dict(data)
    return [str(p) for p in caught.value.problems]


def test_valid_profile_loads_with_its_plan():
    loaded = profile_from_dict(profile(task_success=plan()))
    assert loaded.target == "support-bot/answer"
    task_success = loaded.metrics["task_success"]
    assert task_success.aggregation is Aggregation.RATE
    assert task_success.strategy is SamplingStrategy.REPRESENTATIVE_TASK_SET
    assert task_success.runs == 30 and task_success.constraint == 0.9 and task_success.min_samples == 30


def test_rule_unknown_metric_refused_with_closest_valid_id_suggested():
    assert problems(profile(task_sucess=plan())) == [
        "metrics.task_sucess: unknown metric 'task_sucess'; did you mean 'task_success'?"
    ]


@pytest.mark.parametrize("aggregation", ["rate", "mean", "distribution", "percentile"])
def test_rule_repeated_run_aggregation_refused_with_single_run(aggregation):
    latency = plan(direction="lower", strategy="single_run", cases=1, repetitions=1, aggregation=aggregation,
                   min_samples=1, tolerance=None, constraint=None)
    metric = "task_success" if aggregation == "rate" else "end_to_end_latency"
    if metric == "task_success":
        latency["direction"] = "higher"
    found = problems(profile(**{metric: latency}))
    assert found == [f"metrics.{metric}.strategy: aggregation '{aggregation}' needs repeated runs "
                     "and is refused with 'single_run'"]


@pytest.mark.parametrize("aggregation", ["rate", "mean", "distribution", "percentile"])
def test_rule_repeated_run_aggregation_refused_with_fewer_than_two_runs(aggregation):
    metric = "task_success" if aggregation == "rate" else "end_to_end_latency"
    one_run = plan(direction="higher" if metric == "task_success" else "lower", strategy="load_test", cases=1,
                   repetitions=1, aggregation=aggregation, min_samples=1, tolerance=None, constraint=None)
    found = problems(profile(**{metric: one_run}))
    assert f"metrics.{metric}.repetitions: aggregation '{aggregation}' needs a plan of at least two runs; " \
           "cases x repetitions = 1" in found


def test_rule_single_value_and_sum_accepted_with_single_run():
    single = dict(strategy="single_run", cases=1, repetitions=1, min_samples=1, tolerance=None, constraint=None,
                  direction="lower")
    loaded = profile_from_dict(profile(
        total_task_cost=plan(aggregation="sum", **single),
        end_to_end_latency=plan(aggregation="single_value", **single),
    ))
    assert loaded.total_runs == 1, "both metrics share the one run of the same design"


def test_rule_reliability_metric_refused_with_single_run():
    consistency = plan(strategy="single_run", cases=1, repetitions=1, aggregation="mean", min_samples=1)
    found = problems(profile(consistency=consistency))
    assert "metrics.consistency.strategy: consistency (a reliability metric) needs repeated runs and is " \
           "refused with 'single_run'" in found


def test_rule_reliability_metric_refused_with_fewer_than_two_runs():
    one_run = plan(direction="lower", strategy="load_test", cases=1, repetitions=1, min_samples=1,
                   tolerance=0.01, constraint=0.05)
    found = problems(profile(retry_rate=one_run))
    assert "metrics.retry_rate.repetitions: retry_rate (a reliability metric) needs a plan of at least two " \
           "runs; cases x repetitions = 1" in found


def test_rule_total_task_cost_must_use_sum():
    found = problems(profile(total_task_cost=plan(direction="lower", aggregation="mean", tolerance=None,
                                                  constraint=None)))
    assert found == ["metrics.total_task_cost.aggregation: total_task_cost must use 'sum' (it feeds budget "
                     "accounting), not 'mean'"]


def test_rule_aggregation_must_be_one_the_catalogue_allows():
    found = problems(profile(task_success=plan(aggregation="sum")))
    assert found == ["metrics.task_success.aggregation: 'sum' is not an aggregation of task_success; allowed: rate"]


@pytest.mark.parametrize("constraint", [1.5, -0.1])
def test_rule_ratio_constraint_lies_in_0_1(constraint):
    assert problems(profile(task_success=plan(constraint=constraint))) == [
        f"metrics.task_success.constraint: task_success is a ratio: its constraint must lie in [0, 1], "
        f"got {constraint}"
    ]


@pytest.mark.parametrize("edge", [0, 1])
def test_rule_ratio_constraint_edges_accepted(edge):
    assert profile_from_dict(profile(task_success=plan(constraint=edge))).metrics["task_success"].constraint == edge


def test_rule_ratio_tolerance_lies_in_0_1():
    assert problems(profile(task_success=plan(tolerance=2))) == [
        "metrics.task_success.tolerance: task_success is a ratio: its tolerance must lie in [0, 1], got 2.0"
    ]


def test_rule_constraint_is_a_threshold_in_the_metrics_unit():
    latency = plan(direction="lower", aggregation="percentile", min_samples=30, tolerance=0.25, constraint=2.5)
    loaded = profile_from_dict(profile(end_to_end_latency=latency))
    assert loaded.metrics["end_to_end_latency"].constraint == 2.5  # seconds: not a ratio, may exceed 1
    found = problems(profile(end_to_end_latency=plan(latency, constraint=-1)))
    assert found == ["metrics.end_to_end_latency.constraint: end_to_end_latency is never negative (s): its "
                     "constraint must be >= 0, got -1.0"]


def test_rule_min_samples_is_a_count_of_evidence_never_compared_with_the_value():
    # 30 samples of a ratio whose constraint is 0.9: the count is not held to the ratio's [0, 1]
    loaded = profile_from_dict(profile(task_success=plan(min_samples=30, constraint=0.9)))
    assert loaded.metrics["task_success"].min_samples == 30
    # three samples never mean "a value of at least three"
    assert profile_from_dict(profile(task_success=plan(min_samples=3))).metrics["task_success"].constraint == 0.9
    assert problems(profile(task_success=plan(min_samples=0))) == [
        "metrics.task_success.min_samples: Input should be greater than or equal to 1 (got 0)"
    ]
    assert problems(profile(task_success=plan(min_samples=2.5))) == [
        "metrics.task_success.min_samples: Input should be a valid integer (got 2.5)"
    ]


def test_rule_min_samples_a_task_plan_cannot_give_is_refused():
    assert problems(profile(task_success=plan(min_samples=31))) == [
        "metrics.task_success.min_samples: 31 samples needed but the plan's 30 runs give one task sample each"
    ]
    # retry_rate counts calls: a run makes several, so more samples than runs is possible
    retries = plan(direction="lower", cases=10, min_samples=40, tolerance=None, constraint=0.05)
    assert profile_from_dict(profile(retry_rate=retries)).metrics["retry_rate"].min_samples == 40


def test_rule_direction_must_match_the_catalogue():
    assert problems(profile(task_success=plan(direction="lower"))) == [
        "metrics.task_success.direction: task_success is better when higher; the profile says 'lower'"
    ]


@pytest.mark.parametrize("strategy, cases, repetitions, field", [
    ("single_run", 2, 1, "cases"),
    ("repeated_same_input", 3, 5, "cases"),
    ("repeated_same_input", 1, 1, "repetitions"),
    ("representative_task_set", 1, 1, "cases"),
    ("representative_task_set", 10, 3, "repetitions"),
    ("repeated_representative_task_set", 10, 1, "repetitions"),
    ("load_test", 1, 1, "repetitions"),
])
def test_rule_strategy_fixes_the_shape_of_the_runs(strategy, cases, repetitions, field):
    shaped = plan(direction="lower", strategy=strategy, cases=cases, repetitions=repetitions,
                  aggregation="sum", min_samples=1, tolerance=None, constraint=None)
    found = problems(profile(total_task_cost=shaped))
    assert any(p.startswith(f"metrics.total_task_cost.{field}: strategy '{strategy}' means") for p in found), found


def test_every_problem_is_reported_at_once_naming_metric_and_field():
    data = {
        "target": "",
        "metrcs": {},
        "metrics": {
            "task_success": plan(min_sample=30, cases="thirty"),
            "total_task_cost": plan(direction="lower", aggregation="mean", tolerance=None, constraint=None),
            "halucination_rate": plan(),
            "retry_rate": plan(direction="lower", strategy="single_run", cases=1, repetitions=1, min_samples=1,
                               tolerance=-0.5, constraint=None),
        },
    }
    with pytest.raises(ProfileError) as caught:
        profile_from_dict(data, source="bad.toml")
    found = [str(p) for p in caught.value.problems]
    assert found == [
        "metrcs: unknown key; did you mean 'metrics'?",
        "target: must name the target (a non-empty string), got ''",
        "metrics.task_success.min_sample: unknown key; did you mean 'min_samples'?",
        "metrics.task_success.cases: Input should be a valid integer (got 'thirty')",
        "metrics.total_task_cost.aggregation: total_task_cost must use 'sum' (it feeds budget accounting), "
        "not 'mean'",
        "metrics.halucination_rate: unknown metric 'halucination_rate'; did you mean 'hallucination_rate'?",
        "metrics.retry_rate.tolerance: Input should be greater than or equal to 0 (got -0.5)",
        "metrics.retry_rate.strategy: aggregation 'rate' needs repeated runs and is refused with 'single_run'",
        "metrics.retry_rate.strategy: retry_rate (a reliability metric) needs repeated runs and is refused "
        "with 'single_run'",
    ]
    assert str(caught.value).startswith("bad.toml: 9 problems in the profile")


def test_missing_required_fields_are_named():
    found = problems(profile(task_success=plan(rationale=None, aggregation=None)))
    assert found == ["metrics.task_success.aggregation: missing (required)",
                     "metrics.task_success.rationale: missing (required)"]


def test_profile_built_in_code_obeys_the_same_rules():
    plan_model = MetricPlan(**plan(strategy="single_run", cases=1, repetitions=1, min_samples=1))
    with pytest.raises(ValidationError, match="refused with 'single_run'"):
        TaskProfile(target="t", metrics={"task_success": plan_model})


def test_designs_share_runs_and_the_total_is_counted_once_per_design():
    loaded = profile_from_dict(profile(
        task_success=plan(),
        total_task_cost=plan(direction="lower", aggregation="sum", tolerance=None, constraint=None),
        consistency=plan(strategy="repeated_same_input", cases=1, repetitions=10, aggregation="mean",
                         min_samples=10, constraint=0.8),
    ))
    assert loaded.total_runs == 30 + 10
    assert profile_from_dict(loaded.to_dict()) == loaded


def write_profile(path, body: str):
    path.write_text(textwrap.dedent(body))
    return path


def test_profile_check_prints_every_error_and_exits_1(tmp_path):
    bad = write_profile(tmp_path / "bad.toml", """
        target = "support-bot/answer"
        [metrics.task_success]
        direction = "higher"
        strategy = "single_run"
        cases = 1
        repetitions = 1
        aggregation = "rate"
        min_samples = 1
        constraint = 1.2
        rationale = "x"
        [metrics.total_task_cost]
        direction = "lower"
        strategy = "single_run"
        cases = 1
        repetitions = 1
        aggregation = "mean"
        min_samples = 1
        rationale = "budget"
    """)
    result = meritlens("profile", "check", str(bad), "--db", str(tmp_path / "none.duckdb"))
    assert result.returncode == 1
    assert "metrics.task_success.strategy: aggregation 'rate' needs repeated runs" in result.stderr
    assert "metrics.task_success.constraint: task_success is a ratio" in result.stderr
    assert "metrics.total_task_cost.aggregation: total_task_cost must use 'sum'" in result.stderr
    assert result.stdout == ""


def test_profile_check_prints_the_plan_and_exits_0(tmp_path):
    good = write_profile(tmp_path / "good.toml", """
        target = "support-bot/answer"
        [metrics.task_success]
        direction = "higher"
        strategy = "representative_task_set"
        cases = 30
        repetitions = 1
        aggregation = "rate"
        min_samples = 30
        tolerance = 0.02
        constraint = 0.9
        rationale = "one run per support ticket of the frozen set"
        [metrics.consistency]
        direction = "higher"
        strategy = "repeated_same_input"
        cases = 1
        repetitions = 8
        aggregation = "mean"
        min_samples = 8
        rationale = "the same ticket eight times"
    """)
    result = meritlens("profile", "check", str(good), "--db", str(tmp_path / "none.duckdb"),
                       "--url", "http://127.0.0.1:9")
    assert result.returncode == 0, result.stderr
    assert "target support-bot/answer: 2 metrics, 38 runs in 2 designs" in result.stdout
    assert "30 runs: representative_task_set, 30 cases x 1 repetition -> task_success" in result.stdout
    assert "8 runs: repeated_same_input, 1 case x 8 repetitions -> consistency" in result.stdout
    assert ">= 0.9 ratio" in result.stdout
    assert "plugin or evaluator" in result.stdout  # consistency has no span window
    assert "current windows not shown" in result.stdout


def test_load_profile_reports_unreadable_and_invalid_toml(tmp_path):
    with pytest.raises(ProfileError, match="cannot read it"):
        load_profile(tmp_path / "missing.toml")
    broken = write_profile(tmp_path / "broken.toml", "target = \n")
    with pytest.raises(ProfileError, match="not valid TOML"):
        load_profile(broken)
