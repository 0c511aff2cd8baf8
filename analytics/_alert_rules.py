"""The alert rules of a task profile: its ``[[alerts]]`` array, each entry validated into the rule the
collector evaluates for the profile's target (`meritlens.analytics._alerts`)::

    [[alerts]]
    name = "latency-p95"          # the rule's id: unique among the loaded profiles
    kind = "constraint"           # constraint | regression | no_data
    metric = "end_to_end_latency"
    threshold = 2.0               # a constraint's; default: the metric's constraint under [metrics.<id>]
    confidence = 0.95             # over any 30 days
    min_samples = 200             # default: the metric's min_samples under [metrics.<id>], else 30
    range = "1h"                  # whole hours, up to 30 days
    baseline = "7d"               # a regression's: the range before the current one it is compared with
    tolerance = 0.5               # a regression's; default: the metric's tolerance, else 0
    quantile = 0.95               # the quantile of a percentile metric

The direction (a ceiling or a floor) is the metric's own; the aggregation the profile's plan of the
metric when it has one. A ``no_data`` rule fires when the target's samples of its metric (default
``end_to_end_latency``, which every task has) stop for its range.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from meritlens.analytics._alerts import MONTH_US, AlertRule, RuleKind
from meritlens.analytics._definitions import DEFINITIONS_BY_METRIC
from meritlens.analytics._format import suggestion
from meritlens.analytics._time_buckets import HOUR_US, parse_duration

NO_DATA = "no_data"
KINDS = (RuleKind.CONSTRAINT.value, RuleKind.REGRESSION.value, NO_DATA)
NO_DATA_METRIC = "end_to_end_latency"
DEFAULT_MIN_SAMPLES = 30
DEFAULT_RANGE = "1h"
ALERT_KEYS = ("name", "kind", "metric", "threshold", "tolerance", "confidence", "min_samples", "range", "baseline",
              "quantile")


@dataclass(frozen=True)
class ProfileAlert:
    """One ``[[alerts]]`` entry: its name, kind and metric, the rule (None for ``no_data``), its range
    and a regression's baseline range (µs), and the entry as written (``source``)."""

    name: str
    kind: str
    metric: str
    rule: AlertRule | None
    range_us: int
    baseline_us: int | None
    source: tuple

    def to_dict(self) -> dict[str, Any]:
        return dict(self.source)


def _hours_us(raw, field: str) -> int:
    try:
        us = int(parse_duration(raw).total_seconds() * 1_000_000)
    except ValueError as exc:
        raise ValueError(f"{field}: {exc}") from None
    if us % HOUR_US or us > MONTH_US:
        raise ValueError(f"{field}: {raw!r} is not a whole number of hours up to 30 days (e.g. 1h, 24h, 7d)")
    return us


def _number(raw: Mapping, field: str, default=None, *, integer: bool = False):
    value = raw.get(field, default)
    if value is None:
        return None
    wanted = int if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, wanted) or (not integer and not math.isfinite(value)):
        raise ValueError(f"{field}: must be {'an integer' if integer else 'a finite number'}, got {value!r}")
    return value


def parse_alert(raw: Any, plans: Mapping[str, Any]) -> ProfileAlert:
    """One ``[[alerts]]`` entry against the profile's metric plans (``plans``: metric -> plan with
    constraint, tolerance, min_samples and aggregation); ValueError says what is wrong, in one line."""
    if not isinstance(raw, Mapping):
        raise ValueError(f"must be a table of keys, got {raw!r}")
    unknown = [key for key in raw if key not in ALERT_KEYS]
    if unknown:
        raise ValueError(f"{unknown[0]}: unknown key{suggestion(unknown[0], ALERT_KEYS, 'valid keys')}")
    kind = raw.get("kind")
    if kind not in KINDS:
        raise ValueError(f"kind: must be one of {', '.join(KINDS)}, got {kind!r}")
    metric = raw.get("metric", NO_DATA_METRIC if kind == NO_DATA else None)
    if not isinstance(metric, str):
        raise ValueError(f"metric: must name a metric, got {metric!r}")
    plan = plans.get(metric)
    range_us = _hours_us(raw.get("range", DEFAULT_RANGE), "range")
    baseline = raw.get("baseline")
    if (baseline is not None) != (kind == RuleKind.REGRESSION.value):
        raise ValueError("baseline: a regression needs one (e.g. baseline = \"7d\")" if baseline is None else
                         f"baseline: only a regression has one, not a {kind} rule")
    baseline_us = _hours_us(baseline, "baseline") if baseline is not None else None
    for field in ("threshold", "tolerance", "confidence", "min_samples", "quantile"):
        _number(raw, field, integer=field == "min_samples")
    if kind == NO_DATA:
        extra = [f for f in ("threshold", "tolerance", "confidence", "min_samples", "quantile") if f in raw]
        if extra:
            raise ValueError(f"{extra[0]}: a no_data rule has none (it fires when the samples stop for its range)")
        if metric not in DEFINITIONS_BY_METRIC:
            raise ValueError(f"metric: no window of the collector computes {metric!r}")
        return ProfileAlert(_name(raw), kind, metric, None, range_us, None, tuple(raw.items()))
    if kind == RuleKind.CONSTRAINT.value and "tolerance" in raw:
        raise ValueError("tolerance: a constraint has a threshold, not a tolerance")
    if kind == RuleKind.REGRESSION.value and "threshold" in raw:
        raise ValueError("threshold: a regression has a tolerance (the smallest change that counts), not a threshold")
    threshold = _number(raw, "threshold", getattr(plan, "constraint", None))
    if kind == RuleKind.CONSTRAINT.value and threshold is None:
        raise ValueError(f"threshold: missing, and the profile gives {metric} no constraint")
    min_samples = _number(raw, "min_samples", getattr(plan, "min_samples", DEFAULT_MIN_SAMPLES), integer=True)
    try:
        rule = AlertRule(metric, RuleKind(kind), threshold=threshold if kind == RuleKind.CONSTRAINT.value else None,
                         tolerance=_number(raw, "tolerance", getattr(plan, "tolerance", None)) or 0.0,
                         confidence=_number(raw, "confidence", 0.95), min_samples=min_samples, range_us=range_us,
                         aggregation=getattr(plan, "aggregation", None), quantile=_number(raw, "quantile"))
    except ValueError as exc:
        raise ValueError(str(exc).removeprefix(f"alert rule on {metric}: ")) from None
    return ProfileAlert(_name(raw), kind, metric, rule, range_us, baseline_us, tuple(raw.items()))


def _name(raw: Mapping) -> str:
    return raw["name"]


def alert_name(raw: Any, index: int) -> str:
    """The entry's name for messages, or its position when it has none (checked by `check_name`)."""
    name = raw.get("name") if isinstance(raw, Mapping) else None
    return name if isinstance(name, str) and name.strip() else f"#{index + 1}"


def check_name(raw: Any, seen: set[str]) -> None:
    name = raw.get("name") if isinstance(raw, Mapping) else None
    if not isinstance(name, str) or not name.strip() or any(ch.isspace() for ch in name):
        raise ValueError(f"name: every rule needs a name without spaces (its id), got {name!r}")
    if name in seen:
        raise ValueError(f"name: {name!r} names another rule of the profile too")
    seen.add(name)


__all__ = ["ALERT_KEYS", "KINDS", "NO_DATA", "NO_DATA_METRIC", "ProfileAlert", "alert_name", "check_name",
           "parse_alert"]
