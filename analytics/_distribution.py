"""A window's distribution of sample values, in state that does not grow with the samples.

While a window holds at most `EXACT_SAMPLES` samples it keeps their values and reports exact order
statistics. Beyond that it keeps a log-bucketed histogram: the bucket scheme of OpenTelemetry's
exponential histogram and Prometheus' native histograms (bucket ``i`` of scale ``s`` holds the values
in ``(base**i, base**(i+1)]``, ``base = 2**(2**-s)``), at one fixed scale, with a zero bucket and a
mirrored histogram for negative values. Each bucket reports the value whose relative error is the same
at both of its ends, so every reported quantile is within ``(base - 1) / (base + 1)`` of the true one
(`relative_error_of`). The scale is never lowered: with integer counts and fixed buckets a removal is
exact and the state is a function of the current samples alone, whatever their order and batching.

A histogram cannot give the exact values back, so a window whose samples fall back to
`EXACT_SAMPLES` or fewer (a task's value turning NULL, a forgotten span) reports that it must be
recomputed from its samples (`Distribution.remove` returns False).

Sums are kept exactly as integers (`exact_sum`, `exact_square_sum`): the mean and the variance are
correctly rounded whatever the order of additions and removals.
"""

from __future__ import annotations

import bisect
import math

import numpy as np

from meritlens.analytics._scale import relative_error_of

EXACT_SAMPLES = 1000
"""Windows with at most this many samples report exact order statistics."""
SUM_SCALE = 1200
"""Exact sums are integers in units of 2**-SUM_SCALE (squares: 2**-(2 * SUM_SCALE)): every finite
double is a whole number of them."""
_SPLIT = 134217729.0  # 2**27 + 1, Veltkamp's splitter for doubles
_SQUARE_LOW, _SQUARE_HIGH = 2.0 ** -450, 2.0 ** 450
"""Magnitudes between which a square and its rounding error are exact doubles (no underflow or overflow)."""


def bucket_indices(values: np.ndarray, scale: int) -> np.ndarray:
    """The bucket index of each positive value at ``scale`` (OpenTelemetry's mapping: upper bounds
    inclusive; exact powers of two land in the bucket they close)."""
    mantissa, exponent = np.frexp(values)
    indices = np.ceil(np.log2(values) * float(1 << scale)).astype(np.int64) - 1
    powers = mantissa == 0.5
    if powers.any():
        indices[powers] = ((exponent[powers].astype(np.int64) - 1) << scale) - 1
    return indices


def exact_sum(values: np.ndarray) -> int:
    """The exact sum of finite doubles, in units of 2**-SUM_SCALE."""
    if values.size == 0:
        return 0
    mantissa, exponent = np.frexp(values)
    whole = (mantissa * (1 << 53)).astype(np.int64)  # exact: |mantissa| < 1 has 53 significant bits
    low_exponent = int(exponent.min())
    bins = exponent - low_exponent
    # per exponent, the sums of the mantissas' two halves: doubles hold them exactly (|half| < 2**27,
    # fewer than 2**26 values a call)
    highs = np.bincount(bins, weights=whole >> 26)
    lows = np.bincount(bins, weights=whole & ((1 << 26) - 1))
    held = np.flatnonzero((highs != 0) | (lows != 0))
    if held.size == 0:
        return 0
    # Horner's rule from the highest exponent down: the integers stay as wide as the values' spread
    total, previous = 0, int(held[-1])
    for k, high, low in zip(held[::-1].tolist(), highs[held[::-1]].astype(np.int64).tolist(),
                            lows[held[::-1]].astype(np.int64).tolist()):
        total = (total << (previous - k)) + (high << 26) + low
        previous = k
    return total << (previous + low_exponent - 53 + SUM_SCALE)


def exact_square_sum(values: np.ndarray) -> int:
    """The exact sum of the squares of finite doubles, in units of 2**-(2 * SUM_SCALE).

    In the usual range each square is split exactly into its rounded product and the product's
    rounding error (Dekker's product with Veltkamp's split) and both parts are summed exactly; the
    few values whose square would underflow or overflow a double are squared as integers."""
    if values.size == 0:
        return 0
    values = values.astype(float, copy=False)
    magnitude = np.abs(values)
    usual = (magnitude > _SQUARE_LOW) & (magnitude < _SQUARE_HIGH)
    total = 0
    if not usual.all():
        for value in values[~usual & (magnitude > 0)].tolist():
            mantissa, exponent = math.frexp(value)
            whole = int(mantissa * (1 << 53))
            total += (whole * whole) << (2 * (exponent - 53 + SUM_SCALE))
        values = values[usual]
    product = values * values
    spread = _SPLIT * values
    high = spread - (spread - values)
    low = values - high
    error = ((high * high - product) + 2.0 * high * low) + low * low
    return total + (exact_sum(np.concatenate([product, error])) << SUM_SCALE)


def segment_sums(values: np.ndarray, starts: np.ndarray) -> tuple[list[int], list[int]]:
    """The exact sum and exact sum of squares (`exact_sum`, `exact_square_sum`) of each segment of
    ``values`` (segment k: ``values[starts[k]:starts[k + 1]]``, the last to the end; none empty), in a
    few passes over all of them rather than a few per segment."""
    if values.size < (1 << 21) and (np.abs(values) < _SMALL_INTEGER).all() and (values == np.rint(values)).all():
        whole = values.astype(np.int64)  # integers (token counts, steps, 0/1 outcomes): int64 sums are exact
        totals = np.add.reduceat(whole, starts).tolist()
        squares = np.add.reduceat(whole * whole, starts).tolist()
        return [t << SUM_SCALE for t in totals], [s << (2 * SUM_SCALE) for s in squares]
    segment = np.repeat(np.arange(starts.size), np.diff(np.append(starts, values.size)))
    totals = _binned_sums(values, segment, starts.size)
    usual = (np.abs(values) > _SQUARE_LOW) & (np.abs(values) < _SQUARE_HIGH)
    plain = np.where(usual, values, 0.0)  # the others would overflow or underflow: squared as integers below
    product = plain * plain
    spread = _SPLIT * plain
    high = spread - (spread - plain)
    low = plain - high
    error = ((high * high - product) + 2.0 * high * low) + low * low
    parts = np.concatenate([product, error])
    squares = [s << SUM_SCALE for s in _binned_sums(parts, np.concatenate([segment, segment]), starts.size)]
    for i in np.flatnonzero(~usual & (values != 0)).tolist():  # squares a double cannot hold: as integers
        squares[int(segment[i])] += exact_square_sum(values[i:i + 1])
    return totals, squares


def _binned_sums(values: np.ndarray, segment: np.ndarray, segments: int) -> list[int]:
    """`exact_sum` of the values of each segment id, binned by (segment, exponent) in one pass."""
    mantissa, exponent = np.frexp(values)
    whole = (mantissa * (1 << 53)).astype(np.int64)
    low_exponent = int(exponent.min()) if values.size else 0
    width = (int(exponent.max()) - low_exponent + 1) if values.size else 1
    bins = segment * width + (exponent - low_exponent)
    # doubles hold each bin's sums of the mantissas' halves exactly (|half| < 2**27, fewer than 2**26 a bin)
    highs = np.bincount(bins, weights=whole >> 26, minlength=segments * width)
    lows = np.bincount(bins, weights=whole & ((1 << 26) - 1), minlength=segments * width)
    held = np.flatnonzero((highs != 0) | (lows != 0))
    totals = [0] * segments
    # per segment, Horner's rule from its highest exponent down (a segment's bins are consecutive):
    # the integers stay as wide as the segment's spread of exponents
    segment_now, total, previous = -1, 0, 0
    for b, high, low in zip(held[::-1].tolist(), highs[held[::-1]].astype(np.int64).tolist(),
                            lows[held[::-1]].astype(np.int64).tolist()):
        s, k = divmod(b, width)
        if s != segment_now:
            if segment_now >= 0:
                totals[segment_now] = total << (previous + low_exponent - 53 + SUM_SCALE)
            segment_now, total, previous = s, 0, k
        total = (total << (previous - k)) + (high << 26) + low
        previous = k
    if segment_now >= 0:
        totals[segment_now] = total << (previous + low_exponent - 53 + SUM_SCALE)
    return totals


_SMALL_INTEGER = float(1 << 21)
"""Below it a square is an exact int64 and 2**21 of them sum without overflow."""


def scaled_to_float(scaled: int, divisor: int = 1, scale: int = SUM_SCALE) -> float:
    """A scaled exact sum divided by ``divisor``, correctly rounded."""
    return scaled / (divisor << scale)


def sample_variance(n: int, total: int, squares: int) -> float | None:
    """The unbiased variance of ``n`` samples from their exact sums (`exact_sum`, `exact_square_sum`),
    correctly rounded (inf beyond the doubles); None below two samples."""
    if n < 2:
        return None
    spread = max(n * squares - total * total, 0)  # units of 2**-(2 * SUM_SCALE); exact
    try:
        return spread / ((n * (n - 1)) << (2 * SUM_SCALE))
    except OverflowError:
        return math.inf


def sample_stddev(n: int, total: int, squares: int) -> float | None:
    """The square root of `sample_variance`, also where the variance itself is beyond the doubles."""
    variance = sample_variance(n, total, squares)
    if variance is None or math.isfinite(variance):
        return None if variance is None else math.sqrt(variance)
    spread = n * squares - total * total
    return math.isqrt(spread // (n * (n - 1))) / (1 << SUM_SCALE)


class _Buckets:
    """Integer counts of consecutive bucket indices, from ``offset``."""

    __slots__ = ("offset", "counts")

    def __init__(self, offset: int = 0, counts: np.ndarray | None = None):
        self.offset = offset
        self.counts = np.zeros(0, dtype=np.int64) if counts is None else counts

    def change(self, indices: np.ndarray, sign: int) -> bool:
        """Add (sign 1) or take out (sign -1) one count per index; False when a count would turn negative."""
        if indices.size == 0:
            return True
        lo, hi = int(indices.min()), int(indices.max())
        if sign < 0 and (self.counts.size == 0 or lo < self.offset or hi >= self.offset + self.counts.size):
            return False
        self._cover(lo, hi)
        if indices.size <= 16:  # a few values: one count each, no array of the whole range
            counts = self.counts
            for i in (indices - self.offset).tolist():
                counts[i] += sign
            if sign < 0:
                if counts.min() < 0:
                    return False
                self._trim()
            return True
        delta = np.bincount(indices - self.offset, minlength=self.counts.size)
        if sign < 0:
            if (delta > self.counts).any():
                return False
            self.counts -= delta
            self._trim()
        else:
            self.counts += delta
        return True

    def merge(self, other: "_Buckets") -> None:
        """Add ``other``'s counts."""
        if other.counts.size:
            self._cover(other.offset, other.offset + other.counts.size - 1)
            start = other.offset - self.offset
            self.counts[start:start + other.counts.size] += other.counts

    def _cover(self, lo: int, hi: int) -> None:
        """Grow the counts to cover bucket indices ``lo``..``hi``."""
        if self.counts.size == 0:
            self.offset, self.counts = lo, np.zeros(hi - lo + 1, dtype=np.int64)
        elif lo < self.offset or hi >= self.offset + self.counts.size:
            start = min(lo, self.offset)
            end = max(hi + 1, self.offset + self.counts.size)
            grown = np.zeros(end - start, dtype=np.int64)
            grown[self.offset - start:self.offset - start + self.counts.size] = self.counts
            self.offset, self.counts = start, grown

    def _trim(self) -> None:
        held = np.flatnonzero(self.counts)
        if held.size == 0:
            self.offset, self.counts = 0, np.zeros(0, dtype=np.int64)
        elif held[0] > 0 or held[-1] < self.counts.size - 1:
            self.offset += int(held[0])
            self.counts = self.counts[held[0]:held[-1] + 1].copy()

    @property
    def total(self) -> int:
        return int(self.counts.sum())


class Distribution:
    """The sample values of one window: exact while few, a fixed-scale histogram beyond (see the module)."""

    __slots__ = ("scale", "n", "values", "zeros", "positive", "negative")

    def __init__(self, scale: int):
        self.scale = scale
        self.n = 0
        self.values: list[float] | None = []
        """The sorted sample values while exact (a list: a window's deltas are mostly a few values,
        which `bisect` places faster than array copies); None once a histogram."""
        self.zeros = 0
        self.positive = _Buckets()
        self.negative = _Buckets()
        """Buckets of the magnitudes of negative values."""

    @property
    def exact(self) -> bool:
        return self.values is not None

    @property
    def relative_error(self) -> float:
        """The bound on the relative error of the reported quantiles: 0 while exact."""
        return 0.0 if self.exact else relative_error_of(self.scale)

    @property
    def nbytes(self) -> int:
        if self.values is not None:
            return 64 + 32 * len(self.values)
        return 64 + self.positive.counts.nbytes + self.negative.counts.nbytes

    def add(self, values: np.ndarray, buckets: np.ndarray | None = None) -> None:
        """Put sample values in; ``buckets``: their magnitudes' bucket indices, when computed already."""
        if values.size == 0:
            return
        self.n += int(values.size)
        if self.values is not None:
            if self.n <= EXACT_SAMPLES:
                held = self.values
                for v in values.tolist():
                    bisect.insort(held, v)
                return
            values, buckets = np.concatenate([np.array(self.values, dtype=float), values]), None
            self.values = None
        self._bucket(values, 1, buckets)

    def apply(self, removed: np.ndarray, added: np.ndarray, removed_buckets: np.ndarray | None = None,
              added_buckets: np.ndarray | None = None) -> bool:
        """Take out ``removed`` and put in ``added`` (one delta; their bucket indices when computed
        already). False when the distribution can no longer say its values exactly (see `remove`):
        the caller recomputes it from the samples."""
        if self.values is not None:
            if not self.remove(removed):
                return False
            self.add(added, added_buckets)
            return True
        self.add(added, added_buckets)  # first, so that no bucket count turns negative on the way
        return self.remove(removed, removed_buckets)

    def remove(self, values: np.ndarray, buckets: np.ndarray | None = None) -> bool:
        """Take out sample values. False when the distribution can no longer say them exactly (it
        fell back to `EXACT_SAMPLES` or fewer as a histogram, or it does not hold them): the caller
        then recomputes it from the samples."""
        if values.size == 0:
            return True
        if values.size > self.n:
            return False
        self.n -= int(values.size)
        if self.values is not None:
            held = self.values
            for v in values.tolist():
                i = bisect.bisect_left(held, v)
                if i == len(held) or held[i] != v:
                    return False
                del held[i]
            return True
        if not self._bucket(values, -1, buckets):
            return False
        return self.n > EXACT_SAMPLES

    def merge(self, other: "Distribution") -> None:
        """Add ``other``'s samples (the same scale): the distribution of both sets of samples."""
        if other.n == 0:
            return
        if other.values is not None:
            self.add(np.array(other.values, dtype=float))
            return
        if self.values is not None:  # a histogram joins: this one becomes one too
            values, self.values = np.array(self.values, dtype=float), None
            self._bucket(values, 1)
        self.n += other.n
        self.zeros += other.zeros
        self.positive.merge(other.positive)
        self.negative.merge(other.negative)

    def _bucket(self, values: np.ndarray, sign: int, buckets: np.ndarray | None = None) -> bool:
        if values.size == 0:
            return True
        if buckets is None:
            magnitude = np.abs(values)
            buckets = bucket_indices(np.where(magnitude > 0, magnitude, 1.0), self.scale)
        if values.min() > 0:  # the usual case: durations, tokens, costs
            return self.positive.change(buckets, sign)
        positive, negative = values > 0, values < 0
        zeros = int(values.size - positive.sum() - negative.sum())
        if sign < 0 and zeros > self.zeros:
            return False
        self.zeros += sign * zeros
        ok = self.positive.change(buckets[positive], sign)
        return self.negative.change(buckets[negative], sign) and ok

    def order_statistics(self, ranks: list[int]) -> list[float]:
        """The values at the given 0-based ranks (exact, or the rank's bucket's value)."""
        if self.values is not None:
            return [float(self.values[r]) for r in ranks]
        neg, pos = self.negative.counts[::-1], self.positive.counts
        ends = np.cumsum(np.concatenate([neg, [self.zeros], pos]))
        where = np.searchsorted(ends, np.asarray(ranks), "right").tolist()
        base = 2.0 ** (2.0 ** -self.scale)
        middle = 2.0 / (1.0 + base)  # a bucket's value over its upper bound
        out = []
        for slot in where:
            if slot < neg.size:
                index = self.negative.offset + neg.size - 1 - slot
                out.append(-middle * 2.0 ** ((index + 1) / (1 << self.scale)))
            elif slot == neg.size:
                out.append(0.0)
            else:
                index = self.positive.offset + slot - neg.size - 1
                out.append(middle * 2.0 ** ((index + 1) / (1 << self.scale)))
        return out

    def quantiles(self, qs: tuple[float, ...]) -> list[float]:
        """Continuous quantiles: linear interpolation between the two nearest ranks."""
        positions = [q * (self.n - 1) for q in qs]
        ranks = sorted({math.floor(p) for p in positions} | {math.ceil(p) for p in positions})
        at = dict(zip(ranks, self.order_statistics(ranks)))
        out = []
        for p in positions:
            lo, hi = at[math.floor(p)], at[math.ceil(p)]
            out.append(lo + (hi - lo) * (p - math.floor(p)))
        return out

    # --- saving ------------------------------------------------------------------------------
    def export(self) -> tuple[list, list[np.ndarray]]:
        """(header, arrays) from which `restore` rebuilds this distribution exactly."""
        if self.values is not None:
            return ["x", self.n], [np.array(self.values, dtype="<f8")]
        return (["h", self.n, self.zeros, self.positive.offset, self.negative.offset],
                [_compact(self.positive.counts), _compact(self.negative.counts)])

    @classmethod
    def restore(cls, scale: int, header: list, arrays: list[np.ndarray]) -> "Distribution":
        d = cls(scale)
        d.n = int(header[1])
        if header[0] == "x":
            d.values = arrays[0].astype(float).tolist()
            held = len(d.values)
        else:
            d.values = None
            d.zeros = int(header[2])
            d.positive = _Buckets(int(header[3]), arrays[0].astype(np.int64))
            d.negative = _Buckets(int(header[4]), arrays[1].astype(np.int64))
            held = d.zeros + d.positive.total + d.negative.total
        if held != d.n:
            raise ValueError(f"a saved distribution holds {held} values, its header says {d.n}")
        return d


def _compact(counts: np.ndarray) -> np.ndarray:
    """Counts in the narrowest unsigned type that holds them (most buckets hold few samples)."""
    top = int(counts.max()) if counts.size else 0
    for dtype in ("<u1", "<u2", "<u4"):
        if top < np.iinfo(dtype).max:
            return counts.astype(dtype)
    return counts.astype("<u8")


__all__ = ["EXACT_SAMPLES", "Distribution", "SUM_SCALE", "bucket_indices", "exact_square_sum", "exact_sum",
           "sample_stddev", "sample_variance", "scaled_to_float", "segment_sums"]
