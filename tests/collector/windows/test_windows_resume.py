"""At start the store takes up the saved window state where it was left, when that is exact.

The state is saved with its watermark and a digest of the window definitions. A restart takes it
up (tests/collector/windows/test_window_state.py) and follows the spans committed after the
watermark from `spans`. Whatever happened before the restart (a clean shutdown, spans committed
whose windows never followed, a bulk load never rebuilt, other window definitions), the rows after
further batches must equal a computation from scratch.
"""

from __future__ import annotations

import random

import duckdb
import pytest

from meritlens.analytics import JudgeCall
from meritlens.collector.cli._evaluation import FileEvaluationStore
from meritlens.collector.windows import _state
from meritlens.instrumentation.conventions import TARGET_ID
from tests.analytics.evidence_helpers import span_rows, store_spans
from tests.collector.windows.test_incremental_windows import _random_spans
from tests.collector.windows.test_rebuild_partitions import _random_store_spans
from tests.store_under_test import StoreUnderTest


def _open(path, **settings) -> StoreUnderTest:
    """A started store whose processor saves its state after every pass (the collector's: every few seconds)."""
    store = StoreUnderTest(str(path), **{"state_save_s": 0, **settings})
    store.start()
    return store


def _crash(store: StoreUnderTest) -> None:
    """Close the file without the shutdown's window pass (what a killed process leaves)."""
    store.close_queue()
    store.crash()


def _from_scratch(tmp_path, spans, name: str = "scratch") -> list[tuple]:
    """The window rows of a store holding ``spans``, computed from scratch (same file name)."""
    (tmp_path / name).mkdir()
    store = _open(tmp_path / name / "spans.duckdb")
    try:
        store.write(span_rows(spans), refresh_windows=False)
        store.refresh_all_windows()
        return store.window_rows()
    finally:
        store.shutdown()


def _spans(seed: int):
    spans = _random_store_spans(seed) + _random_spans(seed)
    random.Random(seed).shuffle(spans)
    return spans


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("before_restart", ["shutdown", "crash_with_spans_not_windowed"])
def test_windows_taken_up_at_start_follow_later_batches_exactly(tmp_path, seed, before_restart):
    spans = _spans(seed)
    cut1, cut2 = len(spans) // 3, 2 * len(spans) // 3
    (tmp_path / "store").mkdir()
    path = tmp_path / "store" / "spans.duckdb"
    store = _open(path)
    store_spans(store, spans[:cut1])
    if before_restart == "shutdown":
        store.shutdown()
    else:
        store.append(span_rows(spans[cut1:cut2]))  # committed; the windows never saw them
        _crash(store)
    store = _open(path)
    try:
        keys, resumed = store.open_windows()
        assert resumed and store.stats["resumes"] == 1 and keys > 0
        store.update_windows()  # the window thread's first pass: it follows what the state missed
        written = spans[:cut1] if before_restart == "shutdown" else spans[:cut2]
        assert store.stats["rebuilds"] == 0  # the saved state was taken up; no target was recomputed
        assert store.stats["caught_up_spans"] == (0 if before_restart == "shutdown" else cut2 - cut1)
        assert store.window_rows() == _from_scratch(tmp_path, written, "first")
        # first batch after the restart: only tasks never seen, of targets with stored windows
        new_tasks = _random_spans(seed + 500)
        store_spans(store, new_tasks)
        assert store.window_rows() == _from_scratch(tmp_path, written + new_tasks, "second")
        store_spans(store, [s for s in spans if s not in written])
        assert store.window_rows() == _from_scratch(tmp_path, spans + new_tasks)
    finally:
        store.shutdown()


def test_a_restart_recomputes_the_windows_when_the_stored_rows_cannot_be_taken_up(tmp_path):
    spans = _spans(11)
    half = len(spans) // 2
    (tmp_path / "store").mkdir()
    path = tmp_path / "store" / "spans.duckdb"
    expected = _from_scratch(tmp_path, spans)

    store = _open(path)
    store_spans(store, spans[:half])
    store.write(span_rows(spans[half:]), refresh_windows=False)  # a bulk load whose loader never rebuilt
    store_spans(store, spans[:2])  # a later followed batch must not store a watermark again
    store.shutdown()
    store = _open(path)
    try:
        assert store.open_windows()[1] is False
        assert store.window_rows() == expected
    finally:
        store.shutdown()

    # the full rebuild stored a watermark again: the next start takes the rows up
    store = _open(path)
    try:
        assert store.open_windows()[1] is True
        assert store.window_rows() == expected
    finally:
        store.shutdown()
    with duckdb.connect(str(path)) as con:  # as a file another version of the definitions wrote
        con.execute("UPDATE window_watermark SET definitions_digest = 'other definitions'")
        con.execute("UPDATE windows SET sample_count = -1")  # stale rows a rebuild must replace
    store = _open(path)
    try:
        assert store.open_windows()[1] is False  # other definitions: recomputed
        assert store.window_rows() == expected
    finally:
        store.shutdown()


def test_many_spans_after_the_watermark_are_followed_in_chunks_never_recomputed(tmp_path):
    spans = _spans(5)
    (tmp_path / "store").mkdir()
    path = tmp_path / "store" / "spans.duckdb"
    store = _open(path, window_lag_rows=3)
    store_spans(store, spans[:4])
    store.append(span_rows(spans[4:]), wait=False)
    _crash(store)
    store = _open(path, window_lag_rows=3)
    try:
        assert store.open_windows()[1] is True
        store.update_windows()
        assert store.stats["rebuilds"] == 0 and store.stats["caught_up_spans"] == len(spans) - 4
        assert store.window_rows() == _from_scratch(tmp_path, spans)
    finally:
        store.shutdown()


def test_a_failure_while_following_the_stored_spans_falls_back_to_the_rebuild(tmp_path, monkeypatch):
    spans = _spans(3)
    half = len(spans) // 2
    (tmp_path / "store").mkdir()
    path = tmp_path / "store" / "spans.duckdb"
    store = _open(path)
    store_spans(store, spans[:half])
    store.append(span_rows(spans[half:]))  # committed; the windows never saw them
    _crash(store)
    store = _open(path)
    try:
        def failing_follow(table, until_us):  # e.g. DuckDB running out of memory mid-way
            raise RuntimeError("the window pass failed")

        monkeypatch.setattr(store.windows, "follow", failing_follow)
        assert store.open_windows()[1] is True
        store.update_windows()
        assert store.stats["rebuilds"] == 1
        assert store.window_rows() == _from_scratch(tmp_path, spans)
    finally:
        store.shutdown()


@pytest.mark.parametrize("tool_writes", ["judge_calls", "application_spans"])
def test_a_tool_on_the_file_leaves_the_windows_to_the_next_start(tmp_path, tool_writes):
    """A process killed before its window pass left spans the windows never saw; a tool then opens
    the file without opening the windows (`meritlens evaluate` on the file records its judge calls).
    Its window passes must not move the stored watermark past those spans, nor write rows from a
    book that holds none of the stored spans: the next start follows them all."""
    spans = _spans(7)
    cut1, cut2 = len(spans) // 3, 2 * len(spans) // 3
    (tmp_path / "store").mkdir()
    path = tmp_path / "store" / "spans.duckdb"
    store = _open(path)
    store.open_windows()
    store_spans(store, spans[:cut1])
    watermark = store.stored_watermark()
    store.append(span_rows(spans[cut1:cut2]))  # committed; the windows never saw them
    _crash(store)
    written = spans[:cut2]
    if tool_writes == "judge_calls":
        tool = FileEvaluationStore(str(path))
        tool.record_judge_calls([JudgeCall(
            metric="task_success", target_id=spans[0].attributes.get(TARGET_ID, "t"), scope="all",
            task_key="task-1", replica=0, model="judge-model", provider="fake", start_unix_nano=spans[0].start_ns,
            end_unix_nano=spans[0].start_ns + 10**9, score=1.0)])
        assert _state.stored_watermark(tool._local.windows.con) == watermark
        tool.close()
    else:
        tool = _open(path)
        store_spans(tool, spans[cut2:])
        assert tool.stored_watermark() == watermark
        tool.shutdown()
        written = spans
    store = _open(path)
    try:
        keys, resumed = store.open_windows()
        assert resumed and keys > 0
        store.update_windows()
        assert store.window_rows() == _from_scratch(tmp_path, written)
    finally:
        store.shutdown()
