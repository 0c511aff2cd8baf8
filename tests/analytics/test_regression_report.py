"""The regressions report over hour buckets: which bucket counts on which side (never both), same hours,
one Bonferroni family over every target, a profile's options for its target only, the statistics'
merge without times, and a plan's notes where there is nothing to plan from."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from meritlens.analytics._profiles import profile_from_dict
from meritlens.analytics._regression_report import ReportRanges, hours_ending, plan_report, regression_report
from meritlens.analytics._regressions import compare
from meritlens.analytics._time_buckets import DAY_US, HOUR_US
from tests.analytics.window_states import T0_US, hour_book, sample_rows

NOW_US = T0_US + 30 * 60_000_000  # half past an hour


def test_ranges_are_whole_hours_ending_with_the_hour_under_way():
    r = ReportRanges.ending(NOW_US, 3 * HOUR_US, DAY_US)
    assert r.recent == (T0_US - 2 * HOUR_US, T0_US + HOUR_US)
    assert r.baseline == ((T0_US - 2 * HOUR_US - DAY_US, T0_US - 2 * HOUR_US),)
    assert hours_ending(NOW_US, 90 * 60_000_000) == (T0_US - HOUR_US, T0_US + HOUR_US)  # 90 minutes: two hours
    assert r.side(("t", "all", T0_US, HOUR_US)) == "recent"
    assert r.side(("t", "all", T0_US - 3 * HOUR_US, HOUR_US)) == "baseline"
    assert r.side(("t", "all", T0_US - 2 * HOUR_US - DAY_US - HOUR_US, HOUR_US)) is None
    # a day bucket across the edge between the sides is on neither
    assert r.side(("t", "all", T0_US - 12 * HOUR_US, DAY_US)) is None
    same = ReportRanges.ending(NOW_US, 3 * HOUR_US, 2 * DAY_US, same_hours=True)
    assert same.baseline == tuple((T0_US - 2 * HOUR_US - d * DAY_US, T0_US + HOUR_US - d * DAY_US) for d in (1, 2))
    assert same.side(("t", "all", T0_US - DAY_US, HOUR_US)) == "baseline"
    assert same.side(("t", "all", T0_US - 12 * HOUR_US, HOUR_US)) is None  # another hour of the day
    with pytest.raises(ValueError, match="at most 24h, not 25h"):
        ReportRanges.ending(NOW_US, 25 * HOUR_US, 2 * DAY_US, same_hours=True)
    with pytest.raises(ValueError, match="whole days"):
        ReportRanges.ending(NOW_US, HOUR_US, 36 * HOUR_US, same_hours=True)


def _rows(metric: str, values, end_us, target: str) -> pa.Table:
    return sample_rows(metric, values, np.full(len(values), end_us), target)


def _book(rng) -> object:
    """Two targets; ``slow`` has its latency doubled in the last hour; every other sample is alike."""
    parts = []
    for target in ("slow", "steady"):
        for hours_ago in range(1, 20):
            parts.append(_rows("end_to_end_latency", rng.lognormal(0, 0.3, 40), T0_US - hours_ago * HOUR_US + 5,
                               target))
        factor = 2.0 if target == "slow" else 1.0
        parts.append(_rows("end_to_end_latency", rng.lognormal(0, 0.3, 150) * factor, T0_US + 5, target))
    return hour_book(pa.concat_tables(parts), NOW_US)


def test_one_family_over_every_target_and_a_profile_for_its_target_only():
    book = _book(np.random.default_rng(7))
    ranges = ReportRanges.ending(NOW_US, HOUR_US, DAY_US)
    report = regression_report(book, ranges)
    verdicts = {(r["target"], r["metric"]): r["verdict"] for r in report["regressions"]}
    assert verdicts == {("slow", "end_to_end_latency"): "worse", ("steady", "end_to_end_latency"): "no_change"}
    assert (report["family_size"], report["worse"]) == (2, 1)
    assert (report["recent_buckets"], report["baseline_buckets"]) == (1, 19)
    assert report["interval_confidence"] == pytest.approx(0.975)
    steady = next(r for r in report["regressions"] if r["target"] == "steady")
    assert (steady["recent_samples"], steady["baseline_samples"]) == (150, 19 * 40)
    # the profile's min_samples (200) apply to its target: the slow target's 150 recent samples are too few,
    # and it leaves the family, so the steady target's interval is at the family's level of one
    profile = profile_from_dict({"target": "slow", "metrics": {"end_to_end_latency": {
        "direction": "lower", "strategy": "representative_task_set", "cases": 200, "repetitions": 1,
        "aggregation": "percentile", "min_samples": 200, "rationale": "r"}}})
    planned = regression_report(book, ranges, plans={"slow": profile.metrics})
    by_target = {r["target"]: r for r in planned["regressions"]}
    assert by_target["slow"]["verdict"] == "not_enough_samples" and by_target["slow"]["min_samples"] == 200
    assert by_target["steady"]["min_samples"] == 2 and planned["family_size"] == 1
    assert regression_report(book, ranges, target="steady")["regressions"][0]["target"] == "steady"


def test_the_statistics_merge_without_times_gives_the_same_comparison():
    book = _book(np.random.default_rng(11))
    keys = [k for k in book.keys if k[0] == "slow"]
    recent = [k for k in keys if k[2] == T0_US]
    baseline = [k for k in keys if k[2] < T0_US]

    def compared(times: bool):
        r = book.merged(recent, ("slow", "all"), times=times).state(("slow", "all"), "end_to_end_latency")
        b = book.merged(baseline, ("slow", "all"), times=times).state(("slow", "all"), "end_to_end_latency")
        return compare(r, b).to_dict()

    assert compared(False) == compared(True)


def test_plans_say_where_there_is_nothing_to_plan_from():
    book = _book(np.random.default_rng(5))
    plans = profile_from_dict({"target": "steady", "metrics": {
        "end_to_end_latency": {"direction": "lower", "strategy": "representative_task_set", "cases": 40,
                               "repetitions": 1, "aggregation": "percentile", "min_samples": 30, "rationale": "r"},
        "task_success": {"direction": "higher", "strategy": "representative_task_set", "cases": 40,
                         "repetitions": 1, "aggregation": "rate", "min_samples": 30, "rationale": "r"},
        "consistency": {"direction": "higher", "strategy": "repeated_same_input", "cases": 1,
                        "repetitions": 40, "aggregation": "mean", "min_samples": 30, "rationale": "r"},
    }}).metrics
    since, until = hours_ending(NOW_US, DAY_US)
    report = plan_report(book, "steady", plans, 0.2, since_us=since, until_us=until)
    rows = {r["metric"]: r for r in report["plans"]}
    assert report["family_size"] == 1 and report["buckets"] == 20
    assert rows["end_to_end_latency"]["method"] == "simulation_order_statistics"
    assert 10 < rows["end_to_end_latency"]["samples"] < 2000 and rows["end_to_end_latency"]["change"] > 0
    assert rows["task_success"]["note"] == "no stored distribution to plan from: 0 samples in the range"
    assert rows["consistency"]["note"].startswith("no stored distribution to plan from: no window by time")
    with pytest.raises(ValueError, match="positive share"):
        plan_report(book, "steady", plans, 0, since_us=since, until_us=until)
