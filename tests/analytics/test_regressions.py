"""Regressions with confidence, checked against simulation: the intervals of rates, means and quantiles
(exact and histogram states) cover the true change near their level; verdicts on injected changes;
the Bonferroni family's error rate; a "same hours" baseline merged from hour buckets."""

from __future__ import annotations

import math
from math import comb

import numpy as np
import pytest

from meritlens.analytics._intervals import (
    binomial_tails,
    newcombe_difference,
    quantile_ranks,
    t_quantile,
    welch_difference,
)
from meritlens.analytics._regressions import Change, Method, compare, compare_all, family_confidence
from meritlens.analytics._time_buckets import DAY_US, HOUR_US, merge_range
from tests.analytics.window_states import T0_US, hour_book, sample_rows, state_in, state_of

_SIMULATIONS = 400
_SIGMA = 1.0
_Z = {0.5: 0.0, 0.9: 1.2815515655446004, 0.95: 1.6448536269514722, 0.99: 2.3263478740408408}


def test_the_intervals_reproduce_published_values():
    # Newcombe (1998), table II: 56/70 - 48/80, hybrid score interval 0.0524 to 0.3339
    d = newcombe_difference(56, 70, 48, 80, 0.95)
    assert (round(d.low, 4), round(d.high, 4)) == (0.0524, 0.3339)
    assert t_quantile(0.975, 10) == pytest.approx(2.228138852, abs=1e-9)
    assert t_quantile(0.975, 1) == pytest.approx(12.70620474, abs=1e-7)
    assert t_quantile(0.995, 30) == pytest.approx(2.749995654, abs=1e-9)
    # the median of 100 samples: order statistics 40 and 61 (1-based) at 95%
    assert quantile_ranks(100, 0.5, 0.95) == (39, 60)
    assert quantile_ranks(5, 0.5, 0.95) == (None, None)
    first, cdf, sf = binomial_tails(60, 0.3)
    exact = np.cumsum([comb(60, k) * 0.3 ** k * 0.7 ** (60 - k) for k in range(61)])
    assert np.allclose(cdf, exact[first:first + cdf.size], atol=1e-13)
    assert np.allclose(sf, 1 - exact[first:first + sf.size], atol=1e-13)
    w = welch_difference(10, 5.0, 4.0, 20, 4.0, 1.0, 0.95)  # df = 11.8 (Welch-Satterthwaite)
    assert w.high - w.value == pytest.approx(t_quantile(0.975, (0.4 + 0.05) ** 2 / (0.4 ** 2 / 9 + 0.05 ** 2 / 19))
                                             * math.sqrt(0.45))


def _coverage(metric, draw, truth, seed, **options) -> tuple[float, float]:
    """(share of simulated comparisons whose interval of recent - baseline holds ``truth``, mean width)."""
    rng = np.random.default_rng(seed)
    held, widths = 0, []
    for _ in range(_SIMULATIONS):
        recent, baseline = draw(rng)
        r = compare(state_of(metric, recent), state_of(metric, baseline), **options)
        held += r.difference.low <= truth <= r.difference.high
        widths.append(r.difference.high - r.difference.low)
    return held / _SIMULATIONS, float(np.mean(widths))


@pytest.mark.parametrize("p_recent, p_baseline, sizes", [(0.1, 0.1, (300, 500)), (0.03, 0.05, (200, 400)),
                                                         (0.8, 0.7, (60, 90))])
def test_rate_intervals_cover_near_their_level(p_recent, p_baseline, sizes):
    coverage, _ = _coverage("task_success", lambda g: (g.binomial(1, p_recent, sizes[0]), g.binomial(1, p_baseline, sizes[1])),
                            p_recent - p_baseline, seed=sizes[0])
    assert 0.925 <= coverage <= 0.975, coverage


def test_mean_intervals_cover_near_their_level():
    mean = math.exp(1 + 0.8 ** 2 / 2)
    coverage, _ = _coverage("agent_steps", lambda g: (g.lognormal(1, 0.8, 200) * 1.1, g.lognormal(1, 0.8, 300)),
                            0.1 * mean, seed=3)
    assert 0.925 <= coverage <= 0.975, coverage


@pytest.mark.parametrize("q, sizes", [(0.5, (400, 600)), (0.95, (300, 500)), (0.5, (3000, 5000)),
                                      (0.95, (3000, 5000)), (0.99, (3000, 5000))])
def test_quantile_intervals_cover_near_their_level_exact_and_histogram(q, sizes):
    """Log-normal latencies, the recent ones 20% slower; below 1,000 samples the states are exact, above
    they are histograms (the interval then takes each order statistic's bucket edge: conservative)."""
    true_q = math.exp(_SIGMA * _Z[q])
    coverage, _ = _coverage("end_to_end_latency",
                            lambda g: (g.lognormal(0, _SIGMA, sizes[0]) * 1.2, g.lognormal(0, _SIGMA, sizes[1])),
                            0.2 * true_q, seed=int(q * 100) + sizes[0], quantile=q)
    assert 0.93 <= coverage <= 0.995, coverage  # conservative beyond 1,000 samples: bucket edges


def test_histogram_states_widen_quantile_intervals_by_no_more_than_their_buckets():
    """The same draws as exact values or as histograms: the histogram interval holds the exact one and
    is wider by at most about two bucket widths per side."""
    rng = np.random.default_rng(11)
    recent, baseline = rng.lognormal(0, 1, 4000), rng.lognormal(0, 1, 4000)
    hist = compare(state_of("end_to_end_latency", recent), state_of("end_to_end_latency", baseline))
    assert hist.method is Method.ORDER_STATISTICS
    error = 0.01  # the default histogram's relative error bound (<= 1%)
    q = np.quantile(baseline, 0.95)
    assert abs(hist.baseline - q) <= error * q
    assert hist.difference.high - hist.difference.low < 4 * q  # bounded on both sides
    exactish = compare(state_of("end_to_end_latency", recent, scale=12), state_of("end_to_end_latency", baseline, scale=12))
    assert hist.difference.low <= exactish.difference.low + 1e-9
    assert hist.difference.high >= exactish.difference.high - 1e-9
    slack = 4 * error * q
    assert hist.difference.low >= exactish.difference.low - slack and hist.difference.high <= exactish.difference.high + slack


def test_verdicts_follow_the_metrics_direction_on_injected_changes():
    rng = np.random.default_rng(21)
    base_latency = rng.lognormal(0, 0.5, 2000)
    slower = compare(state_of("end_to_end_latency", rng.lognormal(0, 0.5, 800) * 1.5),
                     state_of("end_to_end_latency", base_latency))
    assert slower.verdict is Change.WORSE and slower.statistic == "p95"
    assert slower.relative.low <= 0.5 <= slower.relative.high and slower.relative.low > 0
    faster = compare(state_of("end_to_end_latency", rng.lognormal(0, 0.5, 800) * 0.7),
                     state_of("end_to_end_latency", base_latency))
    assert faster.verdict is Change.BETTER
    same = compare(state_of("end_to_end_latency", rng.lognormal(0, 0.5, 800)), state_of("end_to_end_latency", base_latency))
    assert same.verdict is Change.NO_CHANGE
    # success rate: higher is better, so a drop is worse
    drop = compare(state_of("task_success", rng.binomial(1, 0.80, 1500)), state_of("task_success", rng.binomial(1, 0.9, 3000)))
    assert drop.verdict is Change.WORSE and drop.method is Method.NEWCOMBE and drop.statistic == "rate"
    assert drop.difference.low < -0.1 < drop.difference.high
    # retries: lower is better, so more retries are worse
    more = compare(state_of("retry_rate", rng.binomial(1, 0.2, 1500)), state_of("retry_rate", rng.binomial(1, 0.1, 1500)))
    assert more.verdict is Change.WORSE
    # a sum metric is compared per sample: the mean cost per task
    cost = compare(state_of("total_task_cost", rng.gamma(2, 0.01, 500)), state_of("total_task_cost", rng.gamma(2, 0.01, 500)))
    assert cost.statistic == "mean" and cost.method is Method.WELCH and cost.verdict is Change.NO_CHANGE
    # a tolerance: a small significant increase is no change that counts
    small = compare(state_of("end_to_end_latency", base_latency * 1.02), state_of("end_to_end_latency", base_latency),
                    tolerance=0.5)
    assert small.verdict is Change.NO_CHANGE


def test_too_few_samples_and_unsupported_values_say_so():
    rng = np.random.default_rng(5)
    few = compare(state_of("end_to_end_latency", rng.lognormal(0, 1, 20) * 5), state_of("end_to_end_latency", rng.lognormal(0, 1, 500)),
                  min_samples=30)
    assert few.verdict is Change.NOT_ENOUGH_SAMPLES and "recent" in few.reason and few.difference is None
    # 40 samples cannot bound a p99 from above at 95%: no "no change" from an unbounded interval
    unbounded = compare(state_of("end_to_end_latency", rng.lognormal(0, 1, 40)), state_of("end_to_end_latency", rng.lognormal(0, 1, 40)),
                        quantile=0.99)
    assert unbounded.verdict is Change.NOT_ENOUGH_SAMPLES and unbounded.difference.high == math.inf
    ratio = compare(state_of("throughput", np.ones(50)), state_of("throughput", np.ones(50)))
    assert ratio.verdict is Change.UNSUPPORTED and ratio.difference is None
    with pytest.raises(ValueError, match="one metric") as refused:
        compare(state_of("task_success", [1, 0]), state_of("retry_rate", [1, 0]))
    assert "\n" not in str(refused.value)


def test_bonferroni_keeps_the_family_wise_error_within_the_level():
    """Families of 20 unchanged metrics: with the correction, a family shows any worse/better verdict
    in at most ~5% of families; without, in most of them."""
    rng = np.random.default_rng(8)
    families, size = 100, 20
    adjusted = unadjusted = 0
    for _ in range(families):
        pairs = {i: (state_of("task_success", rng.binomial(1, 0.3, 300)), state_of("task_success", rng.binomial(1, 0.3, 300)))
                 for i in range(size)}
        results = compare_all(pairs, confidence=0.95)
        assert {r.family_size for r in results.values()} == {size}
        assert all(r.confidence == family_confidence(0.95, size) for r in results.values())
        adjusted += any(r.verdict in (Change.WORSE, Change.BETTER) for r in results.values())
        single = [compare(*pair, confidence=0.95) for pair in pairs.values()]
        unadjusted += any(r.verdict in (Change.WORSE, Change.BETTER) for r in single)
    assert adjusted / families <= 0.08, adjusted
    assert unadjusted / families >= 0.45, unadjusted


def test_the_family_counts_only_the_comparisons_made():
    rng = np.random.default_rng(2)
    pairs = {"ok": (state_of("task_success", rng.binomial(1, 0.5, 100)), state_of("task_success", rng.binomial(1, 0.5, 100))),
             "few": (state_of("task_success", rng.binomial(1, 0.5, 5)), state_of("task_success", rng.binomial(1, 0.5, 100))),
             "ratio": (state_of("throughput", np.ones(50)), state_of("throughput", np.ones(50)))}
    results = compare_all(pairs, min_samples={"task_success": 30})
    assert results["ok"].family_size == 1 and results["few"].verdict is Change.NOT_ENOUGH_SAMPLES
    assert results["ratio"].verdict is Change.UNSUPPORTED


def test_same_hours_baseline_merged_from_hour_buckets_finds_a_regression_of_those_hours():
    """A daily cycle: every day 09-12 UTC is busy and slow. Today's 09-12 are 40% slower still: worse
    against the same hours of the last seven days. Yesterday's 09-12 are no change against the same
    hours before them, but look worse against whole days (mostly quiet, fast hours)."""
    rng = np.random.default_rng(13)
    day0 = T0_US // DAY_US * DAY_US + 8 * DAY_US
    rows, ends = [], []
    for day in range(8):
        for hour in range(24):
            busy = 9 <= hour < 12
            n = 60 if busy else 20
            slow = (1.4 if day == 7 else 1.0) * (3.0 if busy else 1.0)
            rows.append(rng.lognormal(0, 0.5, n) * slow)
            ends.append(day0 + (day - 7) * DAY_US + hour * HOUR_US + rng.integers(0, HOUR_US, n))
    book = hour_book(sample_rows("end_to_end_latency", np.concatenate(rows), np.concatenate(ends)), day0 + 12 * HOUR_US)
    key, metric = ("bot", "all"), "end_to_end_latency"

    def hours_of(first_day: int, last_day: int, hours=range(9, 12)) -> list[tuple]:
        return [k for k in book.keys if day0 + first_day * DAY_US <= k[2] < day0 + last_day * DAY_US
                and (k[2] % DAY_US) // HOUR_US in hours]

    def merged(keys) -> object:
        return state_in(book.merged(keys, key), key, metric)

    today = state_in(merge_range(book, day0 + 9 * HOUR_US, day0 + 12 * HOUR_US).book, key, metric)
    regression = compare(today, merged(hours_of(-7, 0)))
    assert regression.baseline_samples == 7 * 3 * 60 and regression.recent_samples == 3 * 60
    assert regression.verdict is Change.WORSE
    assert regression.relative.low <= 0.4 <= regression.relative.high
    yesterday = merged(hours_of(-1, 0))
    assert compare(yesterday, merged(hours_of(-7, -1))).verdict is Change.NO_CHANGE
    assert compare(yesterday, merged(hours_of(-7, -1, range(24)))).verdict is Change.WORSE
