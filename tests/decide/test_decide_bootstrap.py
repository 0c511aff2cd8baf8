"""The interval functions alone (numpy only): exact statistics, and coverage of the true difference
at the stated rate over many seeded simulations."""

from __future__ import annotations

import numpy as np
import pytest

from meritlens.analytics._bootstrap import (
    ArmSamples,
    Statistic,
    bootstrap_interval,
    expanded_quantile,
    paired_difference_interval,
    unpaired_difference_interval,
    value_interval,
)

SIMULATIONS = 500
# 500 simulations of a 95% interval: the observed coverage has a standard error of sqrt(.95 * .05 / 500)
# = 0.0097; the band is the stated rate +- 3 standard errors.
_SE = (0.95 * 0.05 / SIMULATIONS) ** 0.5
COVERAGE_BAND = (0.95 - 3 * _SE, 0.95 + 3 * _SE)


def test_weighted_statistics_equal_the_statistics_of_the_expanded_samples():
    rng = np.random.default_rng(3)
    clusters = [rng.lognormal(size=rng.integers(1, 5)) for _ in range(12)]
    arm = ArmSamples(clusters, [v > 1 for v in clusters])
    weights = rng.multinomial(12, np.full(12, 1 / 12), size=200).astype(float)
    for row, w in enumerate(weights):
        expanded = np.repeat(arm.flat, w[arm.owner].astype(int))
        successes = np.repeat(arm.flat > 1, w[arm.owner].astype(int))
        assert arm.evaluate(Statistic.P95, weights[row:row + 1])[0] == pytest.approx(np.quantile(expanded, 0.95))
        assert arm.evaluate(Statistic.MEAN, weights[row:row + 1])[0] == pytest.approx(expanded.mean())
        assert arm.evaluate(Statistic.TOTAL, weights[row:row + 1], 60)[0] == pytest.approx(60 * expanded.mean())
        per_success = arm.evaluate(Statistic.PER_SUCCESS, weights[row:row + 1])[0]
        if successes.sum():
            assert per_success == pytest.approx(expanded.sum() / successes.sum())
        else:
            assert np.isnan(per_success)


def test_expanded_quantile_is_the_t_quantile_widened_for_the_bootstrap_spread():
    # t(0.975) with 9, 29 and 99 degrees of freedom, times sqrt(n / (n - 1))
    assert expanded_quantile(0.95, 10) == pytest.approx(2.262157 * (10 / 9) ** 0.5, rel=2e-4)
    assert expanded_quantile(0.95, 30) == pytest.approx(2.045230 * (30 / 29) ** 0.5, rel=2e-4)
    assert expanded_quantile(0.95, 100) == pytest.approx(1.984217 * (100 / 99) ** 0.5, rel=2e-4)


def test_the_same_seed_gives_the_same_interval_and_another_seed_another():
    rng = np.random.default_rng(1)
    base = ArmSamples([rng.normal(size=2) for _ in range(20)])
    chal = ArmSamples([rng.normal(0.5, size=2) for _ in range(20)])
    first = paired_difference_interval(base, chal, Statistic.MEAN, seed=[7, 1])
    again = paired_difference_interval(base, chal, Statistic.MEAN, seed=[7, 1])
    other = paired_difference_interval(base, chal, Statistic.MEAN, seed=[8, 1])
    assert (first.low, first.high) == (again.low, again.high)
    assert (first.low, first.high) != (other.low, other.high)
    assert first.estimate == other.estimate


def test_identical_arms_give_a_zero_width_interval_at_zero():
    clusters = [[0.4, 0.5], [0.7, 0.6], [0.9, 0.8]]
    interval = paired_difference_interval(ArmSamples(clusters), ArmSamples(clusters), Statistic.MEAN, seed=1)
    assert (interval.estimate, interval.low, interval.high) == (0.0, 0.0, 0.0)


def test_no_interval_from_one_cluster_or_an_undefined_statistic():
    one = value_interval(ArmSamples([[1.0, 2.0, 3.0]]), Statistic.MEAN, seed=1)
    assert one.low is None and "at least two clusters" in one.reason
    assert one.estimate == 2.0
    no_success = ArmSamples([[1.0], [2.0], [3.0]], [[False], [False], [False]])
    undefined = value_interval(no_success, Statistic.PER_SUCCESS, seed=1)
    assert undefined.low is None and "undefined" in undefined.reason
    rare = ArmSamples([[1.0]] * 19 + [[2.0]], [[False]] * 19 + [[True]])
    often_undefined = value_interval(rare, Statistic.PER_SUCCESS, seed=1)
    assert often_undefined.low is None and "resamples" in often_undefined.reason


def test_bad_arguments_are_refused_with_a_message():
    with pytest.raises(ValueError, match="confidence"):
        bootstrap_interval([3], lambda w: w[0].sum(axis=1), seed=1, confidence=1.5)
    with pytest.raises(ValueError, match="resamples"):
        bootstrap_interval([3], lambda w: w[0].sum(axis=1), seed=1, resamples=10)
    with pytest.raises(ValueError, match="same clusters"):
        paired_difference_interval(ArmSamples([[1.0], [2.0]]), ArmSamples([[1.0]]), Statistic.MEAN, seed=1)


def _coverage(simulate, true_difference: float) -> float:
    hits = 0
    for s in range(SIMULATIONS):
        interval = simulate(np.random.default_rng([2024, s]), s)
        assert interval.low is not None
        hits += interval.low <= true_difference <= interval.high
    return hits / SIMULATIONS


def test_paired_intervals_cover_the_true_difference_at_the_stated_rate():
    """30 cases x 2 repetitions, a strong case effect shared by both arms, skewed task noise."""
    true_difference = 0.3

    def simulate(rng, s):
        case = rng.normal(0, 1, 30)[:, None]
        base = case + rng.exponential(1.0, (30, 2))
        challenger = case + true_difference + rng.exponential(1.0, (30, 2))
        return paired_difference_interval(ArmSamples(base), ArmSamples(challenger), Statistic.MEAN, seed=[s, 1])

    coverage = _coverage(simulate, true_difference)
    assert COVERAGE_BAND[0] <= coverage <= COVERAGE_BAND[1], coverage


def test_unpaired_intervals_cover_the_true_difference_at_the_stated_rate():
    """Arms of 40 and 25 independent samples (no case ids)."""
    true_difference = -0.5

    def simulate(rng, s):
        base = rng.gamma(2.0, 1.0, 40)
        challenger = rng.gamma(2.0, 1.0, 25) + true_difference
        return unpaired_difference_interval(ArmSamples([[v] for v in base]), ArmSamples([[v] for v in challenger]),
                                            Statistic.MEAN, seed=[s, 2])

    coverage = _coverage(simulate, true_difference)
    assert COVERAGE_BAND[0] <= coverage <= COVERAGE_BAND[1], coverage


def test_rate_intervals_cover_the_true_difference_at_the_stated_rate():
    """Success rates 0.6 vs 0.75 on 40 cases x 2 repetitions, paired by case."""
    def simulate(rng, s):
        base = rng.random((40, 2)) < 0.60
        challenger = rng.random((40, 2)) < 0.75
        return paired_difference_interval(ArmSamples(base.astype(float)), ArmSamples(challenger.astype(float)),
                                          Statistic.MEAN, seed=[s, 3])

    coverage = _coverage(simulate, 0.15)
    assert COVERAGE_BAND[0] <= coverage <= COVERAGE_BAND[1], coverage


def test_intervals_narrow_with_more_cases_and_still_cover():
    rng = np.random.default_rng(9)
    widths = []
    for cases in (10, 40, 160):
        base = rng.normal(0, 1, (cases, 2))
        challenger = base + 0.2 + rng.normal(0, 0.5, (cases, 2))
        interval = paired_difference_interval(ArmSamples(base), ArmSamples(challenger), Statistic.MEAN, seed=1)
        widths.append(interval.high - interval.low)
    assert widths[0] > widths[1] > widths[2]
