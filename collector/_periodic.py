"""A daemon thread that runs one step every interval until shut down (the memory limiter's checks,
retention's moves)."""

from __future__ import annotations

import threading
from collections.abc import Callable


class Periodic:
    """Runs ``step`` every ``interval_s`` on a thread named ``name`` between `start()` and `shutdown()`;
    a step under way finishes before `shutdown()` returns."""

    def __init__(self, name: str, interval_s: float, step: Callable[[], None]):
        self.name, self.interval_s, self._step = name, interval_s, step
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def shutdown(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._step()
