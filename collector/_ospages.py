"""Library pages that only the collector's start-up needed, handed back to the system (Linux).

Starting a collector runs code that a running one never runs again: DuckDB registers its ~2,000
built-in functions, Python compiles and executes ~570 modules, Arrow builds its compute registry.
The kernel keeps those pages of the libraries' code mapped and counted in the process's resident
memory (RSS) until memory runs short, and it protects mapped executable pages longer than other
cached file pages. `release_library_pages` asks it to reclaim the resident pages of every read-only
file mapping now (``madvise(MADV_PAGEOUT)``, Linux 5.4+); what the collector runs afterwards faults
its pages back in from the page cache or the disk, once. `resident_library_pages` and
`release_library_pages_since` do the same for what one step faulted in (the store's reopen of its
database, which runs DuckDB's start-up code again).
"""

from __future__ import annotations

import ctypes
import mmap
from dataclasses import dataclass

import numpy as np

from meritlens.collector._osthread import _libc

MADV_PAGEOUT = 21  # <linux/mman.h>
_EINVAL = 22


@dataclass(frozen=True)
class PageRelease:
    """What one `release_library_pages` call did."""

    mappings: int
    """Read-only file mappings it asked the kernel to reclaim."""
    file_bytes_before: int
    """The process's resident file-backed memory (RssFile) before the call."""
    file_bytes_after: int


def _resident_file_bytes() -> int | None:
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("RssFile:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return None
    return None


def read_only_file_mappings(pid: int | str = "self") -> list[tuple[int, int]]:
    """(start, length) of each mapping of a file that the process ``pid`` cannot write through."""
    found = []
    with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as fh:
        for line in fh:
            parts = line.split(maxsplit=5)
            if len(parts) < 6 or not parts[5].startswith("/") or "w" in parts[1]:
                continue
            start, end = (int(x, 16) for x in parts[0].split("-"))
            found.append((start, end - start))
    return found


def _madvise():
    madvise = _libc.madvise
    madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    madvise.restype = ctypes.c_int
    return madvise


def release_library_pages() -> PageRelease | None:
    """Ask the kernel to reclaim the resident pages of this process's read-only file mappings (its
    libraries' code and constant data); None where the platform cannot (not Linux, a kernel before
    5.4, or /proc not mounted). Never raises: a mapping the kernel refuses is left as it was."""
    if _libc is None:
        return None
    before = _resident_file_bytes()
    if before is None:
        return None
    try:
        mappings = read_only_file_mappings()
    except OSError:
        return None
    madvise = _madvise()
    asked = 0
    for start, length in mappings:
        if madvise(start, length, MADV_PAGEOUT) == 0:
            asked += 1
        elif ctypes.get_errno() == _EINVAL and asked == 0:
            return None  # a kernel without MADV_PAGEOUT
    after = _resident_file_bytes()
    return PageRelease(asked, before, before if after is None else after)


_PAGE = mmap.PAGESIZE
_PRESENT = 1 << 63  # /proc/PID/pagemap: the page is in RAM (readable without privileges)


def resident_library_pages() -> dict[tuple[int, int], np.ndarray] | None:
    """Which pages of each read-only file mapping are resident in this process (one bool a page),
    for `release_library_pages_since`; None where /proc/self/pagemap cannot tell."""
    try:
        mappings = read_only_file_mappings()
        found = {}
        with open("/proc/self/pagemap", "rb", buffering=0) as fh:
            for start, length in mappings:
                fh.seek(start // _PAGE * 8)
                entries = np.frombuffer(fh.read(length // _PAGE * 8), dtype="<u8")
                found[(start, length)] = (entries & np.uint64(_PRESENT)) != 0
    except (OSError, ValueError):
        return None
    return found


def release_library_pages_since(before: dict[tuple[int, int], np.ndarray] | None) -> int:
    """Ask the kernel to reclaim the pages of read-only file mappings that became resident since
    ``before`` (`resident_library_pages`): code that ran in between (e.g. opening a database) and
    that the running collector does not need again. Returns how many pages it asked for; never raises."""
    if before is None or _libc is None:
        return 0
    after = resident_library_pages()
    if after is None:
        return 0
    madvise = _madvise()
    asked = 0
    for (start, length), now in after.items():
        was = before.get((start, length))
        new = now if was is None or len(was) != len(now) else now & ~was
        if not new.any():
            continue
        edges = np.flatnonzero(np.diff(np.concatenate(([0], new.view(np.int8), [0]))))
        for first, end in zip(edges[::2], edges[1::2]):
            if madvise(start + int(first) * _PAGE, int(end - first) * _PAGE, MADV_PAGEOUT) == 0:
                asked += int(end - first)
    return asked
