"""Reading DuckDB's jemalloc through the ``duckdb_je_mallctl`` its Python module exports (bench only).

`duckdb_mallctl` imports duckdb only when called, so the collector's start-up
(bench/_allocators/sitecustomize.py) does not import it earlier than the collector would.
"""

import ctypes

from meritlens.collector._freedmemory import duckdb_mallctl  # noqa: F401 - re-exported for the bench scripts


def refresh(mallctl) -> None:
    """Make jemalloc's statistics current (they are cached until the next epoch)."""
    epoch, size = ctypes.c_uint64(1), ctypes.c_size_t(8)
    mallctl(b"epoch", ctypes.byref(epoch), ctypes.byref(size), ctypes.byref(epoch), 8)


def read_size(mallctl, name: str) -> int | None:
    """A size_t statistic or option, None when jemalloc does not know ``name``."""
    value, size = ctypes.c_size_t(0), ctypes.c_size_t(8)
    return value.value if mallctl(name.encode(), ctypes.byref(value), ctypes.byref(size), None, 0) == 0 else None
