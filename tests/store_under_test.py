"""A span store and its window processor in this process, run together as the collector runs them,
for the tests of both: one object, so a test reads like the scenario it checks."""

from __future__ import annotations

import inspect

from meritlens.collector.store._store import SpanStore
from meritlens.collector.windows import _state
from meritlens.collector.windows._processor import WindowProcessor

_STORE_OPTIONS = set(inspect.signature(SpanStore.__init__).parameters) - {"self", "path"}
_WINDOW_OPTIONS = set(inspect.signature(WindowProcessor.__init__).parameters) - {"self", "store"}


class StoreUnderTest:
    """`SpanStore` options go to the store, `WindowProcessor` options to the processor (the window
    lag to both); `start` starts both. Attributes are the processor's where it has them, else the store's."""

    def __init__(self, path, **options):
        if "window_lag_rows" in options:
            options["max_staged_rows"] = options["window_lag_rows"]
        self.store = SpanStore(str(path), **{k: v for k, v in options.items() if k in _STORE_OPTIONS})
        self._window_options = {k: v for k, v in options.items() if k in _WINDOW_OPTIONS}
        unknown = set(options) - _STORE_OPTIONS - _WINDOW_OPTIONS
        assert not unknown, f"no such option: {unknown}"
        self.windows: WindowProcessor | None = None

    def start(self) -> None:
        self.store.start()
        self.windows = WindowProcessor(self.store, **self._window_options)

    def shutdown(self) -> None:
        if self.windows is not None:
            self.windows.shutdown()
        self.store.shutdown()

    def crash(self) -> None:
        """Close every connection without a shutdown, as a killed process would leave the file."""
        self.windows.con.close()
        for cursor in (self.store._span_cursor, self.store._reader):
            cursor.close()
        self.store._db.con.close()
        self.store._stager.close(remove=False)

    def follow_in_thread(self, gather_s: float = 0.0) -> "StoreUnderTest":
        self.windows._gather_s = gather_s
        self.windows.start()
        return self

    @property
    def stats(self) -> dict:
        return {**self.store.stats, **self.windows.stats, **self.windows.delta.stats}

    @property
    def con(self):
        """The window processor's connection (reads and writes the window tables)."""
        return self.windows.con

    def stored_watermark(self):
        return _state.stored_watermark(self.windows.con)

    def __setattr__(self, name: str, value) -> None:
        if name in ("store", "windows", "_window_options") or not hasattr(self.store, name):
            object.__setattr__(self, name, value)
        else:  # the store's own settings and hooks, which tests replace
            setattr(self.store, name, value)

    def __getattr__(self, name: str):
        windows = self.__dict__.get("windows")
        if windows is not None and hasattr(windows, name):
            return getattr(windows, name)
        return getattr(self.__dict__["store"], name)


class WindowThread:
    """The processor's own thread, started and stopped apart from the store (as the collector does)."""

    def __init__(self, store: StoreUnderTest, gather_s: float = 1.0):
        self._store, self._gather_s = store, gather_s

    def start(self) -> None:
        self._store.follow_in_thread(self._gather_s)

    def shutdown(self) -> None:
        self._store.windows.stop()
