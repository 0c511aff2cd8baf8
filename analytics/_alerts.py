"""Alert rules evaluated as windows update, valid however often they are evaluated.

A rule watches one metric of one target over a **range** (a whole number of hours): time is cut
into consecutive ranges aligned to the epoch (UTC hours, days), and each range's samples form one
**sequence**. The rule is evaluated on the merged state of its current range's hour buckets at each
update (`sequence_start` says where that range began); the bounds of `_sequential` hold at every
sample count of the sequence at once, so evaluating every second or every hour changes nothing.
A new range starts a new sequence with a fresh level. Any 30 consecutive days overlap at most
ceil(30 days / range) + 1 sequences, and each gets an equal share of the rule's level
(`AlertRule.alpha`): a target whose metric stays on the right side raises a false alarm in any 30
days with probability at most 1 - ``confidence`` (a union bound over the sequences).

Kinds:

- **constraint**: the metric's value against a threshold in its unit, a ceiling when lower is better,
  a floor when higher is. Means and rates use `mean_above`/`mean_below`; percentiles the quantile
  confidence sequence; a sum is observed, not estimated (the range's sum so far against the threshold).
- **regression**: the current range against a baseline state (the caller's merge of the baseline
  range, fixed for the sequence), each bounded at half the sequence's level; the difference's bounds
  against ``tolerance``.

Hysteresis by evidence: the rule fires when the evidence puts the metric on the wrong side (the bound
facing the threshold is past it), resolves when the evidence puts it on the right side (the other
bound is within it), and otherwise keeps its state, across ranges too. Neither happens before the
sequence (and a regression's baseline) has ``min_samples`` samples.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

from meritlens.analytics._accumulate import WindowAccumulator
from meritlens.analytics._catalogue import Aggregation, Direction
from meritlens.analytics._distribution import scaled_to_float
from meritlens.analytics._intervals import check_confidence
from meritlens.analytics._regressions import quantile_level, statistic_of
from meritlens.analytics._sequential import mean_above, mean_below, mean_bounds, quantile_rank_bounds
from meritlens.analytics._state_view import StateView, value_range, view
from meritlens.analytics._time_buckets import DAY_US, HOUR_US
from meritlens.analytics._definitions import DEFINITIONS_BY_METRIC, ValueRule

MONTH_US = 30 * DAY_US


class RuleKind(str, Enum):
    CONSTRAINT = "constraint"
    REGRESSION = "regression"


class Evidence(str, Enum):
    WRONG_SIDE = "wrong_side"
    RIGHT_SIDE = "right_side"
    UNDECIDED = "undecided"
    NOT_ENOUGH_SAMPLES = "not_enough_samples"


@dataclass(frozen=True)
class AlertRule:
    """One metric's rule (see the module). ``confidence`` is over any 30 days; ``range_us`` the length
    of one sequence in µs (whole hours, at most 30 days)."""

    metric: str
    kind: RuleKind
    threshold: float | None = None
    """A constraint's ceiling (lower is better) or floor (higher is better), in the metric's unit."""
    tolerance: float = 0.0
    """A regression's smallest change that counts, in the metric's unit."""
    confidence: float = 0.95
    min_samples: int = 30
    range_us: int = HOUR_US
    aggregation: Aggregation | None = None
    """The profile's aggregation when it differs from the catalogue's default."""
    quantile: float | None = None
    """The quantile a percentile rule watches (0.95 unless given)."""

    def __post_init__(self) -> None:
        definition = DEFINITIONS_BY_METRIC.get(self.metric)
        where = f"alert rule on {self.metric}"
        if definition is None:
            raise ValueError(f"{where}: no window of the collector computes {self.metric!r}")
        if definition.value_rule is not ValueRule.AGGREGATE:
            raise ValueError(f"{where}: its value is not a statistic of its samples, so no rule can bound it")
        check_confidence(self.confidence)
        aggregation = self.aggregation or definition.aggregation
        if aggregation not in definition.spec.allowed_aggregations or aggregation is Aggregation.SINGLE_VALUE:
            raise ValueError(f"{where}: aggregation {aggregation.value!r} cannot be watched")
        if self.kind is RuleKind.CONSTRAINT and (self.threshold is None or not math.isfinite(self.threshold)):
            raise ValueError(f"{where}: a constraint needs a finite threshold, not {self.threshold}")
        if not (self.tolerance >= 0 and math.isfinite(self.tolerance)):
            raise ValueError(f"{where}: the tolerance must be a non-negative number, not {self.tolerance}")
        if self.min_samples < 1:
            raise ValueError(f"{where}: min_samples must be at least 1, not {self.min_samples}")
        if self.range_us <= 0 or self.range_us % HOUR_US or self.range_us > MONTH_US:
            raise ValueError(f"{where}: the range must be a whole number of hours up to 30 days, not {self.range_us} µs")
        if self.quantile is not None and not 0 < self.quantile < 1:
            raise ValueError(f"{where}: the quantile must lie strictly between 0 and 1, not {self.quantile}")

    @property
    def sequences_per_month(self) -> int:
        """Sequences that overlap any 30 consecutive days, at most."""
        return -(-MONTH_US // self.range_us) + 1

    @property
    def alpha(self) -> float:
        """The level of one sequence: the rule's share for each sequence of any 30 days."""
        return (1.0 - self.confidence) / self.sequences_per_month

    @property
    def statistic(self) -> str:
        """What the rule bounds: a regression's statistic, or a constraint's observed "sum"."""
        definition = DEFINITIONS_BY_METRIC[self.metric]
        if (self.aggregation or definition.aggregation) is Aggregation.SUM and self.kind is RuleKind.CONSTRAINT:
            return "sum"
        return statistic_of(definition, self.aggregation, self.quantile)


def sequence_start(rule: AlertRule, now_us: int) -> int:
    """The start (µs) of the range holding ``now_us``: the current sequence's samples are those after it."""
    return now_us // rule.range_us * rule.range_us


@dataclass(frozen=True)
class AlertEvaluation:
    """One evaluation of a rule: its state, what decided it, and the evidence it rests on."""

    metric: str
    kind: RuleKind
    statistic: str
    firing: bool
    transition: str | None
    """"fired" or "resolved" when this evaluation changed the state."""
    evidence: Evidence
    value: float | None
    """The statistic's estimate (a regression's: recent - baseline)."""
    bound: float | None
    """The bound facing the threshold (the lower one when lower is better): past it means wrong side."""
    opposite_bound: float | None
    """The other bound: within the threshold means right side."""
    threshold: float
    """A constraint's threshold, or a regression's tolerance."""
    samples: int
    baseline_samples: int | None
    alpha: float
    method: str
    asymptotic: bool
    """A side of a mean without a bound on its samples used the asymptotic confidence sequence."""
    counts: dict

    def to_dict(self) -> dict:
        finite = lambda x: x if x is not None and math.isfinite(x) else None  # noqa: E731
        return {"metric": self.metric, "kind": self.kind.value, "statistic": self.statistic, "firing": self.firing,
                "transition": self.transition, "evidence": self.evidence.value, "value": finite(self.value),
                "bound": finite(self.bound), "opposite_bound": finite(self.opposite_bound),
                "threshold": self.threshold, "samples": self.samples, "baseline_samples": self.baseline_samples,
                "alpha": self.alpha, "method": self.method, "asymptotic": self.asymptotic, "counts": self.counts}


def evaluate_rule(rule: AlertRule, current: WindowAccumulator, *, baseline: WindowAccumulator | None = None,
                  firing: bool = False) -> AlertEvaluation:
    """Evaluate ``rule`` on ``current``, the state of the samples of its current range so far;
    ``firing``: the rule's state before this evaluation; ``baseline``: a regression's baseline state."""
    if current.definition.metric != rule.metric:
        raise ValueError(f"alert rule on {rule.metric} evaluated on a {current.definition.metric} window")
    lower_is_better = current.definition.spec.direction is Direction.LOWER
    s = view(current)
    if rule.kind is RuleKind.REGRESSION:
        if baseline is None or baseline.definition.metric != rule.metric:
            raise ValueError(f"alert rule on {rule.metric}: a regression needs the {rule.metric} baseline state")
        b = view(baseline)
        recent, base = _bounds(rule, s, rule.alpha / 2), _bounds(rule, b, rule.alpha / 2)
        value = recent.value - base.value if recent.value is not None and base.value is not None else None
        low, high = recent.low - base.high, recent.high - base.low
        enough = min(s.n, b.n) >= rule.min_samples
        margin, baseline_samples = rule.tolerance, b.n
        counts = {"recent": recent.counts, "baseline": base.counts}
        method, asymptotic = recent.method, recent.asymptotic or base.asymptotic
    else:
        bounds = _bounds(rule, s, rule.alpha)
        value, low, high = bounds.value, bounds.low, bounds.high
        enough = s.n >= rule.min_samples or rule.statistic == "sum"
        margin, baseline_samples = rule.threshold, None
        counts, method, asymptotic = bounds.counts, bounds.method, bounds.asymptotic
        if quantile_level(rule.statistic) is not None:
            certain, possible = s.count_at_most(rule.threshold)
            counts = {**counts, "at_or_below_threshold": [certain, possible]}
    # regression: difference vs +tolerance (lower is better) or -tolerance; constraint: value vs threshold
    line = margin if rule.kind is RuleKind.CONSTRAINT or lower_is_better else -margin
    if lower_is_better:
        bound, opposite = low, high
        wrong, right = low > line, high <= line
    else:
        bound, opposite = high, low
        wrong, right = high < line, low >= line
    if rule.kind is RuleKind.CONSTRAINT and rule.statistic in ("mean", "rate") and s.n >= 2:
        # the tests at the threshold decide; the bounds (their inversion) are what is shown
        floor, ceiling = value_range(current.definition.spec)
        above = mean_above(s.n, s.total, s.squares, rule.threshold, floor, rule.alpha)
        below = (mean_below(s.n, s.total, s.squares, rule.threshold, ceiling, rule.alpha) if ceiling is not None
                 else high < rule.threshold)
        wrong, right = (above, below) if lower_is_better else (below, above)
    if not enough:
        evidence = Evidence.NOT_ENOUGH_SAMPLES
    else:
        evidence = Evidence.WRONG_SIDE if wrong else Evidence.RIGHT_SIDE if right else Evidence.UNDECIDED
    now = True if evidence is Evidence.WRONG_SIDE else False if evidence is Evidence.RIGHT_SIDE else firing
    transition = "fired" if now and not firing else "resolved" if firing and not now else None
    threshold = rule.threshold if rule.kind is RuleKind.CONSTRAINT else rule.tolerance
    return AlertEvaluation(rule.metric, rule.kind, rule.statistic, now, transition, evidence, value, bound, opposite,
                           threshold, s.n, baseline_samples, rule.alpha, method, asymptotic, counts)


@dataclass(frozen=True)
class _Bounds:
    value: float | None
    low: float
    high: float
    method: str
    asymptotic: bool
    counts: dict


def _bounds(rule: AlertRule, s: StateView, alpha: float) -> _Bounds:
    """The statistic's estimate and its confidence-sequence bounds, each side at ``alpha`` (-inf/inf
    where the samples are too few to bound a side)."""
    statistic = rule.statistic
    counts = {"samples": s.n}
    if statistic == "sum":
        total = scaled_to_float(s.total)
        return _Bounds(total, total, total, "observed_sum", False, counts)
    q = quantile_level(statistic)
    if q is not None:
        low_rank, high_rank = quantile_rank_bounds(s.n, q, alpha)
        low = float(s.rank_ranges([low_rank])[0][0]) if low_rank is not None else -math.inf
        high = float(s.rank_ranges([high_rank])[1][0]) if high_rank is not None else math.inf
        return _Bounds(s.quantile(q) if s.n else None, low, high, "quantile_confidence_sequence", False,
                       {**counts, "ranks": [low_rank, high_rank]})
    if s.ones is not None:
        counts["ones"] = s.ones
    if s.n < 2:
        return _Bounds(s.mean, -math.inf, math.inf, "mean_confidence_sequence", False, counts)
    floor, ceiling = value_range(DEFINITIONS_BY_METRIC[rule.metric].spec)
    low, high, asymptotic = mean_bounds(s.n, s.total, s.squares, alpha, floor, ceiling)
    return _Bounds(s.mean, low, high, "mean_confidence_sequence", asymptotic, counts)


@dataclass(frozen=True)
class NoData:
    """Whether a target stopped sending: no sample ended in the last ``range_us``."""

    silent: bool
    last_sample_us: int | None
    silent_for_us: int | None


def no_data(state: WindowAccumulator | None, now_us: int, range_us: int) -> NoData:
    """"No data" for a target: ``state`` is any of its windows covering the range (its cumulative one,
    or the merge of the range's buckets); silent when its last sample ended ``range_us`` or more ago."""
    last = state.last_end.value if state is not None and state.values.n else None
    if last is None:
        return NoData(True, None, None)
    return NoData(now_us - last >= range_us, last, now_us - last)


__all__ = ["AlertEvaluation", "AlertRule", "Evidence", "MONTH_US", "NoData", "RuleKind", "evaluate_rule", "no_data",
           "sequence_start"]
