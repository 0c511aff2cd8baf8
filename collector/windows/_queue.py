"""The committed batches the windows do not include yet, and who waits for them: appends (beyond the
lag budget), queries (until the windows include what was acknowledged before them) and the window
thread (until there is something to do)."""

from __future__ import annotations

import threading
from collections.abc import Callable

from meritlens.collector.store._store import CommittedBatch


class CommitQueue:
    """Batches in commit order, at most about ``lag_rows`` rows of them (appends wait beyond it)."""

    def __init__(self, lag_rows: int, windowed_seq: int):
        self.lag_rows = lag_rows
        self.changed = threading.Condition()
        """Guards everything here; notified on every change."""
        self.batches: list[CommittedBatch] = []
        self.rows = 0
        self.windowed_seq = windowed_seq
        """The windows include every batch committed up to this one (`CommittedBatch.seq`)."""
        self.readers_waiting = 0
        self.closing = False

    def put(self, batch: CommittedBatch) -> None:
        """`SpanStore.on_commit`."""
        with self.changed:
            self.batches.append(batch)
            self.rows += batch.table.num_rows
            self.changed.notify_all()

    def wait_for_room(self) -> None:
        """`SpanStore.before_commit`: wait while more than the lag budget waits for the windows."""
        with self.changed:
            while self.rows > self.lag_rows and not self.closing:
                self.changed.wait(1.0)

    def close(self) -> None:
        with self.changed:
            self.closing = True
            self.changed.notify_all()

    def snapshot(self) -> list[CommittedBatch]:
        with self.changed:
            return list(self.batches)

    def done(self, group: list[CommittedBatch]) -> None:
        """The windows include ``group``, the first batches of the queue."""
        with self.changed:
            del self.batches[:len(group)]
            self.rows -= sum(b.table.num_rows for b in group)
            if group:
                self.windowed_seq = max(self.windowed_seq, group[-1].seq)
            self.changed.notify_all()

    def lag(self) -> tuple[int, int]:
        """(batches, rows) committed that the windows do not include yet."""
        with self.changed:
            return len(self.batches), self.rows

    def wait(self, ready: Callable[[], bool], timeout: float | None) -> bool:
        """Wait until ``ready()`` (evaluated under the lock) or the timeout."""
        with self.changed:
            return self.changed.wait_for(ready, timeout)

    def notify(self) -> None:
        with self.changed:
            self.changed.notify_all()

    def reader(self, delta: int) -> None:
        """A query starts (1) or stops (-1) waiting for the windows: the window thread stops gathering."""
        with self.changed:
            self.readers_waiting += delta
            self.changed.notify_all()
