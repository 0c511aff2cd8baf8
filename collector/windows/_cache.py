"""The window state in memory: the keys the processor touched last, under a byte budget; the others
wait in DuckDB (`_state`) and come back when a batch touches them. Nothing is dropped that is not
saved, so a key's state is never rebuilt from its spans because memory was short."""

from __future__ import annotations

import logging

import duckdb

from meritlens.analytics.engine import BucketCutoffs, WindowBook, WindowKey
from meritlens.collector.windows import _state

log = logging.getLogger("meritlens.collector.windows")

EVICT_TO_FRACTION = 0.75
"""An eviction drops keys until the state takes this share of its budget, so it does not run every pass."""


class StateCache:
    """A `WindowBook` of some keys, which keys changed since the last save, and their sizes."""

    def __init__(self, scale: int, budget_bytes: int, stats: dict[str, int] | None = None):
        self.budget_bytes = budget_bytes
        self.book = WindowBook(scale)
        self.dirty: set[WindowKey] = set()
        """Keys changed since the state was last saved."""
        self._bytes: dict[WindowKey, int] = {}
        self._used: dict[WindowKey, int] = {}
        self._clock = 0
        self.stats = {} if stats is None else stats
        """Counters, in a dict the owner may share."""
        self.stats.update(state_keys_loaded=0, state_keys_evicted=0, state_saves=0, state_keys_saved=0)

    @property
    def nbytes(self) -> int:
        return sum(self._bytes.values())

    def clear(self) -> None:
        self.book = WindowBook(self.book.scale)
        self.dirty.clear()
        self._bytes.clear()
        self._used.clear()

    def load(self, con: duckdb.DuckDBPyConnection, keys: set[WindowKey]) -> set[WindowKey]:
        """Bring ``keys`` into the book from their saved state (a key never saved starts empty).
        Returns the keys whose saved state could not be taken up (they are left out of the book)."""
        missing = sorted((k for k in keys if k not in self.book), key=repr)
        damaged = set()
        for key, blob in _state.load_states(con, missing).items():
            try:
                self.book.import_key(key, blob)
            except ValueError as exc:
                log.warning("the saved window state of %s cannot be taken up (%s)", key, exc)
                damaged.add(key)
                continue
            self.stats["state_keys_loaded"] += 1
        for key in missing:
            if key not in self.book and key not in damaged:
                self.book.add_key(key)
        self.touched(set(missing) - damaged, dirty=False)
        return damaged

    def touched(self, keys: set[WindowKey], dirty: bool = True) -> None:
        self._clock += 1
        for key in keys:
            self._used[key] = self._clock
            self._bytes[key] = self.book.nbytes(key)
        if dirty:
            self.dirty |= keys

    def over_budget(self) -> bool:
        return self.nbytes > self.budget_bytes

    def save(self, con: duckdb.DuckDBPyConnection, windowed_us: int, digest: str, cutoffs: BucketCutoffs, *,
             replace_all: bool = False, dropped: list[WindowKey] = ()) -> int:
        """Save the changed keys (with ``replace_all``: every key held, and nothing else), forget the
        ``dropped`` ones, and save the watermark and bucket cutoffs, in one transaction. Returns the
        number of keys saved."""
        keys = sorted(self.book.keys if replace_all else self.dirty & set(self.book.keys), key=repr)
        _state.save_state(con, {key: self.book.export_key(key) for key in keys}, windowed_us, digest, cutoffs,
                          replace_all=replace_all, dropped=dropped)
        self.dirty.clear()
        self.stats["state_saves"] += 1
        self.stats["state_keys_saved"] += len(keys)
        return len(keys)

    def forget(self, keys: list[WindowKey]) -> None:
        """Drop ``keys`` from memory, saved or not (their saved state is replaced or gone)."""
        for key in keys:
            self.book.drop(key)
            self._bytes.pop(key, None)
            self._used.pop(key, None)
            self.dirty.discard(key)

    def evict(self) -> int:
        """Drop the least recently touched saved keys until the state fits its budget's eviction share."""
        goal = self.budget_bytes * EVICT_TO_FRACTION
        held = self.nbytes
        dropped = 0
        for key in sorted(self._used, key=self._used.get):
            if held <= goal:
                break
            if key in self.dirty:
                continue
            held -= self._bytes.pop(key, 0)
            del self._used[key]
            self.book.drop(key)
            dropped += 1
        self.stats["state_keys_evicted"] += dropped
        return dropped
