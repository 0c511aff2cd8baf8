"""A regressions report: every metric of every target, a recent range against a baseline range, from
the window states kept per time bucket (`_time_buckets`), never from spans; and the plans a profile's
metrics need, from the same states.

Ranges are whole hours (the buckets' edges): the recent range ends with the hour now under way and
lasts the requested duration rounded up to whole hours; the baseline is the range just before it,
or, with *same hours*, the same hours of the day on each of the baseline days (for daily cycles).
A bucket counts on a side only when it lies wholly inside that side's range, so no sample is ever
on both sides; buckets already merged into days or weeks (older than `HOURS_KEPT_DAYS` days) count
only where a whole day or week lies inside a range.

Every comparison of the report belongs to one family (`compare_all`): each interval is at the
Bonferroni level, so all of them hold together with the report's confidence.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from meritlens.analytics._accumulate import WindowBook
from meritlens.analytics._catalogue import METRICS, Direction
from meritlens.analytics._definitions import DEFINITIONS_BY_METRIC, WINDOW_DEFINITIONS
from meritlens.analytics._planning import DEFAULT_POWER, plan_relative
from meritlens.analytics._regressions import CORRECTION, Change, compare_all, family_confidence, statistic_of
from meritlens.analytics._time_buckets import BUCKET_KEY_COLUMNS, DAY_US, HOUR_US
from meritlens.analytics._windows import SCOPE_ALL

if TYPE_CHECKING:  # the profile model (pydantic) is loaded only where a profile is read
    from meritlens.analytics._profiles import MetricPlan

DEFAULT_RECENT_US = DAY_US
DEFAULT_BASELINE_US = 7 * DAY_US

Span = tuple[int, int]
"""[start, end) in µs since the epoch."""


def _whole_hours(us: int) -> int:
    return -(-us // HOUR_US) * HOUR_US


def hours_ending(end_us: int, duration_us: int) -> Span:
    """[start, end): ``duration_us`` rounded up to whole hours, ending with the hour under way at ``end_us``."""
    end = end_us // HOUR_US * HOUR_US + HOUR_US
    return end - _whole_hours(duration_us), end


@dataclass(frozen=True)
class ReportRanges:
    """The recent range and the baseline's ranges (one, or one per day with same hours)."""

    recent: Span
    baseline: tuple[Span, ...]
    same_hours: bool = False

    @classmethod
    def ending(cls, end_us: int, recent_us: int = DEFAULT_RECENT_US, baseline_us: int = DEFAULT_BASELINE_US,
               same_hours: bool = False) -> ReportRanges:
        """The ranges of a report made at ``end_us`` (see the module); ValueError names a wrong duration."""
        if recent_us <= 0 or baseline_us <= 0:
            raise ValueError(f"ranges last a positive time, not {recent_us} µs and {baseline_us} µs")
        start, end = hours_ending(end_us, recent_us)
        recent, baseline = end - start, _whole_hours(baseline_us)
        if not same_hours:
            return cls((start, end), ((start - baseline, start),))
        if recent > DAY_US:
            raise ValueError(f"same hours compares hours of the day: the recent range lasts at most 24h, "
                             f"not {recent // HOUR_US}h")
        if baseline % DAY_US:
            raise ValueError(f"with same hours the baseline is whole days (e.g. 7d), not {baseline / DAY_US:g} days")
        days = range(1, baseline // DAY_US + 1)
        return cls((start, end), tuple((start - d * DAY_US, end - d * DAY_US) for d in days), True)

    @property
    def since_us(self) -> int:
        return min(s for s, _ in self.baseline)

    @property
    def until_us(self) -> int:
        return self.recent[1]

    def side(self, key: tuple) -> str | None:
        """"recent", "baseline" or None: the side a bucket key lies wholly in."""
        start, stop = key[2], key[2] + key[3]
        if self.recent[0] <= start and stop <= self.recent[1]:
            return "recent"
        if any(s <= start and stop <= e for s, e in self.baseline):
            return "baseline"
        return None

    def to_dict(self) -> dict:
        return {"recent": _span_dict(self.recent), "baseline": [_span_dict(s) for s in self.baseline],
                "same_hours": self.same_hours}


def _iso(us: int) -> str:
    return (_dt.datetime(1970, 1, 1, tzinfo=_dt.UTC) + _dt.timedelta(microseconds=us)).isoformat()


def _span_dict(span: Span) -> dict:
    return {"from": _iso(span[0]), "to": _iso(span[1])}


def _sides(book: WindowBook, ranges: ReportRanges, scope: str, target: str | None) -> dict[str, dict[str, list]]:
    """target -> side -> the bucket keys of that side."""
    sides: dict[str, dict[str, list]] = {}
    for key in book.keys:
        if len(key) != len(BUCKET_KEY_COLUMNS) or key[1] != scope or (target is not None and key[0] != target):
            continue
        side = ranges.side(key)
        if side is not None:
            sides.setdefault(key[0], {"recent": [], "baseline": []})[side].append(key)
    return sides


def regression_report(book: WindowBook, ranges: ReportRanges, *, confidence: float = 0.95, scope: str = SCOPE_ALL,
                      target: str | None = None, plans: Mapping[str, Mapping[str, MetricPlan]] | None = None,
                      generated_at: _dt.datetime | None = None) -> dict:
    """The report (JSON-ready) of every metric of every target (or ``target``) that ``book``'s bucket
    states hold samples of. ``plans``: target -> metric -> the profile's plan, whose ``min_samples``,
    ``tolerance`` and ``aggregation`` apply to that target's metric."""
    plans = plans or {}
    pairs, skipped, buckets = {}, [], {"recent": set(), "baseline": set()}
    for tgt, keys in sorted(_sides(book, ranges, scope, target).items()):
        for side, side_keys in keys.items():
            buckets[side].update(k[2:] for k in side_keys)
        recent = book.merged(keys["recent"], (tgt, scope), times=False)
        baseline = book.merged(keys["baseline"], (tgt, scope), times=False)
        for d in WINDOW_DEFINITIONS:
            plan = plans.get(tgt, {}).get(d.metric)
            r, b = recent.state((tgt, scope), d.metric), baseline.state((tgt, scope), d.metric)
            if r.values.n == 0 and b.values.n == 0:
                continue  # nothing of this metric in either range (e.g. no priced task): not a comparison
            if statistic_of(d, plan.aggregation if plan else None) is None:
                skipped.append({"target": tgt, "metric": d.metric,
                                "reason": "its value is not a statistic of its samples"})
            elif r.needs_recompute or b.needs_recompute:
                skipped.append({"target": tgt, "metric": d.metric,
                                "reason": "a bucket's state must be recomputed from its spans first"})
            else:
                pairs[(tgt, d.metric)] = (r, b)
    by_pair = {key: plans.get(key[0], {}).get(key[1]) for key in pairs}
    results = compare_all(
        pairs, confidence=confidence,
        min_samples={k: p.min_samples for k, p in by_pair.items() if p},
        tolerance={k: p.tolerance for k, p in by_pair.items() if p and p.tolerance is not None},
        aggregation={k: p.aggregation for k, p in by_pair.items() if p})
    rows = [{"target": tgt, "unit": METRICS[metric].unit, "direction": METRICS[metric].direction.value,
             **results[(tgt, metric)].to_dict()} for tgt, metric in pairs]
    family = next(iter(results.values())).family_size if results else 0
    verdicts = [r["verdict"] for r in rows]
    return {
        "generated_at": (generated_at or _dt.datetime.now(_dt.UTC)).isoformat(), "scope": scope,
        **ranges.to_dict(), "recent_buckets": len(buckets["recent"]), "baseline_buckets": len(buckets["baseline"]),
        "confidence": confidence, "correction": CORRECTION, "family_size": family,
        "interval_confidence": family_confidence(confidence, family) if family else None,
        "worse": verdicts.count(Change.WORSE.value), "better": verdicts.count(Change.BETTER.value),
        "regressions": rows, "not_compared": skipped,
    }


def plan_report(book: WindowBook, target: str, plans: Mapping[str, MetricPlan], relative_change: float, *,
                since_us: int, until_us: int, confidence: float = 0.95, power: float = DEFAULT_POWER,
                scope: str = SCOPE_ALL) -> dict:
    """Samples per side each metric of a profile needs for a regression to show a change of
    ``relative_change`` (0.1: 10%) in its bad direction, planned from the target's bucket states that
    lie in [since, until). The family is the profile's metrics that can be planned (a regression
    would test them together)."""
    if not relative_change > 0:
        raise ValueError(f"the change to detect is a positive share (0.1 for 10%), not {relative_change}")
    keys = [k for k in book.keys if len(k) == len(BUCKET_KEY_COLUMNS) and k[:2] == (target, scope)
            and since_us <= k[2] and k[2] + k[3] <= until_us]
    merged = book.merged(keys, (target, scope), times=False)
    states, notes = {}, {}
    for metric, plan in plans.items():
        definition = DEFINITIONS_BY_METRIC.get(metric)
        state = merged.state((target, scope), metric) if definition else None
        if definition is None:
            notes[metric] = "no stored distribution to plan from: no window by time (an evaluator's or plugin's metric)"
        elif statistic_of(definition, plan.aggregation) is None:
            notes[metric] = "no plan: its value is not a statistic of its samples"
        elif state.values.n < 2 or state.needs_recompute:
            notes[metric] = (f"no stored distribution to plan from: {state.values.n} sample"
                             f"{'s' if state.values.n != 1 else ''} in the range")
        else:
            states[metric] = state
    family = max(1, len(states))
    rows = []
    for metric, plan in plans.items():
        row = {"metric": metric, "unit": METRICS[metric].unit, "min_samples": plan.min_samples}
        if metric in states:
            sign = -1.0 if METRICS[metric].direction is Direction.HIGHER else 1.0
            try:
                found = plan_relative(states[metric], sign * relative_change, confidence=confidence, power=power,
                                      family_size=family, aggregation=plan.aggregation)
                row.update(found.to_dict(), note=None if found.samples is not None else "beyond the largest plan")
            except ValueError as exc:
                row["note"] = f"no plan: {exc}"
        else:
            row["note"] = notes[metric]
        rows.append(row)
    return {"target": target, "scope": scope, "from": _iso(since_us), "to": _iso(until_us), "buckets": len(keys),
            "relative_change": relative_change, "power": power, "confidence": confidence, "correction": CORRECTION,
            "family_size": family, "plans": rows}


__all__ = ["DEFAULT_BASELINE_US", "DEFAULT_RECENT_US", "ReportRanges", "hours_ending", "plan_report",
           "regression_report"]
