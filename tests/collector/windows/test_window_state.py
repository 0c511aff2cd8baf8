"""The window processor's state is bounded, saved with its watermark, and taken up at the next start.

Saved and taken up, a key's state must be the same state: the same window rows now, and the same
rows after any later batch as a computation from scratch, without reading a target's spans. A crash
between saves leaves rows ahead of the saved state; the next start follows the spans committed
after the saved watermark. A state of other definitions or of an earlier layout is never used: the
windows are then recomputed. A damaged key is rebuilt from its target's spans, alone.
"""

from __future__ import annotations

import datetime as dt
import threading
import time

import duckdb
import pytest

from meritlens.analytics._accumulate import WindowBook
from meritlens.analytics._distribution import EXACT_SAMPLES
from meritlens.collector.windows import _processor as processor_module
from meritlens.instrumentation import conventions as c
from tests.analytics.evidence_helpers import T0, Ids, S, Span, continuous_calls, span_rows, store_spans
from tests.collector.windows.test_windows_resume import _crash, _from_scratch, _open, _spans
from tests.store_under_test import StoreUnderTest, WindowThread

_NOW = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)


def _book_of(path, spans) -> tuple[StoreUnderTest, WindowBook]:
    store = _open(path)
    store_spans(store, spans)
    return store, store.book


def test_a_key_exported_and_taken_up_renders_the_same_windows(tmp_path):
    """Both kinds of distribution: a target below the exact range and one beyond it."""
    spans = continuous_calls(1, 40, "few") + continuous_calls(2, EXACT_SAMPLES + 300, "many")
    store, book = _book_of(tmp_path / "s.duckdb", spans)
    try:
        for key in (("few", "all"), ("many", "all")):
            copy = WindowBook(book.scale)
            copy.import_key(key, book.export_key(key))
            assert copy.windows(key, "db", _NOW) == book.windows(key, "db", _NOW)
            assert copy.export_key(key) == book.export_key(key)
        errors = {w.target_id: w.quantile_error for w in book.windows(("few", "all"), "db", _NOW)
                  + book.windows(("many", "all"), "db", _NOW) if w.metric == "input_tokens"}
        assert errors["few"] == 0.0 and 0 < errors["many"] <= 0.01
        blob = book.export_key(("many", "all"))
        assert len(blob) < 64 * 1024  # bounded: the histogram's buckets, not 1,300 values per window
    finally:
        store.shutdown()


@pytest.mark.parametrize("damage", ["cut", "scale", "definitions"])
def test_a_blob_that_does_not_fit_the_book_is_refused_in_one_line(tmp_path, damage):
    store, book = _book_of(tmp_path / "s.duckdb", continuous_calls(3, 20))
    try:
        blob = book.export_key(("bot", "all"))
        target = WindowBook(book.scale + (damage == "scale"))
        if damage == "cut":
            blob = blob[:-3]
        elif damage == "definitions":
            blob = blob.replace(b'"input_tokens"', b'"input_tokenz"')
        with pytest.raises(ValueError) as refused:
            target.import_key(("bot", "all"), blob)
        assert "\n" not in str(refused.value)
    finally:
        store.shutdown()


@pytest.mark.parametrize("seed", range(3))
def test_a_clean_restart_takes_the_state_up_and_reads_no_spans_for_it(tmp_path, seed):
    spans = _spans(seed)
    cut1, cut2 = len(spans) // 3, 2 * len(spans) // 3
    (tmp_path / "store").mkdir()
    path = tmp_path / "store" / "spans.duckdb"
    store = _open(path)
    store_spans(store, spans[:cut1])
    keys = len([k for k in store.book.keys if len(k) == 2])  # (target, scope); the others are time buckets
    store.shutdown()
    assert keys > 0
    store = _open(path, window_memory_bytes=1)  # every key comes back from its saved state, none from spans
    try:
        assert store.open_windows() == (keys, True)
        store_spans(store, spans[cut1:cut2])
        assert store.window_rows() == _from_scratch(tmp_path, spans[:cut2], "second")
        store_spans(store, spans[cut2:])
        assert store.window_rows() == _from_scratch(tmp_path, spans)
        assert store.stats["rebuilds"] == 0 and store.stats["state_keys_loaded"] > 0
    finally:
        store.shutdown()


def test_a_crash_between_saves_follows_the_spans_since_the_saved_watermark(tmp_path):
    """Rows are written on every pass, the state every few seconds: after a crash the rows are ahead
    of the saved state, and the next start brings the state to them from the spans."""
    spans = _spans(21)
    cut1, cut2 = len(spans) // 3, 2 * len(spans) // 3
    (tmp_path / "store").mkdir()
    path = tmp_path / "store" / "spans.duckdb"
    store = _open(path)
    store_spans(store, spans[:cut1])  # saved after this pass (state_save_s=0)
    store.windows._state_save_s = 3600.0
    store_spans(store, spans[cut1:cut2])  # rows written, state not saved
    saved_us = store.stored_watermark()[0]
    assert saved_us < store.windowed_us
    rows = store.window_rows()
    _crash(store)
    store = _open(path)
    try:
        assert store.open_windows()[1] is True
        assert store.window_rows() == rows  # the rows the crashed run wrote stay until they are rewritten
        store.update_windows()
        assert store.stats["caught_up_spans"] == cut2 - cut1 and store.stats["rebuilds"] == 0
        assert store.window_rows() == rows
        store_spans(store, spans[cut2:])
        assert store.window_rows() == _from_scratch(tmp_path, spans)
    finally:
        store.shutdown()


def test_a_damaged_key_is_rebuilt_from_its_own_targets_spans(tmp_path):
    spans = continuous_calls(4, 30, "bot-a") + continuous_calls(5, 30, "bot-b")
    (tmp_path / "store").mkdir()
    path = tmp_path / "store" / "spans.duckdb"
    store = _open(path)
    store_spans(store, spans[:20] + spans[30:50])
    store.shutdown()
    with duckdb.connect(str(path)) as con:
        con.execute("UPDATE window_state SET state = 'not a state'::BLOB WHERE target_id = 'bot-a'")
    store = _open(path)
    try:
        assert store.open_windows()[1] is True
        store_spans(store, spans[20:30] + spans[50:])
        assert store.stats["rebuilds"] == 1  # bot-a's alone; bot-b's state was taken up
        assert store.stats["state_keys_loaded"] == 3  # bot-b's, and both targets' hour buckets
        assert store.window_rows() == _from_scratch(tmp_path, spans)
    finally:
        store.shutdown()


def test_a_state_table_of_an_earlier_layout_is_dropped_and_the_windows_recomputed(tmp_path):
    spans = _spans(8)
    (tmp_path / "store").mkdir()
    path = tmp_path / "store" / "spans.duckdb"
    store = _open(path)
    store_spans(store, spans)
    store.shutdown()
    with duckdb.connect(str(path)) as con:
        con.execute("DROP TABLE window_state")
        con.execute("CREATE TABLE window_state (windowed_us BIGINT, target_id VARCHAR, payload BLOB)")
        con.execute("ALTER TABLE windows DROP COLUMN quantile_error")  # a file of an earlier version
    store = _open(path)
    try:
        assert store.open_windows()[1] is False
        assert store.window_rows() == _from_scratch(tmp_path, spans)
    finally:
        store.shutdown()


def test_the_saved_bytes_follow_the_keys_a_pass_changed_not_the_spans(tmp_path):
    store = _open(tmp_path / "s.duckdb")
    try:
        for i in range(6):
            store_spans(store, continuous_calls(10 + i, 400, f"bot-{i}"))  # each pass changes one target
        saved = store.con.execute("select count(*), max(octet_length(state)) from window_state").fetchall()[0]
        assert saved[0] == 6
        # per pass, the changed target's key and its hour: not every key every time
        assert store.stats["state_keys_saved"] == 2 * 6
        store_spans(store, continuous_calls(30, 2000, "bot-0"))  # bot-0 goes past the exact range
        biggest = store.con.execute("select max(octet_length(state)) from window_state").fetchall()[0][0]
        store_spans(store, continuous_calls(31, 4000, "bot-0"))
        assert store.con.execute("select max(octet_length(state)) from window_state").fetchall()[0][0] \
            < 1.2 * biggest  # 4,000 more samples: about the same bytes
    finally:
        store.shutdown()


def test_the_window_thread_saves_the_state_every_few_seconds(tmp_path):
    store = StoreUnderTest(str(tmp_path / "s.duckdb"), state_save_s=0.2)
    store.start()
    thread = WindowThread(store, gather_s=0.0)
    try:
        thread.start()
        store.append(span_rows(continuous_calls(40, 50)))
        committed_us = store.store.last_received_us
        deadline = time.monotonic() + 30
        while store.query("select count(*) from window_watermark"
                          f" where windowed_us >= {committed_us}").rows != [(1,)]:
            assert time.monotonic() < deadline, "the state was never saved"
            time.sleep(0.05)
        assert store.query("select count(*) from window_state").rows == [(1,)]
    finally:
        thread.shutdown()
        store.shutdown()


def test_a_shutdown_stops_following_the_stored_spans_and_the_next_start_goes_on(tmp_path, monkeypatch):
    spans = _spans(9) + continuous_calls(41, 200)
    (tmp_path / "store").mkdir()
    path = tmp_path / "store" / "spans.duckdb"
    store = _open(path)
    store_spans(store, spans[:10])
    for i in range(10, len(spans), 10):  # committed batches the windows never saw
        store.append(span_rows(spans[i:i + 10]))
    _crash(store)
    store = _open(path, window_lag_rows=5)  # a chunk a batch
    first_chunk = threading.Event()
    follow = processor_module.WindowProcessor.follow

    def slow_follow(self, *args, **kwargs):
        follow(self, *args, **kwargs)
        first_chunk.set()
        time.sleep(0.05)

    monkeypatch.setattr(processor_module.WindowProcessor, "follow", slow_follow)
    assert store.open_windows()[1] is True
    thread = WindowThread(store, gather_s=0.0)
    thread.start()
    assert first_chunk.wait(30)
    store.shutdown()  # stops the thread between chunks and saves how far it got
    monkeypatch.undo()
    followed = store.stats["caught_up_spans"]
    assert 0 < followed < len(spans) - 10
    store = _open(path)
    try:
        assert store.open_windows()[1] is True
        store.update_windows()
        assert store.stats["caught_up_spans"] == len(spans) - 10 - followed  # only what was left
        assert store.window_rows() == _from_scratch(tmp_path, spans)
    finally:
        store.shutdown()


def test_a_failed_pass_follows_the_spans_again_from_the_saved_state(tmp_path, monkeypatch):
    spans = _spans(12)
    half = len(spans) // 2
    store = _open(tmp_path / "spans.duckdb")
    try:
        store_spans(store, spans[:half])
        failures = iter([RuntimeError("DuckDB ran out of memory")])

        def failing_store_windows(keys):
            error = next(failures, None)
            if error is not None:
                raise error
            return processor_module.WindowProcessor.store_windows(store.windows, keys)

        monkeypatch.setattr(store.windows, "store_windows", failing_store_windows)
        store_spans(store, spans[half:])
        assert store.stats["recoveries"] == 1
        store.update_windows()  # follows the stored spans from the saved state
        assert store.stats["rebuilds"] == 0
        (tmp_path / "scratch_dir").mkdir()
        assert store.window_rows() == _from_scratch(tmp_path / "scratch_dir", spans)
    finally:
        store.shutdown()


def test_a_window_falling_back_under_the_exact_range_is_recomputed_alone(tmp_path):
    """A task's value turning NULL (its later call has no price) takes one sample out of a
    histogram of EXACT_SAMPLES + 1 samples: that window is recomputed from its samples, exact again;
    the target's other windows follow the delta."""
    ids = Ids(50)
    spans = continuous_calls(51, EXACT_SAMPLES, "bot")
    trace, root = ids.trace(), ids.span()
    task = {c.TARGET_ID: "bot", c.TASK_ID: "late-task"}
    spans.append(Span(trace, root, "chat", T0, T0 + S, {**task, c.GEN_AI_OPERATION_NAME: c.OP_CHAT,
                                                        c.GEN_AI_USAGE_INPUT_TOKENS: 5, c.COST_USD: 0.5}, kind=3))
    unpriced = Span(ids.trace(), ids.span(), "chat", T0 + 2 * S, T0 + 3 * S, {
        **task, c.GEN_AI_OPERATION_NAME: c.OP_CHAT, c.GEN_AI_USAGE_INPUT_TOKENS: 5}, kind=3)
    store = _open(tmp_path / "spans.duckdb")
    try:
        store_spans(store, spans)
        cost = store.query("select sample_count, quantile_error from windows where metric = 'total_task_cost'").rows
        assert cost[0][0] == EXACT_SAMPLES + 1 and cost[0][1] > 0
        store_spans(store, [unpriced])
        cost = store.query("select sample_count, quantile_error from windows where metric = 'total_task_cost'").rows
        assert cost == [(EXACT_SAMPLES, 0.0)]
        # the window and its hour's (every sample ended in one hour): no other window of the target
        assert store.stats["recomputed_windows"] == 2 and store.stats["rebuilds"] == 0
        (tmp_path / "scratch_dir").mkdir()
        assert store.window_rows() == _from_scratch(tmp_path / "scratch_dir", spans + [unpriced])
    finally:
        store.shutdown()


def test_a_growing_task_never_needs_a_recomputation(tmp_path):
    """Tasks whose spans arrive over several batches, some of them the windows' first or last:
    their deltas only widen a window's times, so no window is recomputed."""
    ids = Ids(60)
    batches: list[list[Span]] = [[], [], []]
    for t in range(40):
        trace = ids.trace()
        start = T0 + t * S
        task = {c.TARGET_ID: "bot", c.TASK_ID: f"task-{t}"}
        for k in range(3):  # the task's later spans end later and arrive in later batches
            batches[k].append(Span(trace, ids.span(), "chat", start + k * S, start + (k + 1) * S + t, {
                **task, c.GEN_AI_OPERATION_NAME: c.OP_CHAT, c.GEN_AI_USAGE_INPUT_TOKENS: 10 + k + t,
                c.COST_USD: 0.001 * (k + 1)}, kind=3))
    store = _open(tmp_path / "spans.duckdb")
    try:
        for batch in batches:
            store_spans(store, batch)
        assert store.stats["recomputed_windows"] == 0 and store.stats["rebuilds"] == 0
        (tmp_path / "scratch_dir").mkdir()
        assert store.window_rows() == _from_scratch(tmp_path / "scratch_dir", [s for b in batches for s in b])
    finally:
        store.shutdown()


def _abort_transaction(con) -> None:
    """Leave ``con`` as a failed statement inside a transaction leaves it: DuckDB refuses every
    statement until a ROLLBACK."""
    con.execute("BEGIN")
    with pytest.raises(duckdb.Error):
        con.execute("SELECT error('a statement that fails')")
    with pytest.raises(duckdb.Error, match="aborted"):
        con.execute("SELECT 1")


def test_a_connection_left_in_an_aborted_transaction_is_rolled_back_and_the_windows_go_on(tmp_path):
    """After such a failure a pass, a state save and a read of the windows by time work again, and
    the windows still equal a computation from scratch."""
    spans = _spans(23)
    q = len(spans) // 4
    (tmp_path / "store").mkdir()
    store = _open(tmp_path / "store" / "spans.duckdb")
    try:
        store_spans(store, spans[:q])
        _abort_transaction(store.con)
        store_spans(store, spans[q:2 * q])  # this pass fails on the aborted connection, and ends it
        store.update_windows()  # the next pass follows the stored spans from the saved state
        assert store.stats["recoveries"] == 1

        store.windows._state_save_s = 3600.0
        store_spans(store, spans[2 * q:3 * q])  # changed state, not saved yet
        _abort_transaction(store.con)
        assert store.save_state() is True
        assert store.stored_watermark()[0] == store.windowed_us

        _abort_transaction(store.con)
        with pytest.raises(duckdb.Error, match="aborted"):
            store.range_windows(None, None)
        assert store.range_windows(None, None)  # the failed read ended the transaction

        store_spans(store, spans[3 * q:])
        assert store.window_rows() == _from_scratch(tmp_path, spans)
    finally:
        store.shutdown()
