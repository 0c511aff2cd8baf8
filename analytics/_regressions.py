"""Regressions with confidence: did one metric of one target change between a baseline and a recent state?

Both sides are window states (`WindowAccumulator`): a range is the merge of its time buckets, and a
"same hours" baseline is the merge of the same hours of the baseline days, both done by the caller.
What is compared follows the metric's aggregation (a profile may choose another one the catalogue
allows):

| aggregation | statistic | interval of recent - baseline | relative change (recent / baseline - 1) |
|---|---|---|---|
| rate, samples all 0 or 1 | the proportion | Newcombe's hybrid score interval | MOVER on the log scale, Wilson's intervals |
| rate of other values, mean, distribution, sum | the mean per sample | Welch's interval | MOVER on the log scale, t intervals |
| percentile | a quantile (p95 unless asked) | MOVER, order-statistic intervals | MOVER on the log scale, the same intervals |

A sum is compared as its mean per sample: ranges of different lengths or traffic have different
sums, the same cost per task. Quantile intervals hold for any distribution; beyond `EXACT_SAMPLES`
samples each order statistic is known only to lie in its histogram bucket, and the interval takes
the bucket's far edge on each side, so the histogram's relative error widens it and never makes it
miss. Per-success ratios and throughput are not means of the samples: their states keep no
statistic to compare them with, and they are reported as unsupported.

Many metrics and targets are tested at once. Every interval is at the **Bonferroni** level
1 - (1 - confidence) / family_size (`family_confidence`), so all the intervals of a family hold
together with probability at least ``confidence`` and a healthy family shows no `worse` or `better`
verdict with at least that probability (family-wise error at most 1 - confidence). The verdict:

- `not_enough_samples`: a side has fewer than ``min_samples`` samples (or no interval can be formed);
- `worse` / `better`: the whole interval lies beyond ``tolerance`` on the bad / good side of zero,
  as the metric's direction says;
- `no_change`: otherwise (no change as large as ``tolerance`` that this evidence can show).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import Hashable, Mapping

from meritlens.analytics._accumulate import WindowAccumulator
from meritlens.analytics._catalogue import Aggregation, Direction
from meritlens.analytics._intervals import (
    Estimate,
    check_confidence,
    mean_interval,
    mover_difference,
    mover_ratio,
    newcombe_difference,
    quantile_ranks,
    welch_difference,
    wilson_interval,
)
from meritlens.analytics._state_view import StateView, view
from meritlens.analytics._definitions import ValueRule, WindowDefinition
from meritlens.analytics._windows import MIN_SAMPLES_FOR_REPEATED_CLAIM

CORRECTION = "bonferroni"
DEFAULT_QUANTILE = 0.95
"""The quantile a percentile metric is compared at (its window's value is the p95)."""


class Change(str, Enum):
    WORSE = "worse"
    BETTER = "better"
    NO_CHANGE = "no_change"
    NOT_ENOUGH_SAMPLES = "not_enough_samples"
    UNSUPPORTED = "unsupported"
    """The metric's value is not a statistic of its samples (a per-success ratio, a throughput)."""


class Method(str, Enum):
    NEWCOMBE = "newcombe_hybrid_score"
    WELCH = "welch"
    ORDER_STATISTICS = "order_statistics_mover"


@dataclass(frozen=True)
class Regression:
    """One metric's change from ``baseline`` to ``recent``: estimates, intervals and the verdict."""

    metric: str
    statistic: str
    """What is compared: "rate", "mean" or a quantile ("p95")."""
    verdict: Change
    method: Method | None
    recent: float | None
    baseline: float | None
    difference: Estimate | None
    """recent - baseline in the metric's unit, with its interval at ``confidence``."""
    relative: Estimate | None
    """recent / baseline - 1, with its interval (None when the baseline is not positive)."""
    confidence: float
    """Each interval's level: the family's level, Bonferroni-adjusted."""
    family_confidence: float
    family_size: int
    recent_samples: int
    baseline_samples: int
    min_samples: int
    tolerance: float
    reason: str | None = None

    def to_dict(self) -> dict:
        return {
            "metric": self.metric, "statistic": self.statistic, "verdict": self.verdict.value,
            "method": self.method.value if self.method else None, "recent": self.recent, "baseline": self.baseline,
            "difference": self.difference.to_dict() if self.difference else None,
            "relative": self.relative.to_dict() if self.relative else None,
            "confidence": self.confidence, "family_confidence": self.family_confidence,
            "family_size": self.family_size, "correction": CORRECTION, "recent_samples": self.recent_samples,
            "baseline_samples": self.baseline_samples, "min_samples": self.min_samples,
            "tolerance": self.tolerance, "reason": self.reason,
        }


def family_confidence(confidence: float, family_size: int) -> float:
    """Each interval's level so that ``family_size`` intervals hold together with probability at least
    ``confidence`` (Bonferroni: the miss probability is split evenly)."""
    if family_size < 1:
        raise ValueError(f"a family of intervals has at least one member, not {family_size}")
    return 1.0 - (1.0 - check_confidence(confidence)) / family_size


def verdict(direction: Direction, difference: Estimate, tolerance: float = 0.0) -> Change:
    """The verdict on an interval of recent - baseline (see the module)."""
    low, high = (difference.low, difference.high) if direction is Direction.HIGHER else (-difference.high,
                                                                                         -difference.low)
    if high < -tolerance:
        return Change.WORSE
    if low > tolerance:
        return Change.BETTER
    return Change.NO_CHANGE


def statistic_of(definition: WindowDefinition, aggregation: Aggregation | None = None,
                 quantile: float | None = None) -> str | None:
    """What a regression of this metric's window compares ("rate", "mean", "p95", ...); None when unsupported."""
    if definition.value_rule is not ValueRule.AGGREGATE:
        return None
    aggregation = aggregation or definition.aggregation
    if aggregation is Aggregation.SINGLE_VALUE:
        return None
    if aggregation is Aggregation.PERCENTILE:
        return quantile_name(quantile if quantile is not None else DEFAULT_QUANTILE)
    return "rate" if aggregation is Aggregation.RATE else "mean"


def compare(recent: WindowAccumulator, baseline: WindowAccumulator, *, confidence: float = 0.95,
            family_size: int = 1, min_samples: int | None = None, tolerance: float = 0.0,
            aggregation: Aggregation | None = None, quantile: float | None = None) -> Regression:
    """The change of one metric between two states of its window (see the module for the methods).

    ``min_samples``: fewest samples on each side (the profile's; at least two); ``tolerance``: the
    smallest change that counts, in the metric's unit; ``aggregation``: the profile's when it differs
    from the catalogue's default; ``quantile``: the level a percentile metric is compared at."""
    if recent.definition.metric != baseline.definition.metric:
        raise ValueError(f"a regression compares one metric: {recent.definition.metric} against "
                         f"{baseline.definition.metric}")
    if tolerance < 0 or not math.isfinite(tolerance):
        raise ValueError(f"a tolerance is a non-negative number in the metric's unit, not {tolerance}")
    level = family_confidence(confidence, family_size)
    spec = recent.definition.spec
    minimum = max(min_samples or 0, MIN_SAMPLES_FOR_REPEATED_CLAIM)
    statistic = statistic_of(recent.definition, aggregation, quantile)
    r, b = view(recent), view(baseline)
    common = dict(metric=spec.id, confidence=level, family_confidence=confidence, family_size=family_size,
                  recent_samples=r.n, baseline_samples=b.n, min_samples=minimum, tolerance=tolerance)
    if statistic is None:
        return Regression(statistic=(aggregation or recent.definition.aggregation).value, verdict=Change.UNSUPPORTED,
                          method=None, recent=None, baseline=None, difference=None, relative=None,
                          reason=f"the value of {spec.id} is not a statistic of its samples", **common)
    if min(r.n, b.n) < minimum:
        side = "recent" if r.n < minimum else "baseline"
        return Regression(statistic=statistic, verdict=Change.NOT_ENOUGH_SAMPLES, method=None,
                          recent=_point(r, statistic), baseline=_point(b, statistic), difference=None, relative=None,
                          reason=f"the {side} range has {min(r.n, b.n)} samples; {minimum} are needed", **common)
    method, difference, relative = _intervals(statistic, r, b, level)
    change, reason = verdict(spec.direction, difference, tolerance), None
    if change is Change.NO_CHANGE and not (math.isfinite(difference.low) and math.isfinite(difference.high)):
        # an unbounded side can still show a change on the other; it cannot show "no change"
        change, reason = Change.NOT_ENOUGH_SAMPLES, "too few samples to bound both sides of the interval"
    return Regression(statistic=statistic, verdict=change, method=method, recent=_point(r, statistic),
                      baseline=_point(b, statistic), difference=difference, relative=relative, reason=reason, **common)


def compare_all(pairs: Mapping[Hashable, tuple[WindowAccumulator, WindowAccumulator]], *, confidence: float = 0.95,
                min_samples: Mapping[str, int] | None = None, tolerance: Mapping[str, float] | None = None,
                aggregation: Mapping[str, Aggregation] | None = None,
                quantile: float | None = None) -> dict[Hashable, Regression]:
    """Regressions of many (target, metric) pairs tested together: the family is every pair that has
    enough samples on both sides and a supported statistic (decided by the sample counts alone, before
    any interval), and each interval is at the family's Bonferroni level. The maps are by metric, or
    by a pair's key for that pair alone (e.g. a target's profile)."""
    min_samples, tolerance, aggregation = min_samples or {}, tolerance or {}, aggregation or {}

    def options(key: Hashable, state: WindowAccumulator) -> dict:
        metric = state.definition.metric

        def pick(by: Mapping, default=None):
            return by[key] if key in by else by.get(metric, default)

        return dict(min_samples=pick(min_samples), tolerance=pick(tolerance, 0.0), aggregation=pick(aggregation),
                    quantile=quantile)

    def tested(key: Hashable, recent: WindowAccumulator, base: WindowAccumulator) -> bool:
        o = options(key, recent)
        needed = max(o["min_samples"] or 0, MIN_SAMPLES_FOR_REPEATED_CLAIM)
        return (statistic_of(recent.definition, o["aggregation"], quantile) is not None
                and min(recent.values.n, base.values.n) >= needed)

    family = max(1, sum(tested(key, r, b) for key, (r, b) in pairs.items()))
    return {key: compare(r, b, confidence=confidence, family_size=family, **options(key, r))
            for key, (r, b) in pairs.items()}


def quantile_name(q: float) -> str:
    """A quantile statistic's name: 0.95 -> "p95"."""
    if not 0.0 < q < 1.0:
        raise ValueError(f"a quantile level lies strictly between 0 and 1, not {q}")
    return f"p{q * 100:g}"


def quantile_level(statistic: str) -> float | None:
    """The level of a quantile statistic ("p95" -> 0.95); None for a rate, a mean or a sum."""
    return float(statistic[1:]) / 100.0 if statistic.startswith("p") else None


def _point(s: StateView, statistic: str) -> float | None:
    if s.n == 0:
        return None
    q = quantile_level(statistic)
    return s.mean if q is None else s.quantile(q)


def _intervals(statistic: str, r: StateView, b: StateView,
               level: float) -> tuple[Method, Estimate, Estimate | None]:
    if statistic == "rate" and r.binary and b.binary:
        difference = newcombe_difference(r.ones, r.n, b.ones, b.n, level)
        relative = mover_ratio(wilson_interval(r.ones, r.n, level), wilson_interval(b.ones, b.n, level))
        return Method.NEWCOMBE, difference, relative
    q = quantile_level(statistic)
    if q is None:
        difference = welch_difference(r.n, r.mean, r.variance, b.n, b.mean, b.variance, level)
        relative = mover_ratio(mean_interval(r.n, r.mean, r.variance, level),
                               mean_interval(b.n, b.mean, b.variance, level))
        return Method.WELCH, difference, relative
    sides = [quantile_interval(s, q, level) for s in (r, b)]
    return Method.ORDER_STATISTICS, mover_difference(*sides), mover_ratio(*sides)


def quantile_interval(s: StateView, q: float, level: float) -> Estimate:
    """The ``q`` quantile of a state with its distribution-free interval at ``level``: the order
    statistics of `quantile_ranks`, each taken at the far edge of the range that surely holds it."""
    estimate = s.quantile(q)
    low_rank, high_rank = quantile_ranks(s.n, q, level)
    low = float(s.rank_ranges([low_rank])[0][0]) if low_rank is not None else -math.inf
    high = float(s.rank_ranges([high_rank])[1][0]) if high_rank is not None else math.inf
    return Estimate(estimate, min(low, estimate), max(high, estimate))


__all__ = ["CORRECTION", "Change", "DEFAULT_QUANTILE", "Method", "Regression", "compare", "compare_all",
           "family_confidence", "quantile_interval", "quantile_level", "quantile_name", "statistic_of", "verdict"]
