"""A span store and its window processor opened together in this process: what a command that
writes into a DuckDB file (no collector holds it) uses."""

from __future__ import annotations

from dataclasses import dataclass

from meritlens.collector.store._store import SpanStore
from meritlens.collector.windows._processor import WindowProcessor


@dataclass
class LocalStore:
    store: SpanStore
    windows: WindowProcessor

    @classmethod
    def open(cls, path: str, **store_options) -> LocalStore:
        """Start a store on ``path`` (raises duckdb.Error when another process holds it)."""
        store = SpanStore(path, **store_options)
        store.start()
        try:
            return cls(store, WindowProcessor(store))
        except BaseException:
            store.shutdown()
            raise

    def close(self) -> None:
        """Bring the windows up to date with what was written, then close the file."""
        try:
            self.windows.shutdown()
        finally:
            self.store.shutdown()
