"""Alert rules evaluated again and again: a simulated month of a healthy target evaluated every minute
raises false alarms within the level (fixed-sample intervals checked as often raise them every month);
a real shift fires and resolves on evidence; a handful of slow samples under the minimum does not;
regression rules; "no data"; rules refused in one line."""

from __future__ import annotations

import math

import numpy as np
import pytest

from meritlens.analytics._alerts import AlertRule, Evidence, RuleKind, evaluate_rule, no_data, sequence_start
from meritlens.analytics._intervals import wilson_interval
from meritlens.analytics._sequential import evidence
from meritlens.analytics._time_buckets import DAY_US, HOUR_US
from tests.analytics.window_states import T0_US, add_samples, state_of

MINUTE_US = 60_000_000
_MONTH_MINUTES = 30 * 24 * 60
_Z95 = 1.6448536269514722


def _month_alarms(rule: AlertRule, months: int, per_minute: float, draw_counts, seed: int) -> tuple[float, float]:
    """Simulated months of per-minute evaluations of a constraint rule on a healthy target exactly at its
    threshold: (share of months with a false alarm, share with one from a 95% fixed-sample Wilson
    interval checked as often). ``draw_counts(rng, n)`` gives each minute's samples on the wrong side of
    the threshold's indicator; the evidence is the same function `evaluate_rule` applies to a window state."""
    rng = np.random.default_rng(seed)
    per_range = rule.range_us // MINUTE_US
    ranges = _MONTH_MINUTES // per_range
    fired = naive = 0
    for start in range(0, months, 20):
        m = min(20, months - start)
        n = rng.poisson(per_minute, (m, _MONTH_MINUTES))
        k = draw_counts(rng, n)
        n = np.cumsum(n.reshape(m, ranges, per_range), axis=2).astype(float)
        k = np.cumsum(k.reshape(m, ranges, per_range), axis=2).astype(float)
        p, c = draw_counts.p, draw_counts.c
        s, v = k - n * p, k * (1 - p) ** 2 + (n - k) * p * p
        alarm = evidence(s, v, c, rule.alpha) & (n >= rule.min_samples)
        fired += int(alarm.any(axis=(1, 2)).sum())
        z = 1.959963984540054  # the Wilson lower bound past p, at every evaluation
        centre = (k + z * z / 2) / (n + z * z)
        half = z * np.sqrt(k * (n - k) / np.maximum(n, 1) + z * z / 4) / (n + z * z)
        naive += int((((centre - half) > p) & (n >= rule.min_samples)).any(axis=(1, 2)).sum())
    return fired / months, naive / months


def _binomial(p: float, c: float):
    draw = lambda rng, n: rng.binomial(n, p)  # noqa: E731
    draw.p, draw.c = p, c
    return draw


@pytest.mark.parametrize("confidence, range_us", [(0.95, HOUR_US), (0.5, HOUR_US), (0.95, DAY_US)])
def test_a_healthy_rate_at_its_ceiling_evaluated_every_minute_for_a_month_stays_within_the_level(confidence, range_us):
    """An error rate exactly at its 5% ceiling (the hardest healthy case), 5 tasks a minute, evaluated
    every minute for 30 days: months with any false alarm are within 1 - confidence."""
    rule = AlertRule("human_intervention_rate", RuleKind.CONSTRAINT, threshold=0.05, confidence=confidence,
                     min_samples=30, range_us=range_us)
    months = 200
    fired, naive = _month_alarms(rule, months, 5.0, _binomial(0.05, 0.05), seed=int(confidence * 100) + range_us % 97)
    assert fired <= 1 - confidence
    assert naive >= 0.9  # the fixed-sample interval alarms in (nearly) every month


def test_a_healthy_p95_at_its_ceiling_evaluated_every_minute_for_a_month_stays_within_the_level():
    """Latency whose p95 is exactly the ceiling: each minute's samples at or below it are Binomial(n, 0.95);
    the rule fires when its evidence puts the p95 above (the count below too small)."""
    rule = AlertRule("end_to_end_latency", RuleKind.CONSTRAINT, threshold=1.0, min_samples=30, range_us=HOUR_US)
    draw = lambda rng, n: n - rng.binomial(n, 0.95)  # noqa: E731 - samples above: the indicator of the wrong side
    draw.p, draw.c = 0.05, 0.05
    fired, naive = _month_alarms(rule, 200, 10.0, draw, seed=95)
    assert fired <= 0.05 and naive >= 0.9


def test_evaluate_on_real_states_decides_as_the_simulation_does():
    """A day evaluated every minute through real window states: the same decisions as the vectorized
    evidence of the month simulation, for a target that drifts across its ceiling."""
    rule = AlertRule("human_intervention_rate", RuleKind.CONSTRAINT, threshold=0.05, min_samples=30)
    rng = np.random.default_rng(3)
    firing, state, decided = False, None, []
    k = n = 0
    for minute in range(24 * 60):
        now = T0_US + minute * MINUTE_US
        if now == sequence_start(rule, now):
            state, k, n = state_of(rule.metric, []), 0, 0
        p = 0.12 if 8 * 60 <= minute < 16 * 60 else 0.01
        values = rng.binomial(1, p, rng.poisson(30))
        add_samples(state, values, now)
        k, n = k + int(values.sum()), n + values.size
        result = evaluate_rule(rule, state, firing=firing)
        firing = result.firing
        expected = bool(evidence(k - n * 0.05, k * 0.95 ** 2 + (n - k) * 0.05 ** 2, 0.05, rule.alpha)) and n >= 30
        assert (result.evidence is Evidence.WRONG_SIDE) == expected
        assert result.counts == {"samples": n, "ones": k}
        decided.append(result.transition)
    assert "fired" in decided[8 * 60:16 * 60] and "fired" not in decided[:8 * 60]
    assert "resolved" in decided[16 * 60:]


def test_a_latency_shift_fires_holds_and_resolves_on_evidence():
    """p95 ceiling 1.5x the healthy p95, 40 tasks a minute; from hour 5 to hour 8 latencies double. Evaluated every minute:
    no alarm before, fires during the shift, stays firing into a new hour before that hour has evidence,
    resolves once the evidence puts the p95 back under the ceiling."""
    healthy_p95 = math.exp(0.5 * _Z95)
    rule = AlertRule("end_to_end_latency", RuleKind.CONSTRAINT, threshold=1.5 * healthy_p95, min_samples=30)
    rng = np.random.default_rng(9)
    firing, state, log = False, None, []
    for minute in range(11 * 60):
        now = T0_US + minute * MINUTE_US
        if now == sequence_start(rule, now):
            state = state_of(rule.metric, [])
        slow = 2.0 if 5 * 60 <= minute < 8 * 60 else 1.0
        add_samples(state, rng.lognormal(0, 0.5, 40) * slow, now)
        result = evaluate_rule(rule, state, firing=firing)
        firing = result.firing
        log.append(result)
    fired = [i for i, r in enumerate(log) if r.transition == "fired"]
    assert fired and 5 * 60 < fired[0] < 6 * 60 and not any(r.firing for r in log[:5 * 60])
    assert log[8 * 60].firing and log[8 * 60].evidence is Evidence.UNDECIDED  # held into the new hour
    resolved = [i for i, r in enumerate(log) if r.transition == "resolved"]
    assert resolved and 8 * 60 < resolved[0] < 9 * 60
    first = log[fired[0]]
    assert first.bound > rule.threshold and first.statistic == "p95" and first.counts["samples"] == first.samples
    certain, possible = first.counts["at_or_below_threshold"]
    assert certain <= possible < 0.95 * first.samples


def test_a_handful_of_slow_samples_under_the_minimum_does_not_fire():
    rule = AlertRule("end_to_end_latency", RuleKind.CONSTRAINT, threshold=2.0, min_samples=30)
    state = state_of(rule.metric, np.full(8, 60.0))
    result = evaluate_rule(rule, state)
    assert not result.firing and result.evidence is Evidence.NOT_ENOUGH_SAMPLES and result.samples == 8


def test_an_undecided_evaluation_keeps_the_state():
    rule = AlertRule("task_success", RuleKind.CONSTRAINT, threshold=0.9, min_samples=10)
    state = state_of(rule.metric, [1] * 18 + [0] * 2)  # 90% of 20: no evidence either way
    assert evaluate_rule(rule, state, firing=True).firing and evaluate_rule(rule, state, firing=True).transition is None
    assert not evaluate_rule(rule, state, firing=False).firing
    assert evaluate_rule(rule, state).evidence is Evidence.UNDECIDED


def test_a_regression_rule_fires_on_a_shift_against_its_baseline_and_not_without():
    rng = np.random.default_rng(12)
    baseline = state_of("end_to_end_latency", rng.lognormal(0, 0.5, 20_000))
    rule = AlertRule("end_to_end_latency", RuleKind.REGRESSION, tolerance=0.2, min_samples=50)
    same = evaluate_rule(rule, state_of(rule.metric, rng.lognormal(0, 0.5, 2000)), baseline=baseline)
    assert not same.firing and same.baseline_samples == 20_000
    slower = evaluate_rule(rule, state_of(rule.metric, rng.lognormal(0, 0.5, 2000) * 1.6), baseline=baseline)
    assert slower.firing and slower.transition == "fired" and slower.bound > 0.2
    assert slower.value == pytest.approx(0.6 * math.exp(0.5 * _Z95), rel=0.15)
    rate = AlertRule("task_success", RuleKind.REGRESSION, min_samples=50)
    worse = evaluate_rule(rate, state_of(rate.metric, rng.binomial(1, 0.7, 2000)),
                     baseline=state_of(rate.metric, rng.binomial(1, 0.9, 5000)))
    assert worse.firing and worse.bound < 0 and worse.counts["recent"]["ones"] < 1500
    with pytest.raises(ValueError, match="baseline"):
        evaluate_rule(rate, state_of(rate.metric, [1, 0]))


def test_a_sum_constraint_is_the_observed_sum():
    rule = AlertRule("total_task_cost", RuleKind.CONSTRAINT, threshold=10.0, range_us=DAY_US)
    under = evaluate_rule(rule, state_of(rule.metric, np.full(99, 0.1)))
    over = evaluate_rule(rule, state_of(rule.metric, np.full(101, 0.1)), firing=False)
    assert under.evidence is Evidence.RIGHT_SIDE and over.firing and over.bound == pytest.approx(10.1)


def test_the_level_is_split_over_the_sequences_of_any_30_days():
    hourly = AlertRule("task_success", RuleKind.CONSTRAINT, threshold=0.9)
    daily = AlertRule("task_success", RuleKind.CONSTRAINT, threshold=0.9, range_us=DAY_US)
    assert hourly.sequences_per_month == 721 and daily.sequences_per_month == 31
    assert hourly.alpha == pytest.approx(0.05 / 721) and daily.alpha == pytest.approx(0.05 / 31)
    assert sequence_start(daily, T0_US + DAY_US + 5) == (T0_US + DAY_US) // DAY_US * DAY_US


def test_no_data_when_a_target_stops_sending():
    state = state_of("task_success", [1, 0], end_us=T0_US)
    assert no_data(state, T0_US + 2 * HOUR_US, HOUR_US).silent
    quiet = no_data(state, T0_US + 10 * MINUTE_US, HOUR_US)
    assert not quiet.silent and quiet.last_sample_us == T0_US and quiet.silent_for_us == 10 * MINUTE_US
    assert no_data(state_of("task_success", []), T0_US, HOUR_US) == no_data(None, T0_US, HOUR_US)
    assert no_data(None, T0_US, HOUR_US).silent


@pytest.mark.parametrize("arguments, message", [
    (dict(metric="latency", kind=RuleKind.CONSTRAINT, threshold=1.0), "no window"),
    (dict(metric="cost_per_successful_task", kind=RuleKind.CONSTRAINT, threshold=1.0), "not a statistic"),
    (dict(metric="end_to_end_latency", kind=RuleKind.CONSTRAINT), "threshold"),
    (dict(metric="end_to_end_latency", kind=RuleKind.CONSTRAINT, threshold=1.0, range_us=HOUR_US + 1), "whole number of hours"),
    (dict(metric="end_to_end_latency", kind=RuleKind.REGRESSION, confidence=1.0), "confidence"),
    (dict(metric="task_success", kind=RuleKind.REGRESSION, aggregation=None, quantile=1.5), "quantile"),
])
def test_bad_rules_are_refused_in_one_line(arguments, message):
    with pytest.raises(ValueError, match=message) as refused:
        AlertRule(**arguments)
    assert "\n" not in str(refused.value)


def test_the_naive_wilson_check_in_the_simulation_is_wilsons_interval():
    """The month simulation's fixed-sample comparison computes Wilson's interval inline (vectorized)."""
    k, n = 23, 300
    z = 1.959963984540054
    centre = (k + z * z / 2) / (n + z * z)
    half = z * math.sqrt(k * (n - k) / n + z * z / 4) / (n + z * z)
    assert centre - half == pytest.approx(wilson_interval(k, n, 0.95).low)
