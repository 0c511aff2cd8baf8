"""Bloom filters of the trace, task and span keys the store holds.

A filter answers "may this key be stored?": never *no* for a stored key, and *yes* for a key never
stored with a small probability that grows as more keys are added. The store uses them to skip
reading back spans for a batch of new tasks and to skip the duplicate check of new spans; a wrong
*yes* costs one read of stored spans, never a wrong window. `KeyFilter` has the size it was given;
`GrowingKeyFilter` starts small and grows with the keys it holds, up to the size it was given.
"""

from __future__ import annotations

import numpy as np

from meritlens.collector.process._native import native as _native

_PROBES = 7


class KeyFilter:
    """A Bloom filter over 64-bit key hashes, of ``size_bytes`` (rounded down to a power of two),
    with ``probes`` bits a key."""

    def __init__(self, size_bytes: int, probes: int = _PROBES):
        bits = 1 << max(10, int(size_bytes * 8).bit_length() - 1)
        self._mask = np.uint64(bits - 1)
        self._words = np.zeros(bits // 64, dtype=np.uint64)
        self._probes = np.arange(probes, dtype=np.uint64)[:, None]

    @property
    def nbytes(self) -> int:
        return self._words.nbytes

    def clear(self) -> None:
        self._words = np.zeros(self._words.shape, dtype=np.uint64)  # calloc: untouched pages cost no memory

    def merge(self, other: KeyFilter) -> None:
        """Add every key of ``other`` (a filter of the same size and probes)."""
        self._words |= other._words

    def positions(self, hashes: np.ndarray) -> np.ndarray:
        """The bit positions of ``hashes``: the same for every filter of this size and probes."""
        h = hashes.astype(np.uint64, copy=False)
        first = h & np.uint64(0xFFFFFFFF)
        step = (h >> np.uint64(32)) | np.uint64(1)
        with np.errstate(over="ignore"):
            return (first[None, :] + self._probes * step[None, :]) & self._mask

    @property
    def bits(self) -> int:
        return self._words.size * 64

    def add(self, hashes: np.ndarray) -> int:
        """Add ``hashes``; return how many bits they set that were not set before."""
        if hashes.size == 0:
            return 0
        if _native is not None:  # the same bits, without the probe arrays
            return _native.bloom_add(self._words, np.ascontiguousarray(hashes, dtype=np.uint64), len(self._probes))
        positions = self.positions(hashes).ravel()
        index = positions >> np.uint64(6)
        bits = np.left_shift(np.uint64(1), positions & np.uint64(63))
        words = self._words
        fresh = np.unique(positions[(words[index] & bits) == 0]).size
        # A buffered |= keeps one bit of positions that share a word; those are found by reading
        # back and set again unbuffered. ~3x faster than ufunc.at for all of them.
        words[index] |= bits
        lost = (words[index] & bits) != bits
        if lost.any():
            np.bitwise_or.at(words, index[lost], bits[lost])
        return int(fresh)

    def may_contain(self, hashes: np.ndarray) -> np.ndarray:
        """One bool per hash: False only for keys never added."""
        if hashes.size == 0:
            return np.zeros(0, dtype=bool)
        if _native is not None:
            found = _native.bloom_test(self._words, np.ascontiguousarray(hashes, dtype=np.uint64), len(self._probes))
            return np.frombuffer(found, dtype=np.bool_)
        return self.may_contain_at(self.positions(hashes))

    def may_contain_at(self, positions: np.ndarray) -> np.ndarray:
        """`may_contain` for positions computed by a filter of the same size and probes."""
        bits = (self._words[positions >> np.uint64(6)] >> (positions & np.uint64(63))) & np.uint64(1)
        return bits.all(axis=0).astype(bool)


class GrowingKeyFilter:
    """A Bloom filter whose memory follows the keys it holds, never more than ``size_bytes``.

    A fixed filter touches every page of its bits after a few hundred thousand keys, because
    probes fall at random; this one is a chain of filters (the first two of ``first_bytes``,
    each further pair twice the size of the one before, within half of ``size_bytes``), each
    filled until ``fill`` of its bits are set, and a key may be stored when any of them says so.
    A new filter is resident at once (its first keys touch all its pages), so the chain holds up
    to ~1.5 times the bits its keys need; filters doubling one by one would hold up to 2 times.
    The last filter is the largest that fits in the rest of ``size_bytes`` (16 MiB of the 32 MiB
    default); it takes every key past its fill (for the 32 MiB default: past ~8M keys), and its
    wrong "maybe"s then grow as in a fixed filter of its size.

    With the default 10 probes and a fill of 0.27 (~32 bits a key) each full filter answers
    ~0.0002% wrong "maybe"s; 8 probes and a fill of 0.5 (~11.5 bits a key) answer ~0.4%, for
    a filter whose wrong "maybe"s cost little.
    """

    PROBES = 10
    FILL = 0.27

    def __init__(self, size_bytes: int, *, first_bytes: int = 256 * 1024, probes: int = PROBES,
                 fill: float = FILL):
        size = 1 << max(7, int(first_bytes).bit_length() - 1)
        while size > 128 and size > size_bytes:
            size //= 2
        self._sizes = [size]
        while True:  # the growing part, within half the bound
            following = self._sizes[-1] * (2 if len(self._sizes) % 2 == 0 else 1)
            if sum(self._sizes) + following > size_bytes // 2:
                break
            self._sizes.append(following)
        # the last filter takes every key past the others' fill: as large as the bound allows, so
        # that its wrong "maybe"s grow slowly once it does
        last = 1 << max(0, (size_bytes - sum(self._sizes)).bit_length() - 1)
        if last > self._sizes[-1]:
            self._sizes.append(last)
        self._probes = probes
        self._fill = fill
        self._layers: list[KeyFilter] = []
        self._set_bits = 0  # of the last layer
        self.clear()

    @property
    def nbytes(self) -> int:
        return sum(layer.nbytes for layer in self._layers)

    @property
    def max_nbytes(self) -> int:
        return sum(self._sizes)

    @property
    def layers(self) -> int:
        return len(self._layers)

    def clear(self) -> None:
        self._layers = [KeyFilter(self._sizes[0], self._probes)]
        self._set_bits = 0

    def add(self, hashes: np.ndarray) -> None:
        start = 0
        while start < hashes.size:
            layer = self._layers[-1]
            if len(self._layers) == len(self._sizes):  # the last filter takes every further key
                self._set_bits += layer.add(hashes[start:])
                return
            if self._set_bits >= self._fill * layer.bits:
                layer = KeyFilter(self._sizes[len(self._layers)], self._probes)
                self._layers.append(layer)
                self._set_bits = 0
            # few enough keys not to fill the layer far past its fill (a key sets <= probes bits)
            part = hashes[start:start + int(self._fill * layer.bits - self._set_bits) // self._probes + 1]
            self._set_bits += layer.add(part)
            start += part.size

    def may_contain(self, hashes: np.ndarray) -> np.ndarray:
        """One bool per hash: False only for keys never added."""
        found = self._layers[0].may_contain(hashes)
        for layer in self._layers[1:]:
            found = found | layer.may_contain(hashes)
        return found


class _Block:
    """The keys committed between two times (µs since the epoch), as a Bloom filter."""

    __slots__ = ("first_us", "last_us", "keys", "filter")

    def __init__(self, first_us: int, size_bytes: int, probes: int):
        self.first_us = self.last_us = first_us
        self.keys = 0
        self.filter = KeyFilter(size_bytes, probes)


class KeyLocator:
    """Where stored keys are: for a key hash, the commit-time ranges that may hold it.

    It stands in for a B-tree over the stored spans' keys, whose memory would grow with every
    span: commits are grouped in blocks of consecutive commit times, each with a Bloom filter of
    its keys, and a filter over the span keys alone (the ones every insert checks) answers
    "stored anywhere?" first. The spans table is
    kept in commit order, so a range is read through DuckDB's min/max pruning. Its memory grows
    with the keys up to ``size_bytes``, whatever the load: a quarter for the overall filter (a
    `GrowingKeyFilter` of ~11.5 bits a key: its ~1% wrong "maybe"s cost a probe of the blocks,
    ~3 µs a block, not a read), the rest for the blocks;
    when the blocks fill it, the two adjacent blocks with the fewest keys are merged (their
    filters OR'ed), so older ranges get coarser and a wrong "maybe" costs a larger read — never
    a wrong answer. A block holds 24 bits a key with 16 probes: ~0.001% wrong "maybe"s, so that
    a look-up of hundreds of keys over hundreds of blocks reads few blocks it need not.
    """

    _BLOCK_PROBES = 16
    _BLOCK_BITS_PER_KEY = 24
    _OVERALL_PROBES, _OVERALL_FILL = 8, 0.5  # ~11.5 bits a key: its wrong "maybe"s cost a probe of the blocks

    def __init__(self, size_bytes: int, *, block_bytes: int = 256 * 1024, block_keys: int | None = None):
        self._all = GrowingKeyFilter(size_bytes // 4, probes=self._OVERALL_PROBES, fill=self._OVERALL_FILL)
        self._block_bytes = min(block_bytes, max(1024, size_bytes // 8))
        self._block_keys = block_keys or self._block_bytes * 8 // self._BLOCK_BITS_PER_KEY
        self._max_blocks = max(2, (size_bytes - self._all.max_nbytes) // self._block_bytes)
        self._blocks: list[_Block] = []

    @property
    def nbytes(self) -> int:
        return self._all.nbytes + sum(b.filter.nbytes for b in self._blocks)

    @property
    def blocks(self) -> int:
        return len(self._blocks)

    def clear(self) -> None:
        self._all.clear()
        self._blocks = []

    def add(self, hashes: np.ndarray, first_us: int, last_us: int | None = None, *,
            gated: np.ndarray | None = None) -> None:
        """Record ``hashes`` as committed between ``first_us`` and ``last_us`` (default: at
        ``first_us``); never earlier than the keys added before. ``gated`` (a subset of them)
        also go in the overall filter that `ranges` checks first (default: all)."""
        if hashes.size == 0:
            return
        last_us = first_us if last_us is None else last_us
        self._all.add(hashes if gated is None else gated)
        start = 0
        while start < hashes.size:
            block = self._blocks[-1] if self._blocks else None
            if block is None or block.keys >= self._block_keys:
                block = _Block(first_us, self._block_bytes, self._BLOCK_PROBES)
                self._blocks.append(block)
                if len(self._blocks) > self._max_blocks:
                    self._merge_smallest_pair()
            part = hashes[start:start + self._block_keys - block.keys]
            block.filter.add(part)
            block.keys += int(part.size)
            block.last_us = max(block.last_us, last_us)
            start += part.size

    def _merge_smallest_pair(self) -> None:
        sealed = self._blocks[:-1]  # the open block keeps filling
        i = min(range(len(sealed) - 1), key=lambda j: sealed[j].keys + sealed[j + 1].keys)
        a, b = self._blocks[i], self._blocks[i + 1]
        a.filter.merge(b.filter)
        a.keys += b.keys
        a.last_us = b.last_us
        del self._blocks[i + 1]

    def may_contain(self, hashes: np.ndarray) -> np.ndarray:
        """One bool per hash: False only for gated keys never added."""
        return self._all.may_contain(hashes)

    def ranges(self, hashes: np.ndarray, until_us: int | None = None, *, gated: bool = True) -> list[tuple[int, int]]:
        """The (first_us, last_us) commit-time ranges, oldest first and coalesced, that may hold
        any of ``hashes``; only ranges starting at or before ``until_us`` when it is given.
        ``gated``: the hashes are of gated keys, so the overall filter rules out most new ones."""
        if gated and hashes.size:
            hashes = hashes[self._all.may_contain(hashes)]
        found: list[tuple[int, int]] = []
        if hashes.size == 0:
            return found
        previous = -2
        # Without the native probes, the blocks (all of one size) share one array of positions.
        positions = self._blocks[0].filter.positions(hashes) if self._blocks and _native is None else None
        for i, block in enumerate(self._blocks):
            if until_us is not None and block.first_us > until_us:
                break
            hit = block.filter.may_contain(hashes) if positions is None else block.filter.may_contain_at(positions)
            if hit.any():
                if previous == i - 1:
                    found[-1] = (found[-1][0], block.last_us)
                else:
                    found.append((block.first_us, block.last_us))
                previous = i
        return found
