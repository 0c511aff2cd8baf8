"""OS-level names for the collector's own threads, so `top -H`, `ps -L` and /proc show which
thread spends the CPU (Python before 3.14 leaves every thread named after the process)."""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

_PR_SET_NAME = 15  # prctl(2)
_MAX_NAME_BYTES = 15  # the kernel keeps 16 bytes, the last a NUL

_libc = None
if sys.platform.startswith("linux"):
    try:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:  # pragma: no cover - a libc ctypes cannot open
        _libc = None


def os_thread_name(name: str) -> str:
    """The kernel's name for a thread called ``name``: ``meritlens-`` shortened to ``ml-``, then cut
    to the kernel's 15 bytes."""
    if name.startswith("meritlens-"):
        name = "ml-" + name[len("meritlens-"):]
    return name.encode("utf-8")[:_MAX_NAME_BYTES].decode("utf-8", "ignore")


def name_os_thread(name: str) -> bool:
    """Give the calling thread ``os_thread_name(name)`` as its OS name; False where the platform
    has no such name (the thread runs the same either way)."""
    if _libc is None:
        return False
    return _libc.prctl(_PR_SET_NAME, os_thread_name(name).encode("utf-8"), 0, 0, 0) == 0
