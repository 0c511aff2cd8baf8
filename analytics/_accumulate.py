"""The window processor's state: a bounded, mergeable aggregate per window, updated by sample deltas.

Each (target, scope, metric) window keeps what its row needs in state that does not grow with the
samples behind it:

- the sample values' `Distribution` (exact while few, a fixed-scale histogram beyond);
- exact sums of the values and of their squares (integers, `exact_sum`), so the mean and the variance
  are the same, correctly rounded, whatever the order of additions and removals;
- successes among the samples and the evidence digest's sums (span count, md5 halves);
- the first/last sample end and start/end times, each as the few best values (`_Extreme`);

and each (target, scope) keeps the ``FACTS`` counts (fact rows arrive with the samples). A batch
changes a window by a *delta*: the samples of the touched tasks as they were before the batch are
taken out, as they are after it put in. A delta the state cannot follow exactly (a histogram falling
back to the exact range, a pure removal of every retained first or last time) marks only that window
for recomputation from its samples (`WindowBook.apply_delta` returns them).

A (target, scope)'s state is saved as one blob and taken up exactly (`WindowBook.export_key`,
`WindowBook.import_key`), so a processor can keep only some keys in memory.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import struct
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from meritlens.analytics._catalogue import Aggregation
from meritlens.analytics._definitions import FACT_PREFIX, FACTS, WINDOW_DEFINITIONS, ValueRule, WindowDefinition
from meritlens.analytics._distribution import Distribution, sample_stddev, scaled_to_float
from meritlens.analytics._evidence import digest_from_sums, evidence_uri
from meritlens.analytics._sample_columns import (
    _NO_SAMPLES,
    KEY_COLUMNS,
    SampleColumns,
    WindowId,
    WindowKey,
    delta_keys,
    group_samples,
)
from meritlens.analytics._scale import DEFAULT_RELATIVE_ERROR, scale_for
from meritlens.analytics._windows import EVIDENCE_MEDIA_TYPE, Window, WindowState

_QUANTILES = (0.5, 0.9, 0.95, 0.99)
EXTREME_DEPTH = 8
"""Distinct first/last times kept per window: a removal of every sample of all of them (and nothing as
good added) needs the window recomputed; a growing task only widens its times, so its delta never does."""
DEFAULT_SCALE = scale_for(DEFAULT_RELATIVE_ERROR)


class _Extreme:
    """The lowest (or highest) few distinct sample times of a window, with how many samples have each,
    which know when a removal took the extreme away. Invariant: every sample not counted here lies
    strictly beyond the last kept value, so the first kept value is the extreme."""

    __slots__ = ("sign", "kept")

    def __init__(self, lowest: bool, kept: dict[int, int] | None = None):
        self.sign = 1 if lowest else -1
        self.kept: dict[int, int] = dict(sorted((kept or {}).items()))
        """Sign-adjusted value -> samples, lowest first, at most `EXTREME_DEPTH` values."""

    @property
    def value(self) -> int | None:
        return self.sign * next(iter(self.kept)) if self.kept else None

    def apply(self, removed: np.ndarray, added: np.ndarray, held_before: int,
              best_removed: int | None = None, best_added: int | None = None) -> bool:
        """Put ``added`` in, then take ``removed`` out; ``held_before``: samples before the delta;
        ``best_*``: the lowest (highest) of each, when known. False when the extreme is no longer
        known (the window must be recomputed)."""
        kept = self.kept
        outside = held_before - sum(kept.values())
        if outside and not kept:
            return False
        if kept and outside:  # most deltas: every value beyond the kept ones (checked on the scalars)
            last = next(reversed(kept))
            beyond_added = not added.size or self.sign * (
                best_added if best_added is not None else added.min() if self.sign > 0 else added.max()) > last
            beyond_removed = not removed.size or self.sign * (
                best_removed if best_removed is not None else removed.min() if self.sign > 0 else removed.max()) > last
            if beyond_added and beyond_removed:
                return outside + added.size - removed.size >= 0
        kept = dict(kept)
        if added.size:
            values = self.sign * added
            if outside:  # beyond the last kept value: outside with the others (most deltas, at once)
                last = next(reversed(kept))
                if values.min() > last:
                    outside += int(values.size)
                    values = values[:0]
                else:
                    within = values <= last
                    outside += int(values.size - within.sum())
                    values = values[within]
            if values.size > EXTREME_DEPTH:  # only the few lowest can be kept, and the kept ones' repeats
                cut = np.partition(values, EXTREME_DEPTH - 1)[EXTREME_DEPTH - 1]
                if kept:
                    cut = max(cut, next(reversed(kept)))
                within = values <= cut
                outside += int(values.size - within.sum())
                values = values[within]
            for v in values.tolist():  # a few values (the lowest few and their repeats)
                kept[v] = kept.get(v, 0) + 1
            if values.size:
                kept = dict(sorted(kept.items()))
                while len(kept) > EXTREME_DEPTH:
                    outside += kept.pop(next(reversed(kept)))
        if removed.size:
            values = self.sign * removed
            last = next(reversed(kept)) if kept else None
            if last is not None and values.min() > last:
                outside -= int(values.size)
            elif last is not None:
                within = values <= last
                unique, counts = np.unique(values[within], return_counts=True)
                for v, n in zip(unique.tolist(), counts.tolist(), strict=True):
                    held = kept.get(v, 0)
                    if held < n:
                        return False
                    if held == n:
                        del kept[v]
                    else:
                        kept[v] = held - n
                outside -= int(values.size - within.sum())
            else:
                outside -= int(values.size)
            if outside < 0:
                return False
        self.kept = kept
        return bool(kept) or outside == 0

    def merge(self, other: _Extreme, held: int, other_held: int) -> bool:
        """Take ``other``'s samples in (``held``, ``other_held``: each side's samples). False when
        the merged extreme is not known (a side that is not)."""
        outside, other_outside = held - sum(self.kept.values()), other_held - sum(other.kept.values())
        if (outside and not self.kept) or (other_outside and not other.kept):
            return False
        kept = dict(self.kept)
        for v, n in other.kept.items():
            kept[v] = kept.get(v, 0) + n
        # a side's uncounted samples lie beyond its last kept value: count nothing beyond the nearer such bound
        bounds = [next(reversed(k)) for k, out in ((self.kept, outside), (other.kept, other_outside)) if out]
        limit = min(bounds) if bounds else None
        kept = dict(sorted((v, n) for v, n in kept.items() if limit is None or v <= limit))
        while len(kept) > EXTREME_DEPTH:
            kept.pop(next(reversed(kept)))
        self.kept = kept
        return True


@dataclass
class WindowAccumulator:
    """The bounded, mergeable state of one (target, scope, metric) window."""

    definition: WindowDefinition
    values: Distribution
    total: int = 0
    squares: int = 0
    successes: int = 0
    spans: int = 0
    key_high: int = 0
    key_low: int = 0
    first_end: _Extreme = field(default_factory=lambda: _Extreme(lowest=True))
    last_end: _Extreme = field(default_factory=lambda: _Extreme(lowest=False))
    first_start: _Extreme = field(default_factory=lambda: _Extreme(lowest=True))
    last_stop: _Extreme = field(default_factory=lambda: _Extreme(lowest=False))
    needs_recompute: bool = False
    """A delta left this window's state unable to say its row: recompute it from its samples."""
    _row: tuple | None = field(default=None, repr=False, compare=False)
    """The row's numbers as computed last (rendering is most of a window pass): cleared by any change."""

    @classmethod
    def empty(cls, definition: WindowDefinition, scale: int) -> WindowAccumulator:
        return cls(definition, Distribution(scale))

    @property
    def nbytes(self) -> int:
        return 600 + self.values.nbytes

    @property
    def _extremes(self) -> tuple[_Extreme, ...]:
        return self.first_end, self.last_end, self.first_start, self.last_stop

    def apply(self, removed: SampleColumns | None, added: SampleColumns | None) -> None:
        removed = removed or _NO_SAMPLES
        added = added or _NO_SAMPLES
        held = self.values.n
        times_known = (self.first_end.apply(removed.first_end_us, added.first_end_us, held,
                                            removed.first_end_min, added.first_end_min)
                       and self.last_end.apply(removed.last_end_us, added.last_end_us, held,
                                               removed.last_end_max, added.last_end_max))
        if self.definition.value_rule is ValueRule.THROUGHPUT:  # only its value reads start and stop times
            times_known = (times_known and self.first_start.apply(removed.start_ns, added.start_ns, held)
                           and self.last_stop.apply(removed.end_ns, added.end_ns, held))
        values_known = self.values.apply(removed.v, added.v, removed.buckets, added.buckets)
        self.total += added.total - removed.total
        self.squares += added.squares - removed.squares
        self._row = None
        self.successes += added.successes - removed.successes
        self.spans += added.spans - removed.spans
        self.key_high += added.key_high - removed.key_high
        self.key_low += added.key_low - removed.key_low
        if not (times_known and values_known):
            self.needs_recompute = True

    def merge(self, other: WindowAccumulator, times: bool = True) -> None:
        """Take ``other``'s samples in (the same metric and scale): the state of both sets of samples,
        as of a window over a longer time (`WindowBook.merge_keys`). Without ``times`` only what the
        statistics over the values read (`_state_view`) is merged, most of a merge's cost saved: the
        samples' first and last times are left out, so a row rendered from it has none."""
        held, other_held = self.values.n, other.values.n
        kept = len(self._extremes) if self.definition.value_rule is ValueRule.THROUGHPUT else 2
        pairs = zip(self._extremes[:kept], other._extremes[:kept], strict=True)
        known = not times or all([mine.merge(theirs, held, other_held) for mine, theirs in pairs])
        self.values.merge(other.values)
        self.total += other.total
        self.squares += other.squares
        self.successes += other.successes
        self.spans += other.spans
        self.key_high += other.key_high
        self.key_low += other.key_low
        self.needs_recompute = self.needs_recompute or other.needs_recompute or not known
        self._row = None

    def window(self, target_id: str, scope: str, facts: dict[str, int], db_name: str,
               computed_at: _dt.datetime, evidence_suffix: str = "") -> Window:
        if self.needs_recompute:
            raise RuntimeError(f"the window {(target_id, scope, self.definition.metric)} must be recomputed first")
        d = self.definition
        n = self.values.n
        if self._row is None:
            self._row = self._numbers()
        value, mean, stddev, lo, hi, quantiles, error = self._row
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
            count=n if n and mean is not None else None, mean=mean, stddev=stddev, min=lo, max=hi,
            p50=quantiles[0], p90=quantiles[1], p95=quantiles[2], p99=quantiles[3], quantile_error=error,
            first_span_time=_from_us(self.first_end.value) if n else None,
            last_span_time=_from_us(self.last_end.value) if n else None,
            evidence_uri=evidence_uri(db_name, target_id, scope, d.metric) + evidence_suffix if n else None,
            evidence_media_type=EVIDENCE_MEDIA_TYPE if n else None,
            evidence_digest=digest_from_sums(self.spans, self.key_high, self.key_low) if n else None,
            computed_at=computed_at,
        )

    def _numbers(self) -> tuple:
        """(value, mean, stddev, min, max, quantiles, quantile error) of the samples held."""
        d = self.definition
        n = self.values.n
        value = mean = lo = hi = stddev = error = None
        quantiles = [None] * len(_QUANTILES)
        if n:
            if d.value_rule is ValueRule.PER_SUCCESS:
                value = scaled_to_float(self.total, self.successes) if self.successes else None
            elif d.value_rule is ValueRule.THROUGHPUT:
                span_ns = self.last_stop.value - self.first_start.value
                value = n / (span_ns / 1e9) if n >= 2 and span_ns > 0 else None
            else:
                mean = scaled_to_float(self.total, n)
                stddev = sample_stddev(n, self.total, self.squares)
                quantiles = self.values.quantiles(_QUANTILES)
                lo, hi = self.values.order_statistics([0, n - 1])
                error = self.values.relative_error
                value = {
                    Aggregation.SUM: scaled_to_float(self.total),
                    Aggregation.MEAN: mean,
                    Aggregation.RATE: mean,
                    Aggregation.DISTRIBUTION: mean,
                    Aggregation.PERCENTILE: quantiles[2],
                    Aggregation.SINGLE_VALUE: lo if n == 1 else None,
                }[d.aggregation]
        if value is not None and not math.isfinite(value):
            value = None
        return value, mean, stddev, lo, hi, quantiles, error

    # --- saving ------------------------------------------------------------------------------
    def export(self) -> tuple[dict, list[np.ndarray]]:
        values, arrays = self.values.export()
        return {"values": values, "total": _pack_int(self.total), "squares": _pack_int(self.squares),
                "successes": self.successes, "spans": self.spans, "keys": [self.key_high, self.key_low],
                "extremes": [list(e.kept.items()) for e in self._extremes]}, arrays

    @classmethod
    def restore(cls, definition: WindowDefinition, scale: int, header: dict,
                arrays: list[np.ndarray]) -> WindowAccumulator:
        extremes = header["extremes"]
        if len(extremes) != 4:
            raise ValueError(f"a saved window state has {len(extremes)} extremes")
        return cls(definition, Distribution.restore(scale, header["values"], arrays),
                   total=_unpack_int(header["total"]), squares=_unpack_int(header["squares"]),
                   successes=int(header["successes"]), spans=int(header["spans"]),
                   key_high=int(header["keys"][0]), key_low=int(header["keys"][1]),
                   first_end=_Extreme(True, dict(extremes[0])), last_end=_Extreme(False, dict(extremes[1])),
                   first_start=_Extreme(True, dict(extremes[2])), last_stop=_Extreme(False, dict(extremes[3])))


def _pack_int(value: int) -> list[int] | int:
    """An exact sum as (odd part, power of two) when large: sums of doubles end in many zero bits."""
    if value == 0 or value.bit_length() < 63:
        return value
    zeros = (value & -value).bit_length() - 1
    return [value >> zeros, zeros]


def _unpack_int(packed) -> int:
    return packed[0] << packed[1] if isinstance(packed, list) else int(packed)


def _from_us(us: int | None) -> _dt.datetime | None:
    if us is None:
        return None
    return _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC) + _dt.timedelta(microseconds=us)


_DEFINITIONS = {d.metric: d for d in WINDOW_DEFINITIONS}
_BLOB_HEADER = struct.Struct("<I")


class WindowBook:
    """The accumulators of the windows of some (target, scope) keys; applies deltas and renders rows.

    ``scale``: the histograms' fixed scale (`scale_for` of the quantiles' relative error). The book
    holds the keys it was given or made; a processor may keep only some in memory (`export_key`,
    `import_key`, `drop`)."""

    def __init__(self, scale: int = DEFAULT_SCALE):
        self.scale = scale
        self._windows: dict[WindowKey, dict[str, WindowAccumulator]] = {}
        self._facts: dict[WindowKey, dict[str, int]] = {}

    def __contains__(self, key: WindowKey) -> bool:
        return key in self._windows

    @property
    def keys(self) -> list[WindowKey]:
        return list(self._windows)

    def nbytes(self, key: WindowKey) -> int:
        return sum(a.nbytes for a in self._windows.get(key, {}).values())

    def sampled(self, key: WindowKey) -> bool:
        """Whether ``key`` holds any sample (a key whose samples were all taken out holds none)."""
        return any(self._facts.get(key, {}).values())

    def drop(self, key: WindowKey) -> None:
        self._windows.pop(key, None)
        self._facts.pop(key, None)

    def add_key(self, key: WindowKey) -> None:
        """An empty state for ``key`` (no sample yet)."""
        self._windows[key] = {d.metric: WindowAccumulator.empty(d, self.scale) for d in WINDOW_DEFINITIONS}
        self._facts[key] = {name: 0 for name in FACTS}

    def apply_delta(self, removed: pa.Table | None, added: pa.Table | None,
                    key_columns: tuple[str, ...] = KEY_COLUMNS) -> tuple[set[WindowKey], set[WindowId]]:
        """Take out the ``removed`` sample rows and put in the ``added`` ones (``SAMPLE_ROW_COLUMNS``,
        facts included), by their ``key_columns``; keys not held are started empty. Returns the keys
        changed and the windows that must be recomputed from their samples before they are rendered."""
        out = group_samples(removed, key_columns, self.scale) if removed is not None else {}
        into = group_samples(added, key_columns, self.scale) if added is not None else {}
        keys = {k[:-1] for k in out} | {k[:-1] for k in into}
        recompute: set[WindowId] = set()
        for key in keys:
            if key not in self._windows:
                self.add_key(key)
            facts = self._facts[key]
            for name in FACTS:
                metric = FACT_PREFIX + name
                r, a = out.get((*key, metric)), into.get((*key, metric))
                facts[name] += (a.v.size if a is not None else 0) - (r.v.size if r is not None else 0)
            for metric, accumulator in self._windows[key].items():
                r, a = out.get((*key, metric)), into.get((*key, metric))
                if r is not None or a is not None:
                    accumulator.apply(r, a)
                if accumulator.needs_recompute:
                    recompute.add((*key, metric))
        return keys, recompute

    def take_key(self, other: WindowBook, key: WindowKey) -> None:
        """Hold ``other``'s state of ``key`` (an empty one where ``other`` has none)."""
        if key in other._windows:
            self._windows[key], self._facts[key] = other._windows[key], other._facts[key]
        else:
            self.add_key(key)

    def take_windows(self, other: WindowBook, windows: set[WindowId]) -> None:
        """Replace ``windows``' accumulators by ``other``'s (a book computed from those windows'
        samples), or by empty ones where ``other`` has none."""
        for window in windows:
            key, metric = window[:-1], window[-1]
            held = other._windows.get(key, {}).get(metric)
            if key not in self._windows:
                self.add_key(key)
            self._windows[key][metric] = held or WindowAccumulator.empty(_DEFINITIONS[metric], self.scale)

    def merged(self, keys: list[WindowKey], into: WindowKey, times: bool = True) -> WindowBook:
        """A book holding one key, ``into``, whose state is that of all ``keys``' samples together
        (e.g. the hours of a day). Keys this book does not hold add nothing. ``times``: see
        `WindowAccumulator.merge` (False: for statistics over the values only)."""
        merged = WindowBook(self.scale)
        merged.add_key(into)
        accumulators, facts = merged._windows[into], merged._facts[into]
        for key in keys:
            if key not in self._windows:
                continue
            for name, count in self._facts[key].items():
                facts[name] += count
            for metric, accumulator in self._windows[key].items():  # read, never changed
                accumulators[metric].merge(accumulator, times)
        return merged

    def state(self, key: WindowKey, metric: str) -> WindowAccumulator | None:
        """The state of one window held (to read: statistics over it, `meritlens.analytics._state_view`)."""
        return self._windows.get(key, {}).get(metric)

    def needing_recompute(self, key: WindowKey) -> set[WindowId]:
        """The windows of ``key`` whose state cannot say their row (see `WindowAccumulator.needs_recompute`)."""
        return {(*key, metric) for metric, a in self._windows.get(key, {}).items() if a.needs_recompute}

    def windows(self, key: WindowKey, db_name: str, computed_at: _dt.datetime,
                evidence_suffix: str = "") -> list[Window]:
        """The rows of ``key``'s windows; ``evidence_suffix`` is appended to their evidence URIs (a time span)."""
        accumulators = self._windows[key]
        facts = self._facts[key]
        return [accumulators[d.metric].window(key[0], key[1], facts, db_name, computed_at, evidence_suffix)
                for d in WINDOW_DEFINITIONS]

    # --- saving ------------------------------------------------------------------------------
    def export_key(self, key: WindowKey) -> bytes:
        """One blob from which `import_key` rebuilds the key's state exactly: a JSON header (the
        counters and array layouts) then the arrays' bytes."""
        windows, arrays = {}, []
        for metric, accumulator in self._windows[key].items():
            header, held = accumulator.export()
            header["arrays"] = [[a.dtype.str, int(a.size)] for a in held]
            windows[metric] = header
            arrays.extend(held)
        head = json.dumps({"scale": self.scale, "facts": self._facts[key], "windows": windows},
                          separators=(",", ":")).encode()
        return b"".join([_BLOB_HEADER.pack(len(head)), head, *(a.tobytes() for a in arrays)])

    @staticmethod
    def scale_of(blob: bytes) -> int:
        """The histograms' scale a key's state was saved at (`export_key`)."""
        (size,) = _BLOB_HEADER.unpack_from(blob)
        return int(json.loads(blob[_BLOB_HEADER.size:_BLOB_HEADER.size + size])["scale"])

    def import_key(self, key: WindowKey, blob: bytes) -> None:
        """Take up a key's state from `export_key`'s blob. Raises ValueError when it does not fit this
        book (another scale, other window definitions or facts, a damaged blob)."""
        try:
            (size,) = _BLOB_HEADER.unpack_from(blob)
            head = json.loads(blob[_BLOB_HEADER.size:_BLOB_HEADER.size + size])
            if head["scale"] != self.scale:
                raise ValueError(f"saved at scale {head['scale']}, not {self.scale}")
            if set(head["facts"]) != set(FACTS) or set(head["windows"]) != set(_DEFINITIONS):
                raise ValueError("saved for other window definitions")
            offset = _BLOB_HEADER.size + size
            accumulators = {}
            for metric, header in head["windows"].items():
                arrays = []
                for dtype, count in header["arrays"]:
                    array = np.frombuffer(blob, dtype=np.dtype(dtype), count=count, offset=offset)
                    offset += array.nbytes
                    arrays.append(array)
                accumulators[metric] = WindowAccumulator.restore(_DEFINITIONS[metric], self.scale, header, arrays)
            if offset != len(blob):
                raise ValueError(f"{len(blob) - offset} bytes more than its header describes")
        except (KeyError, TypeError, IndexError, struct.error, json.JSONDecodeError) as exc:
            raise ValueError(f"a damaged window state ({type(exc).__name__}: {exc})") from None
        self._windows[key] = {d.metric: accumulators[d.metric] for d in WINDOW_DEFINITIONS}
        self._facts[key] = {name: int(head["facts"][name]) for name in FACTS}


__all__ = ["DEFAULT_SCALE", "EXTREME_DEPTH", "SampleColumns", "WindowAccumulator", "WindowBook", "WindowId",
           "WindowKey", "delta_keys", "group_samples"]
