"""One log line when a receiver refuses a request, at most one a period per kind of refusal, so a
misconfigured client is visible in the collector's log without a flood."""

from __future__ import annotations

import logging
import threading
import time

log = logging.getLogger("meritlens.collector.refused")

DEFAULT_PERIOD_S = 10.0


class RefusalLog:
    """``note(status, where, reason)``: logs the first refusal of each (status, where) at once, then
    at most one line per ``period_s`` saying how many more there were. The reason of a status in
    ``withheld`` is not logged: a malformed request's reason can quote its content, which a redaction
    policy keeps out of the log (the client still gets it in the response)."""

    def __init__(self, period_s: float = DEFAULT_PERIOD_S, clock=time.monotonic, withheld: tuple = ()):
        self._period_s = period_s
        self._clock = clock
        self._withheld = withheld
        self._lock = threading.Lock()  # gRPC refusals come from its threads, HTTP's from the event loop
        self._last: dict[tuple, float] = {}
        self._skipped: dict[tuple, int] = {}

    def note(self, status, where: str, reason: str, peer: str | None = None) -> None:
        key = (status, where)
        now = self._clock()
        with self._lock:
            last = self._last.get(key)
            if last is not None and now - last < self._period_s:
                self._skipped[key] = self._skipped.get(key, 0) + 1
                return
            self._last[key] = now
            skipped = self._skipped.pop(key, 0)
        more = f" (and {skipped} more like it in the last {self._period_s:g}s)" if skipped else ""
        if status in self._withheld:
            reason = "the reason may quote the request's content, which the redaction policy keeps out of the log"
        reason = " ".join(reason.split())
        if len(reason) > 300:
            reason = reason[:300] + "..."
        log.warning("refused %s%s with %s: %s%s", where, f" from {peer}" if peer else "", status, reason, more)
