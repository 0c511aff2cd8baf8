"""Windows by time: every window definition per hour (then day, then week) of its samples' end time.

Followed incrementally, in any batching, with retries and late spans, `windows_by_time` must equal a
computation from scratch; a late span moves its task to the hour it now ends in; as time passes,
hours merge into days and days into weeks exactly as a computation from scratch at that time buckets
them, and the table stays bounded.
"""

from __future__ import annotations

import dataclasses
import random

import pytest

from meritlens.analytics._time_buckets import DAY_US, HOUR_US, HOURS_KEPT_DAYS, BucketCutoffs
from meritlens.instrumentation import conventions as c
from tests.analytics.evidence_helpers import Ids, S, Span, span_rows, store_spans
from tests.collector.windows.test_incremental_windows import _random_spans
from tests.store_under_test import StoreUnderTest

NOW_US = 1_796_000_000_000_000  # 2026-11-30
_BY_TIME = ("target_id", "metric", "scope", "bucket_start", "bucket_seconds", "aggregation", "value", "sample_count",
            "state", "count", "mean", "stddev", "min", "max", "p50", "p90", "p95", "p99", "quantile_error",
            "first_span_time", "last_span_time", "evidence_uri", "evidence_digest")


class Clock:
    def __init__(self, us: int = NOW_US):
        self.us = us

    def __call__(self) -> int:
        return self.us


def _by_time(store: StoreUnderTest) -> list[tuple]:
    return store.query(f"select {', '.join(_BY_TIME)} from windows_by_time order by all").rows


def _shifted(spans: list[Span], seconds: int) -> list[Span]:
    return [dataclasses.replace(s, start_ns=s.start_ns + seconds * S, end_ns=s.end_ns + seconds * S) for s in spans]


def _spans_over_hours(seed: int, hours: int, back_days: float = 2.0) -> list[Span]:
    """Random tasks (several traces, wrappers, tools, errors, assessments) spread over ``hours`` hours
    that end ``back_days`` before the test's now."""
    rng = random.Random(seed)
    base = NOW_US // 1_000_000 - int(back_days * 86_400) - 1_700_000_000
    return [s for k in range(hours)
            for s in _shifted(_random_spans(seed * 100 + k), base + k * 3600 + rng.randint(0, 3000))]


def _store(path, clock: Clock, **options) -> StoreUnderTest:
    store = StoreUnderTest(str(path), clock=clock, state_save_s=0, **options)
    store.start()
    return store


def _from_scratch(tmp_path, spans, clock: Clock, name: str) -> list[tuple]:
    (tmp_path / name).mkdir()
    store = _store(tmp_path / name / "spans.duckdb", clock)
    try:
        store.write(span_rows(spans), refresh_windows=False)
        store.refresh_all_windows()
        return _by_time(store)
    finally:
        store.shutdown()


@pytest.mark.parametrize("seed", range(4))
def test_windows_by_time_followed_in_batches_equal_a_computation_from_scratch(tmp_path, seed):
    clock = Clock()
    spans = _spans_over_hours(seed, 5)
    rng = random.Random(seed)
    order = spans[:]
    rng.shuffle(order)
    (tmp_path / "store").mkdir()
    store = _store(tmp_path / "store" / "spans.duckdb", clock, window_memory_bytes=1 if seed % 2 else 1 << 30)
    try:
        for i in range(0, len(order), 7):
            store_spans(store, order[i:i + 7])
        store_spans(store, rng.sample(order, len(order) // 4))  # a client's retry
        got = _by_time(store)
        assert {row[4] for row in got} == {3600} and len({row[3] for row in got}) >= 4  # hours
        assert got == _from_scratch(tmp_path, spans, clock, "scratch")
        # each bucket's samples add up to the cumulative window's
        totals = store.query("select target_id, scope, metric, sum(sample_count) from windows_by_time"
                             " group by all having sum(sample_count) > 0 order by all").rows
        assert totals == store.query("select target_id, scope, metric, sample_count from windows"
                                     " where sample_count > 0 order by all").rows
    finally:
        store.shutdown()


def test_a_late_span_moves_its_task_to_the_hour_it_now_ends_in(tmp_path):
    clock = Clock()
    ids = Ids(5)
    start = (NOW_US - DAY_US) // HOUR_US * HOUR_US * 1000 + 10 * 60 * S  # 10 minutes past an hour, yesterday
    trace = ids.trace()
    task = {c.TARGET_ID: "bot", c.TASK_ID: "late-task", c.OUTCOME_SUCCESS: True}
    first = Span(trace, ids.span(), "chat", start, start + 60 * S, {**task, c.GEN_AI_OPERATION_NAME: c.OP_CHAT,
                                                                   c.GEN_AI_USAGE_INPUT_TOKENS: 100})
    late = Span(trace, ids.span(), "chat", start + 3600 * S, start + 3700 * S, {
        **task, c.GEN_AI_OPERATION_NAME: c.OP_CHAT, c.GEN_AI_USAGE_INPUT_TOKENS: 50})
    store = _store(tmp_path / "spans.duckdb", clock)
    try:
        store_spans(store, [first])
        hour = store.query("select epoch_us(bucket_start), value from windows_by_time"
                           " where metric = 'input_tokens' and sample_count > 0").rows
        assert hour == [(start // 1000 // HOUR_US * HOUR_US, 100.0)]
        store_spans(store, [late])
        rows = store.query("select epoch_us(bucket_start), value, sample_count from windows_by_time"
                           " where metric = 'input_tokens' order by 1").rows
        # the task now ends an hour later: its sample left the first hour (which keeps an empty row)
        assert rows == [(hour[0][0], None, 0), (hour[0][0] + HOUR_US, 150.0, 1)]
    finally:
        store.shutdown()


def test_hours_merge_into_days_and_weeks_as_a_computation_at_that_time_would_bucket_them(tmp_path):
    clock = Clock()
    spans = [s for day in range(0, 40, 3) for s in _spans_over_hours(day, 2, back_days=day + 0.5)]
    (tmp_path / "store").mkdir()
    store = _store(tmp_path / "store" / "spans.duckdb", clock)
    try:
        store_spans(store, spans)
        widths = {row[0] for row in store.query("select distinct bucket_seconds from windows_by_time").rows}
        assert widths == {3600, 86400}
        cumulative = store.query("select * exclude (computed_at) from windows order by all").rows
        for days in (1, 5, 30, 400, 1400):  # time passes: hours become days, days weeks, old weeks go
            clock.us = NOW_US + days * DAY_US
            assert store.compact_if_due()
            assert store.cutoffs == BucketCutoffs.at(clock.us)
            assert _by_time(store) == _from_scratch(tmp_path, spans, clock, f"scratch-{days}"), days
            assert store.query("select * exclude (computed_at) from windows order by all").rows == cumulative
        assert _by_time(store) == []  # every sample is now older than the last week kept
        assert store.query("select count(*) from window_bucket_state").rows == [(0,)]
    finally:
        store.shutdown()


def test_the_table_holds_at_most_the_buckets_of_its_tiers(tmp_path):
    clock = Clock()
    store = _store(tmp_path / "spans.duckdb", clock)
    try:
        spans = [s for day in range(0, 60, 2) for s in _spans_over_hours(day, 1, back_days=day)]
        store_spans(store, spans)
        per_key = store.query("select target_id, scope, metric, count(*) from windows_by_time group by all").rows
        cutoffs = BucketCutoffs.at(clock.us)
        most = HOURS_KEPT_DAYS * 24 + 1 + (cutoffs.hours_from - cutoffs.days_from) // DAY_US
        assert per_key and max(r[3] for r in per_key) <= most
    finally:
        store.shutdown()


def test_a_restart_keeps_the_buckets_and_their_cutoffs(tmp_path):
    clock = Clock()
    spans = _spans_over_hours(77, 4)
    (tmp_path / "store").mkdir()
    path = tmp_path / "store" / "spans.duckdb"
    store = _store(path, clock)
    store_spans(store, spans[: len(spans) // 2])
    store.shutdown()
    store = _store(path, clock)
    try:
        assert store.open_windows()[1] is True
        store_spans(store, spans[len(spans) // 2:])
        assert store.stats["rebuilds"] == 0
        assert _by_time(store) == _from_scratch(tmp_path, spans, clock, "scratch")
    finally:
        store.shutdown()


def _hours_ago(hours: float, seed: int, count: int = 3, target: str = "bot") -> list[Span]:
    """``count`` one-call tasks ending about ``hours`` before the real now."""
    import time as _time

    ids = Ids(seed)
    end = int((_time.time() - hours * 3600) * 1e9)
    return [Span(ids.trace(), ids.span(), "chat", end - (k + 2) * S, end - k * S, {
        c.TARGET_ID: target, c.GEN_AI_OPERATION_NAME: c.OP_CHAT, c.GEN_AI_USAGE_INPUT_TOKENS: 100 * seed + k,
        c.OUTCOME_SUCCESS: k % 2 == 0}, kind=3) for k in range(count)]


def _range_rows(*args: str) -> tuple[dict, str]:
    import json

    from tests.cli_runner import run_cli

    done = run_cli("windows", "--metric", "input_tokens", "--format", "json", *args)
    rows = {(r["target_id"], r["scope"]): (r["value"], r["sample_count"]) for r in json.loads(done.stdout)}
    return rows, done.stderr


def test_windows_of_a_time_range_through_a_collector_and_on_the_file(tmp_path):
    """`meritlens windows --since/--between` merge the hour buckets that overlap the range: through
    a running collector (its freshest buckets) and on the file it leaves, the same windows."""
    import datetime as _dt

    from tests.analytics.evidence_helpers import post_spans
    from tests.conftest import CollectorProcess

    old, recent = _hours_ago(30, 1), _hours_ago(0.2, 2)
    collector = CollectorProcess(tmp_path / "meritlens.duckdb").start()
    try:
        post_spans(collector.url, old + recent)
        through, covered = _range_rows("--since", "2h", "--url", collector.url)
        assert through == {("bot", "all"): (float(sum(100 * 2 + k for k in range(3))), 3)}
        assert "1 time bucket" in covered
        day = _dt.datetime.now(_dt.UTC) - _dt.timedelta(hours=40)
        both, _ = _range_rows("--between", day.isoformat(), _dt.datetime.now(_dt.UTC).isoformat(),
                              "--url", collector.url)
        assert both[("bot", "all")][1] == 6
    finally:
        collector.stop()
    on_file, _ = _range_rows("--since", "2h", "--db", str(tmp_path / "meritlens.duckdb"))
    assert on_file == through
    nothing, covered = _range_rows("--between", "2001-01-01", "2001-01-02", "--db", str(tmp_path / "meritlens.duckdb"))
    assert nothing == {} and "no window by time" in covered
