"""The histograms' scale: how coarse their buckets are, from the relative error a user accepts.

Kept apart from `_distribution` (and free of numpy) so that settings and command-line help can name
the default and check a value without loading the numeric stack.
"""

from __future__ import annotations

DEFAULT_RELATIVE_ERROR = 0.01
"""The default bound on the relative error of a histogram's quantiles (the scale is the coarsest within it)."""
MAX_SCALE = 20


def relative_error_of(scale: int) -> float:
    """The largest relative error of a quantile reported by a histogram of ``scale``: a bucket
    (base**i, base**(i+1)] reports 2 * base**(i+1) / (1 + base), off by at most (base - 1) / (base + 1)."""
    base = 2.0 ** (2.0 ** -scale)
    return (base - 1.0) / (base + 1.0)


def scale_for(relative_error: float) -> int:
    """The coarsest scale whose quantiles are within ``relative_error`` (0 < relative_error < 1)."""
    if not 0.0 < relative_error < 1.0:
        raise ValueError(f"the relative error of quantiles must lie strictly between 0 and 1, not {relative_error}")
    for scale in range(0, MAX_SCALE + 1):
        if relative_error_of(scale) <= relative_error:
            return scale
    raise ValueError(f"a relative error of {relative_error} needs a scale above {MAX_SCALE}; choose at least "
                     f"{relative_error_of(MAX_SCALE):.1e}")


__all__ = ["DEFAULT_RELATIVE_ERROR", "MAX_SCALE", "relative_error_of", "scale_for"]
