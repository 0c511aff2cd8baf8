"""Allocator attribution for `bench/ingest.py --allocators` (issue 7, the RSS target).

`bench/ingest.py` puts this directory first on the collector's PYTHONPATH and names a JSON file in
MERITLENS_BENCH_ALLOCATORS; Python then imports this module at start-up. A daemon thread samples,
every 50 ms, the process's anonymous RSS, DuckDB's jemalloc (``stats.resident`` and
``stats.allocated`` through the ``duckdb_je_mallctl`` its module exports) and glibc's heap
(``mallinfo2``: held and in use), and writes the peaks, and the breakdown at the anonymous peak, to
that file once a second. Reading the counters writes nothing to the allocators.
"""

import os
import threading

_OUT = os.environ.get("MERITLENS_BENCH_ALLOCATORS")


def _sample(out: str) -> None:
    import ctypes
    import glob
    import json
    import time

    time.sleep(1.0)  # let the collector import DuckDB
    import duckdb

    so = glob.glob(os.path.join(os.path.dirname(duckdb.__path__[0]), "_duckdb*.so"))
    mallctl = getattr(ctypes.CDLL(so[0]), "duckdb_je_mallctl", None) if so else None
    if mallctl is not None:
        mallctl.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t), ctypes.c_void_p,
                            ctypes.c_size_t]

    class MallInfo2(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                    "fsmblks", "uordblks", "fordblks", "keepcost")]

    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = MallInfo2

    def jemalloc(name: str) -> int | None:
        if mallctl is None:
            return None
        value, size = ctypes.c_size_t(0), ctypes.c_size_t(8)
        return value.value if mallctl(name.encode(), ctypes.byref(value), ctypes.byref(size), None, 0) == 0 else None

    def anon_kib() -> int:
        with open("/proc/self/status") as fh:
            return next(int(line.split()[1]) for line in fh if line.startswith("RssAnon:"))

    mib = 1 << 20
    peaks: dict[str, float] = {}
    at_peak: dict[str, float] = {}
    last_write = 0.0
    while True:
        if mallctl is not None:  # refresh jemalloc's statistics
            epoch, size = ctypes.c_uint64(1), ctypes.c_size_t(8)
            mallctl(b"epoch", ctypes.byref(epoch), ctypes.byref(size), ctypes.byref(epoch), 8)
        info = libc.mallinfo2()
        now = {"anonymous": anon_kib() / 1024,
               "duckdb_resident": (jemalloc("stats.resident") or 0) / mib,
               "duckdb_allocated": (jemalloc("stats.allocated") or 0) / mib,
               "glibc_held": (info.arena + info.hblkhd) / mib,
               "glibc_in_use": (info.uordblks + info.hblkhd) / mib}
        for key, value in now.items():
            peaks[key] = max(peaks.get(key, 0.0), value)
        if now["anonymous"] >= at_peak.get("anonymous", 0.0):
            at_peak = now
        if time.monotonic() - last_write > 1.0:
            tmp = out + ".tmp"
            with open(tmp, "w") as fh:
                json.dump({"peaks": peaks, "at_anonymous_peak": at_peak, "duckdb_jemalloc": mallctl is not None}, fh)
            os.replace(tmp, out)
            last_write = time.monotonic()
        time.sleep(0.05)


if _OUT:
    threading.Thread(target=_sample, args=(_OUT,), daemon=True, name="bench-allocators").start()
