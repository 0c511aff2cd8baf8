"""Planning against simulation: the sample sizes the power analysis gives detect the change with about
the promised power when the regression is run on that many samples, for rates, means and quantiles
(the last planned by resampling a stored histogram, checked against fresh log-normal draws)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from meritlens.analytics._planning import plan, quantile_power, samples_for_means, samples_for_rates
from meritlens.analytics._regressions import Change, compare
from meritlens.analytics._state_view import view
from tests.analytics.window_states import state_of

_SIMULATIONS = 400


def _detected(metric: str, draw, seed: int, **options) -> float:
    rng = np.random.default_rng(seed)
    found = 0
    for _ in range(_SIMULATIONS):
        recent, baseline = draw(rng)
        found += compare(state_of(metric, recent), state_of(metric, baseline), **options).verdict is Change.WORSE
    return found / _SIMULATIONS


def test_the_rate_plan_detects_with_the_promised_power():
    n = samples_for_rates(0.9, -0.05)
    assert 600 < n < 800  # textbook: ~686 a side for 90% -> 85% at 5%, 80% power
    power = _detected("task_success", lambda g: (g.binomial(1, 0.85, n), g.binomial(1, 0.9, n)), seed=1)
    assert abs(power - 0.8) <= 0.06, power


def test_the_mean_plan_from_a_stored_variance_detects_with_the_promised_power():
    baseline = state_of("agent_steps", np.random.default_rng(2).normal(5, 2, 5000))
    result = plan(baseline, 0.5)
    assert result.method == "two_sample_t" and result.baseline == pytest.approx(5, abs=0.1)
    assert result.samples == samples_for_means(view(baseline).variance, 0.5)
    n = result.samples
    power = _detected("agent_steps", lambda g: (g.normal(5.5, 2, n), g.normal(5, 2, n)), seed=3)
    assert abs(power - 0.8) <= 0.06, power


def test_the_quantile_plan_by_resampling_a_histogram_detects_with_the_promised_power():
    """The plan resamples a stored histogram of 20,000 latencies; fresh log-normal draws of the planned
    size, the recent ones 20% slower, show the p95 worse in about 80% of regressions."""
    baseline = state_of("end_to_end_latency", np.random.default_rng(4).lognormal(0, 1, 20_000))
    assert not view(baseline).exact
    p95 = view(baseline).quantile(0.95)
    result = plan(baseline, 0.2 * p95, simulations=300)
    assert result.method == "simulation_order_statistics" and result.statistic == "p95"
    n = result.samples
    assert 1000 < n < 5000
    power = _detected("end_to_end_latency", lambda g: (g.lognormal(math.log(1.2), 1, n), g.lognormal(0, 1, n)), seed=5)
    assert abs(power - 0.8) <= 0.08, power
    # more samples, more power; a family of tests needs more samples
    assert quantile_power(view(baseline), 0.95, 0.2, 2 * n, simulations=200) > 0.9
    assert plan(baseline, 0.2 * p95, family_size=20, simulations=200).samples > n


def test_plans_refuse_what_they_cannot_answer_in_one_line():
    for call in (lambda: samples_for_rates(0.98, 0.05), lambda: samples_for_means(0.0, 1.0),
                 lambda: samples_for_rates(0.5, 0.1, power=1.0),
                 lambda: plan(state_of("throughput", np.ones(10)), 1.0),
                 lambda: plan(state_of("end_to_end_latency", [1.0]), 1.0)):
        with pytest.raises(ValueError) as refused:
            call()
        assert "\n" not in str(refused.value)
