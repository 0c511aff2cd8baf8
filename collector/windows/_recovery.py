"""Taking the windows up at start, and saving the window state that makes that cheap.

The stored rows are taken as they are when the watermark stored with them was written by this
version of the window definitions (`window_definitions_digest`) and at most the lag budget of rows
was committed after it, or a saved window state can follow them. The state saved last is loaded
when it belongs to these definitions and is not newer than the watermark; when it is older (a crash
after the save), the window thread first brings it up to date from the spans committed since
(`replay`). Every other target's state is rebuilt from its spans on its next batch, as after an
eviction. Otherwise every window is recomputed.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from meritlens.analytics._accumulate import StateMismatch, WindowBook
from meritlens.analytics._schema import SPANS_TABLE, WINDOWS_TABLE
from meritlens.analytics._windows import APPLICATION_SPANS
from meritlens.collector.store._database import timestamp_sql
from meritlens.collector.store._keyhash import key_hashes
from meritlens.collector.store._rows import trace_task_hashes
from meritlens.collector.windows import _state
from meritlens.collector.windows._delta import WINDOW_INPUT_SQL, conform, sample_targets, touched_keys

if TYPE_CHECKING:
    from meritlens.collector.windows._processor import WindowProcessor

log = logging.getLogger("meritlens.collector.windows")

STATE_SAVE_FRACTION = 8
STATE_SAVE_MIN_SPANS = 1_000_000
STATE_SAVE_INTERVAL_S = 600.0
"""A save after 1/8 of the stored spans (at least 1,000,000, whose rebuild takes seconds), or after 10
minutes: a crash then costs the next start a replay of at most about that many spans."""
MAX_REPLAY_FRACTION = 2
"""A saved state more than half the stored spans behind the windows is not replayed: rebuilding
the targets from their spans reads little more."""


def open_windows(p: WindowProcessor) -> tuple[int, bool]:
    """Take the stored windows up, else recompute them all; delete a saved state not taken up.
    Returns (the number of (target, scope) keys, whether the stored windows were taken up)."""
    with p.lock:
        start_us = p.windowed_us
        kept_us = None
        try:
            resumed, kept_us = _resume(p)
        except Exception:  # noqa: BLE001 - the rebuild below recomputes everything it touched
            log.exception("taking up the stored windows failed; recomputing them")
            p.windowed_us, resumed, p.replay_until_us = start_us, None, None
    opened = (p.refresh_all_windows(), False) if resumed is None else (resumed, True)
    try:
        _state.keep_only_saved_state(p.con, kept_us if resumed is not None else None)
    except Exception:  # noqa: BLE001 - it is ignored at the next start
        log.exception("deleting the saved window state failed (it no longer matches the watermark)")
    return opened


def _resume(p: WindowProcessor) -> tuple[int | None, int | None]:
    """(keys taken up, the watermark of the saved state taken up), or (None, None)."""
    con = p.con
    if p.window_lag()[0]:
        return None, None
    stored = _state.stored_watermark(con)
    if stored is None:
        return None, None
    watermark, digest = stored
    if digest != p.definitions_digest():
        log.info("the window definitions changed since the windows were stored; recomputing them")
        return None, None
    book, state_us = _state.load_saved_state(con, watermark, digest)
    if state_us is not None and state_us < watermark:
        behind = _count_committed_after(p, state_us)
        if behind > max(p.window_lag_rows, p.store.stored_rows // MAX_REPLAY_FRACTION):
            log.info("the saved window state is %d spans behind; targets are rebuilt from their spans", behind)
            book, state_us = WindowBook(), None
    later = _count_committed_after(p, watermark)
    if state_us is None and later > p.window_lag_rows:
        log.info("%d spans were committed after the stored windows; recomputing them", later)
        return None, None
    replaying = state_us is not None and state_us < watermark
    # A replay adds each chunk's keys as a window pass does: a key is looked up among the stored
    # spans only when spans committed before its chunk may hold it.
    p.delta.fill_seen(state_us if replaying else None)
    p.book = book
    p.stats["state_keys_taken_up"] = len(book.keys)
    p.evicted = {t for (t,) in con.execute(
        f"SELECT DISTINCT target_id FROM {SPANS_TABLE} WHERE {APPLICATION_SPANS}").fetchall()}
    p.evicted -= {target for target, _ in book.keys}
    p.restore_recency()
    p.watermark_valid = True
    if replaying:  # the stored rows include the spans up to the watermark; the state does not yet
        p.windowed_us = state_us
        p.replay_until_us = max(p.store.last_received_us, watermark)
    else:
        p.windowed_us = watermark
        if later:
            rows = con.sql(f"SELECT {WINDOW_INPUT_SQL} FROM {SPANS_TABLE}"
                           f" WHERE received_at > {timestamp_sql(watermark)} ORDER BY received_at").to_arrow_table()
            table = conform(rows)
            until_us = int(pc.max(pc.cast(table.column("received_at"), pa.int64())).as_py())
            p.follow(table, until_us)
            p.mark_processed([], until_us)
    p.stats["resumes"] += 1
    p.opened = True
    keys = con.execute(f"SELECT count(*) FROM (SELECT DISTINCT target_id, scope FROM {WINDOWS_TABLE})").fetchall()[0][0]
    return keys, state_us


def _count_committed_after(p: WindowProcessor, us: int) -> int:
    return p.con.execute(f"SELECT count(*) FROM {SPANS_TABLE} WHERE received_at > {timestamp_sql(us)}").fetchall()[0][0]


def replay(p: WindowProcessor) -> None:
    """Bring the window state taken up at start, older than the stored windows, up to every span
    stored at start: the spans the stored rows already include change only the state (in chunks of
    whole batches, as the window passes saw them); the later ones are applied as a window pass
    applies them. If the replay fails, every window is recomputed. A shutdown stops it between
    chunks: the replay stays pending, and the state saved before stays for the next start."""
    con = p.con
    until_us = p.replay_until_us
    started, replayed = time.monotonic(), 0
    try:
        floor_us = _state.stored_watermark(con)[0]  # the crashed run's: its rows include the spans up to it
        batches = con.execute(
            f"SELECT epoch_us(received_at), count(*) FROM {SPANS_TABLE}"
            f" WHERE received_at > {timestamp_sql(p.windowed_us)} AND received_at <= {timestamp_sql(until_us)}"
            " GROUP BY 1 ORDER BY 1").fetchall()
        for lo, hi in _state.replay_chunks(batches, p.windowed_us, floor_us, p.window_lag_rows):
            if p.closing:
                log.info("replaying the saved window state stopped for the shutdown after %d stored spans;"
                         " the next start replays from the saved state", replayed)
                return
            rows = con.sql(f"SELECT {WINDOW_INPUT_SQL} FROM {SPANS_TABLE} WHERE received_at > {timestamp_sql(lo)}"
                           f" AND received_at <= {timestamp_sql(hi)} ORDER BY received_at").to_arrow_table()
            table = conform(rows)
            if hi <= floor_us:
                _replay_state(p, table, hi)
            else:
                p.follow(table, hi)
            p.mark_processed([], hi)
            replayed += table.num_rows
        p.stats["state_replayed_spans"] += replayed
        p.rows_since_state_save += replayed  # the saved state is that far behind
        log.info("window state brought up to date from %d stored spans in %.1f s", replayed,
                 time.monotonic() - started)
        p.replay_until_us = None
    except Exception:  # noqa: BLE001 - the spans are stored; a full rebuild recomputes every window
        log.exception("bringing the saved window state up to date failed; recomputing every window")
        p.replay_until_us = None
        p.mark_processed([], until_us)  # the recomputation covers every span stored at start
        try:
            p.refresh_all_windows()
        except Exception:  # noqa: BLE001 - the next start recomputes them
            log.exception("recomputing the windows failed; the next start recomputes them")
            p.invalidate_watermark()


def _replay_state(p: WindowProcessor, table: pa.Table, until_us: int) -> None:
    """Apply stored rows (committed after ``windowed_us``, up to ``until_us``) to the state of the
    loaded targets only: the stored window rows include them already."""
    keys = touched_keys(table)
    hashes = key_hashes(table)
    targets = {k[0] for k in keys} - p.evicted
    try:
        if keys:
            removed, added = p.delta.of_batch(table, hashes, until_us, p.windowed_us)
            targets |= (sample_targets(removed) | sample_targets(added)) - p.evicted
            p.apply_state_only(removed, added, targets, until_us)
    except StateMismatch as exc:
        log.info("window state of %s rebuilt from the spans on its next batch: %s", sorted(targets), exc)
        p.forget(targets)
    finally:
        p.delta.seen.add(trace_task_hashes(hashes))


def save_if_due(p: WindowProcessor) -> bool:
    """Save the window state when enough spans were windowed since the last save: 1/8 of the stored
    spans (at least 1,000,000), or any after 10 minutes. Returns whether it saved."""
    rows = p.rows_since_state_save
    if rows == 0 or not p.opened:
        return False
    due = (rows >= max(STATE_SAVE_MIN_SPANS, p.store.stored_rows // STATE_SAVE_FRACTION)
           or time.monotonic() - p.state_saved_at >= STATE_SAVE_INTERVAL_S)
    return save(p) if due else False


def save(p: WindowProcessor) -> bool:
    """Save the window state with the stored watermark, replacing the state saved before. Only whole
    state at the stored watermark is saved: after `open_windows`, with the watermark valid and no
    replay under way; a state saved at that watermark already is left as it is. A processor that
    never opened the windows (a tool's) leaves a saved state alone. A failure is logged and leaves
    the state saved before. Returns whether it saved."""
    if not p.opened:
        return False
    with p.lock:
        con = p.con
        try:
            stored = _state.stored_watermark(con)
            if (p.replay_until_us is not None or not p.watermark_valid
                    or stored != (p.windowed_us, p.definitions_digest())):
                return False
            windowed_us, digest = stored
            if _state.saved_at(con, windowed_us):  # taken up at start, or saved since: nothing newer
                p.rows_since_state_save = 0
                return False
            started = time.monotonic()
            _state.save_state(con, p.book, windowed_us, digest)
            p.stats["state_keys_saved"] = len(p.book.keys)
            p.stats["state_saves"] += 1
            log.info("window state of %d keys saved in %.1f s", len(p.book.keys), time.monotonic() - started)
            p.rows_since_state_save = 0
            p.state_saved_at = time.monotonic()
            return True
        except Exception:  # noqa: BLE001 - the spans and windows are stored; the state is rebuilt instead
            log.exception("saving the window state failed; a start replays the state saved before, or rebuilds")
            return False
