"""The Pareto frontier of an experiment's arms over two or three metrics, with uncertainty.

Each arm is placed by its value of every axis metric, with a confidence interval (the same
samples, statistics and bootstrap as ``compare``). An arm is dominated when another arm is at
least as good on every axis and better on one (by the estimates); the frontier is the arms no
other arm dominates. Each dominance is also judged with the paired intervals of the differences:
it is *confident* when, on every axis, the dominating arm is not worse anywhere in the interval
and on some axis better across the whole interval.

Arms whose spans break their manifest entry, and arms without enough evidence on an axis, are
never placed: they are listed as excluded, with the reason.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from typing import Any, Sequence

from meritlens.analytics._arm_check import ArmCheck, check_arm
from meritlens.analytics._bootstrap import DEFAULT_CONFIDENCE, DEFAULT_RESAMPLES
from meritlens.analytics._calculator import METHOD_NAME, ArmValue, Method
from meritlens.analytics._calculator import Calculator as Calculator
from meritlens.analytics._catalogue import METRICS, Direction, unknown_metric_message
from meritlens.analytics._format import format_value
from meritlens.analytics._manifest import ExperimentManifest
from meritlens.analytics._profiles import TaskProfile, text_table
from meritlens.analytics._rules import (
    ComparisonError,
    MetricRule,
    ResultState,
    default_rule,
    rules_from_profile,
    statistic_for,
)


@dataclass(frozen=True)
class Dominance:
    """``by`` dominates the arm; per axis the interval of (by - arm), oriented so positive is better for ``by``."""

    by: str
    confident: bool
    differences: dict[str, dict[str, Any]]

    def to_json(self) -> dict[str, Any]:
        return {"by": self.by, "confident": self.confident, "differences": self.differences}


@dataclass(frozen=True)
class FrontierArm:
    arm: str
    status: str
    """'optimal' (on the frontier), 'dominated', or 'excluded'."""
    values: dict[str, ArmValue]
    dominated_by: tuple[Dominance, ...] = ()
    reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "arm": self.arm, "status": self.status,
            "values": {
                metric: {"value": v.value, "ci": [v.ci_low, v.ci_high] if v.ci_low is not None else None,
                         "state": v.state.value, "samples": v.samples, "cases": v.cases, "reason": v.reason}
                for metric, v in self.values.items()
            },
            "dominated_by": [d.to_json() for d in self.dominated_by],
            "reason": self.reason,
        }


@dataclass(frozen=True)
class Frontier:
    experiment: dict[str, Any]
    axes: tuple[MetricRule, ...]
    rules_source: str
    method: Method
    arms: tuple[FrontierArm, ...]
    checks: tuple[ArmCheck, ...]
    computed_at: str

    @property
    def optimal(self) -> list[str]:
        return [a.arm for a in self.arms if a.status == "optimal"]

    @property
    def dominated(self) -> list[str]:
        return [a.arm for a in self.arms if a.status == "dominated"]

    @property
    def excluded(self) -> list[str]:
        return [a.arm for a in self.arms if a.status == "excluded"]

    def certificate(self) -> dict[str, Any]:
        """The calculation evidence of every placed arm: each axis value's inputs digest, method,
        seed, and the exact window (target, metric, scope, evidence digest) it rests on."""
        entries = []
        blockers = []
        for arm in self.arms:
            if arm.status == "excluded":
                continue
            for metric, value in arm.values.items():
                evidence = value.evidence
                entries.append({"arm": arm.arm, "metric": metric, **evidence.to_json()})
                blockers += [
                    f"{arm.arm}/{metric}: window ({w.target_id}, {w.metric}, {w.scope}) "
                    + ("is not stored" if w.evidence_digest is None else "holds other evidence than the samples used")
                    for w in evidence.windows if not w.matches
                ]
        return {"certified": not blockers and bool(entries), "not_certified_because": blockers,
                "calculations": entries}

    def to_json(self) -> dict[str, Any]:
        return {
            "type": "meritlens.frontier",
            "experiment": self.experiment,
            "axes": [
                {"metric": a.metric, "direction": a.direction.value, "aggregation": a.aggregation.value,
                 "unit": a.unit, "min_samples": a.min_samples,
                 "statistic": statistic_for(a)[0].value}
                for a in self.axes
            ],
            "rules": self.rules_source,
            "method": self.method.to_json(),
            "computed_at": self.computed_at,
            "frontier": self.optimal,
            "dominated": {a.arm: [d.by for d in a.dominated_by] for a in self.arms if a.status == "dominated"},
            "excluded": {a.arm: a.reason for a in self.arms if a.status == "excluded"},
            "arms": [a.to_json() for a in self.arms],
            "checks": [c.to_json() for c in self.checks],
            "certificate": self.certificate(),
        }


def _better_or_equal(direction: Direction, a: float, b: float) -> bool:
    return a >= b if direction is Direction.HIGHER else a <= b


def _strictly_better(direction: Direction, a: float, b: float) -> bool:
    return a > b if direction is Direction.HIGHER else a < b


def dominates(axes: Sequence[MetricRule], a: dict[str, float], b: dict[str, float]) -> bool:
    """Whether point ``a`` dominates point ``b``: at least as good on every axis, better on one."""
    return (all(_better_or_equal(r.direction, a[r.metric], b[r.metric]) for r in axes)
            and any(_strictly_better(r.direction, a[r.metric], b[r.metric]) for r in axes))


def frontier(
    manifest: ExperimentManifest,
    query,
    axes: Sequence[str],
    *,
    profile: TaskProfile | None = None,
    profile_source: str | None = None,
    seed: int | None = None,
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
    now: str | None = None,
) -> Frontier:
    """The frontier of ``manifest``'s arms over the ``axes`` metrics (two or three). Each axis follows
    the profile's rule for its metric when the profile (given, else the manifest's) has one, else the
    catalogue's defaults."""
    if not 2 <= len(axes) <= 3 or len(set(axes)) != len(axes):
        raise ComparisonError(f"a frontier needs two or three different metrics, got {list(axes)}")
    for metric in axes:
        if metric not in METRICS:
            raise ComparisonError(unknown_metric_message(metric))
    if not manifest.arms:
        raise ComparisonError(f"experiment {manifest.experiment_id!r} has no arms yet")
    if profile is not None and profile.target != manifest.target_id:
        raise ComparisonError(f"the profile is for target {profile.target!r}; experiment "
                              f"{manifest.experiment_id!r} measures {manifest.target_id!r}")
    chosen = profile or manifest.task_profile
    planned = {r.metric: r for r in rules_from_profile(chosen)} if chosen else {}
    rules = tuple(planned.get(m) or default_rule(m) for m in axes)
    for rule in rules:
        statistic, why_not = statistic_for(rule)
        if statistic is None:
            raise ComparisonError(f"axis {rule.metric}: {why_not}")
    source = (f"profile {profile_source}" if profile is not None and profile_source else
              "profile" if profile is not None else
              "the profile recorded in the manifest" if chosen else "catalogue defaults (no profile)")
    source += "; axes without a profile rule use catalogue defaults" if chosen and len(planned) and any(
        m not in planned for m in axes) else ""
    method = Method(confidence=confidence, resamples=resamples, seed=manifest.shuffle_seed if seed is None else seed)
    calc = Calculator(manifest, query, method)
    checks = {arm.name: check_arm(manifest, arm, query) for arm in manifest.arms}

    placed: dict[str, dict[str, ArmValue]] = {}
    excluded: dict[str, tuple[dict[str, ArmValue], str]] = {}
    for arm in manifest.arms:
        values = {r.metric: calc.arm_value(arm.name, r, checks[arm.name]) for r in rules}
        if checks[arm.name].refused:
            excluded[arm.name] = (values, "refused: " + "; ".join(checks[arm.name].problems))
            continue
        missing = [f"{m}: {v.state.value}" + (f" ({v.reason})" if v.reason else "")
                   for m, v in values.items() if v.state is not ResultState.MEASURED]
        if missing:
            excluded[arm.name] = (values, "; ".join(missing))
        else:
            placed[arm.name] = values

    points = {name: {m: v.value for m, v in values.items()} for name, values in placed.items()}
    result = []
    for arm in manifest.arms:
        if arm.name in excluded:
            values, reason = excluded[arm.name]
            result.append(FrontierArm(arm.name, "excluded", values, reason=reason))
            continue
        dominators = [other for other in placed if other != arm.name and dominates(rules, points[other], points[arm.name])]
        dominances = tuple(_dominance(calc, rules, other, arm.name) for other in dominators)
        result.append(FrontierArm(arm.name, "dominated" if dominators else "optimal", placed[arm.name], dominances))
    return Frontier(
        experiment=manifest.reference(), axes=rules, rules_source=source, method=method, arms=tuple(result),
        checks=tuple(checks[a.name] for a in manifest.arms),
        computed_at=now or _dt.datetime.now(_dt.timezone.utc).isoformat(),
    )


def _dominance(calc: Calculator, rules: Sequence[MetricRule], by: str, arm: str) -> Dominance:
    """How sure the dominance of ``arm`` by ``by`` is: the interval of (by - arm) on every axis."""
    differences: dict[str, dict[str, Any]] = {}
    not_worse = True
    better_somewhere = False
    for rule in rules:
        interval, info = calc.difference(arm, by, rule)
        if interval is None:
            differences[rule.metric] = {"difference": None, "ci": None, "reason": info.get("reason")}
            not_worse = False
            continue
        sign = 1.0 if rule.direction is Direction.HIGHER else -1.0
        low, high = sorted((sign * interval.low, sign * interval.high))
        not_worse &= low >= 0
        better_somewhere |= low > 0
        differences[rule.metric] = {
            "difference": interval.estimate, "ci": [interval.low, interval.high], "pairing": info["pairing"],
            "inputs_digest": info["evidence"].inputs_digest,
        }
    return Dominance(by, not_worse and better_somewhere, differences)


def format_frontier(result: Frontier) -> str:
    """The frontier as text: one row per arm with its values and intervals, then who dominates whom."""
    e = result.experiment
    lines = [
        f"frontier of experiment {e['experiment_id']} (manifest {e['manifest_digest'][:12]}) over "
        + ", ".join(f"{a.metric} ({a.aggregation.value}, {a.unit}, {a.direction.value} is better)" for a in result.axes),
        f"rules: {result.rules_source}; {METHOD_NAME}, {result.method.confidence:.0%} intervals, "
        f"{result.method.resamples} resamples, seed {result.method.seed}",
        "",
    ]
    headers = ["arm", "status"] + [a.metric for a in result.axes] + ["dominated by"]
    rows = []
    for arm in result.arms:
        cells = []
        for a in result.axes:
            v = arm.values[a.metric]
            interval = f" [{format_value(v.ci_low, a.unit)}, {format_value(v.ci_high, a.unit)}]"
            cells.append("-" if v.value is None else
                         format_value(v.value, a.unit) + (interval if v.ci_low is not None else ""))
        by = ", ".join(d.by + ("" if d.confident else " (not confident)") for d in arm.dominated_by)
        rows.append([arm.arm, arm.status, *cells, by or "-"])
    lines.append(text_table(headers, rows))
    for arm in result.arms:
        if arm.reason:
            lines.append(f"  {arm.arm} excluded: {arm.reason}")
    certificate = result.certificate()
    lines.append("certified" if certificate["certified"] else
                 "not certified: " + "; ".join(certificate["not_certified_because"] or ["no arm placed"]))
    return "\n".join(lines)
