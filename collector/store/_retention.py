"""Retention: a thread that moves the spans received longer ago than the horizon out of DuckDB
(`SpanStore.move_to_archive`), so that the file holds about one horizon of spans at steady load."""

from __future__ import annotations

import logging
import time

from meritlens.collector._periodic import Periodic
from meritlens.collector.store._store import SpanStore

log = logging.getLogger("meritlens.collector.store")

MOVE_ROWS = 1_000_000
"""Spans one move takes at most: one segment, one DELETE; a backlog is moved in several."""
MIN_INTERVAL_S, MAX_INTERVAL_S = 0.2, 600.0
"""Moves run every quarter of the horizon, within these bounds: a span leaves DuckDB at most a
quarter horizon (10 minutes at most) after it passed the horizon."""


class Retention:
    """Moves, every ``interval_s`` (default: a quarter of ``retain_s``), the spans of ``store``
    received more than ``retain_s`` ago."""

    def __init__(self, store: SpanStore, retain_s: float, *, interval_s: float | None = None,
                 move_rows: int = MOVE_ROWS):
        self.store = store
        self.retain_us = int(retain_s * 1_000_000)
        self.interval_s = interval_s or min(MAX_INTERVAL_S, max(MIN_INTERVAL_S, retain_s / 4))
        self.move_rows = move_rows
        self.failures = 0
        self._moves = Periodic("meritlens-retention", self.interval_s, self._move_now)

    def start(self) -> None:
        self._moves.start()

    def shutdown(self) -> None:
        """Stop between moves (a move under way finishes first)."""
        self._moves.shutdown()

    def move_past_horizon(self) -> int:
        """Move every span past the horizon now, in moves of at most ``move_rows``; returns how many."""
        horizon_us = time.time_ns() // 1000 - self.retain_us
        moved = 0
        while not self._moves.stopping:
            step = self.store.move_to_archive(horizon_us, self.move_rows)
            moved += step
            if step < self.move_rows:
                break
        return moved

    def _move_now(self) -> None:
        try:
            moved = self.move_past_horizon()
        except Exception:  # noqa: BLE001 - the spans stay in DuckDB; the next round tries again
            self.failures += 1
            log.exception("moving spans past the retention horizon failed; they stay in DuckDB")
            return
        if moved:
            log.debug("moved %d spans past the retention horizon", moved)
