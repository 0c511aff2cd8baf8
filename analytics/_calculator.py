"""The statistics engine of ``compare`` and ``frontier``: an arm's value and a difference between
two arms, each with its confidence interval and its calculation evidence (the exact inputs, the
method, the seed, a digest of all of them, and the windows the samples are the evidence of), and
the recomputation of an interval from that evidence alone (``recompute_interval``).

Samples are grouped by case and compared by a bootstrap over cases: paired where the arms share at
least two cases of the experiment's case set (every repetition of a case moves with it), unpaired
otherwise. A value is never given on fewer samples than the rule's ``min_samples``.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any, Sequence

from meritlens.analytics._arm_check import ArmCheck
from meritlens.analytics._arm_samples import ArmData, Sample, WindowRef, load_arm_data
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
from meritlens.analytics._manifest import ExperimentManifest, canonical_json
from meritlens.analytics._rules import MetricRule, ResultState, constraint_met, statistic_for

METHOD_NAME = "cluster bootstrap, BCa with expanded quantiles"
PAIRING_RULE = (
    "paired by case_id over the cases of the experiment's case set both arms ran (at least two); "
    "otherwise unpaired, each arm's cases (or single samples without a case id) resampled independently"
)


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


def _plan_runs(manifest: ExperimentManifest) -> int:
    return len(manifest.cases) * manifest.repetitions


class Calculator:
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
