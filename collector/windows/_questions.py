"""Questions asked of the windows by time: a regressions report and a profile's sample plans.

Each question travels as JSON (the body of its collector route, built by its command) and is
answered from a book of bucket states, wherever they are read: the running collector's (the
freshest), a DuckDB file's or a lake's saved ones. `since_us`/`until_us` say which buckets to read.
"""

from __future__ import annotations

import datetime as _dt
import math
from dataclasses import asdict, dataclass
from typing import ClassVar

from meritlens.analytics.engine import DEFAULT_BASELINE_US, DEFAULT_POWER, DEFAULT_RECENT_US, SCOPE_ALL
from meritlens.collector._paths import REGRESSION_PLANS_PATH, REGRESSIONS_PATH


def now_us() -> int:
    return int(_dt.datetime.now(_dt.UTC).timestamp() * 1_000_000)


def _positive_int(body: dict, name: str, default: int | None) -> int | None:
    value = body.get(name, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} is a positive whole number of µs, not {value!r}")
    return value


def _share(body: dict, name: str, default: float) -> float:
    value = body.get(name, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
        raise ValueError(f"{name} is a number strictly between 0 and 1, not {value!r}")
    return float(value)


def _text(body: dict, name: str) -> str | None:
    value = body.get(name)
    if value is not None and (not isinstance(value, str) or not value):
        raise ValueError(f"{name} is a non-empty string, not {value!r}")
    return value


def _profile(body: dict):
    from meritlens.analytics.engine import profile_from_dict  # the profile model: only when a question has one

    raw = body.get("profile")
    return None if raw is None else profile_from_dict(raw, "the request's profile")


def _checked(body) -> dict:
    if not isinstance(body, dict):
        raise ValueError(f"a question is a JSON object, not {type(body).__name__}")
    return body


@dataclass(frozen=True)
class RegressionQuestion:
    """`meritlens regressions`: every metric of every target (or ``target``), recent against baseline.
    ``profile``: a task profile as the mapping of its TOML file; its plans apply to ``target`` (or its
    own target). ``until_us``: when the report is made (now when None)."""

    recent_us: int = DEFAULT_RECENT_US
    baseline_us: int = DEFAULT_BASELINE_US
    same_hours: bool = False
    confidence: float = 0.95
    target: str | None = None
    profile: dict | None = None
    until_us: int | None = None
    path: ClassVar[str] = REGRESSIONS_PATH
    """The collector's route that answers it."""

    @classmethod
    def from_json(cls, body) -> RegressionQuestion:
        """ValueError names the field that is wrong."""
        body = _checked(body)
        same_hours = body.get("same_hours", False)
        if not isinstance(same_hours, bool):
            raise ValueError(f"same_hours is true or false, not {same_hours!r}")
        question = cls(_positive_int(body, "recent_us", DEFAULT_RECENT_US),
                       _positive_int(body, "baseline_us", DEFAULT_BASELINE_US), same_hours,
                       _share(body, "confidence", 0.95), _text(body, "target"), body.get("profile"),
                       _positive_int(body, "until_us", None))
        question.ranges()  # the durations fit together
        _profile(body)
        return question

    def to_json(self) -> dict:
        return asdict(self)

    def ranges(self):
        """The `ReportRanges` asked for."""
        from meritlens.analytics.engine import ReportRanges

        return ReportRanges.ending(self.until_us or now_us(), self.recent_us, self.baseline_us, self.same_hours)

    @property
    def subject(self) -> str | None:
        """The one target asked about: the given one, else the profile's (None: every target)."""
        profile = _profile({"profile": self.profile})
        return self.target or (profile.target if profile else None)

    def answer(self, book, ranges) -> dict:
        """The report from ``book``, which holds the bucket states of [ranges.since_us, ranges.until_us)."""
        from meritlens.analytics.engine import regression_report

        profile = _profile({"profile": self.profile})
        plans = {self.subject: profile.metrics} if profile else None
        return regression_report(book, ranges, confidence=self.confidence, scope=SCOPE_ALL, target=self.subject,
                                 plans=plans)


@dataclass(frozen=True)
class PlanQuestion:
    """`meritlens profile check --detect`: samples per side for each metric of ``profile`` to show a
    change of ``detect`` (0.1: 10%), from the buckets of the ``baseline_us`` before ``until_us``."""

    profile: dict
    detect: float
    power: float = DEFAULT_POWER
    confidence: float = 0.95
    target: str | None = None
    baseline_us: int = DEFAULT_BASELINE_US
    until_us: int | None = None
    path: ClassVar[str] = REGRESSION_PLANS_PATH

    @classmethod
    def from_json(cls, body) -> PlanQuestion:
        body = _checked(body)
        if body.get("profile") is None:
            raise ValueError("a plan needs the profile")
        _profile(body)
        detect = body.get("detect")
        if isinstance(detect, bool) or not isinstance(detect, (int, float)) or not (
                math.isfinite(detect) and detect > 0):
            raise ValueError(f"detect is a positive share (0.1 for 10%), not {detect!r}")
        return cls(body["profile"], float(detect), _share(body, "power", DEFAULT_POWER),
                   _share(body, "confidence", 0.95), _text(body, "target"),
                   _positive_int(body, "baseline_us", DEFAULT_BASELINE_US), _positive_int(body, "until_us", None))

    def to_json(self) -> dict:
        return asdict(self)

    def span(self) -> tuple[int, int]:
        """[since, until): whole hours up to the end of the hour under way."""
        from meritlens.analytics.engine import hours_ending

        return hours_ending(self.until_us or now_us(), self.baseline_us)

    @property
    def subject(self) -> str:
        return self.target or _profile({"profile": self.profile}).target

    def answer(self, book, since_us: int, until_us: int) -> dict:
        from meritlens.analytics.engine import plan_report

        profile = _profile({"profile": self.profile})
        return plan_report(book, self.subject, profile.metrics, self.detect, since_us=since_us, until_us=until_us,
                           confidence=self.confidence, power=self.power)
