"""The memory limiter: exports are refused while the process's anonymous memory is above a soft limit.

Modelled on the OpenTelemetry Collector's memory_limiter processor. A thread reads the process's
anonymous resident memory (`RssAnon` of /proc/self/status: Python's heap, DuckDB's buffer pool, Arrow
buffers, every thread's allocations; not the mapped library code, which the kernel can drop and read
again) every check interval, and adds the bytes the requests in flight hold in their share (what they
may still allocate is counted before it is). Above the soft limit (``--memory-limit`` less the spike
headroom) the receivers answer new exports 503 + Retry-After / UNAVAILABLE + RetryInfo before reading
their bodies, until a check finds it below again; queries and the dashboard go on answering. On crossing the soft
limit the limiter asks Python's garbage collector for one full collection (at most once a period), as
the OpenTelemetry limiter forces a Go GC. The headroom is what may be allocated between two checks.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable

from meritlens.collector._periodic import Periodic
from meritlens.collector._settings import MemoryLimiterConfig

log = logging.getLogger("meritlens.collector.memory")

STATUS_PATH = "/proc/self/status"
QUIET_PERIOD_S = 10.0
"""At most one garbage collection and one log line about crossing the soft limit per this period."""


def anonymous_resident_bytes(path: str = STATUS_PATH) -> int | None:
    """The process's anonymous resident memory (`RssAnon`), or None where the system does not report it."""
    try:
        with open(path, "rb") as fh:
            for line in fh:
                if line.startswith(b"RssAnon:"):
                    value, unit = line.split()[1:3]
                    return int(value) * 1024 if unit == b"kB" else None
    except (OSError, ValueError, IndexError):
        return None
    return None


def _mib(n: int) -> str:
    return f"{n / 2**20:.0f}MiB"


class MemoryLimiter:
    """`start()` reads the memory every check interval until `shutdown()`; `limited` says whether
    exports are refused now, and `refusal()` why."""

    def __init__(self, config: MemoryLimiterConfig, read: Callable[[], int | None] = anonymous_resident_bytes,
                 in_flight: Callable[[], int] = lambda: 0):
        config.validate()
        self.config = config
        self._read = read
        self._in_flight = in_flight
        """Bytes the requests being processed hold in the in-flight share (`InflightBudget.used`)."""
        self._checks = Periodic("meritlens-memory", config.check_interval_s, self.check)
        self.usage: int | None = None
        """The anonymous memory at the last check (None: not read yet, or not reported here)."""
        self.limited = False
        self.available = True
        """False where the system does not report the anonymous memory: nothing is refused then."""
        self._collect_after = 0.0
        self._warn_after = 0.0

    def start(self) -> None:
        self.check()
        if not self.available:
            log.warning("this system does not report the process's anonymous memory (RssAnon in %s): the memory"
                        " limiter is off, so --memory-limit bounds only the parts the collector sizes itself",
                        STATUS_PATH)
            return
        self._checks.start()

    def shutdown(self) -> None:
        self._checks.shutdown()

    def check(self) -> None:
        """Read the memory once and refuse or accept exports from now on accordingly."""
        usage = self._read()
        if usage is None:
            self.available = self.limited = False
            self.usage = None
            return
        soft = self.config.soft_limit
        if usage + self._in_flight() > soft and not self.limited:
            now = time.monotonic()
            if now >= self._collect_after:
                self._collect_after = now + QUIET_PERIOD_S
                gc.collect()
                usage = self._read() or usage
            # its own period: a crossing that the collection undid must not silence the next one's refusals
            if usage + self._in_flight() > soft and now >= self._warn_after:
                self._warn_after = now + QUIET_PERIOD_S
                log.warning("%s is above the soft limit %s: refusing exports until it falls (%s)",
                            self._described(usage), _mib(soft), self._limits())
        self.usage = usage
        self.limited = usage + self._in_flight() > soft

    def _described(self, usage: int) -> str:
        return f"anonymous memory {_mib(usage)} with {_mib(self._in_flight())} held by requests in flight"

    def _limits(self) -> str:
        c = self.config
        return f"--memory-limit {_mib(c.limit)} less {_mib(c.spike)} of headroom for spikes"

    def refusal(self) -> str:
        """Why an export is refused now."""
        return (f"the collector's {self._described(self.usage or 0)} is above its soft limit of"
                f" {_mib(self.config.soft_limit)} ({self._limits()})")
