"""Numbers as people read them in text output: significant digits and units (`$`, `ms`, `s`, `%`, ...).
Machine formats (JSON, CSV, the stored rows) keep every digit; only what is printed for people rounds."""

from __future__ import annotations

import difflib
import math
from collections.abc import Sequence

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


UNITLESS = frozenset({"score"})
"""Units a number is shown without: a score is read as the number itself."""


def format_value(value, unit: str | None = None) -> str:
    """One cell as a person reads it: rounded numbers, `$` for USD, `ms`/`s` for seconds, `%` for a
    ratio, the unit's name after any other ("720 tokens"); a number without a unit is only rounded."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if unit == "USD":
        return ("-$" if value < 0 else "$") + significant(abs(float(value)))
    if unit == "s":
        return f"{significant(value * 1000)} ms" if abs(value) < 1 else f"{significant(float(value))} s"
    if unit == "ratio":
        return f"{significant(value * 100)}%"
    number = str(value) if isinstance(value, int) else significant(value)
    return number if unit is None or unit in UNITLESS else f"{number} {unit}"


def format_signed(value: float, unit: str | None = None) -> str:
    """A difference: ``format_value`` with its sign always shown ("+$0.002", "-12 ms")."""
    return ("-" if value < 0 else "+") + format_value(abs(value), unit)


def suggestion(word: str, valid: Sequence[str], what: str, *, listed: int = 12) -> str:
    """'; did you mean 'X'?' naming the closest of ``valid``, else '; valid WHAT: a, b, ...' (at most
    ``listed`` of them), else '; there are no WHAT yet'."""
    close = difflib.get_close_matches(word, valid, n=1)
    if close:
        return f"; did you mean {close[0]!r}?"
    if not valid:
        return f"; there are no {what} yet"
    more = f" and {len(valid) - listed} more" if len(valid) > listed else ""
    return f"; {what}: {', '.join(valid[:listed])}{more}"
