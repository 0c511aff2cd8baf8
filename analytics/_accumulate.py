"""The window processor's state: mergeable aggregates per window, updated by sample deltas.

Each (target, scope, metric) window keeps what its row needs and nothing that grows with the
spans behind it except the sample values themselves (for exact percentiles):

- an exact sum (a big integer in units of 2**-SUM_SCALE, so adding and removing samples in any
  order gives the same, correctly rounded, sum and mean as a computation from scratch);
- the sample values as an exact multiset with order statistics (`Multiset`);
- successes among the samples, the first/last sample end and start/end times, the evidence
  digest's sums;

and each (target, scope) keeps the ``FACTS`` counts (fact rows arrive with the samples). A batch changes a window by a *delta*: the
samples of the touched tasks as they were before the batch are removed, as they are after it added.

The state can be saved as rows and restored exactly (`WindowBook.state_rows`, `WindowBook.restore`):
the collector saves it at a clean shutdown so that the next start does not reread the spans.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from meritlens.analytics._catalogue import Aggregation
from meritlens.analytics._windows import (
    EVIDENCE_MEDIA_TYPE,
    FACT_PREFIX,
    FACTS,
    SAMPLE_VALUES,
    WINDOW_DEFINITIONS,
    ValueRule,
    Window,
    WindowDefinition,
    WindowState,
    digest_from_sums,
    evidence_uri,
)

SUM_SCALE = 1200
"""Exact sums are integers in units of 2**-SUM_SCALE: every finite double is a whole number of them."""
SMALL_DISTINCT = 256
"""A multiset with at most this many distinct values keeps value -> count; above it, sorted arrays."""
_QUANTILES = (0.5, 0.9, 0.95, 0.99)
STATE_PART_BYTES = 8 * 1024 * 1024
"""Largest payload of one saved state row (`WindowBook.state_rows`)."""
_FLOATS = np.dtype("<f8")
_COUNTS = np.dtype("<i8")


class StateMismatch(RuntimeError):
    """A delta removed something the state does not hold: the state must be rebuilt from the spans."""


def exact_sum(values: np.ndarray) -> int:
    """The exact sum of finite doubles, in units of 2**-SUM_SCALE."""
    if values.size == 0:
        return 0
    mantissa, exponent = np.frexp(values)
    whole = (mantissa * (1 << 53)).astype(np.int64)  # exact: |mantissa| < 1 has 53 significant bits
    total = 0
    for e in np.unique(exponent):
        part = whole[exponent == e]
        # two halves so that no int64 sum can overflow
        high = int(np.sum(part >> 26, dtype=np.int64))
        low = int(np.sum(part & ((1 << 26) - 1), dtype=np.int64))
        total += ((high << 26) + low) << (int(e) - 53 + SUM_SCALE)
    return total


def _to_float(scaled: int, divisor: int = 1) -> float:
    """A scaled exact sum divided by ``divisor``, correctly rounded."""
    return scaled / (divisor << SUM_SCALE)


def _kth_of_two(a: np.ndarray, b: np.ndarray, k: int) -> float:
    """The k-th smallest (0-based) value of the two sorted arrays together, by a binary search for
    how many of the k + 1 smallest come from ``a``: O(log n), nothing merged or copied."""
    lo, hi = max(0, k + 1 - b.size), min(k + 1, a.size)
    while lo < hi:  # the fewest i from a such that b's (k + 1 - i)-th is not above a[i]
        i = (lo + hi) // 2
        if b[k - i] > a[i]:
            lo = i + 1
        else:
            hi = i
    taken_b = k + 1 - lo
    if lo == 0:
        return float(b[taken_b - 1])
    if taken_b == 0:
        return float(a[lo - 1])
    return float(max(a[lo - 1], b[taken_b - 1]))


class Multiset:
    """An exact multiset of doubles with insert, remove and k-th smallest.

    Few distinct values (rates, token counts, steps): value -> count. Many: a sorted base array plus
    a small sorted array of recent inserts, merged into the base when it grows past a fraction of it;
    the k-th value is found without merging, by a binary search over both (`_kth_of_two`). Removing
    from the base costs a copy of it (removals come only from tasks that gain spans after they were
    first counted)."""

    __slots__ = ("_counts", "_base", "_recent", "n")

    def __init__(self) -> None:
        self._counts: Counter | None = Counter()
        self._base = np.empty(0)
        self._recent = np.empty(0)
        self.n = 0

    @property
    def nbytes(self) -> int:
        if self._counts is not None:
            return 100 * len(self._counts)
        return self._base.nbytes + self._recent.nbytes

    def add(self, values: np.ndarray) -> None:
        if values.size == 0:
            return
        self.n += int(values.size)
        if self._counts is not None:
            counts = self._counts
            # counted in numpy, then one dict update per distinct value (not per value)
            for value, count in zip(*(a.tolist() for a in np.unique(values, return_counts=True))):
                counts[value] += count
            if len(self._counts) > SMALL_DISTINCT:
                items = sorted(self._counts.items())
                self._base = np.repeat(np.array([v for v, _ in items]), [c for _, c in items])
                self._counts = None
            return
        added = np.sort(values)
        # into the sorted recent values at their places: one linear copy, not a sort of them all
        self._recent = np.insert(self._recent, np.searchsorted(self._recent, added), added)
        if self._recent.size > max(2048, self._base.size // 16):
            # two sorted runs: the stable sort (timsort) merges them in linear time
            self._base = np.sort(np.concatenate([self._base, self._recent]), kind="stable")
            self._recent = np.empty(0)

    def remove(self, values: np.ndarray) -> None:
        if values.size == 0:
            return
        if self._counts is not None:
            for value, count in Counter(values.tolist()).items():
                held = self._counts.get(value, 0)
                if held < count:
                    raise StateMismatch(f"removing {value!r} x{count}, held x{held}")
                if held == count:
                    del self._counts[value]
                else:
                    self._counts[value] = held - count
            self.n -= int(values.size)
            return
        unique, counts = np.unique(values, return_counts=True)
        drop_recent, drop_base = [], []
        for value, count in zip(unique.tolist(), counts.tolist()):
            for array, drops in ((self._recent, drop_recent), (self._base, drop_base)):
                if count == 0:
                    break
                lo = int(np.searchsorted(array, value, "left"))
                hi = int(np.searchsorted(array, value, "right"))
                take = min(count, hi - lo)
                drops.append(np.arange(lo, lo + take))
                count -= take
            if count:
                raise StateMismatch(f"removing {value!r}: {count} more than held")
        if drop_recent:
            self._recent = np.delete(self._recent, np.concatenate(drop_recent))
        if drop_base:
            self._base = np.delete(self._base, np.concatenate(drop_base))
        self.n -= int(values.size)

    def export(self) -> tuple[dict, np.ndarray]:
        """(header, payload bytes as a uint8 array) from which `restore` rebuilds this multiset
        exactly, inner layout included."""
        if self._counts is not None:
            values = np.fromiter(self._counts.keys(), dtype=_FLOATS, count=len(self._counts))
            counts = np.fromiter(self._counts.values(), dtype=_COUNTS, count=len(self._counts))
            return {"n": self.n, "distinct": int(values.size)}, np.concatenate([values.view(np.uint8),
                                                                                 counts.view(np.uint8)])
        values = np.concatenate([self._base, self._recent]).astype(_FLOATS, copy=False)
        return {"n": self.n, "base": int(self._base.size), "recent": int(self._recent.size)}, values.view(np.uint8)

    @classmethod
    def restore(cls, header: dict, payload) -> "Multiset":
        """The multiset `export` described; ValueError when the payload does not match the header."""
        multiset = cls()
        multiset.n = int(header["n"])
        if "distinct" in header:
            distinct = int(header["distinct"])
            _expect_bytes(payload, distinct * (_FLOATS.itemsize + _COUNTS.itemsize))
            values = np.frombuffer(payload, _FLOATS, distinct)
            counts = np.frombuffer(payload, _COUNTS, distinct, offset=distinct * _FLOATS.itemsize)
            multiset._counts = Counter(dict(zip(values.tolist(), counts.tolist())))
            held = int(counts.sum())
        else:
            base, recent = int(header["base"]), int(header["recent"])
            _expect_bytes(payload, (base + recent) * _FLOATS.itemsize)
            multiset._counts = None
            multiset._base = np.frombuffer(payload, _FLOATS, base).astype(float)
            multiset._recent = np.frombuffer(payload, _FLOATS, recent, offset=base * _FLOATS.itemsize).astype(float)
            held = base + recent
        if held != multiset.n:
            raise ValueError(f"a saved multiset holds {held} values, its header says {multiset.n}")
        return multiset

    def order_statistics(self, ranks: list[int]) -> list[float]:
        """The values at the given 0-based ranks of the sorted multiset."""
        if self._counts is not None:
            keys = np.array(sorted(self._counts))
            ends = np.cumsum([self._counts[k] for k in keys.tolist()])
            return [float(keys[int(np.searchsorted(ends, r, "right"))]) for r in ranks]
        if self._recent.size == 0:
            return [float(self._base[r]) for r in ranks]
        return [_kth_of_two(self._base, self._recent, r) for r in ranks]

    def quantiles(self, qs: tuple[float, ...]) -> list[float]:
        """Continuous quantiles (linear interpolation between the two nearest ranks)."""
        positions = [q * (self.n - 1) for q in qs]
        ranks = sorted({int(math.floor(p)) for p in positions} | {int(math.ceil(p)) for p in positions})
        at = dict(zip(ranks, self.order_statistics(ranks)))
        out = []
        for p in positions:
            lo, hi = at[int(math.floor(p))], at[int(math.ceil(p))]
            out.append(lo + (hi - lo) * (p - math.floor(p)))
        return out


def _expect_bytes(payload, size: int) -> None:
    if len(payload) != size:
        raise ValueError(f"a saved window state payload has {len(payload)} bytes, its header needs {size}")


@dataclass
class _Extreme:
    """A running min (or max) that knows when a removal may have taken it away."""

    lowest: bool
    value: int | None = None
    stale: bool = False

    def better(self, a: int, b: int) -> bool:
        return a < b if self.lowest else a > b

    def apply(self, removed: np.ndarray, added: np.ndarray) -> None:
        best_added = None
        if added.size:
            best_added = int(added.min() if self.lowest else added.max())
        if removed.size and self.value is not None:
            best_removed = int(removed.min() if self.lowest else removed.max())
            # Taking out the current extreme is harmless only when an added value is as good.
            if best_removed == self.value and (best_added is None or self.better(self.value, best_added)):
                self.stale = True
        if best_added is not None and (self.value is None or self.better(best_added, self.value)):
            self.value = best_added


@dataclass
class WindowAccumulator:
    """The mergeable state of one (target, scope, metric) window."""

    definition: WindowDefinition
    values: Multiset = field(default_factory=Multiset)
    total: int = 0
    successes: int = 0
    spans: int = 0
    key_high: int = 0
    key_low: int = 0
    first_end: _Extreme = field(default_factory=lambda: _Extreme(lowest=True))
    last_end: _Extreme = field(default_factory=lambda: _Extreme(lowest=False))
    first_start: _Extreme = field(default_factory=lambda: _Extreme(lowest=True))
    last_stop: _Extreme = field(default_factory=lambda: _Extreme(lowest=False))

    @property
    def stale(self) -> bool:
        return any(e.stale for e in self._extremes)

    @property
    def nbytes(self) -> int:
        return 400 + self.values.nbytes

    def apply(self, removed: "SampleColumns | None", added: "SampleColumns | None") -> None:
        removed = removed or _NO_SAMPLES
        added = added or _NO_SAMPLES
        self.values.remove(removed.v)
        self.values.add(added.v)
        self.total += exact_sum(added.v) - exact_sum(removed.v)
        self.successes += int(added.success.sum()) - int(removed.success.sum())
        self.spans += int(added.span_count.sum()) - int(removed.span_count.sum())
        self.key_high += added.key_high - removed.key_high
        self.key_low += added.key_low - removed.key_low
        self.first_end.apply(removed.first_end_us, added.first_end_us)
        self.last_end.apply(removed.last_end_us, added.last_end_us)
        self.first_start.apply(removed.start_ns, added.start_ns)
        self.last_stop.apply(removed.end_ns, added.end_ns)
        if self.values.n == 0:
            for extreme in self._extremes:
                extreme.value, extreme.stale = None, False

    def export(self) -> tuple[dict, np.ndarray]:
        """(header, payload as in `Multiset.export`) from which `restore` rebuilds this accumulator exactly."""
        values, payload = self.values.export()
        return {"values": values, "total": self.total, "successes": self.successes, "spans": self.spans,
                "key_high": self.key_high, "key_low": self.key_low,
                "extremes": [[e.value, e.stale] for e in self._extremes]}, payload

    @classmethod
    def restore(cls, definition: WindowDefinition, header: dict, payload) -> "WindowAccumulator":
        accumulator = cls(definition, values=Multiset.restore(header["values"], payload),
                          total=int(header["total"]), successes=int(header["successes"]), spans=int(header["spans"]),
                          key_high=int(header["key_high"]), key_low=int(header["key_low"]))
        extremes = header["extremes"]
        if len(extremes) != len(accumulator._extremes):
            raise ValueError(f"a saved window state has {len(extremes)} extremes")
        for extreme, (value, stale) in zip(accumulator._extremes, extremes):
            extreme.value = None if value is None else int(value)
            extreme.stale = bool(stale)
        return accumulator

    @property
    def _extremes(self) -> tuple[_Extreme, ...]:
        return self.first_end, self.last_end, self.first_start, self.last_stop

    def window(self, target_id: str, scope: str, facts: dict[str, int], db_name: str,
               computed_at: _dt.datetime) -> Window:
        d = self.definition
        n = self.values.n
        value = mean = lo = hi = None
        quantiles = [None] * len(_QUANTILES)
        if n:
            if d.value_rule is ValueRule.PER_SUCCESS:
                value = _to_float(self.total, self.successes) if self.successes else None
            elif d.value_rule is ValueRule.THROUGHPUT:
                span_ns = self.last_stop.value - self.first_start.value
                value = n / (span_ns / 1e9) if n >= 2 and span_ns > 0 else None
            else:
                mean = _to_float(self.total, n)
                quantiles = self.values.quantiles(_QUANTILES)
                lo, hi = self.values.order_statistics([0, n - 1])
                value = {
                    Aggregation.SUM: _to_float(self.total),
                    Aggregation.MEAN: mean,
                    Aggregation.RATE: mean,
                    Aggregation.DISTRIBUTION: mean,
                    Aggregation.PERCENTILE: quantiles[2],
                    Aggregation.SINGLE_VALUE: lo if n == 1 else None,
                }[d.aggregation]
        if value is not None and not math.isfinite(value):
            value = None
        if value is not None and n >= d.min_samples:
            state = WindowState.MEASURED
        elif value is not None:
            state = WindowState.INSUFFICIENT_EVIDENCE
        elif d.not_applicable(facts, n):
            state = WindowState.NOT_APPLICABLE
        elif d.configured(facts, n):
            state = WindowState.INSUFFICIENT_EVIDENCE
        else:
            state = WindowState.NOT_CONFIGURED
        return Window(
            target_id=target_id, metric=d.metric, scope=scope, aggregation=d.aggregation.value, value=value,
            unit=d.spec.unit, sample_count=n, state=state.value,
            count=n if n and mean is not None else None, mean=mean, min=lo, max=hi,
            p50=quantiles[0], p90=quantiles[1], p95=quantiles[2], p99=quantiles[3],
            first_span_time=_from_us(self.first_end.value) if n else None,
            last_span_time=_from_us(self.last_end.value) if n else None,
            evidence_uri=evidence_uri(db_name, target_id, scope, d.metric) if n else None,
            evidence_media_type=EVIDENCE_MEDIA_TYPE if n else None,
            evidence_digest=digest_from_sums(self.spans, self.key_high, self.key_low) if n else None,
            computed_at=computed_at,
        )


def _from_us(us: int | None) -> _dt.datetime | None:
    if us is None:
        return None
    return _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc) + _dt.timedelta(microseconds=us)


@dataclass
class SampleColumns:
    """The samples of one window in one delta, as arrays (see ``SAMPLE_ROW_COLUMNS``)."""

    v: np.ndarray
    first_end_us: np.ndarray
    last_end_us: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray
    success: np.ndarray
    span_count: np.ndarray
    key_high: int
    key_low: int



_NO_SAMPLES = SampleColumns(*(np.empty(0, dtype=t) for t in (float, np.int64, np.int64, np.int64, np.int64, bool,
                                                              np.int64)), 0, 0)


def group_samples(table: pa.Table) -> dict[tuple[str, str, str], SampleColumns]:
    """Sample rows (``SAMPLE_ROW_COLUMNS``) as the samples of each (target_id, scope, metric) with
    any (a fact is a metric ``FACT_PREFIX + name`` here), each in the rows' order."""
    if table.num_rows == 0:
        return {}
    codes = np.zeros(table.num_rows, dtype=np.int64)
    for name in ("target_id", "scope"):  # one integer per distinct (target, scope)
        encoded = table.column(name).combine_chunks().dictionary_encode()
        codes = codes * len(encoded.dictionary) + encoded.indices.to_numpy(zero_copy_only=False)
    order = np.argsort(codes, kind="stable")
    starts = np.flatnonzero(np.diff(codes[order], prepend=-1))
    keys = [tuple(table.column(n)[int(order[i])].as_py() for n in ("target_id", "scope")) for i in starts.tolist()]

    def column(name: str, dtype) -> np.ndarray:
        values = table.column(name)
        if dtype is bool:
            values = pc.fill_null(values, False)
        return values.to_numpy(zero_copy_only=False).astype(dtype, copy=False)[order]

    first_end, last_end = column("first_end_us", np.int64), column("last_end_us", np.int64)
    start, end = column("start_ns", np.int64), column("end_ns", np.int64)
    success, span_count = column("success", bool), column("span_count", np.int64)
    key_high, key_low = column("key_high", np.uint64), column("key_low", np.uint64)
    groups: dict[tuple[str, str, str], SampleColumns] = {}
    for metric in SAMPLE_VALUES:
        values = table.column(metric)
        if values.null_count == len(values):
            continue
        rows = np.flatnonzero(pc.is_valid(values).to_numpy(zero_copy_only=False)[order])
        v = values.to_numpy(zero_copy_only=False)[order[rows]].astype(float, copy=False)
        lo = np.searchsorted(rows, starts)  # each (target, scope)'s first row among the samples
        hi = np.append(lo[1:], rows.size)
        held = np.flatnonzero(hi > lo)
        # sums over consecutive non-empty runs, wrapping at 2**64 like the digest
        highs = np.add.reduceat(key_high[rows], lo[held]).tolist()
        lows = np.add.reduceat(key_low[rows], lo[held]).tolist()
        fe, le, st, en = first_end[rows], last_end[rows], start[rows], end[rows]
        su, sc = success[rows], span_count[rows]
        for g, i, j, h, l in zip(held.tolist(), lo[held].tolist(), hi[held].tolist(), highs, lows):
            groups[(*keys[g], metric)] = SampleColumns(v[i:j], fe[i:j], le[i:j], st[i:j], en[i:j], su[i:j], sc[i:j],
                                                       int(h), int(l))
    return groups


class WindowBook:
    """Every window's accumulator, by (target, scope); applies deltas and renders window rows."""

    def __init__(self) -> None:
        self._windows: dict[tuple[str, str], dict[str, WindowAccumulator]] = {}
        self._facts: dict[tuple[str, str], dict[str, int]] = {}

    def __contains__(self, key: tuple[str, str]) -> bool:
        return key in self._windows

    @property
    def keys(self) -> list[tuple[str, str]]:
        return list(self._windows)

    def nbytes(self, key: tuple[str, str]) -> int:
        return sum(a.nbytes for a in self._windows.get(key, {}).values())

    def drop(self, key: tuple[str, str]) -> None:
        self._windows.pop(key, None)
        self._facts.pop(key, None)

    def _accumulators(self, key: tuple[str, str]) -> dict[str, WindowAccumulator]:
        accumulators = self._windows.get(key)
        if accumulators is None:
            accumulators = {d.metric: WindowAccumulator(d) for d in WINDOW_DEFINITIONS}
            self._windows[key] = accumulators
            self._facts[key] = {name: 0 for name in FACTS}
        return accumulators

    def apply_delta(self, removed: pa.Table | None, added: pa.Table | None,
                    skip_keys: set[tuple[str, str]] = frozenset(),
                    skip_targets: set[str] = frozenset()) -> set[tuple[str, str]]:
        """Take out the ``removed`` sample rows and put in the ``added`` ones (``SAMPLE_ROW_COLUMNS``,
        facts included); return the (target, scope) keys changed. Keys in ``skip_keys``, and every
        key of ``skip_targets``, are left alone.

        Raises StateMismatch when the state cannot follow (a removal of something not held, or a
        window's first or last time taken away); the caller then rebuilds from the spans."""
        out = group_samples(removed) if removed is not None else {}
        into = group_samples(added) if added is not None else {}
        keys = {k for k in ({k[:2] for k in out} | {k[:2] for k in into}) - skip_keys if k[0] not in skip_targets}
        stale = set()
        for key in keys:
            accumulators = self._accumulators(key)
            facts = self._facts[key]
            for name in FACTS:
                metric = FACT_PREFIX + name
                r, a = out.get((*key, metric)), into.get((*key, metric))
                facts[name] += (a.v.size if a is not None else 0) - (r.v.size if r is not None else 0)
            for metric, accumulator in accumulators.items():
                r, a = out.get((*key, metric)), into.get((*key, metric))
                if r is not None or a is not None:
                    accumulator.apply(r, a)
                    if accumulator.stale:
                        stale.add(key)
        if stale:
            raise StateMismatch(f"a removal took away a window's first or last time for {sorted(stale)}")
        return keys

    def state_rows(self, part_bytes: int = STATE_PART_BYTES):
        """The state as rows ``(target_id, scope, metric, part, header, payload)`` (`WINDOW_STATE_COLUMNS`
        less the watermark), key by key: a row with metric None holds a key's fact counts, then each
        window's counters (JSON header, part 0) and sample values in parts of at most ``part_bytes``.
        A generator: one window's payload is held at a time."""
        for key in sorted(self._windows):
            target, scope = key
            yield target, scope, None, 0, json.dumps(self._facts[key]), b""
            for metric, accumulator in self._windows[key].items():
                header, payload = accumulator.export()
                view = memoryview(payload)
                for part, start in enumerate(range(0, max(payload.size, 1), part_bytes)):
                    yield target, scope, metric, part, json.dumps(header) if part == 0 else None, \
                        bytes(view[start:start + part_bytes])

    @classmethod
    def restore(cls, rows) -> "WindowBook":
        """The book `state_rows` described. ``rows``: its rows, each window's parts together and in
        order. Raises ValueError when they do not make whole (target, scope) keys of the current
        window definitions (the caller then rebuilds from the spans)."""
        book = cls()
        definitions = {d.metric: d for d in WINDOW_DEFINITIONS}
        window: list = []  # [target, scope, metric, header, payload parts]

        def finish() -> None:
            if not window:
                return
            target, scope, metric, header, parts = window
            key = (target, scope)
            if metric is None:
                facts = json.loads(header)
                if set(facts) != set(FACTS) or key in book._facts:
                    raise ValueError(f"saved fact counts of {key} do not match the current facts")
                book._facts[key] = {name: int(facts[name]) for name in FACTS}
                book._windows[key] = {}
                return
            if metric not in definitions or key not in book._windows or metric in book._windows[key]:
                raise ValueError(f"a saved window state for {key} {metric!r} has no place in the book")
            book._windows[key][metric] = WindowAccumulator.restore(definitions[metric], json.loads(header),
                                                                   b"".join(parts))

        for target, scope, metric, part, header, payload in rows:
            if window and (target, scope, metric) == tuple(window[:3]):
                if part != len(window[4]):
                    raise ValueError(f"saved window state part {part} of {(target, scope, metric)} out of order")
                window[4].append(payload)
                continue
            finish()
            if part != 0 or header is None:
                raise ValueError(f"saved window state of {(target, scope, metric)} starts without its header")
            window[:] = [target, scope, metric, header, [payload]]
        finish()
        for key, accumulators in book._windows.items():
            if set(accumulators) != set(definitions):
                raise ValueError(f"the saved window state of {key} lacks {sorted(set(definitions) - set(accumulators))}")
        return book

    def windows(self, key: tuple[str, str], db_name: str, computed_at: _dt.datetime) -> list[Window]:
        accumulators = self._windows[key]
        facts = self._facts[key]
        return [accumulators[d.metric].window(key[0], key[1], facts, db_name, computed_at) for d in WINDOW_DEFINITIONS]


__all__ = ["STATE_PART_BYTES", "Multiset", "SampleColumns", "StateMismatch", "WindowAccumulator", "WindowBook", "exact_sum"]
