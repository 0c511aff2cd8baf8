"""What a decision asks of each metric (direction, aggregation, evidence, tolerance, constraint),
the statistic that summarises an arm's samples for it, and the verdict an interval of a difference
gives. Shared by ``compare`` and ``frontier``."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from meritlens.analytics._bootstrap import Statistic
from meritlens.analytics._catalogue import METRICS, Aggregation, Direction
from meritlens.analytics._definitions import SPAN_WINDOW_METRICS, sample_statistic
from meritlens.analytics._manifest import ExperimentManifest
from meritlens.analytics._profiles import TaskProfile
from meritlens.analytics._windows import MIN_SAMPLES_FOR_REPEATED_CLAIM


class ComparisonError(ValueError):
    """The comparison cannot run as asked (unknown arm, profile for another target, ...)."""


class ResultState(str, Enum):
    """The state of one arm's value or of one challenger's comparison."""

    MEASURED = "measured"
    """An arm's value with its interval."""
    COMPARED = "compared"
    """A difference with its interval and a verdict."""
    INSUFFICIENT_EVIDENCE = "insufficient_evidence"
    """Samples exist but fewer than required (or too few cases for an interval): no verdict."""
    NOT_CONFIGURED = "not_configured"
    """No samples of the metric in the arm: nothing measured it."""
    NOT_COMPARABLE = "not_comparable"
    """The metric's value is no function of per-sample values stored in spans (no interval can be given)."""
    REFUSED = "refused"
    """The arm's spans break its manifest entry (execution window, model identity)."""


class Verdict(str, Enum):
    """What the interval of (challenger - baseline), oriented so that positive is better, says."""

    BETTER = "better"
    """Better by more than the tolerance: the whole interval lies above +tolerance."""
    WORSE = "worse"
    """Worse by more than the tolerance: the whole interval lies below -tolerance."""
    EQUIVALENT = "equivalent"
    """The whole interval lies within [-tolerance, +tolerance]."""
    NON_INFERIOR = "non_inferior"
    """Not worse by more than the tolerance, possibly better: the interval lies above -tolerance."""
    INCONCLUSIVE = "inconclusive"
    """The interval reaches below -tolerance and above it: more evidence is needed."""


@dataclass(frozen=True)
class MetricRule:
    """One metric of the decision: which way is better, how arms are summarised, how much evidence,
    which difference matters (tolerance) and which bound must hold (constraint)."""

    metric: str
    direction: Direction
    aggregation: Aggregation
    min_samples: int
    tolerance: float | None = None
    constraint: float | None = None

    @property
    def unit(self) -> str:
        return METRICS[self.metric].unit


def rules_from_profile(profile: TaskProfile) -> list[MetricRule]:
    """The rules of every required metric of ``profile``, in profile order."""
    return [
        MetricRule(metric, plan.direction, plan.aggregation, plan.min_samples, plan.tolerance, plan.constraint)
        for metric, plan in profile.metrics.items()
    ]


def default_rule(metric: str) -> MetricRule:
    """A metric's rule without a profile: the catalogue's direction and default aggregation, two samples
    (the least an interval needs), no tolerance, no constraint."""
    spec = METRICS[metric]
    return MetricRule(metric, spec.direction, spec.default_aggregation, MIN_SAMPLES_FOR_REPEATED_CLAIM)


def statistic_for(rule: MetricRule) -> tuple[Statistic | None, str | None]:
    """The statistic that summarises an arm's samples for ``rule``, or None and why there is none."""
    kind = sample_statistic(rule.metric)
    if kind is None:
        if rule.metric in SPAN_WINDOW_METRICS:
            return None, f"{rule.metric} is not a function of per-sample values; no interval can be given"
        return None, (f"{rule.metric} is measured by a plugin or evaluator, whose per-sample values are not "
                      "stored with the spans; no interval can be given")
    if kind == "per_success":
        return Statistic.PER_SUCCESS, None
    return {
        Aggregation.MEAN: Statistic.MEAN,
        Aggregation.RATE: Statistic.MEAN,
        Aggregation.DISTRIBUTION: Statistic.MEAN,
        Aggregation.SINGLE_VALUE: Statistic.MEAN,
        Aggregation.SUM: Statistic.TOTAL,
        Aggregation.PERCENTILE: Statistic.P95,
    }[rule.aggregation], None


def resolve_rules(manifest: ExperimentManifest, profile: TaskProfile | None, profile_source: str | None,
                  query=None) -> tuple[list[MetricRule], str]:
    """The decision's rules: the given profile, else the manifest's, else catalogue defaults for every
    span-window metric (a metric without samples anywhere then shows as not_configured)."""
    if profile is not None:
        if profile.target != manifest.target_id:
            raise ComparisonError(
                f"the profile {profile_source or ''} is for target {profile.target!r}; experiment "
                f"{manifest.experiment_id!r} measures {manifest.target_id!r}".replace("  ", " ")
            )
        return rules_from_profile(profile), f"profile {profile_source}" if profile_source else "profile"
    recorded = manifest.task_profile
    if recorded is not None:
        return rules_from_profile(recorded), "the profile recorded in the manifest"
    return [default_rule(m) for m in SPAN_WINDOW_METRICS], "catalogue defaults (no profile)"


def constraint_met(rule: MetricRule, low: float, high: float) -> bool | None:
    """Whether an arm's interval lies on the good side of the constraint (None: it straddles it)."""
    if rule.constraint is None:
        return None
    if rule.direction is Direction.HIGHER:  # a floor
        return True if low >= rule.constraint else False if high < rule.constraint else None
    return True if high <= rule.constraint else False if low > rule.constraint else None


def judge(direction: Direction, tolerance: float | None, low: float, high: float) -> tuple[Verdict, bool | None]:
    """The verdict on an interval of (challenger - baseline), and whether it meets the tolerance
    (True: not worse by more than it; False: worse by more than it; None: the interval cannot say)."""
    t = tolerance or 0.0
    lo, hi = (low, high) if direction is Direction.HIGHER else (-high, -low)
    meets = True if lo >= -t else False if hi < -t else None
    if lo > t:
        return Verdict.BETTER, meets
    if hi < -t:
        return Verdict.WORSE, meets
    if lo >= -t and hi <= t:
        return Verdict.EQUIVALENT, meets
    if lo >= -t:
        return Verdict.NON_INFERIOR, meets
    return Verdict.INCONCLUSIVE, meets
