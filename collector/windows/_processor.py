"""The window processor: keeps `windows` equal to a computation from scratch over every committed span.

The store hands it every committed batch (`SpanStore.on_commit`). A thread of its own (`start`) takes
every batch committed since its last pass at once, so a pass's fixed cost is shared by however many
arrived meanwhile: their sample delta (`_delta`) is applied to the bounded window state (`WindowBook`),
and the changed windows' rows are written. The state lives in memory under a byte budget and in
DuckDB (`_cache`, `_state`): it is saved with its watermark every few seconds, before keys leave
memory, and at shutdown. A start takes the saved state up and brings it to every stored span from
the spans committed after its watermark (`open_windows`); without a usable saved state (none, or
other window definitions) every window is recomputed from the spans (`refresh_all_windows`).

Only two rare cases read a target's stored spans again: a window whose state cannot follow a delta
(`WindowBook.apply_delta` names it) is recomputed from its samples, and a saved state that cannot be
read is rebuilt.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

import duckdb
import pyarrow as pa

from meritlens.analytics.engine import (
    BUCKET_KEY_COLUMNS,
    DEFAULT_RELATIVE_ERROR,
    SPANS_TABLE,
    BucketCutoffs,
    RangeWindows,
    WindowBook,
    WindowId,
    WindowKey,
    bucketed,
    compact,
    delta_keys,
    keys_in,
    merge_plan,
    merge_range,
    scale_for,
    window_definitions_digest,
)
from meritlens.collector._settings import (
    DEFAULT_DB_MEMORY_BYTES,
    DEFAULT_KEY_FILTER_BYTES,
    DEFAULT_QUERY_WAIT_S,
    DEFAULT_WINDOW_GATHER_S,
    DEFAULT_WINDOW_LAG_ROWS,
    DEFAULT_WINDOW_MEMORY_BYTES,
    MIN_REBUILD_ROWS_PER_PARTITION,
    REBUILD_POOL_BYTES_PER_ROW,
)
from meritlens.collector.store._archive import RecomputeRefused
from meritlens.collector.store._database import now_us, rollback, rollback_on_error, timestamp_sql, transaction, utc_now
from meritlens.collector.store._keyfilter import GrowingKeyFilter
from meritlens.collector.store._keyhash import key_hashes
from meritlens.collector.store._rows import concat, trace_task_hashes
from meritlens.collector.store._store import CommittedBatch, SpanStore, WriteResult
from meritlens.collector.windows import _state
from meritlens.collector.windows._cache import StateCache
from meritlens.collector.windows._delta import WINDOW_INPUT_SQL, SampleDelta, conform, touched_keys
from meritlens.collector.windows._engine import bucket_rows
from meritlens.collector.windows._queue import CommitQueue
from meritlens.collector.windows._rebuild import SpanRebuild

log = logging.getLogger("meritlens.collector.windows")
T = TypeVar("T")

STATE_SAVE_INTERVAL_S = 10.0
"""How often changed window state is saved with its watermark: a crash costs the next start the
spans committed since (seconds of them), never a recomputation."""


class WindowProcessor:
    """Follows a `SpanStore`'s committed batches into `windows`.

    At most ``window_lag_rows`` committed rows wait for the windows (appends wait beyond that), and
    queries wait up to ``query_wait_s`` for the windows to include what was acknowledged before them.
    ``window_memory_bytes`` bounds the state held in memory; ``quantile_error`` bounds the relative error
    of the quantiles of windows beyond the exact range (`meritlens.analytics._distribution`).
    ``rebuild_rows_per_partition``: scoped rows a rebuild reads per statement (default: the store's
    DuckDB memory limit over ``REBUILD_POOL_BYTES_PER_ROW``)."""

    def __init__(self, store: SpanStore, *, key_filter_bytes: int = DEFAULT_KEY_FILTER_BYTES,
                 window_memory_bytes: int = DEFAULT_WINDOW_MEMORY_BYTES,
                 window_lag_rows: int = DEFAULT_WINDOW_LAG_ROWS, query_wait_s: float = DEFAULT_QUERY_WAIT_S,
                 rebuild_rows_per_partition: int | None = None, gather_s: float = DEFAULT_WINDOW_GATHER_S,
                 quantile_error: float = DEFAULT_RELATIVE_ERROR, state_save_s: float = STATE_SAVE_INTERVAL_S,
                 clock: Callable[[], int] | None = None):
        self.store = store
        self._clock = clock or now_us
        """µs since the epoch: what decides when time buckets merge (a test's own clock)."""
        if rebuild_rows_per_partition is None:
            pool = store.memory_limit_bytes or DEFAULT_DB_MEMORY_BYTES
            rebuild_rows_per_partition = max(MIN_REBUILD_ROWS_PER_PARTITION, pool // REBUILD_POOL_BYTES_PER_ROW)
        self._query_wait_s = query_wait_s
        self._gather_s = gather_s
        self._state_save_s = state_save_s
        self.stats = {"rebuilds": 0, "rebuild_partitions": 0, "label_rounds": 0, "recomputed_windows": 0,
                      "resumes": 0, "caught_up_spans": 0, "recoveries": 0}
        self.cache = StateCache(scale_for(quantile_error), window_memory_bytes, self.stats)
        self.lock = threading.RLock()
        """Serializes window passes (held with the store's ``write_lock`` while they write)."""
        self.queue = CommitQueue(window_lag_rows, store.commits)
        self.windowed_us = store.last_received_us
        """The window state includes every span committed up to this time (µs since the epoch)."""
        self.replay_until_us: int | None = None
        """Set while the state catches up with spans stored before it was loaded (`_catch_up`)."""
        self.cutoffs = BucketCutoffs.at(self._clock())
        """Where the tiers of time buckets begin for the state held (`meritlens.analytics._time_buckets`)."""
        self.complete = not store.held_spans_at_start
        """Whether the state (in memory and saved) is every key's whole state at ``windowed_us``: only
        then are batches followed and the state saved. Made so by `open_windows` and
        `refresh_all_windows`; a bulk load unmakes it."""
        self._digest: str | None = None
        self.state_saved_at = time.monotonic()
        self._saved_us: int | None = None
        """The watermark of the state saved last by this processor."""
        self._warned_budget = False
        self.on_windows: Callable[[set[tuple]], None] | None = None
        """Called after a pass with the keys whose windows changed, (target, scope) and time buckets
        (`BUCKET_KEY_COLUMNS`): the alert rules' evaluation."""
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        # a started store: the windows start from what it holds, and follow every later commit
        self.con = store.connection()
        self.delta = SampleDelta(store, self.con, GrowingKeyFilter(key_filter_bytes))
        self._from_spans = SpanRebuild(self.con, rebuild_rows_per_partition)
        store.on_commit = self.queue.put
        store.before_commit = self.queue.wait_for_room
        store.move_guard = self.lock  # no pass reads `spans` while a move changes where they are
        store.freshness = self.freshness

    @property
    def book(self) -> WindowBook:
        return self.cache.book

    # --- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        """Follow committed batches in a thread of its own (call `open_windows` first)."""
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="meritlens-windows", daemon=True)
        self._thread.start()

    def stop(self, catch_up: bool = True) -> None:
        """Stop the thread; with ``catch_up``, process what is committed in the caller (a tool that
        wrote spans). Without it the backlog stays for the next start, which follows it from the spans."""
        self.close_queue()
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
        if catch_up and self.con is not None:
            self.update_windows()

    def shutdown(self, catch_up: bool = True) -> None:
        """`stop`, save the window state, and close the processor's connection."""
        if self.con is None:  # shut down already
            return
        try:
            self.stop(catch_up)
        except Exception:  # the spans are stored; the next start follows them
            log.exception("updating the windows at shutdown failed")
        else:
            self.save_state()
        self.con.close()
        self.con = None

    @property
    def window_lag_rows(self) -> int:
        """Committed rows that may wait for the windows (appends wait beyond it)."""
        return self.queue.lag_rows

    def close_queue(self) -> None:
        self.queue.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                if self.wait_for_spans(timeout=0.5):
                    self._wait_for_demand(self._gather_s)
                    self.update_windows()
                self.save_state_if_due()
                self.compact_if_due()
            except Exception:  # keep following; the next pass retries
                log.exception("updating the windows failed")
                self._stop.wait(1.0)

    # --- waiting --------------------------------------------------------------------------------
    def freshness(self, wait_s: float | None = None) -> bool:
        """Wait up to ``wait_s`` (the query wait) for the windows to include what was acknowledged
        before the call; whether they do (a warning is logged when not)."""
        wait_s = self._query_wait_s if wait_s is None else wait_s
        if wait_s <= 0:  # answer now, asking nothing of the mover or the window thread
            return self.replay_until_us is None and not self.store.staged_rows() and not self.queue.lag()[1]
        if self.wait_for_windows(wait_s):
            return True
        log.warning("the windows are more than %.0f s behind the stored spans; answering with them as they are",
                    wait_s)
        return False

    def wait_for_spans(self, timeout: float | None = None) -> bool:
        """Block until spans are queued for the windows (True) or ``timeout`` passes (False)."""
        q = self.queue
        return q.wait(lambda: q.batches or q.closing or self.replay_until_us is not None, timeout) and bool(
            q.batches or self.replay_until_us is not None)

    def wait_for_windows(self, timeout: float | None = None) -> bool:
        """Block until the windows include every span committed or staged (acknowledged) before this
        call; False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        self.queue.reader(1)
        try:
            seq = self.store.wait_committed(timeout)
            if seq is None:
                return False
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            # a catch-up at start covers every batch committed before it
            return self.queue.wait(lambda: self.queue.windowed_seq >= seq and self.replay_until_us is None, left)
        finally:
            self.queue.reader(-1)

    def _wait_for_demand(self, timeout: float) -> None:
        """Let committed batches gather for up to ``timeout``: return sooner when a query waits for
        the windows, when half the lag budget is queued, or at shutdown."""
        q = self.queue
        q.wait(lambda: q.readers_waiting or q.closing or self.store.readers_waiting or 2 * q.rows >= q.lag_rows,
               timeout)

    def window_lag(self) -> tuple[int, int]:
        """(batches, rows) committed that the windows do not include yet."""
        return self.queue.lag()

    # --- writing through the store --------------------------------------------------------------
    def write(self, table: pa.Table, *, refresh_windows: bool = True) -> WriteResult:
        """Append span rows to the store (`SpanStore.append`) and bring the windows up to date with
        them. A bulk loader may pass ``refresh_windows=False`` and call `refresh_all_windows` (or
        `refresh_windows` with the keys it touched) once at the end."""
        result = self.store.append(table, follow=refresh_windows, wait=False)
        self.update_windows()
        return result

    # --- window passes --------------------------------------------------------------------------
    def update_windows(self) -> int:
        """Bring the windows up to date with every batch committed so far, processed together.
        Returns how many batches were processed.

        A processor whose state is not complete (a tool's on a file that already held spans, or after a
        bulk load) writes no window rows: the next `open_windows` follows its batches from the spans."""
        if self.con is None:
            raise RuntimeError("the window processor is shut down")
        with self.lock, rollback_on_error(self.con):
            if self.replay_until_us is not None:
                if not self.queue.closing:
                    self._catch_up()
                if self.replay_until_us is not None:  # stopped by a shutdown: the next start goes on
                    return 0
            group = self.queue.snapshot()
            if not group:
                return 0
            until_us = group[-1].received_us
            if any(not b.follow and b.table.num_rows for b in group):  # the loader rebuilds their windows
                self.delta.seen.add(trace_task_hashes(concat([b.keys for b in group if not b.follow])))
                self.invalidate_state()
            # batches the state includes already (a catch-up read them from the spans) are passed over
            followed = [b for b in group if b.follow and b.table.num_rows and b.received_us > self.windowed_us]
            if followed and self.complete:
                try:
                    self.follow(concat([b.table for b in followed]), until_us, concat([b.keys for b in followed]))
                except Exception:  # the spans are stored; the saved state follows them again
                    log.exception("updating the windows failed; they follow the stored spans from the saved state")
                    self._recover()
                    return 0
            self.mark_processed(group, until_us)
            return len(group)

    def follow(self, table: pa.Table, until_us: int, hashes: pa.Table | None = None) -> None:
        """Apply the stored rows of ``table`` (committed after ``windowed_us``, up to ``until_us``) to the
        window state and write the changed windows' rows. Raises when a step fails; the state in memory
        is then no longer whole (`_recover`)."""
        hashes = key_hashes(table) if hashes is None else hashes
        if touched_keys(table):
            self._apply(*self.delta.of_batch(table, hashes, until_us, self.windowed_us), until_us)
        self.delta.seen.add(trace_task_hashes(hashes))
        self.windowed_us = max(self.windowed_us, until_us)
        if not self._fit_memory():
            self.save_state_if_due()

    def _apply(self, removed: pa.Table | None, added: pa.Table, until_us: int,
               before: Callable[[], None] | None = None) -> set[WindowKey]:
        """Apply a sample delta to the state and write the changed windows' rows; ``before`` runs once the keys'
        state is loaded, before the delta is applied. Returns the changed keys."""
        by_time = bucketed(removed, self.cutoffs), bucketed(added, self.cutoffs)
        keys = delta_keys(removed, added) | delta_keys(*by_time, key_columns=BUCKET_KEY_COLUMNS)
        damaged = self.cache.load(self.con, keys)
        if damaged:
            self._rebuild_targets({k[0] for k in damaged}, self.windowed_us, also=damaged)
        if before is not None:
            before()
        changed, recompute = self.book.apply_delta(removed, added)
        changed_by_time, recompute_by_time = self.book.apply_delta(*by_time, BUCKET_KEY_COLUMNS)
        if recompute or recompute_by_time:
            self._recompute(recompute | recompute_by_time, until_us)
        self.cache.touched(changed | changed_by_time)
        self.store_windows(changed | changed_by_time)
        if self.on_windows is not None:
            self.on_windows(changed | changed_by_time)
        return changed | changed_by_time

    def remove(self, rows: pa.Table, delete: Callable[[duckdb.DuckDBPyConnection], None]) -> set[WindowKey]:
        """Delete stored span rows (``rows``: every column the windows read, `conform`ed) with ``delete`` (given
        the processor's connection, in a transaction of its own) and bring the windows to what they would be
        without them: their tasks' and traces' old samples out, the samples of the spans that remain in.
        Returns the changed keys. A key left with no sample goes, rows and state, as it would never have been.
        The saved watermark goes in the deleting transaction, so a crash before the state is saved again makes
        the next start recompute the windows rather than take up a state that still counts the deleted spans."""

        def deleting() -> None:
            with self.store.write_lock, transaction(self.con):
                delete(self.con)
                _state.delete_watermark(self.con)

        with self.lock:
            self.update_windows()
            changed: set[WindowKey] = set()
            if self.complete and rows.num_rows and touched_keys(rows):
                delta = self.delta.of_removal(rows, key_hashes(rows), self.windowed_us)
                changed = self._apply(*delta, self.windowed_us, before=deleting)
            else:
                deleting()
            empty = sorted((k for k in changed if not self.book.sampled(k)), key=repr)
            self.cache.forget(empty)
            with self.store.write_lock, transaction(self.con):
                _state.delete_window_rows(self.con, [k for k in empty if len(k) == 2])
                _state.delete_bucket_rows(self.con, [k for k in empty if len(k) == len(BUCKET_KEY_COLUMNS)])
            if self.complete:  # the watermark is gone: saved again even when no key changed
                with self.store.write_lock:
                    self.cache.save(self.con, self.windowed_us, self.definitions_digest(), self.cutoffs, dropped=empty)
                self._saved_us, self.state_saved_at = self.windowed_us, time.monotonic()
            return changed

    def mark_processed(self, group: list[CommittedBatch], until_us: int) -> None:
        self.windowed_us = max(self.windowed_us, until_us)
        self.queue.done(group)

    def _catch_up(self) -> None:
        """Bring the state up to ``replay_until_us`` from the stored spans committed after its watermark,
        in chunks of whole committed batches, as window passes would have. A shutdown stops it between
        chunks (the saved state and the spans stay for the next start); a failure recomputes every window."""
        until_us = self.replay_until_us
        started, replayed = time.monotonic(), 0
        try:
            batches = self.con.execute(
                f"SELECT epoch_us(received_at), count(*) FROM {SPANS_TABLE}"
                f" WHERE received_at > {timestamp_sql(self.windowed_us)} AND received_at <= {timestamp_sql(until_us)}"
                " GROUP BY 1 ORDER BY 1").fetchall()
            for lo, hi in _state.replay_chunks(batches, self.windowed_us, self.queue.lag_rows):
                if self.queue.closing:
                    log.info("following the stored spans stopped for the shutdown after %d spans", replayed)
                    return
                rows = self.con.sql(f"SELECT {WINDOW_INPUT_SQL} FROM {SPANS_TABLE} WHERE received_at >"
                                    f" {timestamp_sql(lo)} AND received_at <= {timestamp_sql(hi)}"
                                    " ORDER BY received_at").to_arrow_table()
                self.follow(conform(rows), hi)
                replayed += rows.num_rows
                self.stats["caught_up_spans"] += rows.num_rows
        except Exception:  # the spans are stored; a full recomputation covers them
            log.exception("following the stored spans failed; recomputing every window")
            self.replay_until_us = None
            self.refresh_all_windows()
            return
        self.windowed_us = max(self.windowed_us, until_us)
        self.replay_until_us = None
        self.queue.notify()
        if replayed:
            log.info("windows brought up to date from %d stored spans in %.1f s", replayed, time.monotonic() - started)

    def _recover(self) -> None:
        """After a failed pass: drop the state in memory and follow the stored spans again from the
        saved state (every committed batch is in `spans`); without a usable saved state, recompute."""
        rollback(self.con)  # what the failure left open
        self.stats["recoveries"] += 1
        stored = _state.stored_watermark(self.con) if self.complete else None
        self.cache.clear()
        if stored is None or stored[1] != self.definitions_digest():
            self.refresh_all_windows()
            return
        self.windowed_us = stored[0]
        self.delta.fill_seen(stored[0])
        group = self.queue.snapshot()
        self.replay_until_us = max(self.store.last_received_us, group[-1].received_us if group else 0)

    def invalidate_state(self) -> None:
        """The state may now miss committed spans: save none, and forget the saved one (the next start
        recomputes every window) until `refresh_all_windows`."""
        self.complete = False
        try:
            _state.delete_state(self.con)
        except Exception:  # a stale watermark digest makes the next start recompute
            log.exception("removing the saved window state failed")

    # --- recomputing from the spans -----------------------------------------------------------
    def open_windows(self) -> tuple[int, bool]:
        """At start: take the saved state up (the window thread then follows the spans stored after its
        watermark), else recompute every window. Returns (the number of (target, scope) keys, whether
        the saved state was taken up)."""
        with self.lock:
            stored = _state.stored_watermark(self.con)
            if stored is None or self.window_lag()[0]:
                return self.refresh_all_windows(), False
            if stored[1] != self.definitions_digest():
                log.info("the window definitions changed since the windows were stored; recomputing them")
                return self.refresh_all_windows(), False
            cutoffs = _state.stored_cutoffs(self.con)
            if cutoffs is None:
                log.info("the windows by time were never saved; recomputing every window")
                return self.refresh_all_windows(), False
            self.cache.clear()
            self.windowed_us = self._saved_us = stored[0]
            self.cutoffs = cutoffs
            self.delta.fill_seen(stored[0])
            self.complete = True
            if self.store.last_received_us > stored[0]:
                self.replay_until_us = self.store.last_received_us
            self.stats["resumes"] += 1
            return _state.saved_keys(self.con), True

    def refresh_windows(self, keys: set[WindowKey]) -> None:
        """Recompute, from every stored span, the windows of the targets of the given (target_id, scope) keys."""
        if keys:
            self.update_windows()
            with self.lock:
                rebuilt = self._rebuild_targets({k[0] for k in keys}, self.windowed_us)
                self.store_windows(rebuilt)

    def refresh_all_windows(self) -> int:
        """Recompute every window from the stored spans, write their rows and save their state (at start:
        windows equal a from-scratch run); fills the filter of seen keys. Returns the number of keys."""
        if self.store.archive_state.dropped:
            raise RecomputeRefused("recomputing every window", self.store.archive_state)
        with self.lock:
            group = self.queue.snapshot()
            # every committed span (a batch committed meanwhile is passed over when it comes: `update_windows`)
            until_us = max(self.windowed_us, self.store.last_received_us, group[-1].received_us if group else 0)
            self.delta.fill_seen()
            self.cache.clear()
            self.replay_until_us = None
            self.cutoffs = BucketCutoffs.at(self._clock())
            keys = self._rebuild_targets(None, until_us)
            self.windowed_us = until_us
            self.store_windows(keys, replace_by_time=True)
            self.complete = True
            self.cache.save(self.con, until_us, self.definitions_digest(), self.cutoffs, replace_all=True)
            self._saved_us, self.state_saved_at = until_us, time.monotonic()
            self.cache.evict()
            self.mark_processed(group, until_us)
            return len(keys)

    def _rebuild_targets(self, targets: set[str] | None, until_us: int,
                         also: set[WindowKey] = frozenset()) -> set[WindowKey]:
        """The whole state of ``targets`` (None: all) recomputed from every span committed up to
        ``until_us`` into the book; returns their keys (marked changed), with the keys ``also``
        (empty when the spans give them no sample)."""
        if self.store.archive_state.dropped:
            raise RecomputeRefused(f"recomputing the windows of {len(targets or ())} targets", self.store.archive_state)
        self.stats["rebuilds"] += 1
        fresh, keys = self._from_spans.book(targets, until_us, self.book.scale, self.cutoffs)
        self.stats["rebuild_partitions"] = self._from_spans.partitions
        self.stats["label_rounds"] = self._from_spans.label_rounds
        for key in list(self.book.keys):
            if targets is None or key[0] in targets:
                self.book.drop(key)
        keys |= also
        for key in keys:
            self.book.take_key(fresh, key)
        self.cache.touched(keys)
        return keys

    def _recompute(self, windows: set[WindowId], until_us: int) -> None:
        """Recompute single windows from their samples (those a delta could not follow)."""
        fresh, _ = self._from_spans.book({w[0] for w in windows}, until_us, self.book.scale, self.cutoffs)
        self.book.take_windows(fresh, windows)
        self.stats["recomputed_windows"] += len(windows)
        log.info("%d windows recomputed from their samples (a delta their state could not follow)", len(windows))

    # --- writing window rows and state ----------------------------------------------------------
    def store_windows(self, keys: set[WindowKey], *, replace_by_time: bool = False) -> None:
        """Write the rows of ``keys``' windows (cumulative and by time) in a transaction of their own;
        with ``replace_by_time``, the rows by time of no other key are kept."""
        if not keys and not replace_by_time:
            return
        now = utc_now()
        cumulative = sorted(k for k in keys if len(k) == 2)
        rows = [w for key in cumulative for w in self.book.windows(key, self.store.db_name, now)]
        by_time_keys = [k for k in keys if len(k) == len(BUCKET_KEY_COLUMNS)]
        by_time = bucket_rows(self.book, by_time_keys, self.store.db_name, now)
        with self.store.write_lock, transaction(self.con):
            if rows:
                _state.write_window_rows(self.con, rows)
            if replace_by_time:
                _state.delete_bucket_rows(self.con, None)
            _state.write_bucket_rows(self.con, by_time)

    def definitions_digest(self) -> str:
        if self._digest is None:
            self._digest = window_definitions_digest(self.store.db_name, self.book.scale)
        return self._digest

    def _fit_memory(self) -> bool:
        """Keep the state in memory within its budget: save it, then let the least recently used keys
        go. Returns whether it saved."""
        if not self.cache.over_budget():
            return False
        if self.save_state():
            self.cache.evict()
            return True
        if not self._warned_budget:
            self._warned_budget = True
            log.warning("the window state is over its memory budget and cannot be saved until every window is"
                        " recomputed; it stays in memory")
        return False

    def compact_if_due(self) -> bool:
        """When a day has passed: merge the hours that left the hour tier into their day, the days into
        their week, drop the weeks past the last, and write their rows and state (`_time_buckets`).
        Returns whether it compacted."""
        cutoffs = BucketCutoffs.at(self._clock())
        if cutoffs == self.cutoffs or not self.complete or self.con is None:
            return False
        with self.lock, rollback_on_error(self.con):
            if not self.save_state():
                return False
            moved, groups = merge_plan(_state.saved_bucket_keys(self.con, before_us=cutoffs.hours_from), cutoffs)
            self.cutoffs = cutoffs
            if moved:
                self.cache.load(self.con, set(moved) | set(groups))
                moved, merged, recompute = compact(self.book, moved, cutoffs)
                self.cache.forget(moved)
                if recompute:
                    self._recompute(recompute, self.windowed_us)
                self.cache.touched(merged)
                with self.store.write_lock, transaction(self.con):
                    _state.delete_bucket_rows(self.con, moved)
                self.store_windows(merged)
            with self.store.write_lock:
                self.cache.save(self.con, self.windowed_us, self.definitions_digest(), self.cutoffs, dropped=moved)
            self._saved_us = self.windowed_us
            log.info("windows by time: %d buckets merged into %d longer ones", len(moved), len(groups))
            return True

    def read_buckets(self, since_us: int | None, until_us: int | None, read: Callable[[WindowBook], T],
                     target: str | None = None, scope: str | None = None) -> T:
        """``read(book)`` over the bucket states that overlap a time range: those held in memory (the
        freshest) and the saved ones. It runs under the lock (the states are shared, not copied) and
        must only read them: merges (`WindowBook.merged`) copy nothing back."""
        with self.lock:
            book = WindowBook(self.book.scale)
            for key in keys_in([k for k in self.book.keys if len(k) == len(BUCKET_KEY_COLUMNS)], since_us, until_us):
                if (target is None or key[0] == target) and (scope is None or key[1] == scope):
                    book.take_key(self.book, key)
            with rollback_on_error(self.con):
                _state.load_range(self.con, since_us, until_us, target, scope, book)
            return read(book)

    def range_windows(self, since_us: int | None, until_us: int | None, target: str | None = None,
                      scope: str | None = None) -> RangeWindows:
        """The windows of a time range: each (target, scope)'s merge of the buckets that overlap it."""
        return self.read_buckets(since_us, until_us, lambda book: merge_range(book, since_us, until_us), target, scope)

    def save_state_if_due(self) -> bool:
        if self.cache.dirty and time.monotonic() - self.state_saved_at >= self._state_save_s:
            return self.save_state()
        return False

    def save_state(self) -> bool:
        """Save the changed keys' state with the watermark, when the state is complete. A failure is
        logged and leaves the state saved before. Returns whether it saved."""
        if not self.complete or self.con is None:
            return False
        with self.lock:
            if not self.cache.dirty and self._saved_us == self.windowed_us:
                return True
            try:
                started = time.monotonic()
                with self.store.write_lock:
                    saved = self.cache.save(self.con, self.windowed_us, self.definitions_digest(), self.cutoffs)
                self._saved_us = self.windowed_us
                self.state_saved_at = time.monotonic()
                log.debug("window state of %d keys saved in %.2f s", saved, self.state_saved_at - started)
                return True
            except Exception:  # the spans are stored; a start follows them from the state saved before
                log.exception("saving the window state failed")
                return False
