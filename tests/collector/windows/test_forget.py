"""Forgetting spans: after `forget`, the windows, the windows by time and their evidence digests equal those of a
store that never received the forgotten spans, whichever spans of a task go (some of its calls, its root, whole
traces, whole targets), with the state in memory or saved, and across a restart."""

from __future__ import annotations

import random

import pytest

from meritlens.collector.windows._forget import ForgetError, condition, forget
from tests.analytics.evidence_helpers import store_spans
from tests.collector.windows.test_windows_by_time import Clock, _by_time, _spans_over_hours, _store


def _reference(tmp_path, spans, clock, name: str) -> tuple[list, list]:
    (tmp_path / name).mkdir()
    store = _store(tmp_path / name / "spans.duckdb", clock)
    try:
        if spans:
            store_spans(store, spans)
        return store.window_rows(), _by_time(store)
    finally:
        store.shutdown()


def _pick(spans, rng: random.Random) -> tuple[str, set[str]]:
    """A condition over `spans` naming some single spans, one whole trace and, at times, one whole target; and
    the span ids it names."""
    singles = rng.sample(spans, max(1, len(spans) // 6))
    trace = rng.choice(spans).trace_id
    parts = [f"span_id IN ({', '.join(repr(s.span_id) for s in singles)})"]
    gone = {s.span_id for s in singles} | {s.span_id for s in spans if s.trace_id == trace}
    if rng.random() < 0.5:
        parts.append("target_id = 'bot-b'")
        gone |= {s.span_id for s in spans if s.attributes.get("meritlens.target.id") == "bot-b"}
    return condition([trace], " OR ".join(parts)), gone


@pytest.mark.parametrize("seed", range(4))
def test_windows_after_forgetting_equal_a_store_that_never_received_the_spans(tmp_path, seed):
    clock, rng = Clock(), random.Random(seed)
    spans = _spans_over_hours(seed, 4)
    where, gone = _pick(spans, rng)
    kept = [s for s in spans if s.span_id not in gone]
    (tmp_path / "store").mkdir()
    path = tmp_path / "store" / "spans.duckdb"
    store = _store(path, clock, window_memory_bytes=1 if seed % 2 else 1 << 30)  # odd seeds: state saved, evicted
    try:
        for i in range(0, len(spans), 9):
            store_spans(store, spans[i:i + 9])
        dry = forget(store.windows, where, act=False)
        assert (dry.spans, dry.done) == (len(gone), False)
        assert store.query("select count(*) from spans").rows[0][0] == len(spans)
        report = forget(store.windows, where, act=True)
        assert report.spans == len(gone) and report.windows_changed > 0
        assert store.query("select count(*) from spans").rows[0][0] == len(kept)
        expected = _reference(tmp_path, kept, clock, "reference")
        assert (store.window_rows(), _by_time(store)) == expected
    finally:
        store.shutdown()
    # the saved state is the state after forgetting: a restart takes it up
    store = _store(path, clock)
    try:
        assert store.open_windows()[1] is True
        assert (store.window_rows(), _by_time(store)) == expected
    finally:
        store.shutdown()


@pytest.mark.parametrize("trace_ids, where, message", [
    ((), None, "name the spans to forget"),
    (("XYZ",), None, "is not a trace id"),
    ((), "  ", "--where is empty"),
])
def test_a_request_naming_no_spans_is_refused_in_one_line(trace_ids, where, message):
    with pytest.raises(ForgetError, match=message):
        condition(trace_ids, where)


def test_a_condition_that_writes_or_does_not_run_is_refused(tmp_path):
    store = _store(tmp_path / "spans.duckdb", Clock())
    try:
        store_spans(store, _spans_over_hours(1, 1))
        before = store.query("select count(*) from spans").rows[0][0]
        for where in ("true; DELETE FROM spans", "no_such_column = 1", "(true) UNION ALL (SELECT 1, 2, 3)",
                      "true) OR (false"):
            with pytest.raises(ForgetError, match="cannot select spans|not one SQL condition"):
                forget(store.windows, condition((), where), act=True)
        assert store.query("select count(*) from spans").rows[0][0] == before
    finally:
        store.shutdown()
