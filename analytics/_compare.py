"""Comparing a baseline arm with challenger arms, metric by metric, with confidence intervals.

For each metric the decision requires (``_rules``: a task profile, else the catalogue's defaults),
each arm's samples are read from the spans exactly as its window computes them (``_arm_samples``)
and compared by a bootstrap over cases (``_calculator``). A result is never a verdict on fewer
samples than the profile's ``min_samples``, nor from an arm whose spans break its manifest entry.

Every computed result carries its calculation evidence: the exact inputs, the method, the seed, a
digest of all of them, and the windows (target, metric, scope, evidence digest) the samples are
the evidence of, so that anyone can recompute it (``recompute_interval``).
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from typing import Any

from meritlens.analytics._arm_check import ArmCheck, check_arm
from meritlens.analytics._bootstrap import DEFAULT_CONFIDENCE, DEFAULT_RESAMPLES, Statistic
from meritlens.analytics._calculator import ArmValue, Calculator, Evidence, Method
from meritlens.analytics._manifest import ExperimentManifest
from meritlens.analytics._profiles import TaskProfile
from meritlens.analytics._rules import (
    ComparisonError,
    MetricRule,
    ResultState,
    Verdict,
    judge,
    resolve_rules,
    statistic_for,
)


@dataclass(frozen=True)
class ChallengerResult:
    """One challenger against the baseline on one metric."""

    arm: str
    state: ResultState
    value: ArmValue
    difference: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    pairing: str | None = None
    matched_cases: int = 0
    samples_baseline: int = 0
    samples_challenger: int = 0
    meets_tolerance: bool | None = None
    verdict: Verdict | None = None
    reason: str | None = None
    evidence: Evidence | None = None
    certified: bool = False
    not_certified_because: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "arm": self.arm, "state": self.state.value,
            "value": self.value.value, "value_ci": [self.value.ci_low, self.value.ci_high]
            if self.value.ci_low is not None else None,
            "meets_constraint": self.value.meets_constraint,
            "difference": self.difference,
            "difference_ci": [self.ci_low, self.ci_high] if self.ci_low is not None else None,
            "pairing": self.pairing, "matched_cases": self.matched_cases,
            "samples": {"baseline": self.samples_baseline, "challenger": self.samples_challenger},
            "meets_tolerance": self.meets_tolerance, "verdict": self.verdict.value if self.verdict else None,
            "reason": self.reason, "certified": self.certified,
            "not_certified_because": list(self.not_certified_because),
            "evidence": self.evidence.to_json() if self.evidence else None,
        }


@dataclass(frozen=True)
class MetricComparison:
    rule: MetricRule
    statistic: Statistic | None
    baseline: ArmValue
    challengers: tuple[ChallengerResult, ...]

    def to_json(self) -> dict[str, Any]:
        r = self.rule
        return {
            "metric": r.metric, "unit": r.unit, "direction": r.direction.value, "aggregation": r.aggregation.value,
            "statistic": self.statistic.value if self.statistic else None, "min_samples": r.min_samples,
            "tolerance": r.tolerance, "constraint": r.constraint,
            "baseline": self.baseline.to_json(),
            "challengers": [c.to_json() for c in self.challengers],
        }


@dataclass(frozen=True)
class Comparison:
    """A baseline against its challengers on every metric of the decision."""

    experiment: dict[str, Any]
    baseline: str
    rules_source: str
    method: Method
    arms: tuple[ArmCheck, ...]
    metrics: tuple[MetricComparison, ...]
    computed_at: str

    @property
    def refused_arms(self) -> list[str]:
        return [a.arm for a in self.arms if a.refused]

    def to_json(self) -> dict[str, Any]:
        return {
            "type": "meritlens.comparison",
            "experiment": self.experiment,
            "baseline": self.baseline,
            "rules": self.rules_source,
            "method": self.method.to_json(),
            "computed_at": self.computed_at,
            "arms": [a.to_json() for a in self.arms],
            "metrics": [m.to_json() for m in self.metrics],
        }


def compare(
    manifest: ExperimentManifest,
    query,
    *,
    baseline: str | None = None,
    profile: TaskProfile | None = None,
    profile_source: str | None = None,
    seed: int | None = None,
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
    now: str | None = None,
) -> Comparison:
    """Compare the baseline arm (default: the manifest's, else the first) with every other arm on
    every metric of the decision. ``seed`` defaults to the experiment's shuffle seed."""
    if len(manifest.arms) < 2:
        raise ComparisonError(f"experiment {manifest.experiment_id!r} has {len(manifest.arms)} arm(s); "
                              "a comparison needs a baseline and at least one challenger")
    baseline = baseline or manifest.baseline or manifest.arms[0].name
    try:
        manifest.arm(baseline)
    except KeyError as exc:
        raise ComparisonError(exc.args[0]) from None
    rules, source = resolve_rules(manifest, profile, profile_source)
    method = Method(confidence=confidence, resamples=resamples,
                    seed=manifest.shuffle_seed if seed is None else seed)
    calc = Calculator(manifest, query, method)
    checks = {arm.name: check_arm(manifest, arm, query) for arm in manifest.arms}
    challengers = [a.name for a in manifest.arms if a.name != baseline]
    base_check = checks[baseline]
    results = []
    for rule in rules:
        statistic, _ = statistic_for(rule)
        base_value = calc.arm_value(baseline, rule, base_check)
        rows = []
        for name in challengers:
            value = calc.arm_value(name, rule, checks[name])
            rows.append(_challenger_result(calc, rule, baseline, name, value, base_check, checks[name]))
        results.append(MetricComparison(rule, statistic, base_value, tuple(rows)))
    return Comparison(
        experiment=manifest.reference(),
        baseline=baseline,
        rules_source=source,
        method=method,
        arms=tuple(checks[a.name] for a in manifest.arms),
        metrics=tuple(results),
        computed_at=now or _dt.datetime.now(_dt.timezone.utc).isoformat(),
    )


def _challenger_result(calc: Calculator, rule: MetricRule, baseline: str, name: str, value: ArmValue,
                       base_check: ArmCheck, check: ArmCheck) -> ChallengerResult:
    refused = [c for c in (base_check, check) if c.refused]
    if refused:
        return ChallengerResult(name, ResultState.REFUSED, value,
                                reason="; ".join(p for c in refused for p in c.problems))
    interval, info = calc.difference(baseline, name, rule)
    state = info.pop("state", ResultState.COMPARED)
    reason = info.pop("reason", None)
    evidence = info.pop("evidence", None)
    if interval is None:
        return ChallengerResult(name, state, value, reason=reason, **info)
    verdict, meets = judge(rule.direction, rule.tolerance, interval.low, interval.high)
    blockers = [
        f"window ({w.target_id}, {w.metric}, {w.scope}) "
        + ("is not stored" if w.evidence_digest is None else
           "holds other evidence than the samples used (its digest differs)")
        for w in evidence.windows if not w.matches
    ]
    return ChallengerResult(
        name, ResultState.COMPARED, value, difference=interval.estimate, ci_low=interval.low, ci_high=interval.high,
        meets_tolerance=meets, verdict=verdict, evidence=evidence, certified=not blockers,
        not_certified_because=tuple(blockers), **info,
    )
