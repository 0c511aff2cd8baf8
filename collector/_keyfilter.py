"""A fixed-size filter of the trace and task keys the store holds (a Bloom filter).

It answers "may this key be stored?": never *no* for a stored key, and *yes* for a key never
stored with a small probability that grows as more keys are added. The store uses it to skip
reading back spans for a batch of new tasks; a wrong *yes* costs one index lookup, never a
wrong window. Its memory is the size it was given, whatever the load.
"""

from __future__ import annotations

import numpy as np

_PROBES = 7


class KeyFilter:
    """A Bloom filter over 64-bit key hashes, of ``size_bytes`` (rounded down to a power of two)."""

    def __init__(self, size_bytes: int):
        bits = 1 << max(10, int(size_bytes * 8).bit_length() - 1)
        self._mask = np.uint64(bits - 1)
        self._words = np.zeros(bits // 64, dtype=np.uint64)

    @property
    def nbytes(self) -> int:
        return self._words.nbytes

    def clear(self) -> None:
        self._words = np.zeros(self._words.shape, dtype=np.uint64)  # calloc: untouched pages cost no memory

    def _positions(self, hashes: np.ndarray) -> np.ndarray:
        h = hashes.astype(np.uint64, copy=False)
        first = h & np.uint64(0xFFFFFFFF)
        step = (h >> np.uint64(32)) | np.uint64(1)
        probes = np.arange(_PROBES, dtype=np.uint64)[:, None]
        with np.errstate(over="ignore"):
            return (first[None, :] + probes * step[None, :]) & self._mask

    def add(self, hashes: np.ndarray) -> None:
        if hashes.size == 0:
            return
        positions = self._positions(hashes).ravel()
        np.bitwise_or.at(self._words, positions >> np.uint64(6),
                         np.left_shift(np.uint64(1), positions & np.uint64(63)))

    def may_contain(self, hashes: np.ndarray) -> np.ndarray:
        """One bool per hash: False only for keys never added."""
        if hashes.size == 0:
            return np.zeros(0, dtype=bool)
        positions = self._positions(hashes)
        bits = (self._words[positions >> np.uint64(6)] >> (positions & np.uint64(63))) & np.uint64(1)
        return bits.all(axis=0).astype(bool)
