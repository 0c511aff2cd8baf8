"""Logging a warning once per key, from any thread: the instrumentation and the price catalogue warn
about the same mistake once, not on every call."""

from __future__ import annotations

import logging
import threading


class WarnOnce:
    """``warn(key, message, *args)`` logs to ``log`` the first time ``key`` is seen; `forget` starts over."""

    def __init__(self, log: logging.Logger):
        self._log = log
        self._seen: set = set()
        self._lock = threading.Lock()

    def first(self, key) -> bool:
        """Whether ``key`` is seen now for the first time (it counts as seen from now on)."""
        if key in self._seen:  # the common case, without the lock
            return False
        with self._lock:
            if key in self._seen:
                return False
            self._seen.add(key)
            return True

    def __call__(self, key, message: str, *args: object, **kwargs) -> None:
        if self.first(key):
            self._log.warning(message, *args, **kwargs)

    def forget(self) -> None:
        with self._lock:
            self._seen.clear()
