"""The window processor: keeps `windows` equal to a computation from scratch over every committed span.

The store hands it every committed batch (`SpanStore.on_commit`). A thread of its own (`start`) takes
every batch committed since its last pass at once, so a pass's fixed cost is shared by however many
arrived meanwhile: their sample delta (`_delta`) is applied to the window state (`WindowBook`), and
the changed windows' rows and the watermark are written in one transaction. The state of the least
recently written targets is dropped beyond ``window_memory_bytes`` and rebuilt from their spans on
their next batch. At start (`open_windows`) the stored windows are taken up where they were left
(`_recovery`), else every window is recomputed (`_engine`).
"""

from __future__ import annotations

import datetime as _dt
import logging
import threading
import time

import pyarrow as pa

from meritlens.analytics._accumulate import StateMismatch, WindowBook
from meritlens.analytics._schema import SPANS_TABLE
from meritlens.analytics._windows import window_definitions_digest
from meritlens.collector._settings import (
    DEFAULT_KEY_FILTER_BYTES,
    DEFAULT_QUERY_WAIT_S,
    DEFAULT_WINDOW_GATHER_S,
    DEFAULT_WINDOW_LAG_ROWS,
    DEFAULT_WINDOW_MEMORY_BYTES,
    MIN_REBUILD_ROWS_PER_PARTITION,
    REBUILD_POOL_BYTES_PER_ROW,
    DEFAULT_DB_MEMORY_BYTES,
)
from meritlens.collector.store._database import timestamp_sql, transaction
from meritlens.collector.store._keyfilter import GrowingKeyFilter
from meritlens.collector.store._keyhash import key_hashes
from meritlens.collector.store._rows import concat, trace_task_hashes
from meritlens.collector.store._store import CommittedBatch, SpanStore, WriteResult
from meritlens.collector.windows import _recovery, _state
from meritlens.collector.windows._delta import SampleDelta, sample_targets, touched_keys
from meritlens.collector.windows._engine import DuckDBEngine, fill_book

log = logging.getLogger("meritlens.collector.windows")

_REBUILD_TRACES = "_rebuild_traces"
_TARGETED_REBUILD_FRACTION = 0.25
"""A rebuild of targets holding more of the stored spans than this reads every span (see `_few_rows_of`)."""


class WindowProcessor:
    """Follows a `SpanStore`'s committed batches into `windows`.

    At most ``window_lag_rows`` committed rows wait for the windows (appends wait beyond that), and
    queries wait up to ``query_wait_s`` for the windows to include what was acknowledged before them.
    ``rebuild_rows_per_partition``: scoped rows a rebuild reads per statement (default: the store's
    DuckDB memory limit over ``REBUILD_POOL_BYTES_PER_ROW``)."""

    def __init__(self, store: SpanStore, *, key_filter_bytes: int = DEFAULT_KEY_FILTER_BYTES,
                 window_memory_bytes: int = DEFAULT_WINDOW_MEMORY_BYTES,
                 window_lag_rows: int = DEFAULT_WINDOW_LAG_ROWS, query_wait_s: float = DEFAULT_QUERY_WAIT_S,
                 rebuild_rows_per_partition: int | None = None, gather_s: float = DEFAULT_WINDOW_GATHER_S):
        self.store = store
        if rebuild_rows_per_partition is None:
            pool = store.memory_limit_bytes or DEFAULT_DB_MEMORY_BYTES
            rebuild_rows_per_partition = max(MIN_REBUILD_ROWS_PER_PARTITION, pool // REBUILD_POOL_BYTES_PER_ROW)
        self._rebuild_rows_per_partition = rebuild_rows_per_partition
        self._window_memory_bytes = window_memory_bytes
        self._window_lag_rows = window_lag_rows
        self._query_wait_s = query_wait_s
        self._gather_s = gather_s
        self.lock = threading.RLock()
        """Serializes window passes (held with the store's ``write_lock`` while they write)."""
        self._changed = threading.Condition()
        """Guards the queue of committed batches the windows do not include yet."""
        self._pending: list[CommittedBatch] = []
        self._pending_rows = 0
        self._windowed_seq = 0
        """The windows include every batch committed up to this one (`CommittedBatch.seq`)."""
        self.windowed_us = 0
        """The windows include every span committed up to this time (µs since the epoch)."""
        self._closing = False
        self._readers_waiting = 0
        self.book = WindowBook()
        self._recency: dict[tuple[str, str], int] = {}
        self._writes = 0
        self.evicted: set[str] = set()
        """Targets whose window state was dropped; rebuilt from the spans on their next write."""
        self._digest: str | None = None
        self.opened = False
        """Whether `open_windows` or `refresh_all_windows` ran: only then does the book hold each of
        its targets' whole state."""
        self.watermark_valid = True
        """Whether the window rows equal a computation from the spans up to ``windowed_us`` for every
        target, so the watermark may be stored with them. False after a bulk load or a failed
        rebuild, until `refresh_all_windows`; and, on a file that held spans, until the windows open."""
        self.rows_since_state_save = 0
        self.state_saved_at = time.monotonic()
        self.replay_until_us: int | None = None
        """Set at start when the saved state is older than the stored windows (`_recovery.replay`)."""
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.stats = {"rebuilds": 0, "rebuild_partitions": 0, "label_rounds": 0, "resumes": 0,
                      "state_keys_saved": 0, "state_keys_taken_up": 0, "state_saves": 0, "state_replayed_spans": 0}
        # a started store: the windows start from what it holds, and follow every later commit
        self.con = store.connection()
        self.delta = SampleDelta(store, self.con, GrowingKeyFilter(key_filter_bytes))
        self.windowed_us = store.last_received_us
        self._windowed_seq = store.commits
        self.watermark_valid = not store.held_spans_at_start  # until the windows are opened
        store.on_commit = self._committed
        store.before_commit = self._wait_for_room
        store.freshness = self._freshness

    # --- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        """Follow committed batches in a thread of its own (call `open_windows` first)."""
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="meritlens-windows", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread, then process what is committed in the caller. Call it once no more spans
        are committed; a replay of saved state under way stops between chunks (the next start resumes it)."""
        self.close_queue()
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
        if self.con is not None:
            self.update_windows()

    def shutdown(self) -> None:
        """`stop`, save the window state, and close the processor's connection."""
        if self.con is None:  # shut down already
            return
        try:
            self.stop()
        except Exception:  # noqa: BLE001 - the spans are stored; windows are rebuilt at the next start
            log.exception("updating the windows at shutdown failed")
        else:
            self.save_window_state()
        self.con.close()
        self.con = None

    @property
    def window_lag_rows(self) -> int:
        """Committed rows that may wait for the windows (appends wait beyond it)."""
        return self._window_lag_rows

    @property
    def closing(self) -> bool:
        """A shutdown is under way: long work (a replay) stops between its steps."""
        return self._closing

    def close_queue(self) -> None:
        with self._changed:
            self._closing = True
            self._changed.notify_all()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                if self.wait_for_spans(timeout=0.5):
                    self._wait_for_demand(self._gather_s)
                    self.update_windows()
                # also when idle: a start that recomputed every window saves their state at once
                self.save_window_state_if_due()
            except Exception:  # noqa: BLE001 - keep following; the next pass retries
                log.exception("updating the windows failed")
                self._stop.wait(1.0)

    # --- the store's hooks ----------------------------------------------------------------------
    def _committed(self, batch: CommittedBatch) -> None:
        with self._changed:
            self._pending.append(batch)
            self._pending_rows += batch.table.num_rows
            self._changed.notify_all()

    def _wait_for_room(self) -> None:
        with self._changed:
            while self._pending_rows > self._window_lag_rows and not self._closing:
                self._changed.wait(1.0)

    def _freshness(self, wait_s: float | None) -> bool:
        wait_s = self._query_wait_s if wait_s is None else wait_s
        if self.wait_for_windows(wait_s):
            return True
        log.warning("the windows are more than %.0f s behind the stored spans; answering with them as they are",
                    wait_s)
        return False

    # --- waiting --------------------------------------------------------------------------------
    def wait_for_spans(self, timeout: float | None = None) -> bool:
        """Block until spans are queued for the windows (True) or ``timeout`` passes (False)."""
        with self._changed:
            return self._changed.wait_for(lambda: self._pending or self._closing or self.replay_until_us is not None,
                                          timeout) and bool(self._pending or self.replay_until_us is not None)

    def wait_for_windows(self, timeout: float | None = None) -> bool:
        """Block until the windows include every span committed or staged (acknowledged) before this
        call; False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            self._readers_waiting += 1  # the windows stop gathering
            self._changed.notify_all()
        try:
            seq = self.store.wait_committed(timeout)
            if seq is None:
                return False
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            with self._changed:
                return self._changed.wait_for(lambda: self._windowed_seq >= seq, left)
        finally:
            with self._changed:
                self._readers_waiting -= 1

    def _wait_for_demand(self, timeout: float) -> None:
        """Let committed batches gather for up to ``timeout``: return sooner when a query waits for
        the windows, when half the lag budget is queued, or at shutdown."""
        with self._changed:
            self._changed.wait_for(lambda: self._readers_waiting or self._closing or self.store.readers_waiting
                                   or 2 * self._pending_rows >= self._window_lag_rows, timeout)

    def window_lag(self) -> tuple[int, int]:
        """(batches, rows) committed that the windows do not include yet."""
        with self._changed:
            return len(self._pending), self._pending_rows

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

        A processor on a file that already held spans, whose windows were not opened (a tool's, such
        as `meritlens evaluate`), writes no window rows and no watermark: its book does not hold the
        stored spans' state. The next `open_windows` follows its batches."""
        if self.con is None:
            raise RuntimeError("the window processor is shut down")
        with self.lock:
            if self.replay_until_us is not None:
                if not self._closing:
                    _recovery.replay(self)
                if self.replay_until_us is not None:  # stopped by a shutdown: later batches wait for the next start
                    return 0
            with self._changed:
                group = list(self._pending)
            if not group:
                return 0
            until_us = group[-1].received_us
            bulk = [b.keys for b in group if not b.follow and b.table.num_rows]
            if bulk:  # their windows are rebuilt by the loader; later batches must find their keys
                self.delta.seen.add(trace_task_hashes(concat(bulk)))
                self.invalidate_watermark()
            followed = [b for b in group if b.follow and b.table.num_rows]
            if followed and not (self.store.held_spans_at_start and not self.opened):
                self.follow(concat([b.table for b in followed]), until_us, concat([b.keys for b in followed]))
            self.mark_processed(group, until_us)
            return len(group)

    def follow(self, table: pa.Table, until_us: int, hashes: pa.Table | None = None) -> None:
        """Apply the stored rows of ``table`` (committed after the watermark, up to ``until_us``) to the
        windows, in one transaction of window rows."""
        keys = touched_keys(table)
        targets = {k[0] for k in keys}
        hashes = key_hashes(table) if hashes is None else hashes
        rebuild: set[str] = set()
        if not keys:  # no application span: only the watermark moves
            self.store_windows(set(), until_us)
        else:
            try:
                removed, added = self.delta.of_batch(table, hashes, until_us, self.windowed_us)
            except Exception:  # noqa: BLE001 - the windows are rebuilt instead
                log.exception("reading the stored spans a batch touches failed; windows rebuilt instead")
                removed, added, rebuild = None, None, targets
            if not rebuild:
                # A task's spans may carry several targets: a batch of one can change another's samples.
                targets |= sample_targets(removed) | sample_targets(added)
                try:
                    with self.store.write_lock, transaction(self.con):
                        self._write_window_rows(self._apply_delta(removed, added, targets, until_us), until_us)
                except StateMismatch as exc:
                    log.info("window state rebuilt from the spans: %s", exc)
                    rebuild = targets
                except Exception:  # noqa: BLE001 - the spans are stored; the windows are rebuilt
                    log.exception("updating windows failed; windows rebuilt from the spans")
                    rebuild = targets
                except BaseException:
                    self.forget(targets)  # the state may hold what was rolled back
                    raise
        self.delta.seen.add(trace_task_hashes(hashes))
        if rebuild:
            self.forget(rebuild)
            try:
                self.rebuild(rebuild, until_us)
            except Exception:  # noqa: BLE001 - the spans are stored; the windows follow later
                log.exception("rebuilding the windows of %s failed; retried on their next batch", sorted(rebuild))
                self.invalidate_watermark()

    def _apply_delta(self, removed: pa.Table | None, added: pa.Table, targets: set[str], until_us: int,
                     skip_targets: set[str] = frozenset()) -> set[tuple[str, str]]:
        """Apply a delta to the window state; return the keys whose rows must be written. Evicted
        targets among ``targets`` are rebuilt from their spans instead; ``skip_targets``' delta is
        left out. Raises StateMismatch when the state cannot follow."""
        evicted = targets & self.evicted
        rebuilt = self.rebuild_state(evicted, until_us) if evicted else set()
        skip = {key for key in self.book.keys if key[0] in evicted}
        return rebuilt | self.book.apply_delta(removed, added, skip_keys=skip, skip_targets=skip_targets)

    def apply_state_only(self, removed, added, targets: set[str], until_us: int) -> None:
        """Apply a delta to the loaded targets' state only (their stored rows include it already)."""
        self._apply_delta(removed, added, targets, until_us, skip_targets=set(self.evicted))
        self._evict()

    def mark_processed(self, group: list[CommittedBatch], until_us: int) -> None:
        with self._changed:
            del self._pending[:len(group)]
            rows = sum(b.table.num_rows for b in group)
            self._pending_rows -= rows
            self.rows_since_state_save += rows
            self.windowed_us = max(self.windowed_us, until_us)
            if group:
                self._windowed_seq = max(self._windowed_seq, group[-1].seq)
            self._changed.notify_all()

    def forget(self, targets: set[str]) -> None:
        """Drop the state of ``targets``; it is rebuilt from the spans on their next batch."""
        for key in list(self.book.keys):
            if key[0] in targets:
                self.book.drop(key)
                self._recency.pop(key, None)
        self.evicted |= targets

    def invalidate_watermark(self) -> None:
        """The window rows may now miss committed spans: store no watermark until a full rebuild."""
        self.watermark_valid = False
        try:
            _state.delete_watermark(self.con)
        except Exception:  # noqa: BLE001 - a stale watermark makes the next start recompute
            log.exception("removing the windows' watermark failed")

    # --- rebuilding from the spans ------------------------------------------------------------
    def refresh_windows(self, keys: set[tuple[str, str]]) -> None:
        """Recompute, from every stored span, the windows of the targets of the given (target_id, scope) keys."""
        if keys:
            self.update_windows()
            with self.lock:
                self.rebuild({k[0] for k in keys}, self.windowed_us)

    def refresh_all_windows(self) -> int:
        """Recompute every window from the stored spans (at start-up: windows equal a from-scratch
        run); fills the filter of seen keys. Returns the number of (target, scope) keys."""
        with self.lock:
            with self._changed:
                group = list(self._pending)
            until_us = max(self.windowed_us, group[-1].received_us if group else 0)
            self.delta.fill_seen()
            self.book = WindowBook()
            self.evicted.clear()
            self._recency.clear()
            self.watermark_valid = True
            rebuilt = len(self.rebuild(None, until_us))
            self.mark_processed(group, until_us)
            with self._changed:  # a crash before the next save would recompute them all again
                self.rows_since_state_save += self.store.stored_rows
            self.opened = True
            return rebuilt

    def open_windows(self) -> tuple[int, bool]:
        """At start: take up the stored windows where they were left (`_recovery.resume`), else
        recompute them all. Returns (the number of (target, scope) keys, whether they were taken up)."""
        return _recovery.open_windows(self)

    def rebuild(self, targets: set[str] | None, until_us: int) -> set[tuple[str, str]]:
        """Window state and rows of ``targets`` (None: all) recomputed from every span committed up
        to ``until_us``; returns the (target, scope) keys."""
        keys = self.rebuild_state(targets, until_us)
        self.store_windows(keys, until_us)
        return keys

    def rebuild_state(self, targets: set[str] | None, until_us: int) -> set[tuple[str, str]]:
        """Window state of ``targets`` (None: all) recomputed from every span committed up to ``until_us``."""
        con = self.con
        self.stats["rebuilds"] += 1
        committed = f"received_at <= {timestamp_sql(until_us)}"
        source = f"(SELECT * FROM {SPANS_TABLE} WHERE {committed})"
        if targets is not None and self._few_rows_of(targets, committed):
            con.register("_targets", pa.table({"t": sorted(targets)}))
            try:
                con.execute(f"CREATE OR REPLACE TEMP TABLE {_REBUILD_TRACES} AS SELECT DISTINCT trace_id"
                            f" FROM {SPANS_TABLE} WHERE target_id IN (SELECT t FROM _targets) AND {committed}")
            finally:
                con.unregister("_targets")
            source = (f"(SELECT * FROM {SPANS_TABLE} WHERE {committed}"
                      f" AND trace_id IN (SELECT trace_id FROM {_REBUILD_TRACES}))")
        try:
            for key in list(self.book.keys):
                if targets is None or key[0] in targets:
                    self.book.drop(key)
            engine = DuckDBEngine(con, source, rows_per_partition=self._rebuild_rows_per_partition)
            keys = fill_book(self.book, engine.samples(), targets)
            self.stats["rebuild_partitions"], self.stats["label_rounds"] = engine.partitions, engine.label_rounds
        finally:
            try:
                con.execute(f"DROP TABLE IF EXISTS {_REBUILD_TRACES}")
            except Exception:  # noqa: BLE001 - an aborted transaction: its rollback drops it
                pass
        if targets is not None:
            self.evicted -= targets
        return keys

    def _few_rows_of(self, targets: set[str], committed: str) -> bool:
        """Whether ``targets`` hold at most a fraction of the stored spans, so that a rebuild reads
        only their traces; else it reads every span (the trace filter would cost more than it saves)."""
        con = self.con
        con.register("_targets", pa.table({"t": sorted(targets)}))
        try:
            theirs, total = con.execute(
                f"SELECT count(*) FILTER (WHERE target_id IN (SELECT t FROM _targets)), count(*)"
                f" FROM {SPANS_TABLE} WHERE {committed}").fetchall()[0]
        finally:
            con.unregister("_targets")
        return theirs <= _TARGETED_REBUILD_FRACTION * total

    # --- writing window rows --------------------------------------------------------------------
    def store_windows(self, keys: set[tuple[str, str]], until_us: int) -> None:
        """Write the rows of ``keys``' windows, and the watermark ``until_us``, in a transaction of their own."""
        with self.store.write_lock, transaction(self.con):
            self._write_window_rows(keys, until_us)

    def _write_window_rows(self, keys: set[tuple[str, str]], until_us: int) -> None:
        """Write the rows of ``keys``' windows (inside the caller's transaction) and, while the rows
        are whole, the watermark ``until_us``."""
        now = _dt.datetime.now(_dt.timezone.utc)
        if self.watermark_valid:
            _state.write_watermark(self.con, until_us, self.definitions_digest(), now)
        if not keys:
            return
        _state.write_window_rows(self.con, [w for key in sorted(keys)
                                            for w in self.book.windows(key, self.store.db_name, now)])
        self._writes += 1
        for key in keys:
            self._recency[key] = self._writes
        self._evict()

    def definitions_digest(self) -> str:
        if self._digest is None:
            self._digest = window_definitions_digest(self.store.db_name)
        return self._digest

    def _evict(self) -> None:
        """Drop the least recently written targets' state while the book is over its budget."""
        by_target: dict[str, int] = {}
        for key in self.book.keys:
            by_target[key[0]] = max(by_target.get(key[0], 0), self._recency.get(key, 0))
        total = sum(self.book.nbytes(key) for key in self.book.keys)
        for target in sorted(by_target, key=by_target.get):
            if total <= self._window_memory_bytes or len(by_target) <= 1:
                break
            for key in [k for k in self.book.keys if k[0] == target]:
                total -= self.book.nbytes(key)
                self.book.drop(key)
                self._recency.pop(key, None)
            self.evicted.add(target)
            del by_target[target]

    def restore_recency(self) -> None:
        self._recency = dict.fromkeys(self.book.keys, 0)
        self._evict()

    # --- the saved state ------------------------------------------------------------------------
    def save_window_state_if_due(self) -> bool:
        return _recovery.save_if_due(self)

    def save_window_state(self) -> bool:
        return _recovery.save(self)

