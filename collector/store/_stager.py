"""Staging, for every span sink: acknowledged batches wait in a `StagingLog` until one mover stores
them (the DuckDB store in one INSERT, the lake writer as one Parquet segment).

One writer thread stages (`IngestPipeline`'s), one mover moves; readers may wait for what was staged
before them. Staged rows are bounded: at the bound `stage` waits for the mover, and refuses once a
move failed (the mover tries again a second later) or the sink is closing.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Callable

import pyarrow as pa

from meritlens.collector.store._rows import concat
from meritlens.collector.store._staging import StagingLog, read_staged, set_aside

log = logging.getLogger("meritlens.collector.store")

KEEP_LOG_BYTES = 64 * 1024 * 1024
"""Up to this size the staging log keeps records already moved while batches staged during a move wait
in it (a restart moves them again, harmlessly: stored spans are skipped, repeated ones dropped by
readers); beyond it a move also moves those batches, with staging held, and empties the log."""

Store = Callable[[pa.Table, Callable[[], None]], None]
"""How a sink stores moved rows: ``store(table, taken)`` stores ``table`` and calls ``taken()``, with
`Stager.changed` held, at the moment its rows count as stored; it raises when they are not."""


def take_up(path: str, store: Callable[[pa.Table], str], *, set_aside_failure: bool) -> None:
    """Store what a previous process acknowledged into the staging log at ``path`` and did not move
    (it stopped without a clean shutdown); ``store`` returns what it did, for the log. A log ending in
    a torn record (a write cut short by a crash, never acknowledged) is set aside for a person, as is,
    with ``set_aside_failure``, a log whose rows cannot be stored (else the error is raised)."""
    found = read_staged(path)
    if not found.file_bytes:
        return
    if found.tables:
        try:
            done = store(concat(found.tables))
        except Exception:
            if not set_aside_failure:
                raise
            aside = set_aside(path)
            log.exception("the %d staged batches in %s could not be stored; the file is kept as %s",
                          len(found.tables), path, aside)
            return
        log.info("%s that the previous run acknowledged in %s", done, path)
    if found.torn_bytes:
        aside = set_aside(path)
        log.warning("%s ended with %d bytes that are no whole record (a write cut short by a crash is"
                    " never acknowledged); the file is kept as %s", path, found.torn_bytes, aside)


class Stager:
    """The staged batches of one sink and its staging log at ``path``.

    ``move_rows``: staged rows that make a move due at once; ``move_s``: how long the oldest may wait;
    ``max_rows``: the bound; ``row_group_rows``: when set, a move that is not urgent (no reader waits,
    not closing, the oldest not due) moves whole row groups only and leaves the rest staged."""

    def __init__(self, path: str, *, place: str, move_rows: int, move_s: float, max_rows: int,
                 row_group_rows: int | None = None, keep_log_bytes: int = KEEP_LOG_BYTES):
        self.path = path
        self._place = place
        """What staged rows wait for, for messages ("to be stored in FILE")."""
        self._move_rows = move_rows
        self._move_s = move_s
        self._max_rows = max_rows
        self._row_group_rows = row_group_rows
        self._keep_log_bytes = keep_log_bytes
        self._log: StagingLog | None = None
        self._log_lock = threading.Lock()
        """Serializes the log's appends and its emptying."""
        self.changed = threading.Condition()
        """Guards the staged batches and counts; a sink may guard its own counts with it too."""
        self._staged: list[pa.Table] = []
        self._rows = 0
        """Rows staged and not yet moved."""
        self._total = 0
        """Rows staged since start. They move in staging order: the first ``_total - _rows`` are moved."""
        self._since = 0.0
        self._retry_at = 0.0
        """When to try a failed move again; 0 while the last move succeeded."""
        self._readers_waiting = 0
        self._closing = False
        self.on_move_demand: Callable[[], None] | None = None
        """Called (from a reader's thread) when a reader waits for staged rows: the mover should move
        them now (`IngestPipeline` wakes its mover)."""

    def open(self) -> None:
        self._log = StagingLog(self.path)
        self._log.open()

    def close(self, *, remove: bool) -> None:
        if self._log is not None:
            self._log.close(remove=remove)
            self._log = None

    def close_queue(self) -> None:
        """Wake every waiter: a shutdown is under way."""
        with self.changed:
            self._closing = True
            self.changed.notify_all()

    def move_at_shutdown(self, store: Store) -> bool:
        """Move everything staged; False (logged) when that fails: the log keeps it for the next start."""
        try:
            self.move(store)
        except Exception:  # noqa: BLE001 - the staging log keeps them; the next start stores them
            log.exception("the staged spans waiting %s could not be moved at shutdown; %s keeps them for the"
                          " next start", self._place, self.path)
            return False
        return True

    # --- staging --------------------------------------------------------------------------------
    def stage(self, table: pa.Table) -> None:
        """Make ``table`` durable in the log and count it staged; raises when it is not durable."""
        with self.changed:
            while self._rows >= self._max_rows:
                if self._retry_at or self._closing:
                    raise RuntimeError(f"{self._rows} staged span rows are waiting {self._place}, the most"
                                       " allowed: moving them fails (see the log)")
                self.changed.wait(1.0)
        with self._log_lock:
            self._log.append(table)
            with self.changed:
                if not self._staged:
                    self._since = time.monotonic()
                self._staged.append(table)
                self._rows += table.num_rows
                self._total += table.num_rows

    def rows(self) -> int:
        """Staged rows not yet moved."""
        with self.changed:
            return self._rows

    def _urgent(self) -> bool:
        return bool(self._readers_waiting or self._closing or time.monotonic() >= self._since + self._move_s)

    def move_due(self) -> float | None:
        """Seconds until the staged rows should be moved (0: now), or None when none are staged."""
        with self.changed:
            if not self._staged:
                return None
            now = time.monotonic()
            if now < self._retry_at:
                return self._retry_at - now
            if self._rows >= self._move_rows or self._readers_waiting or self._closing:
                return 0.0
            return max(0.0, self._since + self._move_s - now)

    # --- moving ---------------------------------------------------------------------------------
    def move(self, store: Store) -> int:
        """Store the staged rows (whole row groups of them unless urgent, see the class), then empty
        the log once everything it holds is stored: past ``keep_log_bytes``, what was staged during
        the move is stored too, with staging held. Returns the rows moved; on failure they stay
        staged, to be tried again a second later."""
        with self.changed:
            staged, rows = list(self._staged), self._rows
            if self._row_group_rows and not self._urgent():
                rows = rows // self._row_group_rows * self._row_group_rows or rows
        if not staged:
            return 0
        moved = self._move(store, staged, rows)
        with self._log_lock:
            with self.changed:
                rest = list(self._staged)
            if rest:
                if self._log.size <= self._keep_log_bytes:
                    return moved  # they wait for the next move; the log keeps the moved records beside them
                moved += self._move(store, rest)
            self._log.clear()
        return moved

    def _move(self, store: Store, staged: list[pa.Table], rows: int | None = None) -> int:
        """Store ``staged`` (the first staged tables), or only their first ``rows`` rows."""
        table, rest = concat(staged), None
        if rows is not None and rows < table.num_rows:
            table, rest = table.slice(0, rows), table.slice(rows)

        def taken() -> None:  # the rest of the moved tables stays in their place
            self._staged[:len(staged)] = [] if rest is None else [rest]
            self._rows -= table.num_rows
            if self._staged:  # the rest, or staged during this move: their wait starts about now
                self._since = time.monotonic()
            self.changed.notify_all()

        try:
            store(table, taken)
        except BaseException:
            with self.changed:
                self._retry_at = time.monotonic() + 1.0
                self.changed.notify_all()  # a `stage` waiting at the bound refuses now
            raise
        with self.changed:
            self._retry_at = 0.0
        return table.num_rows

    # --- readers --------------------------------------------------------------------------------
    def wait_moved(self, timeout: float | None) -> bool:
        """Wait until every row staged before the call is moved; False on timeout. A waiting reader
        makes the next move take every staged row at once."""
        with self.changed:
            staged = self._total

            def moved() -> bool:
                return self._total - self._rows >= staged

            if moved():
                return True
            self._readers_waiting += 1
            self.changed.notify_all()
            if self._rows and self.on_move_demand is not None:
                self.on_move_demand()
            try:
                return self.changed.wait_for(moved, timeout)
            finally:
                self._readers_waiting -= 1

    @property
    def readers_waiting(self) -> bool:
        return self._readers_waiting > 0


def remove_log(path: str) -> None:
    """Delete a staging log that was taken up by a sink that stages no more."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
