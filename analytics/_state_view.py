"""What the statistics read from a window's state: sample count, exact moments, and where its values lie.

A `WindowAccumulator` keeps exact sums of the values and of their squares, and a `Distribution` that
holds the sorted values up to `EXACT_SAMPLES` samples and a log-bucketed histogram beyond. The
statistics (regressions, confidence sequences, planning) need the moments and, for order statistics,
a value range that certainly holds each one: a single point while the values are exact, the edges
of its bucket beyond. A `StateView` is that, read once from a state and never changing it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from meritlens.analytics._accumulate import WindowAccumulator
from meritlens.analytics._catalogue import MetricSpec
from meritlens.analytics._distribution import SUM_SCALE, Distribution, sample_variance, scaled_to_float

_EDGE_SLACK = 1e-12
"""Bucket edges are computed in doubles; widened by this relative margin so that they surely hold
every value the bucket mapping put in them."""


@dataclass(frozen=True)
class StateView:
    """One window state's samples, as the statistics see them (``distribution`` is the state's own: read only).

    ``lows``/``highs``/``points``/``counts``: the slots holding the values in ascending order (one
    per distinct exact value, or one per non-empty bucket, the zero bucket included), each slot's
    values lying in [low, high] and represented by ``points`` (the value itself, or the bucket's
    reported value)."""

    n: int
    total: int
    """The exact sum of the values, in units of 2**-SUM_SCALE."""
    squares: int
    """The exact sum of their squares, in units of 2**-(2 * SUM_SCALE)."""
    exact: bool
    relative_error: float
    lows: np.ndarray
    highs: np.ndarray
    points: np.ndarray
    counts: np.ndarray
    distribution: Distribution

    @property
    def mean(self) -> float | None:
        return scaled_to_float(self.total, self.n) if self.n else None

    @property
    def variance(self) -> float | None:
        return sample_variance(self.n, self.total, self.squares)

    @property
    def binary(self) -> bool:
        """Every value is 0 or 1 (a rate's samples): values in [0, 1] whose squares sum to their sum."""
        return (self.n > 0 and self.squares == self.total << SUM_SCALE
                and float(self.lows[0]) >= 0.0 and float(self.highs[-1]) <= 1.0 + 2 * _EDGE_SLACK)

    @property
    def ones(self) -> int | None:
        """The number of samples equal to 1, when every sample is 0 or 1."""
        return self.total >> SUM_SCALE if self.binary else None

    def rank_ranges(self, ranks) -> tuple[np.ndarray, np.ndarray]:
        """For 0-based ranks, the (low, high) value range certainly holding each order statistic."""
        slots = np.searchsorted(np.cumsum(self.counts), np.asarray(ranks, dtype=np.int64), "right")
        return self.lows[slots], self.highs[slots]

    def count_at_most(self, x: float, strict: bool = False) -> tuple[int, int]:
        """(certainly, possibly): how many samples are at most ``x`` (below it when ``strict``)."""
        if strict:
            return int(self.counts[self.highs < x].sum()), int(self.counts[self.lows < x].sum())
        return int(self.counts[self.highs <= x].sum()), int(self.counts[self.lows <= x].sum())

    def quantile(self, q: float) -> float:
        """The window's continuous quantile, as its row reports it."""
        return self.distribution.quantiles((q,))[0]


def view(state: WindowAccumulator) -> StateView:
    """The `StateView` of a window state (read only)."""
    if state.needs_recompute:
        raise ValueError(f"the {state.definition.metric} window state must be recomputed from its samples first")
    lows, highs, points, counts = _slots(state.values)
    return StateView(state.values.n, state.total, state.squares, state.values.exact, state.values.relative_error,
                     lows, highs, points, counts, state.values)


def value_range(spec: MetricSpec) -> tuple[float, float | None]:
    """The values a metric's samples can take: [0, 1] for ratios, [0, inf) for every other catalogue
    quantity (counts, costs, durations, frequencies are never negative)."""
    return (0.0, 1.0) if spec.ratio else (0.0, None)


def _slots(d: Distribution) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    if d.values is not None:
        points, counts = np.unique(d.values, return_counts=True)
        return points, points, points, counts.astype(np.int64)
    step = 1.0 / (1 << d.scale)
    base = 2.0 ** step
    middle = 2.0 / (1.0 + base)  # a bucket's reported value over its upper bound
    parts = []
    if d.negative.counts.size:  # magnitudes (base**i, base**(i+1)], largest magnitude first
        index = d.negative.offset + np.arange(d.negative.counts.size)[::-1]
        upper = 2.0 ** ((index + 1) * step)
        parts.append((-upper * (1 + _EDGE_SLACK), -upper / base * (1 - _EDGE_SLACK), -middle * upper,
                      d.negative.counts[::-1]))
    if d.zeros:
        parts.append((np.zeros(1), np.zeros(1), np.zeros(1), np.array([d.zeros], dtype=np.int64)))
    if d.positive.counts.size:
        index = d.positive.offset + np.arange(d.positive.counts.size)
        upper = 2.0 ** ((index + 1) * step)
        parts.append((upper / base * (1 - _EDGE_SLACK), upper * (1 + _EDGE_SLACK), middle * upper, d.positive.counts))
    lows, highs, points, counts = (np.concatenate(column) for column in zip(*parts))
    held = counts > 0
    return lows[held], highs[held], points[held], counts[held].astype(np.int64)


__all__ = ["StateView", "value_range", "view"]
