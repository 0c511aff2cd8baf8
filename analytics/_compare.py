"""Comparing a baseline arm with challenger arms, metric by metric, with confidence intervals.

For each metric the decision requires (a task profile, else the catalogue's defaults), each arm's
samples are read from the spans exactly as its window computes them (``window_samples_sql``: one
sample per task, or per call for call metrics), grouped by case, and compared by a bootstrap over
cases: paired where the arms share at least two cases of the experiment's case set (every
repetition of a case moves with it), unpaired otherwise. A result is never a verdict on fewer
samples than the profile's ``min_samples``, nor from an arm whose spans break its manifest entry.

Every computed result carries its calculation evidence: the exact inputs, the method, the seed, a
digest of all of them, and the windows (target, metric, scope, evidence digest) the samples are
the evidence of, so that anyone can recompute it (``recompute_interval``).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from enum import Enum
from typing import Any, Sequence

from meritlens.analytics._bootstrap import (
    DEFAULT_CONFIDENCE,
    DEFAULT_RESAMPLES,
    ArmSamples,
    Interval,
    Statistic,
    derived_seed,
    paired_difference_interval,
    unpaired_difference_interval,
    value_interval,
)
from meritlens.analytics._catalogue import METRICS, Aggregation, Direction
from meritlens.analytics._definitions import SPAN_WINDOW_METRICS, sample_statistic
from meritlens.analytics._evidence import span_keys_digest
from meritlens.analytics._experiments import ArmCheck, ExperimentManifest, canonical_json, check_arm
from meritlens.analytics._format import format_signed, format_value
from meritlens.analytics._profiles import TaskProfile, text_table
from meritlens.analytics._samples import window_samples_sql
from meritlens.analytics._schema import WINDOW_COLUMN_NAMES, WINDOWS_TABLE
from meritlens.analytics._sql import sql_string
from meritlens.analytics._windows import MIN_SAMPLES_FOR_REPEATED_CLAIM, Window

METHOD_NAME = "cluster bootstrap, BCa with expanded quantiles"
PAIRING_RULE = (
    "paired by case_id over the cases of the experiment's case set both arms ran (at least two); "
    "otherwise unpaired, each arm's cases (or single samples without a case id) resampled independently"
)


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


# --- what the decision asks of each metric ----------------------------------------------------------
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


# --- samples -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Sample:
    key: str
    case_id: str | None
    value: float
    success: bool | None
    span_keys: tuple[str, ...]


@dataclass(frozen=True)
class WindowRef:
    """The window a set of samples is the evidence of, and whether they are exactly its evidence."""

    target_id: str
    metric: str
    scope: str
    evidence_digest: str | None
    """The stored window's digest (None when no window is stored)."""
    samples_digest: str | None
    """sha256 of the sorted span keys of the samples read now."""
    state: str | None
    sample_count: int | None

    @property
    def matches(self) -> bool:
        return self.evidence_digest is not None and self.evidence_digest == self.samples_digest

    def to_json(self) -> dict[str, Any]:
        return {
            "target_id": self.target_id, "metric": self.metric, "scope": self.scope,
            "evidence_digest": self.evidence_digest, "samples_digest": self.samples_digest,
            "matches": self.matches, "state": self.state, "sample_count": self.sample_count,
        }


@dataclass(frozen=True)
class ArmData:
    """One arm's samples of one metric: those in the case set (or without a case) and how many are not."""

    arm: str
    samples: tuple[Sample, ...]
    outside_case_set: int
    window: WindowRef


def _as_bool(value: Any) -> bool | None:
    return None if value is None else bool(value)


def load_arm_data(query, manifest: ExperimentManifest, arm_name: str, metric: str) -> ArmData:
    """The samples of ``metric`` in the arm's scope (its assessment), read from the spans."""
    arm = manifest.arm(arm_name)
    target = manifest.target_of(arm)
    window_rows = query(
        f"SELECT {', '.join(WINDOW_COLUMN_NAMES)} FROM {WINDOWS_TABLE} WHERE target_id = {sql_string(target)} "
        f"AND metric = {sql_string(metric)} AND scope = {sql_string(arm.assessment_id)}"
    )
    window = Window.from_row(window_rows.rows[0], window_rows.columns) if window_rows.rows else None
    samples: list[Sample] = []
    if metric in SPAN_WINDOW_METRICS:
        result = query(window_samples_sql(target, arm.assessment_id, metric))
        for row in result.rows:
            r = dict(zip(result.columns, row))
            samples.append(Sample(r["sample_key"], r["case_id"], float(r["v"]), _as_bool(r["outcome_success"]),
                                  tuple(r["span_keys"])))
    all_keys = [k for s in samples for k in s.span_keys]
    ref = WindowRef(
        target, metric, arm.assessment_id,
        evidence_digest=window.evidence_digest if window else None,
        samples_digest=span_keys_digest(all_keys) if samples else None,
        state=window.state if window else None,
        sample_count=window.sample_count if window else None,
    )
    case_set = set(manifest.cases)
    kept = tuple(s for s in samples if s.case_id is None or s.case_id in case_set)
    return ArmData(arm_name, kept, len(samples) - len(kept), ref)


def _clusters(samples: Sequence[Sample], case_order: Sequence[str]) -> list[list[Sample]]:
    """Samples grouped by case in the experiment's case order; samples without a case stand alone."""
    by_case: dict[str, list[Sample]] = {}
    alone: list[list[Sample]] = []
    for s in samples:
        if s.case_id is None:
            alone.append([s])
        else:
            by_case.setdefault(s.case_id, []).append(s)
    return [by_case[c] for c in case_order if c in by_case] + alone


def _arm_samples(clusters: list[list[Sample]], statistic: Statistic) -> ArmSamples:
    successes = [[bool(s.success) for s in c] for c in clusters] if statistic is Statistic.PER_SUCCESS else None
    return ArmSamples([[s.value for s in c] for c in clusters], successes)


def _inputs(clusters: list[list[Sample]]) -> list[list[Any]]:
    """Calculation inputs: [case_id, sample_key, value, success] per sample, cluster by cluster."""
    return [[s.case_id, s.key, s.value, s.success] for c in clusters for s in c]


# --- results ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Method:
    """How every interval of a result was computed."""

    confidence: float = DEFAULT_CONFIDENCE
    resamples: int = DEFAULT_RESAMPLES
    seed: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "interval": METHOD_NAME, "confidence": self.confidence, "resamples": self.resamples, "seed": self.seed,
            "generator": "numpy.random.default_rng([seed, crc32(label)]) per calculation",
            "pairing": PAIRING_RULE,
        }


@dataclass(frozen=True)
class Evidence:
    """What a computed result was calculated from, and how: enough to recompute it."""

    label: str
    statistic: str
    scale: float
    pairing: str
    inputs: dict[str, list[list[Any]]]
    method: dict[str, Any]
    seed: list[int]
    windows: tuple[WindowRef, ...]

    @property
    def inputs_digest(self) -> str:
        """sha256 of the canonical JSON of the statistic, pairing, inputs, method and seed."""
        return hashlib.sha256(canonical_json(self._digested()).encode()).hexdigest()

    def _digested(self) -> dict[str, Any]:
        return {"label": self.label, "statistic": self.statistic, "scale": self.scale, "pairing": self.pairing,
                "inputs": self.inputs, "method": self.method, "seed": self.seed}

    def to_json(self) -> dict[str, Any]:
        return {**self._digested(), "inputs_digest": self.inputs_digest,
                "windows": [w.to_json() for w in self.windows]}


@dataclass(frozen=True)
class ArmValue:
    """One arm's value of one metric."""

    arm: str
    state: ResultState
    value: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    samples: int = 0
    cases: int = 0
    outside_case_set: int = 0
    meets_constraint: bool | None = None
    reason: str | None = None
    window: WindowRef | None = None
    evidence: Evidence | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "arm": self.arm, "state": self.state.value, "value": self.value,
            "ci": [self.ci_low, self.ci_high] if self.ci_low is not None else None,
            "samples": self.samples, "cases": self.cases, "outside_case_set": self.outside_case_set,
            "meets_constraint": self.meets_constraint, "reason": self.reason,
            "window": self.window.to_json() if self.window else None,
            "evidence": self.evidence.to_json() if self.evidence else None,
        }


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


# --- computing --------------------------------------------------------------------------------------
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


def _plan_runs(manifest: ExperimentManifest) -> int:
    return len(manifest.cases) * manifest.repetitions


class _Calculator:
    """Shared by compare and frontier: arm data (read once), arm values, differences."""

    def __init__(self, manifest: ExperimentManifest, query, method: Method):
        self.manifest = manifest
        self.query = query
        self.method = method
        self._data: dict[tuple[str, str], ArmData] = {}

    def data(self, arm: str, metric: str) -> ArmData:
        key = (arm, metric)
        if key not in self._data:
            self._data[key] = load_arm_data(self.query, self.manifest, arm, metric)
        return self._data[key]

    def _scale(self, statistic: Statistic) -> float:
        return float(_plan_runs(self.manifest)) if statistic is Statistic.TOTAL else 1.0

    def arm_value(self, arm: str, rule: MetricRule, check: ArmCheck | None = None) -> ArmValue:
        statistic, why_not = statistic_for(rule)
        data = self.data(arm, rule.metric)
        base = dict(arm=arm, window=data.window, outside_case_set=data.outside_case_set)
        if check is not None and check.refused:
            return ArmValue(state=ResultState.REFUSED, reason="; ".join(check.problems), **base)
        if statistic is None:
            return ArmValue(state=ResultState.NOT_COMPARABLE, reason=why_not, **base)
        if not data.samples:
            state = data.window.state
            if state is None:
                detail = "no window is stored"
            elif data.window.evidence_digest is not None:
                detail = (f"its window is {state}, from evidence other than span samples (a plugin's or "
                          "evaluator's); without per-sample values no interval can be given")
            else:
                detail = f"its window is {state}"
            return ArmValue(state=ResultState.NOT_CONFIGURED, reason=f"no samples of {rule.metric} ({detail})", **base)
        clusters = _clusters(data.samples, self.manifest.case_order)
        samples = _arm_samples(clusters, statistic)
        scale = self._scale(statistic)
        cases = sum(1 for c in clusters if c[0].case_id is not None)
        counts = dict(samples=len(data.samples), cases=cases, **base)
        if len(data.samples) < rule.min_samples:
            estimate = float(samples.evaluate(statistic, _ones(samples.k), scale)[0])
            return ArmValue(state=ResultState.INSUFFICIENT_EVIDENCE, value=_finite(estimate),
                            reason=f"{len(data.samples)} of {rule.min_samples} samples", **counts)
        label = f"{self.manifest.experiment_id}/{rule.metric}/{arm}"
        seed = derived_seed(self.method.seed, label)
        interval = value_interval(samples, statistic, scale=scale, seed=seed, resamples=self.method.resamples,
                                  confidence=self.method.confidence)
        if interval.low is None:
            return ArmValue(state=ResultState.INSUFFICIENT_EVIDENCE, value=_finite(interval.estimate),
                            reason=interval.reason, **counts)
        evidence = Evidence(
            label=label, statistic=statistic.value, scale=scale, pairing="single arm",
            inputs={arm: _inputs(clusters)}, method=self.method.to_json(), seed=seed, windows=(data.window,),
        )
        return ArmValue(state=ResultState.MEASURED, value=interval.estimate, ci_low=interval.low,
                        ci_high=interval.high, meets_constraint=constraint_met(rule, interval.low, interval.high),
                        evidence=evidence, **counts)

    def difference(self, baseline: str, challenger: str, rule: MetricRule) -> tuple[Interval | None, dict[str, Any]]:
        """The interval of (challenger - baseline) and what it was computed from; None and the reason
        when the evidence does not allow one."""
        statistic, why_not = statistic_for(rule)
        info: dict[str, Any] = {}
        if statistic is None:
            return None, {"state": ResultState.NOT_COMPARABLE, "reason": why_not}
        b, c = self.data(baseline, rule.metric), self.data(challenger, rule.metric)
        empty = [name for name, d in ((baseline, b), (challenger, c)) if not d.samples]
        if empty:
            return None, {"state": ResultState.NOT_CONFIGURED,
                          "reason": f"no samples of {rule.metric} in arm(s) {empty}"}
        b_cases = {s.case_id for s in b.samples if s.case_id is not None}
        c_cases = {s.case_id for s in c.samples if s.case_id is not None}
        common = [case for case in self.manifest.case_order if case in b_cases and case in c_cases]
        scale = self._scale(statistic)
        if len(common) >= 2:
            shared = set(common)
            b_clusters = _clusters([s for s in b.samples if s.case_id in shared], common)
            c_clusters = _clusters([s for s in c.samples if s.case_id in shared], common)
            pairing = "paired"
        else:
            b_clusters = _clusters(b.samples, self.manifest.case_order)
            c_clusters = _clusters(c.samples, self.manifest.case_order)
            pairing = "unpaired"
        nb, nc = sum(map(len, b_clusters)), sum(map(len, c_clusters))
        info.update(pairing=pairing, matched_cases=len(common) if pairing == "paired" else 0,
                    samples_baseline=nb, samples_challenger=nc)
        short = [f"{name} has {n} of {rule.min_samples} samples" for name, n in ((baseline, nb), (challenger, nc))
                 if n < rule.min_samples]
        if short:
            where = f" in the {len(common)} cases both ran" if pairing == "paired" else ""
            return None, {**info, "state": ResultState.INSUFFICIENT_EVIDENCE, "reason": "; ".join(short) + where}
        label = f"{self.manifest.experiment_id}/{rule.metric}/{challenger}-{baseline}"
        seed = derived_seed(self.method.seed, label)
        bs, cs = _arm_samples(b_clusters, statistic), _arm_samples(c_clusters, statistic)
        design = paired_difference_interval if pairing == "paired" else unpaired_difference_interval
        interval = design(bs, cs, statistic, scale=scale, seed=seed, resamples=self.method.resamples,
                          confidence=self.method.confidence)
        evidence = Evidence(
            label=label, statistic=statistic.value, scale=scale, pairing=pairing,
            inputs={"baseline": _inputs(b_clusters), "challenger": _inputs(c_clusters)},
            method=self.method.to_json(), seed=seed, windows=(b.window, c.window),
        )
        info["evidence"] = evidence
        if interval.low is None:
            return None, {**info, "state": ResultState.INSUFFICIENT_EVIDENCE, "reason": interval.reason,
                          "evidence": None}
        return interval, info


def _ones(k: int):
    import numpy as np

    return np.ones((1, k))


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def recompute_interval(evidence: dict[str, Any]) -> Interval:
    """Recompute a result's interval from its evidence (its JSON form) alone; the digest is checked first."""
    digested = {k: evidence[k] for k in ("label", "statistic", "scale", "pairing", "inputs", "method", "seed")}
    digest = hashlib.sha256(canonical_json(digested).encode()).hexdigest()
    if digest != evidence.get("inputs_digest"):
        raise ValueError(f"the evidence does not match its inputs_digest (recomputed {digest})")
    statistic = Statistic(evidence["statistic"])
    method = evidence["method"]
    kwargs = dict(scale=evidence["scale"], seed=evidence["seed"], resamples=method["resamples"],
                  confidence=method["confidence"])

    def arm(rows: list[list[Any]]) -> ArmSamples:
        clusters: list[list[Sample]] = []
        for case_id, key, value, success in rows:
            sample = Sample(key, case_id, value, success, ())
            if case_id is not None and clusters and clusters[-1][0].case_id == case_id:
                clusters[-1].append(sample)
            else:
                clusters.append([sample])
        return _arm_samples(clusters, statistic)

    if evidence["pairing"] == "single arm":
        (rows,) = evidence["inputs"].values()
        return value_interval(arm(rows), statistic, **kwargs)
    design = paired_difference_interval if evidence["pairing"] == "paired" else unpaired_difference_interval
    return design(arm(evidence["inputs"]["baseline"]), arm(evidence["inputs"]["challenger"]), statistic, **kwargs)


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
    import datetime as _dt

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
    calc = _Calculator(manifest, query, method)
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


def _challenger_result(calc: _Calculator, rule: MetricRule, baseline: str, name: str, value: ArmValue,
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


# --- text -------------------------------------------------------------------------------------------
def _num(value: float | None, unit: str) -> str:
    return "-" if value is None else format_value(value, unit)


def _ci(low: float | None, high: float | None, unit: str) -> str:
    return "-" if low is None else f"[{format_value(low, unit)}, {format_value(high, unit)}]"


def _signed(value: float | None, unit: str) -> str:
    return "-" if value is None else format_signed(value, unit)


def _yes(value: bool | None) -> str:
    return "-" if value is None else ("yes" if value else "NO")


def format_comparison(comparison: Comparison) -> str:
    """The comparison as text: the experiment, the arms' checks, then one row per metric and arm."""
    e = comparison.experiment
    m = comparison.method
    lines = [
        f"experiment {e['experiment_id']} (revision {e['application_revision']}, manifest {e['manifest_digest'][:12]}),"
        f" baseline {comparison.baseline}",
        f"rules: {comparison.rules_source}; {METHOD_NAME}, {m.confidence:.0%} intervals, {m.resamples} resamples, "
        f"seed {m.seed}",
    ]
    for check in comparison.arms:
        status = "REFUSED" if check.refused else "ok"
        lines.append(f"  arm {check.arm}: {status}, assessment {check.assessment_id}, {check.tasks} tasks, "
                     f"models {', '.join(check.response_models) or '(none reported)'}")
        lines += [f"    ! {p}" for p in check.problems]
        lines += [f"    - {w}" for w in check.warnings]
    headers = ["metric", "arm", "value", "95% CI", "n", "diff", "diff 95% CI", "tolerance", "constraint", "result"]
    rows = []
    for mc in comparison.metrics:
        r = mc.rule
        bound = "-" if r.constraint is None else (
            (">=" if r.direction is Direction.HIGHER else "<=") + f" {format_value(r.constraint, r.unit)}")
        b = mc.baseline
        rows.append([
            f"{r.metric} ({r.aggregation.value})", f"{b.arm} (baseline)", _num(b.value, r.unit),
            _ci(b.ci_low, b.ci_high, r.unit), str(b.samples), "", "", _num(r.tolerance, r.unit),
            f"{bound} {_yes(b.meets_constraint)}" if r.constraint is not None else "-",
            b.state.value if b.state is not ResultState.MEASURED else "",
        ])
        for c in mc.challengers:
            if c.state is ResultState.COMPARED:
                result = c.verdict.value + ("" if c.certified else " (not certified)")
            else:
                result = c.state.value
            rows.append([
                "", c.arm, _num(c.value.value, r.unit), _ci(c.value.ci_low, c.value.ci_high, r.unit),
                str(c.value.samples), _signed(c.difference, r.unit), _ci(c.ci_low, c.ci_high, r.unit),
                f"meets: {_yes(c.meets_tolerance)}" if c.state is ResultState.COMPARED else "",
                f"{bound} {_yes(c.value.meets_constraint)}" if r.constraint is not None else "-",
                result,
            ])
    lines += ["", text_table(headers, rows)]
    notes = [f"  {mc.rule.metric} / {c.arm}: {c.reason}" for mc in comparison.metrics for c in mc.challengers
             if c.reason and c.state is not ResultState.REFUSED]
    notes += [f"  {mc.rule.metric} / {mc.baseline.arm}: {mc.baseline.reason}" for mc in comparison.metrics
              if mc.baseline.reason and mc.baseline.state is not ResultState.REFUSED]
    if notes:
        lines += ["", "why some results have no verdict:", *notes]
    return "\n".join(lines)
