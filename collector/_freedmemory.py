"""Freed memory handed back to the system when it is freed, not kept for reuse (Linux).

Three allocators in the collector keep what the load frees. DuckDB's bundled jemalloc keeps a freed
page for reuse up to a second (its "dirty decay"): at 10k spans/s a window pass and an INSERT free
tens of MiB each, and 40-60 MiB of freed pages sat in DuckDB's arenas at the process's peak. glibc's
``malloc`` raises its threshold for serving a block from its own mapping each time such a block is
freed, so later large blocks (request bodies, numpy arrays) come from the heap, where a free leaves a
hole the process keeps. Both are tuned for speed in a program that does not care about its RSS; a
collector does. `return_freed_memory` makes DuckDB's arenas purge freed pages at once and fixes glibc's
threshold, which costs page faults when memory is reused (~2-3 points of a core at 10k spans/s) and
lowered the peak RSS by ~30-40 MiB (bench/README.md "Twenty-second session"). The jemalloc bundled in
pyarrow's wheels, which holds the collector's Arrow buffers (staged rows, batches awaiting their window
pass), keeps freed pages for a second too; it reads its configuration only once, so
`prepare_arrow_allocator` must run before pyarrow is imported (~5 MiB lower peak: "Twenty-third session").
"""

from __future__ import annotations

import ctypes
import os
import sys
from dataclasses import dataclass

from meritlens.collector._osthread import _libc
from meritlens.collector._settings import ENV_ARROW_JEMALLOC_CONF

GLIBC_MMAP_THRESHOLD_BYTES = 128 * 1024
"""Blocks at least this large get their own mapping, returned to the system on free (glibc's
initial value, which it otherwise raises as large blocks are freed, up to 32 MiB)."""
_M_MMAP_THRESHOLD = -3  # <malloc.h>
_EFAULT = 14  # jemalloc's answer for an arena slot not created yet
ARROW_JEMALLOC_CONF = "dirty_decay_ms:0,muzzy_decay_ms:0"
"""What `prepare_arrow_allocator` puts in JE_ARROW_MALLOC_CONF: freed pages purged at once."""


@dataclass(frozen=True)
class FreedMemoryPolicy:
    """What one `return_freed_memory` call changed; None where that allocator could not be tuned."""

    glibc_mmap_threshold: int | None
    """glibc's fixed threshold for blocks served from their own mapping, in bytes."""
    duckdb_arenas: int | None
    """DuckDB's jemalloc arenas set to purge freed pages at once (new arenas also do)."""
    arrow_jemalloc: bool = False
    """Whether Arrow's buffers are on its bundled jemalloc configured to purge freed pages at once
    (`prepare_arrow_allocator` ran before pyarrow was imported); False for another pool, or when
    pyarrow was imported first or the environment configured that allocator otherwise."""


def duckdb_mallctl():
    """The ``mallctl`` of DuckDB's bundled jemalloc, or None when this DuckDB build has none."""
    import duckdb

    module = sys.modules.get("_duckdb") or getattr(duckdb, "duckdb", None)
    path = getattr(module, "__file__", None)
    if not path:
        return None
    try:
        mallctl = getattr(ctypes.CDLL(path), "duckdb_je_mallctl", None)
    except OSError:
        return None
    if mallctl is not None:
        mallctl.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t), ctypes.c_void_p,
                            ctypes.c_size_t]
        mallctl.restype = ctypes.c_int
    return mallctl


def _purge_duckdb_at_once() -> int | None:
    mallctl = duckdb_mallctl()
    if mallctl is None:
        return None
    zero = ctypes.c_ssize_t(0)
    # the default of arenas created later (DuckDB creates them as its threads first allocate)
    if mallctl(b"arenas.dirty_decay_ms", None, None, ctypes.byref(zero), ctypes.sizeof(zero)) != 0:
        return None
    count, size = ctypes.c_uint(0), ctypes.c_size_t(ctypes.sizeof(ctypes.c_uint))
    if mallctl(b"arenas.narenas", ctypes.byref(count), ctypes.byref(size), None, 0) != 0:
        return None
    tuned = 0
    # one arena at a time: the all-arenas index (4096) is not accepted for decay times
    for index in range(count.value):
        answer = mallctl(f"arena.{index}.dirty_decay_ms".encode(), None, None, ctypes.byref(zero),
                         ctypes.sizeof(zero))
        if answer == 0:
            tuned += 1
        elif answer != _EFAULT:
            return None
    return tuned


def _fix_glibc_threshold() -> int | None:
    if _libc is None:
        return None
    try:
        mallopt = _libc.mallopt
    except AttributeError:  # a libc other than glibc
        return None
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return GLIBC_MMAP_THRESHOLD_BYTES if mallopt(_M_MMAP_THRESHOLD, GLIBC_MMAP_THRESHOLD_BYTES) == 1 else None


def prepare_arrow_allocator() -> bool:
    """Before pyarrow is imported: have the jemalloc bundled in its wheels purge freed pages at once
    (``JE_ARROW_MALLOC_CONF``, which that allocator reads once, when Arrow first allocates). Returns
    whether it did: not once pyarrow is imported, nor when the environment already configures it.
    Child processes inherit the variable."""
    if "pyarrow" in sys.modules or os.environ.get(ENV_ARROW_JEMALLOC_CONF):
        return False
    os.environ[ENV_ARROW_JEMALLOC_CONF] = ARROW_JEMALLOC_CONF
    return True


def _arrow_purges_at_once() -> bool:
    if os.environ.get(ENV_ARROW_JEMALLOC_CONF) != ARROW_JEMALLOC_CONF:
        return False
    import pyarrow

    return pyarrow.default_memory_pool().backend_name == "jemalloc"


def return_freed_memory() -> FreedMemoryPolicy:
    """Make DuckDB's jemalloc purge freed pages at once and fix glibc's mmap threshold, for this
    whole process from now on, and report whether Arrow's jemalloc was prepared to (see
    `prepare_arrow_allocator`). Never raises: an allocator that cannot be tuned is reported as None."""
    try:
        duckdb_arenas = _purge_duckdb_at_once()
    except Exception:  # noqa: BLE001 - a DuckDB build without its allocator's symbols
        duckdb_arenas = None
    try:
        arrow = _arrow_purges_at_once()
    except Exception:  # noqa: BLE001 - pyarrow missing or broken: nothing to report
        arrow = False
    return FreedMemoryPolicy(glibc_mmap_threshold=_fix_glibc_threshold(), duckdb_arenas=duckdb_arenas,
                             arrow_jemalloc=arrow)
