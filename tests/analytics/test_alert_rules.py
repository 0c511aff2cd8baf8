"""The `[[alerts]]` rules of a task profile: defaults from the metric's plan, a round trip through the
profile's dict, and one line naming the rule and the field for every mistake (`meritlens profile check`)."""

from __future__ import annotations

import copy

import pytest

from meritlens.analytics._alert_rules import NO_DATA
from meritlens.analytics._alerts import HOUR_US, RuleKind
from meritlens.analytics._profiles import ProfileError, profile_from_dict
from tests.analytics.evidence_helpers import meritlens

LATENCY = {"direction": "lower", "strategy": "load_test", "cases": 1, "repetitions": 500,
           "aggregation": "percentile", "min_samples": 200, "constraint": 2.0, "tolerance": 0.25,
           "rationale": "every request"}
RULES = [
    {"name": "p95-ceiling", "kind": "constraint", "metric": "end_to_end_latency", "range": "24h"},
    {"name": "slower", "kind": "regression", "metric": "end_to_end_latency", "baseline": "7d", "confidence": 0.99},
    {"name": "silent", "kind": "no_data", "range": "2h"},
]


def data(*rules, target: str = "bot") -> dict:
    return {"target": target, "metrics": {"end_to_end_latency": dict(LATENCY)}, "alerts": list(rules)}


def problems(*rules) -> list[str]:
    with pytest.raises(ProfileError) as caught:
        profile_from_dict(data(*rules))
    return [str(p) for p in caught.value.problems]


def test_rules_take_their_threshold_tolerance_and_minimum_from_the_metrics_plan():
    profile = profile_from_dict(data(*RULES))
    ceiling, slower, silent = profile.alerts
    assert ceiling.rule.kind is RuleKind.CONSTRAINT and ceiling.rule.threshold == 2.0
    assert ceiling.rule.min_samples == 200 and ceiling.range_us == 24 * HOUR_US and ceiling.rule.statistic == "p95"
    assert slower.rule.kind is RuleKind.REGRESSION and slower.rule.tolerance == 0.25
    assert slower.baseline_us == 7 * 24 * HOUR_US and slower.range_us == HOUR_US and slower.rule.confidence == 0.99
    assert silent.kind == NO_DATA and silent.rule is None and silent.metric == "end_to_end_latency"
    assert profile_from_dict(profile.to_dict()) == profile
    assert profile.to_dict()["alerts"] == RULES


@pytest.mark.parametrize("rule, expected", [
    ({"kind": "constraint", "metric": "end_to_end_latency"}, "alerts[#1].name: every rule needs a name"),
    ({"name": "a", "kind": "threshold", "metric": "end_to_end_latency"},
     "alerts[a].kind: must be one of constraint, regression, no_data, got 'threshold'"),
    ({"name": "a", "kind": "constraint", "metric": "end_to_end_latency", "treshold": 1},
     "alerts[a].treshold: unknown key; did you mean 'threshold'?"),
    ({"name": "a", "kind": "constraint", "metric": "input_tokens"},
     "alerts[a].threshold: missing, and the profile gives input_tokens no constraint"),
    ({"name": "a", "kind": "regression", "metric": "end_to_end_latency"},
     "alerts[a].baseline: a regression needs one"),
    ({"name": "a", "kind": "constraint", "metric": "end_to_end_latency", "range": "90m"},
     "alerts[a].range: '90m' is not a whole number of hours up to 30 days"),
    ({"name": "a", "kind": "constraint", "metric": "end_to_end_latency", "confidence": 1.5},
     "alerts[a]: a confidence level must lie strictly between 0 and 1, not 1.5"),
    ({"name": "a", "kind": "constraint", "metric": "throughput", "threshold": 1},
     "alerts[a]: its value is not a statistic of its samples"),
    ({"name": "a", "kind": "no_data", "threshold": 1}, "alerts[a].threshold: a no_data rule has none"),
    ({"name": "a", "kind": "constraint", "metric": "end_to_end_latency", "min_samples": "many"},
     "alerts[a].min_samples: must be an integer, got 'many'"),
])
def test_each_mistake_is_one_line_naming_the_rule_and_its_field(rule, expected):
    found = problems(rule)
    assert len(found) == 1 and found[0].startswith(expected) and "\n" not in found[0], found


def test_two_rules_of_one_name_in_a_profile_are_refused():
    assert problems(RULES[0], RULES[0]) == ["alerts[p95-ceiling].name: 'p95-ceiling' names another rule of the"
                                            " profile too"]


def toml(profile: dict) -> str:
    """The profile's TOML (strings, numbers and the [[alerts]] tables it uses)."""
    value = lambda v: f'"{v}"' if isinstance(v, str) else repr(v)  # noqa: E731
    lines = [f'target = "{profile["target"]}"']
    for metric, plan in profile["metrics"].items():
        lines += [f"[metrics.{metric}]", *(f"{k} = {value(v)}" for k, v in plan.items())]
    for rule in profile["alerts"]:
        lines += ["[[alerts]]", *(f"{k} = {value(v)}" for k, v in rule.items())]
    return "\n".join(lines) + "\n"


def test_profile_check_lists_the_rules_or_their_problems(tmp_path):
    good = tmp_path / "good.toml"
    good.write_text(toml(data(*RULES)))
    shown = meritlens("profile", "check", str(good))
    assert shown.returncode == 0, shown.stderr
    assert "p95-ceiling  constraint  end_to_end_latency  p95 > 2 s" in shown.stdout
    assert "no sample for 2h" in shown.stdout and "p95 above the 168h before by > 0.25" in shown.stdout
    bad = tmp_path / "bad.toml"
    broken = copy.deepcopy(data(*RULES))
    broken["alerts"][1].pop("baseline")
    bad.write_text(toml(broken))
    refused = meritlens("profile", "check", str(bad))
    assert refused.returncode == 1 and "alerts[slower].baseline: a regression needs one" in refused.stderr
