"""Confidence sequences, checked against simulation: looked at after every sample, a true mean or quantile
is outside them at some point no more often than their level (where fixed-sample intervals looked at
as often are outside far more often); the inequality they rest on; bounds that invert the tests."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pytest

from meritlens.analytics._distribution import exact_square_sum, exact_sum
from meritlens.analytics._sequential import (
    asymptotic_radius,
    evidence,
    mean_above,
    mean_below,
    mean_bounds,
    quantile_rank_bounds,
    stitched_boundary,
)

_ALPHA = 0.1
_SEQUENCES = 1000
_LENGTH = 3000


def test_fan_grama_liu_inequality_holds_on_a_fine_grid():
    """exp(l*xi - psi_E(l)*xi^2) <= 1 + l*xi for xi >= -1 and 0 <= l < 1: what makes the process a supermartingale."""
    xi = np.concatenate([np.linspace(-1, 0, 2001), np.geomspace(1e-6, 1e4, 4000)])[:, None]
    lam = np.linspace(0, 0.999, 1000)[None, :]
    psi = -np.log1p(-lam) - lam
    lhs = lam * xi - psi * xi * xi
    assert (lhs <= np.log1p(lam * xi) + 1e-12).all()


def test_the_stitched_boundary_is_howard_et_als_closed_form():
    """With c = 0 and m = 1 their eq. (11): 1.7 sqrt(v (log log 2v + 0.72 log(5.2 / alpha))), to the
    rounding of its constants."""
    v = np.array([10.0, 1e3, 1e6])
    k1 = (2 ** 0.25 + 2 ** -0.25) / math.sqrt(2)
    ell = 1.4 * np.log(np.log(2 * v)) + math.log(3.1055 / (0.05 * math.log(2) ** 1.4))
    c = 1.0  # m = c**2 = 1
    expected = np.sqrt(k1 ** 2 * v * ell + ((math.sqrt(2) + 1) / 2) ** 2 * ell ** 2) + (math.sqrt(2) + 1) / 2 * ell
    ours = stitched_boundary(v, c, 0.05)
    assert np.allclose(ours, expected, rtol=1e-4)
    approximate = 1.7 * np.sqrt(v * (np.log(np.log(2 * v)) + 0.72 * math.log(5.2 / 0.05)))
    assert np.allclose(np.sqrt(k1 ** 2 * v * ell), approximate, rtol=0.01)


def _crossings(draws: np.ndarray, theta: float, c: float, sign: int) -> float:
    """Share of sequences whose evidence (sign 1: mean above theta; -1: below) appears at any sample count."""
    xi = sign * (draws - theta)
    s, v = np.cumsum(xi, axis=1), np.cumsum(xi * xi, axis=1)
    return float(evidence(s, v, c, _ALPHA).any(axis=1).mean())


@pytest.mark.parametrize("name", ["bernoulli_rare_above", "bernoulli_rare_below", "bernoulli_half", "uniform",
                                  "exponential", "lognormal"])
def test_a_true_mean_is_never_claimed_crossed_more_often_than_the_level(name):
    """Samples whose mean is exactly theta (the hardest healthy case), evidence checked after every
    sample: the share of sequences that ever claim the wrong side stays below alpha. The fixed-sample
    one-sided z test at the same alpha, checked as often, claims it in most sequences."""
    rng = np.random.default_rng(len(name))
    shape = (_SEQUENCES, _LENGTH)
    draws, theta, floor, ceiling, sign = {
        "bernoulli_rare_above": (lambda: rng.binomial(1, 0.05, shape), 0.05, 0.0, 1.0, 1),
        "bernoulli_rare_below": (lambda: rng.binomial(1, 0.05, shape), 0.05, 0.0, 1.0, -1),
        "bernoulli_half": (lambda: rng.binomial(1, 0.5, shape), 0.5, 0.0, 1.0, 1),
        "uniform": (lambda: rng.uniform(0, 1, shape), 0.5, 0.0, 1.0, -1),
        "exponential": (lambda: rng.exponential(2.0, shape), 2.0, 0.0, None, 1),
        "lognormal": (lambda: rng.lognormal(0, 1.5, shape), math.exp(1.5 ** 2 / 2), 0.0, None, 1),
    }[name]
    x = draws().astype(float)
    c = theta - floor if sign > 0 else ceiling - theta
    assert _crossings(x, theta, c, sign) <= _ALPHA
    n = np.arange(1, _LENGTH + 1)
    running = np.cumsum(x, axis=1) / n
    sd = np.sqrt(np.maximum(np.cumsum(x * x, axis=1) / n - running ** 2, 1e-12))
    z = NormalDist().inv_cdf(1 - _ALPHA)
    naive = (sign * (running - theta) > z * sd / np.sqrt(n))[:, 29:].any(axis=1).mean()
    assert naive > 2 * _ALPHA


def test_quantile_bounds_hold_at_every_sample_count_at_once():
    """Log-normal samples; the p95's bounds from the order statistics at every 10th sample count: the
    share of sequences in which the true p95 is ever outside stays below 2 alpha (alpha a side)."""
    rng = np.random.default_rng(95)
    q, true_q = 0.95, math.exp(1.6448536269514722)
    counts = np.arange(10, 2001, 10)
    ranks = [quantile_rank_bounds(int(n), q, _ALPHA) for n in counts]
    missed = 0
    for _ in range(400):
        x = rng.lognormal(0, 1, counts[-1])
        for n, (low, high) in zip(counts, ranks):
            ordered = np.sort(x[:n])
            if (low is not None and ordered[low] > true_q) or (high is not None and ordered[high] < true_q):
                missed += 1
                break
    assert missed / 400 <= 2 * _ALPHA
    # the bounds tighten as samples accumulate, around the quantile's rank
    low, high = quantile_rank_bounds(100_000, q, _ALPHA)
    assert 94_000 < low < 95_000 < high < 96_000
    assert quantile_rank_bounds(20, q, _ALPHA)[1] is None  # 20 samples cannot bound a p95 from above


def test_mean_bounds_invert_the_tests():
    rng = np.random.default_rng(4)
    for x, floor, ceiling in [(rng.lognormal(0, 1, 400), 0.0, None), (rng.binomial(1, 0.2, 300).astype(float), 0.0, 1.0),
                              (rng.uniform(0, 1, 50), 0.0, 1.0)]:
        n, total, squares = x.size, exact_sum(x), exact_square_sum(x)
        low, high, asymptotic = mean_bounds(n, total, squares, 0.01, floor, ceiling)
        assert asymptotic is (ceiling is None)
        assert low < x.mean() < high
        step = 1e-9 * max(1.0, abs(low))
        assert mean_above(n, total, squares, low - step, floor, 0.01)
        assert not mean_above(n, total, squares, low + step, floor, 0.01)
        if ceiling is not None:
            assert mean_below(n, total, squares, high + step, ceiling, 0.01)
            assert not mean_below(n, total, squares, high - step, ceiling, 0.01)
        else:
            variance = x.var(ddof=1)
            assert high == pytest.approx(x.mean() + float(asymptotic_radius(n, variance, 0.01)), rel=1e-9)
    # a threshold at the floor: any sample above it is proof
    assert mean_above(3, exact_sum(np.array([0.0, 0.0, 0.5])), exact_square_sum(np.array([0.0, 0.0, 0.5])), 0.0, 0.0, 0.01)
    assert not mean_above(2, 0, 0, 0.0, 0.0, 0.01)


def test_a_real_shift_is_detected_and_the_bound_converges():
    rng = np.random.default_rng(7)
    x = rng.binomial(1, 0.08, 20_000).astype(float)  # a ceiling of 5%, truly 8%
    s, v = np.cumsum(x - 0.05), np.cumsum((x - 0.05) ** 2)
    found = np.flatnonzero(evidence(s, v, 0.05, 1e-4))
    assert found.size and found[0] < 10_000
    low, high, _ = mean_bounds(x.size, exact_sum(x), exact_square_sum(x), 1e-4, 0.0, 1.0)
    assert 0.05 < low < 0.08 < high < 0.1


@pytest.mark.parametrize("q", [0.5, 0.9, 0.95, 0.99])
def test_quantile_ranks_are_the_edges_of_the_counts_the_boundary_rules_out(q):
    """Against a scan of every count: the low rank is the last count k such that every count up to k
    crosses the boundary below, the high rank the last count that does not cross it above."""
    for n in (30, 100, 500, 2000, 10_000):
        counts = np.arange(n + 1)
        v = counts * (1 - q) ** 2 + (n - counts) * q * q
        below = evidence(n * q - counts, v, 1 - q, _ALPHA)
        above = evidence(counts - n * q, v, q, _ALPHA)
        low = int(np.argmin(below)) - 1 if not below.all() else n
        high = int(np.flatnonzero(~above)[-1]) if (~above).any() else -1
        expected = (low if low >= 0 else None, high if high < n else None)
        assert quantile_rank_bounds(n, q, _ALPHA) == expected, n
