"""Fixed-sample confidence intervals from sufficient statistics, and the distributions they need.

Numbers in, numbers out (no window states here; `_regressions` reads those):

- a proportion: Wilson's score interval (Wilson 1927);
- a mean: Student's t interval; a difference of two means: Welch's interval with the
  Welch-Satterthwaite degrees of freedom (Welch 1947);
- a quantile: the distribution-free interval between two order statistics, whose ranks come from
  the binomial distribution of the number of samples below the quantile (e.g. Hahn & Meeker,
  *Statistical Intervals*, 1991, ch. 5); it holds for any continuous distribution and is
  conservative for discrete ones;
- a difference or a ratio of two independent estimates from their own intervals: MOVER, the method
  of variance estimates recovery (Zou & Donner 2008; Donner & Zou 2012 for ratios, on the log
  scale). With Wilson's intervals it is Newcombe's hybrid score interval for a difference of
  proportions (Newcombe 1998, method 10).

Student's t and the binomial are computed here (numpy and the standard library only): the
regularized incomplete beta function by its continued fraction (Lentz's method, as in Press et
al., *Numerical Recipes*, 6.4), and binomial tails by summing the probabilities around the mode.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

_NORMAL = NormalDist()
_TINY = 1e-300
_BINOMIAL_SPREAD = 40.0
"""Binomial probabilities are summed over the mode +- this many standard deviations (the rest is below 1e-300)."""


@dataclass(frozen=True)
class Estimate:
    """A point estimate with its confidence interval; a limit is -inf or inf where the data cannot bound it."""

    value: float
    low: float
    high: float

    def to_dict(self) -> dict:
        return {"value": self.value, "low": _finite_or_none(self.low), "high": _finite_or_none(self.high)}


def _finite_or_none(x: float) -> float | None:
    return x if math.isfinite(x) else None


def check_confidence(confidence: float) -> float:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"a confidence level must lie strictly between 0 and 1, not {confidence}")
    return float(confidence)


def normal_quantile(p: float) -> float:
    return _NORMAL.inv_cdf(p)


# --- distributions ------------------------------------------------------------------------------
def incomplete_beta(x: float, a: float, b: float) -> float:
    """The regularized incomplete beta function I_x(a, b), for a, b > 0."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_fraction(x, a, b) / a
    return 1.0 - front * _beta_fraction(1.0 - x, b, a) / b


def _beta_fraction(x: float, a: float, b: float) -> float:
    """The continued fraction of I_x(a, b), evaluated by the modified Lentz method."""
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, 200 + int(20 * math.sqrt(max(a, b)))):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > _TINY else _TINY)
            c = 1.0 + numerator / c
            c = c if abs(c) > _TINY else _TINY
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            return h
    raise ArithmeticError(f"the incomplete beta function did not converge at x={x}, a={a}, b={b}")


def t_cdf(t: float, df: float) -> float:
    """Student's t distribution function with ``df`` (> 0, not necessarily whole) degrees of freedom."""
    tail = 0.5 * incomplete_beta(df / (df + t * t), df / 2.0, 0.5)
    return 1.0 - tail if t > 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom: Newton's method on `t_cdf`
    from the Cornish-Fisher expansion, bisection where Newton leaves the bracket."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"a quantile level must lie strictly between 0 and 1, not {p}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    z = normal_quantile(p)
    if math.isinf(df) or p == 0.5:
        return 0.0 if p == 0.5 else z
    t = z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df ** 2)
    log_density_scale = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    low, high = 0.0, math.inf
    for _ in range(100):
        error = t_cdf(t, df) - p
        low, high = (t, high) if error < 0 else (low, t)
        density = math.exp(log_density_scale - (df + 1) / 2 * math.log1p(t * t / df))
        step = t - error / density
        if not low < step < high:
            step = 0.5 * (low + high) if math.isfinite(high) else 2.0 * t
        if abs(step - t) <= 1e-13 * step:
            return step
        t = step
    return t


def binomial_tails(n: int, p: float) -> tuple[int, np.ndarray, np.ndarray]:
    """For B ~ Binomial(n, p): (first, cdf, sf) with cdf[i] = P(B <= first + i) and sf[i] = P(B > first + i)
    over the values with non-negligible probability (below ``first``, cdf is 0 to within 1e-300)."""
    if p <= 0.0 or p >= 1.0 or n == 0:
        at = 0 if p <= 0.0 else n
        return at, np.ones(1), np.zeros(1)
    mode = min(n, int(math.floor((n + 1) * p)))
    spread = int(math.ceil(_BINOMIAL_SPREAD * math.sqrt(n * p * (1 - p)))) + 50
    first, last = max(0, mode - spread), min(n, mode + spread)
    k = np.arange(first, last, dtype=float)
    odds = math.log(p) - math.log1p(-p)
    steps = np.log((n - k) / (k + 1.0)) + odds  # log P(k + 1) - log P(k)
    up = np.concatenate([[0.0], np.cumsum(steps)])
    log_pmf = up - up[mode - first]
    log_pmf += (math.lgamma(n + 1) - math.lgamma(mode + 1) - math.lgamma(n - mode + 1)
                + mode * math.log(p) + (n - mode) * math.log1p(-p))
    pmf = np.exp(log_pmf)
    pmf /= pmf.sum()
    cdf = np.cumsum(pmf)
    sf = np.concatenate([np.cumsum(pmf[::-1])[::-1][1:], [0.0]])
    return first, np.minimum(cdf, 1.0), sf


# --- one sample ----------------------------------------------------------------------------------
def wilson_interval(ones: int, n: int, confidence: float) -> Estimate:
    """Wilson's score interval for a proportion of ``ones`` in ``n`` (n >= 1)."""
    z = normal_quantile(1.0 - (1.0 - check_confidence(confidence)) / 2.0)
    p = ones / n
    centre = (ones + z * z / 2.0) / (n + z * z)
    half = z * math.sqrt(ones * (n - ones) / n + z * z / 4.0) / (n + z * z)
    return Estimate(p, max(0.0, centre - half), min(1.0, centre + half))


def mean_interval(n: int, mean: float, variance: float, confidence: float) -> Estimate:
    """Student's t interval for a mean (n >= 2)."""
    t = t_quantile(1.0 - (1.0 - check_confidence(confidence)) / 2.0, n - 1)
    half = t * math.sqrt(variance / n)
    return Estimate(mean, mean - half, mean + half)


def quantile_ranks(n: int, q: float, confidence: float) -> tuple[int | None, int | None]:
    """The 0-based ranks (low, high) of the order statistics bounding the ``q`` quantile of a
    continuous distribution with probability at least ``confidence`` (each side failing with at most
    half the rest); None where ``n`` samples are too few to bound that side."""
    tail = (1.0 - check_confidence(confidence)) / 2.0
    first, cdf, sf = binomial_tails(n, q)
    # X_(k+1) > q_q exactly when at most k samples fall at or below q_q: P(B <= k) <= tail
    below = int(np.searchsorted(cdf, tail, "right")) - 1
    low = first + below if below >= 0 else None
    # X_(j+1) < q_q needs more than j samples below q_q: P(B > j) <= tail
    above = int(np.argmax(sf <= tail)) if (sf <= tail).any() else None
    high = first + above if above is not None and first + above < n else None
    return low, high


# --- two independent samples --------------------------------------------------------------------------
def mover_difference(a: Estimate, b: Estimate) -> Estimate:
    """a - b from each estimate's interval (MOVER; both intervals at the difference's level)."""
    d = a.value - b.value
    low = d - math.hypot(a.value - a.low, b.high - b.value)
    high = d + math.hypot(a.high - a.value, b.value - b.low)
    return Estimate(d, low, high)


def mover_ratio(a: Estimate, b: Estimate) -> Estimate | None:
    """a / b - 1 (a relative change) from each estimate's interval, by MOVER on the log scale; None
    unless both estimates are positive (a non-positive limit leaves that side unbounded)."""
    if not (a.value > 0.0 and b.value > 0.0):
        return None
    log = lambda x: math.log(x) if x > 0.0 else -math.inf  # noqa: E731
    la, lb = math.log(a.value), math.log(b.value)
    d = la - lb
    low = d - math.hypot(la - log(a.low), log(b.high) - lb)
    high = d + math.hypot(log(a.high) - la, lb - log(b.low))
    return Estimate(math.expm1(d), math.expm1(low), math.expm1(high) if high < 700 else math.inf)


def welch_difference(n_a: int, mean_a: float, var_a: float, n_b: int, mean_b: float, var_b: float,
                     confidence: float) -> Estimate:
    """Welch's interval for mean_a - mean_b (each n >= 2)."""
    d = mean_a - mean_b
    wa, wb = var_a / n_a, var_b / n_b
    se = math.sqrt(wa + wb)
    if se == 0.0:
        return Estimate(d, d, d)
    df = (wa + wb) ** 2 / (wa * wa / (n_a - 1) + wb * wb / (n_b - 1))
    half = t_quantile(1.0 - (1.0 - check_confidence(confidence)) / 2.0, df) * se
    return Estimate(d, d - half, d + half)


def newcombe_difference(ones_a: int, n_a: int, ones_b: int, n_b: int, confidence: float) -> Estimate:
    """Newcombe's hybrid score interval for p_a - p_b (MOVER with Wilson's intervals)."""
    return mover_difference(wilson_interval(ones_a, n_a, confidence), wilson_interval(ones_b, n_b, confidence))


__all__ = ["Estimate", "binomial_tails", "check_confidence", "incomplete_beta", "mean_interval", "mover_difference",
           "mover_ratio", "newcombe_difference", "normal_quantile", "quantile_ranks", "t_cdf", "t_quantile",
           "welch_difference", "wilson_interval"]
