"""Numbers as people read them in text output: significant digits and units (`$`, `ms`, `s`).
Machine formats (JSON, CSV, the stored rows) keep every digit; only what is printed for people rounds."""

from __future__ import annotations

import math

SIGNIFICANT_DIGITS = 4


def significant(value: float, digits: int = SIGNIFICANT_DIGITS) -> str:
    """``value`` to ``digits`` significant digits, without exponent for everyday magnitudes."""
    if value == 0 or not math.isfinite(value):
        return "0" if value == 0 else str(value)
    magnitude = math.floor(math.log10(abs(value)))
    if magnitude >= 15 or magnitude < -6:
        return f"{value:.{digits - 1}e}"
    decimals = max(0, digits - 1 - magnitude)
    text = f"{value:,.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def format_value(value, unit: str | None = None) -> str:
    """One cell as a person reads it: rounded numbers, `$` for USD, `ms`/`s` for seconds."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if unit == "USD":
        return ("-$" if value < 0 else "$") + significant(abs(float(value)))
    if unit == "s":
        return f"{significant(value * 1000)} ms" if abs(value) < 1 else f"{significant(float(value))} s"
    if isinstance(value, int):
        return str(value)
    return significant(value)
