"""Reading DuckDB's jemalloc through the ``duckdb_je_mallctl`` its Python module exports (bench only).

Imports duckdb only when called, so the collector's start-up (bench/_allocators/sitecustomize.py)
does not import it earlier than the collector would.
"""

import ctypes
import glob
import os


def duckdb_mallctl():
    """DuckDB's ``mallctl``, or None when this build exports none."""
    import duckdb

    so = glob.glob(os.path.join(os.path.dirname(duckdb.__path__[0]), "_duckdb*.so"))
    mallctl = getattr(ctypes.CDLL(so[0]), "duckdb_je_mallctl", None) if so else None
    if mallctl is not None:
        mallctl.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t), ctypes.c_void_p,
                            ctypes.c_size_t]
    return mallctl


def refresh(mallctl) -> None:
    """Make jemalloc's statistics current (they are cached until the next epoch)."""
    epoch, size = ctypes.c_uint64(1), ctypes.c_size_t(8)
    mallctl(b"epoch", ctypes.byref(epoch), ctypes.byref(size), ctypes.byref(epoch), 8)


def read_size(mallctl, name: str) -> int | None:
    """A size_t statistic or option, None when jemalloc does not know ``name``."""
    value, size = ctypes.c_size_t(0), ctypes.c_size_t(8)
    return value.value if mallctl(name.encode(), ctypes.byref(value), ctypes.byref(size), None, 0) == 0 else None
