"""Confidence sequences: bounds that hold at every sample count at once, from a window's sufficient statistics.

A rule checked again and again as its samples accumulate would, with fixed-sample intervals, sooner or
later see a healthy metric on the wrong side by chance. A confidence sequence at level alpha is
wrong at *any* of the sample counts it is ever looked at with probability at most alpha, however
often it is looked at and whenever one stops looking (Ville's inequality for a nonnegative
supermartingale).

**Means.** To claim that the mean of samples X_1, X_2, ... exceeds theta when every sample is at
least ``floor``: with xi_i = X_i - theta >= -(theta - floor) = -c, Fan, Grama & Liu's inequality
(2015, *Electronic Journal of Probability* 20(1); exp(l*xi - psi_E(l)*xi^2) <= 1 + l*xi for
xi >= -1, 0 <= l < 1) makes exp(l*S_t - psi_{E,c}(l)*V_t), with S_t = sum xi_i and V_t = sum xi_i^2,
a nonnegative supermartingale for every l in [0, 1/c) as long as each sample's conditional mean is
at most theta (the samples need not be identically distributed). That is a sub-exponential, hence
sub-gamma, process with scale c and variance process V_t in the sense of Howard, Ramdas, McAuliffe &
Sekhon (2021, "Time-uniform, nonparametric, nonasymptotic confidence sequences", *Annals of
Statistics* 49(2)), and their Theorem 1's polynomial stitching boundary (`stitched_boundary`, eta=2,
s=1.4, m=c^2) gives P(exists t: S_t >= boundary(V_t)) <= alpha. S_t and V_t are functions of the
sample count and the exact sums of the values and of their squares at theta, so a window state
suffices. The claim "mean below theta" is the same with xi_i = theta - X_i, needing a ``ceiling``.
Catalogue metrics are never negative, so "above" always has its floor; "below" has its ceiling for
ratios (at most 1). Where a side has no bound (the mean latency being *below* a ceiling), the
asymptotic confidence sequence of Waudby-Smith, Arbour, Sinha, Kennedy & Ramdas (2024,
"Time-uniform central limit theory and asymptotic confidence sequences", *Annals of Statistics*
52(6)) is used, its Gaussian-mixture boundary with the sample variance (`asymptotic_radius`), and
the result says so: its level holds as the samples grow, not at every sample count.

**Quantiles.** The q quantile's bounds are order statistics whose ranks come from the same boundary
applied to the indicators 1{X_i <= q_q} (Bernoulli with mean q, each in [0, 1]): Howard & Ramdas
(2022, "Sequential estimation of quantiles with applications to A/B-testing and best-arm
identification", *Bernoulli* 28(3)), their fixed-quantile confidence sequence. Distribution-free.
"""

from __future__ import annotations

import math

import numpy as np

from meritlens.analytics._distribution import SUM_SCALE

STITCH_ETA = 2.0
"""Howard et al.'s geometric spacing of the intrinsic-time epochs."""
STITCH_S = 1.4
"""Their exponent of the per-epoch level sequence (the one they recommend)."""
ASYMPTOTIC_OPTIMAL_SAMPLES = 500
"""The sample count at which the asymptotic boundary is tightest (it is valid at every count)."""
_K1 = (STITCH_ETA ** 0.25 + STITCH_ETA ** -0.25) / math.sqrt(2.0)
_K2 = (math.sqrt(STITCH_ETA) + 1.0) / 2.0


def _zeta(s: float) -> float:
    """Riemann's zeta function for s > 1 (Euler-Maclaurin after 100 terms; error below 1e-12)."""
    n = 100
    head = sum(k ** -s for k in range(1, n))
    return head + n ** (1 - s) / (s - 1) + 0.5 * n ** -s + s * n ** (-s - 1) / 12 - s * (s + 1) * (s + 2) * n ** (-s - 3) / 720


_LEVEL_OFFSET = math.log(_zeta(STITCH_S) / math.log(STITCH_ETA) ** STITCH_S)


def _stitched(v, c, alpha: float, sqrt, log):
    """The boundary's formula, with ``sqrt`` and ``log`` of numpy (arrays) or of math (one number); v >= c**2 > 0."""
    ell = STITCH_S * log(log(STITCH_ETA * v / (c * c))) + _LEVEL_OFFSET - math.log(alpha)
    return sqrt(_K1 * _K1 * v * ell + _K2 * _K2 * c * c * ell * ell) + c * _K2 * ell


def stitched_boundary(v, c, alpha: float):
    """Howard et al. (2021) Theorem 1, the polynomial stitching boundary for a sub-gamma process with
    scale ``c`` and intrinsic time ``v`` (m = c**2; below m, v counts as m): S_t crosses it at some t
    with probability at most ``alpha``. Vectorized over ``v`` and ``c``."""
    c = np.maximum(np.asarray(c, dtype=float), 1e-150)
    return _stitched(np.maximum(np.asarray(v, dtype=float), c * c), c, alpha, np.sqrt, np.log)


def evidence(centred_sum, centred_squares, c, alpha: float):
    """Whether samples with sum(X_i - theta) = ``centred_sum`` and sum((X_i - theta)**2) =
    ``centred_squares`` show a mean above theta, every sample being at least theta - ``c`` (see the
    module). With c = 0 (theta at the floor) any sample above it is proof. Vectorized."""
    s = np.asarray(centred_sum, dtype=float)
    c = np.asarray(c, dtype=float)
    return np.where(c > 0, s >= stitched_boundary(centred_squares, c, alpha), s > 0)


def _crosses(centred_sum: float, centred_squares: float, c: float, alpha: float) -> bool:
    """`evidence` for one set of sums, without numpy's per-call cost (it is inverted by bisection)."""
    if c <= 0:
        return centred_sum > 0
    return centred_sum >= _stitched(max(centred_squares, c * c), c, alpha, math.sqrt, math.log)


def centred_sums(n: int, total: int, squares: int, theta: float) -> tuple[float, float]:
    """(sum(X_i - theta), sum((X_i - theta)**2)) exactly from a state's count and exact sums (units of
    `exact_sum`), each rounded once."""
    numerator, denominator = float(theta).as_integer_ratio()  # the denominator is a power of two
    t = numerator * ((1 << SUM_SCALE) // denominator)
    centred = total - n * t
    spread = squares - 2 * t * total + n * t * t
    return centred / (1 << SUM_SCALE), spread / (1 << (2 * SUM_SCALE))


def mean_above(n: int, total: int, squares: int, theta: float, floor: float, alpha: float) -> bool:
    """Evidence at level ``alpha`` that the mean exceeds ``theta`` (every sample at least ``floor``)."""
    if n == 0:
        return False
    s, v = centred_sums(n, total, squares, theta)
    return _crosses(s, v, theta - floor, alpha)


def mean_below(n: int, total: int, squares: int, theta: float, ceiling: float, alpha: float) -> bool:
    """Evidence at level ``alpha`` that the mean is below ``theta`` (every sample at most ``ceiling``)."""
    if n == 0:
        return False
    s, v = centred_sums(n, total, squares, theta)
    return _crosses(-s, v, ceiling - theta, alpha)


def asymptotic_radius(n, variance, alpha: float, optimal_samples: int = ASYMPTOTIC_OPTIMAL_SAMPLES):
    """Half-width of Waudby-Smith et al.'s (2024) Gaussian-mixture asymptotic confidence sequence for a
    mean after ``n`` samples of sample ``variance`` (two-sided at ``alpha``; tightest near
    ``optimal_samples``). Vectorized."""
    log_alpha = -2.0 * math.log(alpha)
    rho2 = (log_alpha + math.log(log_alpha + 1.0)) / optimal_samples
    n = np.asarray(n, dtype=float)
    scale = n * rho2 + 1.0
    return np.sqrt(np.asarray(variance, dtype=float)) * np.sqrt(2.0 * scale / (n * n * rho2)
                                                                * np.log(np.sqrt(scale) / alpha))


def mean_bounds(n: int, total: int, squares: int, alpha: float, floor: float | None,
                ceiling: float | None) -> tuple[float, float, bool]:
    """(low, high, asymptotic): the mean's confidence-sequence bounds, each side at level ``alpha``,
    by inverting `mean_above` and `mean_below` (the asymptotic radius on a side without a bound on
    the samples; ``asymptotic`` is then True). n >= 2."""
    mean = total / (n << SUM_SCALE)
    radius = None
    if floor is None or ceiling is None:
        variance = max(n * squares - total * total, 0) / ((n * (n - 1)) << (2 * SUM_SCALE))
        radius = float(asymptotic_radius(n, variance, alpha))
    if floor is None:
        low = mean - radius
    else:
        low = _edge(lambda x: mean_above(n, total, squares, x, floor, alpha), floor, mean)
    if ceiling is None:
        high = mean + radius
    else:
        high = _edge(lambda x: mean_below(n, total, squares, x, ceiling, alpha), ceiling, mean)
    return low, high, radius is not None


def _edge(holds, inside: float, outside: float) -> float:
    """The point nearest ``outside`` from which ``holds`` is true back to ``inside`` (by bisection);
    ``inside`` when it does not hold there."""
    if not holds(inside):
        return inside
    for _ in range(64):
        middle = 0.5 * (inside + outside)
        if middle in (inside, outside):
            break
        inside, outside = (middle, outside) if holds(middle) else (inside, middle)
    return inside


def quantile_rank_bounds(n: int, q: float, alpha: float) -> tuple[int | None, int | None]:
    """0-based ranks (low, high) of the order statistics bounding the ``q`` quantile at every sample
    count at once, each side failing with probability at most ``alpha`` (Howard & Ramdas 2022); None
    where ``n`` samples cannot bound that side yet.

    Below: the quantile lies under X_(k+1) only if at most k samples are at or below it, which the
    indicators' boundary (scale 1 - q) makes unlikely for every k it rules out; above likewise with
    the samples below it (scale q)."""
    if n == 0:
        return None, None
    low = _crossing_edge(n, q, 1.0 - q, alpha, below=True)
    high = _crossing_edge(n, q, q, alpha, below=False)
    return low, (high if high is not None and high < n else None)


def _crossing_edge(n: int, q: float, c: float, alpha: float, below: bool) -> int | None:
    """The last count k (below) or the first count minus one (above) from which every count crosses
    the indicators' boundary, searching only where the boundary can lie."""
    widest = float(stitched_boundary(n * max(q, 1 - q) ** 2, c, alpha))
    narrowest = float(stitched_boundary(n * min(q, 1 - q) ** 2, c, alpha))
    if below:
        counts = np.arange(max(0, math.floor(n * q - widest) - 1), max(0, math.floor(n * q - narrowest) + 2))
        crossed = evidence(n * q - counts, counts * (1 - q) ** 2 + (n - counts) * q * q, c, alpha)
        missing = np.flatnonzero(~crossed)
        if crossed.size == 0 or not crossed[0]:
            return None if counts.size == 0 or counts[0] == 0 else int(counts[0]) - 1
        return int(counts[missing[0]] - 1) if missing.size else int(counts[-1])
    counts = np.arange(min(n, math.ceil(n * q + narrowest) - 1), min(n, math.ceil(n * q + widest) + 1) + 1)
    crossed = evidence(counts - n * q, counts * (1 - q) ** 2 + (n - counts) * q * q, c, alpha)
    missing = np.flatnonzero(~crossed)
    if missing.size == 0:
        return int(counts[0]) - 1
    return int(counts[missing[-1]]) if missing[-1] + 1 < counts.size else None


__all__ = ["ASYMPTOTIC_OPTIMAL_SAMPLES", "STITCH_ETA", "STITCH_S", "asymptotic_radius", "centred_sums", "evidence",
           "mean_above", "mean_below", "mean_bounds", "quantile_rank_bounds", "stitched_boundary"]
