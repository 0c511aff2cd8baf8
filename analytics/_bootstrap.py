"""Bootstrap confidence intervals (numpy only): cluster resampling with BCa correction.

Samples are grouped into *clusters*, the units that are resampled: the cases of a paired comparison
(every repetition of a case moves together, in both arms at once), or single samples when there are
no cases to pair. A design has one or more independent *groups* of clusters: one group for a paired
difference or a single arm, two for an unpaired difference. A statistic is evaluated on integer
weight matrices (how often each cluster was drawn), so thousands of resamples cost a few matrix
products.

The interval is the bias-corrected and accelerated (BCa) percentile interval: the bias correction
from the share of resamples below the estimate, the acceleration from the jackknife (leave one
cluster out) over every group.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from statistics import NormalDist

import numpy as np

DEFAULT_CONFIDENCE = 0.95
DEFAULT_RESAMPLES = 2000
MAX_UNDEFINED_SHARE = 0.05
"""An interval is not given when the statistic is undefined (e.g. no success) in more resamples than this."""
_CHUNK_CELLS = 2_000_000
"""Resamples are evaluated in blocks of about this many matrix cells, to bound memory."""
_NORMAL = NormalDist()


class Statistic(StrEnum):
    """What is computed from an arm's samples."""

    MEAN = "mean"
    """Mean over the samples (each sample weighs one)."""
    TOTAL = "total"
    """The mean times a fixed number of runs (the plan's): a sum that a missing task cannot shrink."""
    P95 = "p95"
    """95th percentile of the samples (linear interpolation, as DuckDB's quantile_cont)."""
    PER_SUCCESS = "per_success"
    """Sum of the samples over the number of successful samples among them."""


@dataclass(frozen=True)
class Interval:
    """An estimate with its confidence interval (``low``/``high`` None when no interval can be given)."""

    estimate: float
    low: float | None
    high: float | None
    reason: str | None = None
    """Why there is no interval, when there is none."""


class ArmSamples:
    """One arm's samples of one metric, grouped into clusters in a given order.

    ``clusters[i]`` holds the values of cluster i (and ``successes[i]`` their success flags, needed
    by ``Statistic.PER_SUCCESS`` only)."""

    def __init__(self, clusters: Sequence[Sequence[float]], successes: Sequence[Sequence[bool]] | None = None):
        self.k = len(clusters)
        values = [np.asarray(c, dtype=float) for c in clusters]
        self.sums = np.array([v.sum() for v in values], dtype=float)
        self.counts = np.array([v.size for v in values], dtype=float)
        self.flat = np.concatenate(values) if values else np.zeros(0)
        self.owner = np.repeat(np.arange(self.k), [v.size for v in values])
        order = np.argsort(self.flat, kind="stable")
        self._sorted = self.flat[order]
        self._sorted_owner = self.owner[order]
        if successes is not None:
            self.success_counts = np.array([np.asarray(s, dtype=bool).sum() for s in successes], dtype=float)
        else:
            self.success_counts = None

    def evaluate(self, statistic: Statistic, weights: np.ndarray, scale: float = 1.0) -> np.ndarray:
        """The statistic for each row of ``weights`` (m x k cluster multiplicities); NaN where undefined."""
        with np.errstate(invalid="ignore", divide="ignore"):
            if statistic in (Statistic.MEAN, Statistic.TOTAL):
                value = (weights @ self.sums) / (weights @ self.counts)
                return value * scale if statistic is Statistic.TOTAL else value
            if statistic is Statistic.PER_SUCCESS:
                if self.success_counts is None:
                    raise ValueError("per_success needs the samples' success flags")
                denominator = weights @ self.success_counts
                return np.where(denominator > 0, (weights @ self.sums) / denominator, np.nan)
            if statistic is Statistic.P95:
                return self._weighted_quantile(weights, 0.95)
        raise ValueError(f"unknown statistic {statistic!r}")

    def _weighted_quantile(self, weights: np.ndarray, q: float) -> np.ndarray:
        """quantile_cont(q) of the multiset where each sample appears as often as its cluster was drawn."""
        rows = max(1, _CHUNK_CELLS // max(self.flat.size, 1))
        if weights.shape[0] > rows:
            return np.concatenate([self._weighted_quantile(weights[i:i + rows], q)
                                   for i in range(0, weights.shape[0], rows)])
        w = weights[:, self._sorted_owner]  # m x n, in sorted value order
        cumulative = np.cumsum(w, axis=1)
        total = cumulative[:, -1] if cumulative.shape[1] else np.zeros(weights.shape[0])
        position = (total - 1) * q
        below = np.floor(position)
        fraction = position - below
        # index of the first sorted value whose cumulative count exceeds a position
        lo = np.argmax(cumulative > below[:, None], axis=1)
        hi = np.argmax(cumulative > (below + 1)[:, None], axis=1)
        hi = np.where(below + 1 <= total - 1, hi, lo)
        value = self._sorted[lo] + fraction * (self._sorted[hi] - self._sorted[lo])
        return np.where(total > 0, value, np.nan)


GroupStatistic = Callable[[Sequence[np.ndarray]], np.ndarray]
"""Maps one weight matrix per group (each m x k_g) to m statistic values."""


def derived_seed(seed: int, label: str) -> list[int]:
    """The entropy of the generator of one calculation: the recorded seed and a checksum of its label,
    so each calculation's resamples do not depend on what else was computed."""
    return [int(seed), zlib.crc32(label.encode())]


def bootstrap_interval(
    group_sizes: Sequence[int],
    statistic: GroupStatistic,
    *,
    seed: int | Sequence[int],
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
) -> Interval:
    """The BCa bootstrap interval of ``statistic`` over independent groups of clusters."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    if resamples < 100:
        raise ValueError(f"at least 100 resamples are needed for an interval, got {resamples}")
    sizes = [int(k) for k in group_sizes]
    estimate = float(statistic([np.ones((1, k)) for k in sizes])[0])
    if not np.isfinite(estimate):
        return Interval(estimate, None, None, "the statistic is undefined on the samples")
    if min(sizes) < 2:
        return Interval(estimate, None, None, "an interval needs at least two clusters (cases) in each group")
    rng = np.random.default_rng(seed)
    chunk = max(1, _CHUNK_CELLS // max(sum(sizes), 1))
    draws = []
    for start in range(0, resamples, chunk):
        m = min(chunk, resamples - start)
        weights = [_draw_weights(rng, k, m) for k in sizes]
        draws.append(statistic(weights))
    replicates = np.concatenate(draws)
    defined = replicates[np.isfinite(replicates)]
    if defined.size < (1 - MAX_UNDEFINED_SHARE) * resamples:
        return Interval(estimate, None, None,
                        f"the statistic is undefined in {resamples - defined.size} of {resamples} resamples")
    if np.ptp(defined) == 0:
        return Interval(estimate, float(defined[0]), float(defined[0]))
    acceleration = _jackknife_acceleration(sizes, statistic)
    low, high = _bca_limits(estimate, defined, acceleration, confidence, min(sizes))
    return Interval(estimate, low, high)


def _draw_weights(rng: np.random.Generator, k: int, m: int) -> np.ndarray:
    """m resamples of k clusters drawn with replacement, as multiplicities (m x k)."""
    drawn = rng.integers(0, k, size=(m, k)) + (np.arange(m) * k)[:, None]
    return np.bincount(drawn.ravel(), minlength=m * k).reshape(m, k).astype(float)


def _jackknife_acceleration(sizes: Sequence[int], statistic: GroupStatistic) -> float:
    """The BCa acceleration from leave-one-cluster-out estimates in every group (empirical influence)."""
    numerator = denominator = 0.0
    block = max(1, _CHUNK_CELLS // max(sum(sizes), 1))
    for g, k in enumerate(sizes):
        parts = []
        for first in range(0, k, block):
            m = min(block, k - first)
            weights = [np.ones((m, size)) for size in sizes]
            weights[g][np.arange(m), first + np.arange(m)] = 0.0
            parts.append(statistic(weights))
        leave_one_out = np.concatenate(parts)
        if not np.all(np.isfinite(leave_one_out)):
            return 0.0
        influence = (k - 1) * (leave_one_out.mean() - leave_one_out)
        numerator += float(np.sum(influence ** 3)) / k ** 3
        denominator += float(np.sum(influence ** 2)) / k ** 2
    if denominator <= 0:
        return 0.0
    return numerator / (6.0 * denominator ** 1.5)


def expanded_quantile(confidence: float, clusters: int) -> float:
    """The two-sided normal quantile of ``confidence``, expanded for ``clusters`` clusters: the bootstrap
    spread of a mean is sqrt((n-1)/n) of its standard error, and a t quantile with n-1 degrees of
    freedom (not a normal one) matches an estimated spread (Hesterberg's expanded interval)."""
    z = _NORMAL.inv_cdf(1 - (1 - confidence) / 2)
    nu = clusters - 1
    # Student t quantile from the normal one (Cornish-Fisher expansion, exact to ~1e-4 for nu >= 3)
    t = (z + (z**3 + z) / (4 * nu) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * nu**2)
         + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * nu**3)
         + (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / (92160 * nu**4))
    return (clusters / nu) ** 0.5 * t


def _bca_limits(estimate: float, replicates: np.ndarray, acceleration: float, confidence: float,
                clusters: int) -> tuple[float, float]:
    n = replicates.size
    below = (np.count_nonzero(replicates < estimate) + 0.5 * np.count_nonzero(replicates == estimate)) / n
    below = min(max(below, 0.5 / n), 1 - 0.5 / n)
    z0 = _NORMAL.inv_cdf(below)
    z_half = expanded_quantile(confidence, max(clusters, 4))
    levels = []
    for z in (-z_half, z_half):
        shifted = z0 + z
        denominator = 1 - acceleration * shifted
        level = _NORMAL.cdf(z0 + shifted / denominator) if denominator > 0 else (0.0 if z < 0 else 1.0)
        levels.append(min(max(level, 0.0), 1.0))
    low, high = np.quantile(replicates, levels)
    return float(low), float(high)


# --- the three designs ----------------------------------------------------------------------------
def value_interval(arm: ArmSamples, statistic: Statistic, *, scale: float = 1.0, seed,
                   resamples: int = DEFAULT_RESAMPLES, confidence: float = DEFAULT_CONFIDENCE) -> Interval:
    """An arm's statistic with its interval (its clusters resampled)."""
    return bootstrap_interval(
        [arm.k], lambda w: arm.evaluate(statistic, w[0], scale), seed=seed, resamples=resamples, confidence=confidence
    )


def paired_difference_interval(baseline: ArmSamples, challenger: ArmSamples, statistic: Statistic, *,
                               scale: float = 1.0, seed, resamples: int = DEFAULT_RESAMPLES,
                               confidence: float = DEFAULT_CONFIDENCE) -> Interval:
    """challenger - baseline, resampling the shared clusters (cases) together: cluster i of both arms
    must be the same case."""
    if baseline.k != challenger.k:
        raise ValueError(f"paired arms need the same clusters, got {baseline.k} and {challenger.k}")
    return bootstrap_interval(
        [baseline.k],
        lambda w: challenger.evaluate(statistic, w[0], scale) - baseline.evaluate(statistic, w[0], scale),
        seed=seed, resamples=resamples, confidence=confidence,
    )


def unpaired_difference_interval(baseline: ArmSamples, challenger: ArmSamples, statistic: Statistic, *,
                                 scale: float = 1.0, seed, resamples: int = DEFAULT_RESAMPLES,
                                 confidence: float = DEFAULT_CONFIDENCE) -> Interval:
    """challenger - baseline, resampling each arm's clusters independently."""
    return bootstrap_interval(
        [baseline.k, challenger.k],
        lambda w: challenger.evaluate(statistic, w[1], scale) - baseline.evaluate(statistic, w[0], scale),
        seed=seed, resamples=resamples, confidence=confidence,
    )
