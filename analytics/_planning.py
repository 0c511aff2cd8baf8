"""Planning: how many samples a regression needs to detect a given change, so `min_samples` comes from numbers.

Each answer is the samples per side (recent and baseline alike) for which the regression of
`_regressions` (its interval at the family's Bonferroni level) shows the change with probability
``power``:

- rates: the normal approximation for two proportions (Fleiss, Levin & Paik, *Statistical Methods
  for Rates and Proportions*, 3rd ed., 2003, 4.2, without continuity correction);
- means: the two-sample t approximation with the variance a window state holds (Welch's interval
  with equal sizes and variances), solved with t quantiles at the resulting degrees of freedom;
- quantiles: by simulation from a stored distribution. Both sides are drawn from the state's
  values (exact values, or its histogram's buckets, multinomially), the recent side multiplied by
  (1 + relative change); the regression's order-statistic interval (with the buckets' edges) is
  formed for each draw, and the smallest size whose share of detections reaches ``power`` is found
  by doubling and bisection, with fixed seeds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from meritlens.analytics._accumulate import WindowAccumulator
from meritlens.analytics._catalogue import Aggregation
from meritlens.analytics._intervals import normal_quantile, quantile_ranks, t_quantile
from meritlens.analytics._regressions import family_confidence, quantile_level, statistic_of
from meritlens.analytics._state_view import StateView, view

DEFAULT_POWER = 0.8
DEFAULT_SIMULATIONS = 400
MAX_SAMPLES = 10_000_000


@dataclass(frozen=True)
class SamplePlan:
    """Samples per side to detect ``change`` (in the metric's unit) from ``baseline``; None: more than `MAX_SAMPLES`."""

    metric: str
    statistic: str
    baseline: float
    change: float
    samples: int | None
    power: float
    confidence: float
    family_size: int
    method: str

    def to_dict(self) -> dict:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


def _alpha(confidence: float, family_size: int) -> float:
    return 1.0 - family_confidence(confidence, family_size)


def _check_power(power: float) -> None:
    if not 0.0 < power < 1.0:
        raise ValueError(f"power is a probability strictly between 0 and 1, not {power}")


def samples_for_rates(baseline_rate: float, change: float, *, confidence: float = 0.95, power: float = DEFAULT_POWER,
                      family_size: int = 1) -> int:
    """Samples per side for a rate to show ``change`` (e.g. -0.02) from ``baseline_rate``."""
    _check_power(power)
    p0, p1 = baseline_rate, baseline_rate + change
    if not (0.0 < p0 < 1.0 and 0.0 < p1 < 1.0) or change == 0:
        raise ValueError(f"a change of {change} from a rate of {baseline_rate} must stay strictly between 0 and 1 "
                         "and not be 0")
    z_alpha = normal_quantile(1.0 - _alpha(confidence, family_size) / 2.0)
    z_power = normal_quantile(power)
    pooled = (p0 + p1) / 2.0
    root = z_alpha * math.sqrt(2.0 * pooled * (1.0 - pooled)) + z_power * math.sqrt(p0 * (1 - p0) + p1 * (1 - p1))
    return max(2, math.ceil((root / change) ** 2))


def samples_for_means(variance: float, change: float, *, confidence: float = 0.95, power: float = DEFAULT_POWER,
                      family_size: int = 1) -> int:
    """Samples per side for a mean whose samples have ``variance`` to show ``change``."""
    _check_power(power)
    if change == 0 or not math.isfinite(change) or not variance > 0 or not math.isfinite(variance):
        raise ValueError(f"a plan for a mean needs a non-zero change and a positive finite variance, "
                         f"got change {change} and variance {variance}")
    alpha = _alpha(confidence, family_size)
    n = 2.0 * variance * ((normal_quantile(1 - alpha / 2) + normal_quantile(power)) / change) ** 2
    for _ in range(20):  # t quantiles at the degrees of freedom of the size found (converges in a few steps)
        df = max(2.0 * n - 2.0, 1.0)
        following = 2.0 * variance * ((t_quantile(1 - alpha / 2, df) + t_quantile(power, df)) / change) ** 2
        if abs(following - n) < 0.5:
            break
        n = following
    return max(2, math.ceil(n))


def quantile_power(source: StateView, q: float, relative_change: float, samples: int, *, confidence: float = 0.95,
                   family_size: int = 1, simulations: int = DEFAULT_SIMULATIONS, seed: int = 0) -> float:
    """The share of simulated regressions of ``samples`` per side drawn from ``source`` (the recent side
    scaled by 1 + ``relative_change``) whose ``q`` quantile interval shows the change."""
    level = family_confidence(confidence, family_size)
    low_rank, high_rank = quantile_ranks(samples, q, level)
    if low_rank is None or high_rank is None:
        return 0.0
    rng = np.random.default_rng([seed, samples])
    share = source.counts / source.counts.sum()
    factor = 1.0 + relative_change
    sides = []
    for scale in (factor, 1.0):
        counts = rng.multinomial(samples, share, size=simulations)
        ends = np.cumsum(counts, axis=1)
        slot = lambda rank: (ends <= rank).sum(axis=1)  # noqa: E731 - each draw's slot of a 0-based rank
        position = q * (samples - 1)
        below, above = source.points[slot(math.floor(position))], source.points[slot(math.ceil(position))]
        estimate = (below + (above - below) * (position - math.floor(position))) * scale
        sides.append((estimate, np.minimum(source.lows[slot(low_rank)] * scale, estimate),
                      np.maximum(source.highs[slot(high_rank)] * scale, estimate)))
    (r, r_low, r_high), (b, b_low, b_high) = sides
    difference = r - b
    if relative_change > 0:
        return float(np.mean(difference - np.hypot(r - r_low, b_high - b) > 0))
    return float(np.mean(difference + np.hypot(r_high - r, b - b_low) < 0))


def samples_for_quantile(source: StateView, q: float, relative_change: float, *, confidence: float = 0.95,
                         power: float = DEFAULT_POWER, family_size: int = 1, simulations: int = DEFAULT_SIMULATIONS,
                         seed: int = 0) -> int | None:
    """Samples per side for the ``q`` quantile to show a ``relative_change`` (0.2: 20% higher), by
    simulation from ``source`` (see the module); None beyond `MAX_SAMPLES`."""
    _check_power(power)
    if relative_change <= -1 or relative_change == 0 or not math.isfinite(relative_change):
        raise ValueError(f"a relative change lies above -1 and is not 0, not {relative_change}")
    if source.n < 2:
        raise ValueError("a plan for a quantile needs a stored distribution of at least two samples")

    def enough(n: int) -> bool:
        return quantile_power(source, q, relative_change, n, confidence=confidence, family_size=family_size,
                              simulations=simulations, seed=seed) >= power

    high = 8
    while not enough(high):
        if high >= MAX_SAMPLES:
            return None
        high = min(2 * high, MAX_SAMPLES)
    low = high // 2
    while high - low > max(1, low // 100):  # to within 1%: the simulation's own noise is larger
        middle = (low + high) // 2
        low, high = (low, middle) if enough(middle) else (middle, high)
    return high


def plan(state: WindowAccumulator, change: float, *, confidence: float = 0.95, power: float = DEFAULT_POWER,
         family_size: int = 1, aggregation: Aggregation | None = None, quantile: float | None = None,
         simulations: int = DEFAULT_SIMULATIONS, seed: int = 0) -> SamplePlan:
    """Samples per side for one metric to show ``change`` (in its unit) from what ``state`` holds
    (e.g. the baseline range's window): its rate, its variance, or its distribution."""
    statistic = statistic_of(state.definition, aggregation, quantile)
    if statistic is None:
        raise ValueError(f"{state.definition.metric}: its value is not a statistic of its samples; no plan")
    s = view(state)
    if s.n < 2:
        raise ValueError(f"{state.definition.metric}: a plan needs a state of at least two samples, it has {s.n}")
    common = dict(metric=state.definition.metric, statistic=statistic, change=change, power=power,
                  confidence=confidence, family_size=family_size)
    q = quantile_level(statistic)
    if q is not None:
        baseline = s.quantile(q)
        if not baseline > 0:
            raise ValueError(f"{state.definition.metric}: a quantile plan needs a positive {statistic}, not {baseline}")
        n = samples_for_quantile(s, q, change / baseline, confidence=confidence, power=power,
                                 family_size=family_size, simulations=simulations, seed=seed)
        return SamplePlan(baseline=baseline, samples=n, method="simulation_order_statistics", **common)
    if statistic == "rate" and s.binary:
        n = samples_for_rates(s.mean, change, confidence=confidence, power=power, family_size=family_size)
        return SamplePlan(baseline=s.mean, samples=n, method="two_proportions_normal", **common)
    n = samples_for_means(s.variance, change, confidence=confidence, power=power, family_size=family_size)
    return SamplePlan(baseline=s.mean, samples=n, method="two_sample_t", **common)


def plan_relative(state: WindowAccumulator, relative_change: float, **options) -> SamplePlan:
    """`plan` for a change of ``relative_change`` times the statistic's value in ``state`` (0.1: 10% higher,
    -0.1: 10% lower); ``options`` are `plan`'s."""
    statistic = statistic_of(state.definition, options.get("aggregation"), options.get("quantile"))
    if statistic is None:
        raise ValueError(f"{state.definition.metric}: its value is not a statistic of its samples; no plan")
    s = view(state)
    q = quantile_level(statistic)
    value = s.quantile(q) if q is not None else s.mean
    if not value:
        raise ValueError(f"a relative change of a {statistic} of {value} is no change")
    return plan(state, relative_change * value, **options)


__all__ = ["DEFAULT_POWER", "MAX_SAMPLES", "SamplePlan", "plan", "plan_relative", "quantile_power",
           "samples_for_means", "samples_for_quantile", "samples_for_rates"]
