"""The window processor's state is saved at a clean shutdown and periodically, and taken up at the next start.

Saved and restored, the state must be the same state: the same window rows now, and the same rows
after any later batch as a computation from scratch, without the restart reading a target's spans.
A state saved before the windows' watermark (a crash after a periodic save) is brought up to date
from the spans committed since, without rewriting the rows the crashed run stored. A state newer
than the watermark, of other definitions, cut short or unreadable is never used: the targets are
then rebuilt from their spans, as before the state was saved.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meritlens.analytics._accumulate import SMALL_DISTINCT, Multiset, WindowBook
from meritlens.analytics._windows import WINDOW_DEFINITIONS
from meritlens.collector.windows import _recovery as recovery_module
from tests.store_under_test import WindowThread
from tests.store_under_test import StoreUnderTest
from meritlens.instrumentation.conventions import TARGET_ID
from tests.analytics.evidence_helpers import span_rows, store_spans
from tests.collector.windows.test_incremental_windows import _random_spans
from tests.collector.windows.test_windows_resume import _crash, _from_scratch, _open, _spans, _windows

_NOW = dt.datetime(2026, 12, 1, tzinfo=dt.timezone.utc)


def _multiset_state(m: Multiset):
    if m._counts is not None:
        return "counts", list(m._counts.items()), m.n
    return "sorted", m._base.tolist(), m._recent.tolist(), m.n


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.lists(st.integers(0, 400), min_size=1, max_size=300)),
                min_size=1, max_size=12),
       st.integers(0, 3))
def test_a_multiset_restored_from_its_export_is_the_same_multiset(operations, spread):
    multiset, held = Multiset(), []
    for add, ints in operations:
        values = np.array(ints, dtype=float) * (10.0 ** spread) / 7  # few or many distinct values
        if add or not held:
            multiset.add(values)
            held.extend(values.tolist())
        else:
            taken = held[: len(values)]
            multiset.remove(np.array(taken))
            del held[: len(values)]
    header, payload = multiset.export()
    restored = Multiset.restore(json.loads(json.dumps(header)), payload)
    assert _multiset_state(restored) == _multiset_state(multiset)
    more = np.arange(SMALL_DISTINCT + 5, dtype=float) / 3  # enough to switch a counts multiset to arrays
    for m in (multiset, restored):
        m.add(more)
    assert _multiset_state(restored) == _multiset_state(multiset)
    if multiset.n:
        assert restored.quantiles((0.5, 0.99)) == multiset.quantiles((0.5, 0.99))


def test_a_payload_that_does_not_match_its_header_is_refused():
    multiset = Multiset()
    multiset.add(np.arange(1000, dtype=float))
    header, payload = multiset.export()
    with pytest.raises(ValueError, match="bytes"):
        Multiset.restore(header, payload[:-8])
    with pytest.raises(ValueError, match="holds"):
        Multiset.restore({**header, "n": header["n"] + 1}, payload)


def _store_with_spans(path, spans) -> StoreUnderTest:
    store = StoreUnderTest(str(path))
    store.start()
    store.open_windows()
    store_spans(store, spans)
    return store


@pytest.mark.parametrize("part_bytes", [64, 1 << 20])
def test_a_book_restored_from_its_rows_renders_the_same_windows(tmp_path, part_bytes):
    store = _store_with_spans(tmp_path / "spans.duckdb", _spans(21))
    try:
        book = store.book
        rows = list(book.state_rows(part_bytes=part_bytes))
        assert all(len(r[-1]) <= part_bytes for r in rows)
        if part_bytes == 64:
            assert any(r[3] > 0 for r in rows)  # some window's values span several rows
        restored = WindowBook.restore(iter(rows))
        assert sorted(restored.keys) == sorted(book.keys) and book.keys
        for key in book.keys:
            assert restored.windows(key, "spans.duckdb", _NOW) == book.windows(key, "spans.duckdb", _NOW)
            assert restored.nbytes(key) == book.nbytes(key)
    finally:
        store.shutdown()


def test_rows_that_do_not_make_whole_keys_are_refused(tmp_path):
    store = _store_with_spans(tmp_path / "spans.duckdb", _spans(22))
    try:
        rows = list(store.book.state_rows(part_bytes=64))
    finally:
        store.shutdown()
    metric = WINDOW_DEFINITIONS[0].metric
    without_a_window = [r for r in rows if r[2] != metric]
    with pytest.raises(ValueError, match="lacks"):
        WindowBook.restore(iter(without_a_window))
    multi = next(i for i, r in enumerate(rows) if r[3] == 1)
    with pytest.raises(ValueError, match="out of order|header"):
        WindowBook.restore(iter(rows[:multi] + rows[multi + 1:]))
    with pytest.raises(ValueError, match="facts"):
        WindowBook.restore(iter([(*rows[0][:4], json.dumps({"unknown": 1}), b"")] + rows[1:]))


def _state_rows(path) -> int:
    store = _open(path)
    try:
        return store.con.execute("select count(*) from window_state").fetchall()[0][0]
    finally:
        store.crash()


@pytest.mark.parametrize("seed", range(3))
def test_a_clean_restart_takes_the_state_up_and_reads_no_spans_for_it(tmp_path, seed):
    spans = _spans(seed)
    cut1, cut2 = len(spans) // 3, 2 * len(spans) // 3
    (tmp_path / "store").mkdir()
    path = tmp_path / "store" / "spans.duckdb"
    store = _store_with_spans(path, spans[:cut1])
    keys = len(store.book.keys)
    store.shutdown()
    assert store.stats["state_keys_saved"] == keys > 0
    assert _state_rows(path) > keys
    # what a store that never restarted rebuilds on the same batches (a removal that takes away a
    # window's first or last time rebuilds its target, restart or not)
    (tmp_path / "unbroken").mkdir()
    unbroken = _store_with_spans(tmp_path / "unbroken" / "spans.duckdb", spans[:cut1])
    try:
        before = unbroken.stats["rebuilds"]
        store_spans(unbroken, spans[cut1:cut2])
        middle = unbroken.stats["rebuilds"]
        store_spans(unbroken, spans[cut2:])
        expected_rebuilds = (middle - before, unbroken.stats["rebuilds"] - before)
    finally:
        unbroken.shutdown()

    store = _open(path)
    try:
        assert store.open_windows()[1] is True
        assert store.stats["state_keys_taken_up"] == keys
        assert store.evicted == set()
        # kept until the next save replaces it: a crash before that replays from it
        assert store.con.execute("select count(*) from window_state").fetchall()[0][0] > keys
        store_spans(store, spans[cut1:cut2])
        assert store.stats["rebuilds"] == expected_rebuilds[0]  # no target's spans reread for the restart
        assert _windows(store) == _from_scratch(tmp_path, spans[:cut2], "second")
        store_spans(store, spans[cut2:])
        assert store.stats["rebuilds"] == expected_rebuilds[1]
        assert _windows(store) == _from_scratch(tmp_path, spans)
    finally:
        store.shutdown()


def _restart_after_tampering(tmp_path, statement: str, **settings):
    spans = _spans(7)
    half = len(spans) // 2
    (tmp_path / "store").mkdir()
    path = tmp_path / "store" / "spans.duckdb"
    store = _store_with_spans(path, spans[:half])
    store.shutdown()
    store = _open(path)
    store.con.execute(statement)
    store.crash()
    store = _open(path, **settings)
    try:
        assert store.open_windows()[1] is True
        taken_up, to_rebuild = store.stats["state_keys_taken_up"], set(store.evicted)
        kept = store.con.execute("select count(*) from window_state").fetchall()[0][0]
        assert (kept > 0) == (taken_up > 0)  # a state not taken up is deleted
        targets = {t for (t,) in store.query("select distinct target_id from windows").rows}
        assert len(targets) > 1
        store_spans(store, spans[half:])
        assert _windows(store) == _from_scratch(tmp_path, spans)
        return taken_up, to_rebuild, targets
    finally:
        store.shutdown()


@pytest.mark.parametrize("statement", [
    "update window_state set windowed_us = windowed_us + 1",  # newer than the windows
    "update window_state set windowed_us = -1",  # a save cut short: its rows never got their watermark
    "update window_state set windowed_us = windowed_us - 1 where target_id = (select min(target_id) from window_state)",
])
def test_a_state_saved_at_another_watermark_is_not_taken_up(tmp_path, statement):
    taken_up, to_rebuild, targets = _restart_after_tampering(tmp_path, statement)
    assert taken_up == 0 and to_rebuild == targets


def test_a_state_of_other_window_definitions_is_not_taken_up(tmp_path):
    taken_up, to_rebuild, targets = _restart_after_tampering(tmp_path, "update window_state set definitions_digest = 'other'")
    assert taken_up == 0 and to_rebuild == targets


def test_a_damaged_state_is_not_taken_up(tmp_path):
    taken_up, to_rebuild, targets = _restart_after_tampering(
        tmp_path, "update window_state set payload = payload[2:] where octet_length(payload) > 8")
    assert taken_up == 0 and to_rebuild == targets


def test_a_state_over_the_memory_budget_is_taken_up_within_it(tmp_path):
    taken_up, to_rebuild, targets = _restart_after_tampering(tmp_path, "select 1", window_memory_bytes=1)
    # every target but one dropped again at once, rebuilt on its next batch
    assert taken_up > 0 and len(to_rebuild) == len(targets) - 1


def test_an_untouched_state_leaves_no_target_to_rebuild(tmp_path):
    taken_up, to_rebuild, targets = _restart_after_tampering(tmp_path, "select 1")
    assert taken_up > 0 and to_rebuild == set()


def test_no_state_is_saved_when_windows_wait_or_were_never_opened(tmp_path):
    spans = _spans(9)
    (tmp_path / "a").mkdir()
    store = _open(tmp_path / "a" / "spans.duckdb")  # windows never opened: the book is not whole
    store_spans(store, spans)
    store.shutdown()
    assert store.stats["state_keys_saved"] == 0
    assert _state_rows(tmp_path / "a" / "spans.duckdb") == 0

    (tmp_path / "b").mkdir()
    store = _store_with_spans(tmp_path / "b" / "spans.duckdb", spans[:5])
    store.write(span_rows(spans[5:]), refresh_windows=False)  # a bulk load: the watermark is invalid
    store.shutdown()
    assert store.stats["state_keys_saved"] == 0
    assert _state_rows(tmp_path / "b" / "spans.duckdb") == 0


@pytest.mark.parametrize("tool_writes", [False, True])
def test_a_tool_opening_the_file_between_two_runs_leaves_the_saved_state(tmp_path, tool_writes):
    spans = _spans(13)
    (tmp_path / "store").mkdir()
    path = tmp_path / "store" / "spans.duckdb"
    store = _store_with_spans(path, spans)
    keys = len(store.book.keys)
    store.shutdown()
    tool = _open(path)  # e.g. `meritlens sql` or `meritlens evaluate` on the file: windows never opened
    assert tool.query("select count(*) from spans").rows[0][0] == len(spans)
    later = _random_spans(513) if tool_writes else []  # new tasks of the same targets
    if later:
        store_spans(tool, later)  # its window pass leaves the watermark, so the state still matches
    tool.shutdown()
    store = _open(path)
    try:
        assert store.open_windows()[1] is True
        assert store.stats["state_keys_taken_up"] == keys > 0
        assert _windows(store) == _from_scratch(tmp_path, spans + later)
    finally:
        store.shutdown()


# --- periodic saves: a crash replays the spans committed since the last save ----------------------
def _exact_before_and_after_the_rest(store, tmp_path, spans, cut: int, name: str) -> None:
    """The windows of ``store`` equal a from-scratch store of ``spans[:cut]``, and of all ``spans``
    once the rest has been stored as one batch."""
    assert _windows(store) == _from_scratch(tmp_path, spans[:cut], name)
    store_spans(store, spans[cut:])
    assert _windows(store) == _from_scratch(tmp_path, spans)


def _targets(spans) -> set[str]:
    return {s.attributes[TARGET_ID] for s in spans if s.attributes.get(TARGET_ID)}


def _save_when_asked(monkeypatch) -> None:
    """Make every `save_window_state_if_due` call with windowed spans since the last save a save."""
    monkeypatch.setattr(recovery_module, "STATE_SAVE_MIN_SPANS", 1)
    monkeypatch.setattr(recovery_module, "STATE_SAVE_FRACTION", 1 << 40)


@pytest.mark.parametrize("seed", range(3))
def test_a_crash_after_a_periodic_save_replays_the_spans_since_instead_of_rebuilding(tmp_path, seed, monkeypatch):
    _save_when_asked(monkeypatch)
    spans = _spans(seed)
    cuts = [len(spans) * i // 4 for i in range(5)]
    parts = [spans[a:b] for a, b in zip(cuts, cuts[1:])]
    (tmp_path / "store").mkdir()
    path = tmp_path / "store" / "spans.duckdb"
    store = _store_with_spans(path, parts[0])
    assert store.save_window_state_if_due() and store.stats["state_saves"] == 1
    assert not store.save_window_state_if_due()  # nothing windowed since
    keys = len(store.book.keys)
    store_spans(store, parts[1])  # windowed after the save
    store.append(span_rows(parts[2]))  # committed; the windows never saw them
    _crash(store)
    # what a store that never crashed rebuilds on the same batches
    (tmp_path / "unbroken").mkdir()
    unbroken = _store_with_spans(tmp_path / "unbroken" / "spans.duckdb", parts[0])
    try:
        before = unbroken.stats["rebuilds"]
        for part in parts[1:]:
            store_spans(unbroken, part)
        expected_rebuilds = unbroken.stats["rebuilds"] - before
    finally:
        unbroken.shutdown()

    store = _open(path)
    try:
        assert store.open_windows()[1] is True
        assert store.stats["state_keys_taken_up"] == keys > 0
        with_state = {target for target, _ in store.book.keys}
        store_targets_without_state = _targets(spans[:cuts[3]]) - with_state
        assert store.evicted == _targets(spans[:cuts[3]]) - with_state  # targets first seen after the save
        # until the replay, the stored rows are those of the crashed run: already exact up to its watermark
        assert _windows(store) == _from_scratch(tmp_path, spans[:cuts[2]], "stored")
        crashed_watermark = store.stored_watermark()[0]
        written_at: list[int] = []  # window rows are written only for spans the crashed run never windowed
        write_rows = store.windows._write_window_rows
        monkeypatch.setattr(store.windows, "_write_window_rows", lambda keys, until_us: (written_at.append(until_us),
                                                                                  write_rows(keys, until_us)))
        store.update_windows()  # the window thread's first pass replays
        assert written_at and min(written_at) > crashed_watermark
        assert store.stats["state_replayed_spans"] == span_rows(parts[1] + parts[2]).num_rows
        _exact_before_and_after_the_rest(store, tmp_path, spans, cuts[3], "replayed")
        # no target with saved state has its spans reread for the crash; those without state are
        # rebuilt in one go by the first pass that applies their spans
        assert store.stats["rebuilds"] <= expected_rebuilds + (1 if store_targets_without_state else 0)
    finally:
        store.shutdown()


def test_a_state_far_behind_the_windows_is_not_replayed(tmp_path, monkeypatch):
    _save_when_asked(monkeypatch)
    spans = _spans(21)
    cut = len(spans) // 5
    (tmp_path / "store").mkdir()
    path = tmp_path / "store" / "spans.duckdb"
    store = _store_with_spans(path, spans[:cut])
    assert store.save_window_state_if_due()
    store_spans(store, spans[cut:])  # most of the spans: a replay would read more than a rebuild
    _crash(store)
    store = _open(path, window_lag_rows=3)
    try:
        store.open_windows()
        assert store.stats["state_keys_taken_up"] == 0
        assert store.con.execute("select count(*) from window_state").fetchall() == [(0,)]
        store.update_windows()
        assert store.stats["state_replayed_spans"] == 0
        assert _windows(store) == _from_scratch(tmp_path, spans)
    finally:
        store.shutdown()


def test_the_window_thread_saves_the_state_as_spans_are_windowed(tmp_path, monkeypatch):
    spans = _spans(17)
    half = len(spans) // 2
    (tmp_path / "store").mkdir()
    store = _open(tmp_path / "store" / "spans.duckdb")
    store.open_windows()
    updater = WindowThread(store, gather_s=0.0)
    updater.start()
    try:
        store.append(span_rows(spans[:half]))
        assert store.wait_for_windows(30)
        assert store.stats["state_saves"] == 0  # far fewer spans than a save waits for
        _save_when_asked(monkeypatch)
        store.append(span_rows(spans[half:]))
        assert store.wait_for_windows(30)
        deadline = time.monotonic() + 30
        while store.stats["state_saves"] == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert store.stats["state_saves"] == 1
    finally:
        updater.shutdown()
    saved = store.con.execute("select distinct windowed_us from window_state").fetchall()
    assert saved == [(store.stored_watermark()[0],)]
    store.shutdown()


def test_a_replay_within_a_small_window_memory_budget_stays_exact(tmp_path, monkeypatch):
    _save_when_asked(monkeypatch)
    spans = _spans(4)
    cuts = [len(spans) * i // 4 for i in range(5)]
    parts = [spans[a:b] for a, b in zip(cuts, cuts[1:])]
    (tmp_path / "store").mkdir()
    path = tmp_path / "store" / "spans.duckdb"
    store = _store_with_spans(path, parts[0] + parts[1][:3])
    assert store.save_window_state_if_due()
    store_spans(store, parts[1][3:])
    store.append(span_rows(parts[2]))
    _crash(store)
    store = _open(path, window_memory_bytes=1)  # every target but one dropped: rebuilt on its next batch
    try:
        assert store.open_windows()[1] is True
        store.update_windows()
        assert store.stats["state_replayed_spans"] > 0
        assert len({target for target, _ in store.book.keys}) <= 1
        _exact_before_and_after_the_rest(store, tmp_path, spans, cuts[3], "replayed")
    finally:
        store.shutdown()


def test_a_replay_that_fails_recomputes_every_window(tmp_path, monkeypatch):
    _save_when_asked(monkeypatch)
    spans = _spans(6)
    cuts = [len(spans) * i // 4 for i in range(5)]
    (tmp_path / "store").mkdir()
    path = tmp_path / "store" / "spans.duckdb"
    store = _store_with_spans(path, spans[:cuts[1]])
    assert store.save_window_state_if_due()
    store_spans(store, spans[cuts[1]:cuts[2]])
    store.append(span_rows(spans[cuts[2]:cuts[3]]))  # committed; the windows never saw them
    _crash(store)
    store = _open(path)
    try:
        assert store.open_windows()[1] is True

        def failing_replay(processor, table, until_us):  # e.g. DuckDB running out of memory mid-way
            raise RuntimeError("the replay failed")

        monkeypatch.setattr(recovery_module, "_replay_state", failing_replay)
        store.update_windows()
        assert store.stats["state_replayed_spans"] == 0 and store.stats["rebuilds"] == 1
        _exact_before_and_after_the_rest(store, tmp_path, spans, cuts[3], "recomputed")
    finally:
        store.shutdown()


def test_a_shutdown_during_a_replay_stops_it_and_the_next_start_replays_again(tmp_path, monkeypatch):
    """SIGTERM while the window thread replays a crashed run's spans: the replay stops between
    chunks instead of holding the shutdown up; the stored rows and the saved state stay as they
    were, and the next start replays from that state."""
    _save_when_asked(monkeypatch)
    spans = _spans(8)
    cuts = [len(spans) * i // 8 for i in range(9)]
    parts = [spans[a:b] for a, b in zip(cuts, cuts[1:])]
    (tmp_path / "store").mkdir()
    path = tmp_path / "store" / "spans.duckdb"
    store = _store_with_spans(path, spans[:cuts[4]])
    assert store.save_window_state_if_due()
    saved_at = store.con.execute("select distinct windowed_us from window_state").fetchall()
    for part in parts[4:6]:  # windowed after the save: two batches, replayed in two chunks
        store_spans(store, part)
    store.append(span_rows(parts[6]))  # committed; the windows never saw them
    _crash(store)

    store = _open(path, window_lag_rows=1)
    first_chunk_done = threading.Event()
    replay_state = recovery_module._replay_state

    def replay_state_until_the_shutdown(processor, table, until_us):
        replay_state(processor, table, until_us)
        first_chunk_done.set()
        deadline = time.monotonic() + 30
        while not processor._closing and time.monotonic() < deadline:  # the rest of a long replay
            time.sleep(0.01)

    monkeypatch.setattr(recovery_module, "_replay_state", replay_state_until_the_shutdown)
    try:
        assert store.open_windows()[1] is True
        stored_rows = _windows(store)
        updater = WindowThread(store, gather_s=0.0)
        updater.start()
        assert first_chunk_done.wait(30)
        updater.shutdown()
        assert store.replay_until_us is not None  # stopped after its first chunk
        assert store.stats["state_replayed_spans"] == 0
        assert _windows(store) == stored_rows
    finally:
        store.shutdown()
    check = _open(path)
    try:
        assert check.con.execute("select distinct windowed_us from window_state").fetchall() == saved_at
    finally:
        check.crash()  # no shutdown: it would take the windows up and save them

    store = _open(path)
    try:
        assert store.open_windows()[1] is True
        store.update_windows()
        assert store.stats["state_replayed_spans"] == span_rows(spans[cuts[4]:cuts[7]]).num_rows
        _exact_before_and_after_the_rest(store, tmp_path, spans, cuts[7], "replayed")
    finally:
        store.shutdown()


def test_a_start_that_recomputes_every_window_saves_their_state_at_once(tmp_path, monkeypatch):
    """Windows recomputed from all the stored spans at start (a bulk load, new definitions, a crash
    with no saved state) are saved by the window thread without waiting for new spans: a crash
    soon after then costs the next start no second recomputation."""
    monkeypatch.setattr(recovery_module, "STATE_SAVE_MIN_SPANS", 1)
    spans = _spans(21)
    (tmp_path / "store").mkdir()
    path = tmp_path / "store" / "spans.duckdb"
    store = _open(path)
    store.write(span_rows(spans), refresh_windows=False)  # a bulk load: no windows yet
    assert store.open_windows()[1] is False  # recomputed
    updater = WindowThread(store, gather_s=0.0)
    updater.start()
    try:
        deadline = time.monotonic() + 30
        while store.stats["state_saves"] == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert store.stats["state_saves"] == 1  # no span arrived since the start
    finally:
        store.windows._stop.set()  # stop the thread without the shutdown's pass: then crash
        store.windows._thread.join()
    _crash(store)
    store = _open(path)
    try:
        assert store.open_windows()[1] is True
        assert store.stats["state_keys_taken_up"] > 0 and store.stats["rebuilds"] == 0
        assert _windows(store) == _from_scratch(tmp_path, spans)
    finally:
        store.shutdown()
    assert store.stats["state_saves"] == 0  # a restart without new spans leaves the saved state as it is
    store = _open(path)
    try:
        assert store.open_windows()[1] is True
        assert store.stats["state_keys_taken_up"] > 0 and store.stats["rebuilds"] == 0
        later = _spans(22)
        store_spans(store, later)
        assert store.stats["rebuilds"] == 0  # the saved state follows; no target rereads its spans
        assert _windows(store) == _from_scratch(tmp_path, spans + later, "later")
    finally:
        store.shutdown()
