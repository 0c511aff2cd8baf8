"""Allocator attribution for `bench/ingest.py --allocators` (issue 7, the RSS target).

`bench/ingest.py` puts this directory first on the collector's PYTHONPATH and names a JSON file in
MERITLENS_BENCH_ALLOCATORS; Python then imports this module at start-up. A daemon thread samples,
every 50 ms, the process's anonymous RSS, DuckDB's jemalloc (``stats.resident``, ``stats.allocated``,
``stats.active``, ``stats.metadata``, all arenas' dirty and muzzy pages and thread caches, through the
``duckdb_je_mallctl`` its module exports) and glibc's heap (``mallinfo2``: held and in use), and
writes the peaks, and the breakdown at the anonymous peak, to that file once a second. Another
samples DuckDB's own accounting (``duckdb_memory()``, by tag) every 2 s on a cursor of the
collector's store (found among the live objects). Reading the counters writes nothing to the allocators.

Two experiments, off unless ingest.py asks (the collector itself does neither):
MERITLENS_BENCH_MALLOC_TRIM_S=S calls glibc's ``malloc_trim(0)`` every S seconds;
MERITLENS_BENCH_JEMALLOC_PURGE_S=S purges every arena of DuckDB's jemalloc (``arena.4096.purge``)
every S seconds.
"""

import os
import threading

_OUT = os.environ.get("MERITLENS_BENCH_ALLOCATORS")
_TAGS: dict[str, dict[str, float]] = {"last": {}, "peaks": {}}


def _sample(out: str) -> None:
    import ctypes
    import json
    import time

    from duckdb_jemalloc import duckdb_mallctl, read_size, refresh

    time.sleep(1.0)  # let the collector import DuckDB
    mallctl = duckdb_mallctl()

    class MallInfo2(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                    "fsmblks", "uordblks", "fordblks", "keepcost")]

    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = MallInfo2

    def jemalloc(name: str) -> int | None:
        return None if mallctl is None else read_size(mallctl, name)

    def anon_kib() -> int:
        with open("/proc/self/status") as fh:
            return next(int(line.split()[1]) for line in fh if line.startswith("RssAnon:"))

    mib, page = 1 << 20, os.sysconf("SC_PAGE_SIZE")
    peaks: dict[str, float] = {}
    at_peak: dict[str, float] = {}
    last_write = 0.0
    while True:
        if mallctl is not None:
            refresh(mallctl)
        info = libc.mallinfo2()
        now = {"anonymous": anon_kib() / 1024,
               "duckdb_resident": (jemalloc("stats.resident") or 0) / mib,
               "duckdb_allocated": (jemalloc("stats.allocated") or 0) / mib,
               "duckdb_active": (jemalloc("stats.active") or 0) / mib,
               "duckdb_metadata": (jemalloc("stats.metadata") or 0) / mib,
               "duckdb_dirty": (jemalloc("stats.arenas.4096.pdirty") or 0) * page / mib,
               "duckdb_muzzy": (jemalloc("stats.arenas.4096.pmuzzy") or 0) * page / mib,
               "duckdb_tcache": (jemalloc("stats.arenas.4096.tcache_bytes") or 0) / mib,
               "glibc_held": (info.arena + info.hblkhd) / mib,
               "glibc_in_use": (info.uordblks + info.hblkhd) / mib}
        for key, value in now.items():
            peaks[key] = max(peaks.get(key, 0.0), value)
        if now["anonymous"] >= at_peak.get("anonymous", 0.0):
            at_peak = now
        if time.monotonic() - last_write > 1.0:
            tmp = out + ".tmp"
            with open(tmp, "w") as fh:
                json.dump({"peaks": peaks, "at_anonymous_peak": at_peak, "duckdb_jemalloc": mallctl is not None,
                           "duckdb_memory": _TAGS}, fh)
            os.replace(tmp, out)
            last_write = time.monotonic()
        time.sleep(0.05)


def _sample_tags() -> None:
    import gc
    import time

    store = None
    while store is None:  # the collector's SpanStore, once it is open
        time.sleep(1.0)
        store = next((o for o in gc.get_objects()
                      if type(o).__name__ == "SpanStore" and getattr(o, "_con", None) is not None), None)
    while True:
        try:
            cursor = store._cursor(store._con)
            rows = cursor.execute("SELECT tag, memory_usage_bytes FROM duckdb_memory()").fetchall()
            cursor.close()
        except Exception:  # noqa: BLE001 - the store closed: keep what was sampled
            return
        _TAGS["last"] = {tag: used / (1 << 20) for tag, used in rows if used}
        for tag, used in _TAGS["last"].items():
            _TAGS["peaks"][tag] = max(_TAGS["peaks"].get(tag, 0.0), used)
        time.sleep(2.0)


def _every(seconds: float, action) -> None:
    import time

    time.sleep(1.0)
    act = action()
    while True:
        time.sleep(seconds)
        act()


def _malloc_trim():
    import ctypes

    libc = ctypes.CDLL("libc.so.6")
    return lambda: libc.malloc_trim(0)


def _jemalloc_purge():
    from duckdb_jemalloc import duckdb_mallctl

    mallctl = duckdb_mallctl()
    return lambda: mallctl(b"arena.4096.purge", None, None, None, 0)


if _OUT:
    threading.Thread(target=_sample, args=(_OUT,), daemon=True, name="bench-allocators").start()
    threading.Thread(target=_sample_tags, daemon=True, name="bench-duckdb-memory").start()
for _variable, _action in (("MERITLENS_BENCH_MALLOC_TRIM_S", _malloc_trim),
                           ("MERITLENS_BENCH_JEMALLOC_PURGE_S", _jemalloc_purge)):
    if os.environ.get(_variable):
        threading.Thread(target=_every, args=(float(os.environ[_variable]), _action), daemon=True,
                         name=f"bench-{_action.__name__}").start()
