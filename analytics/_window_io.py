"""Windows as JSON: how an evaluation sends measured windows to a running collector, and how the
collector validates them before its store writes them."""

from __future__ import annotations

import datetime as _dt
import math
import re
from typing import Any

from meritlens.analytics._catalogue import Aggregation
from meritlens.analytics._schema import WINDOW_COLUMN_NAMES
from meritlens.analytics._windows import Window, WindowState

_TIME_FIELDS = ("first_span_time", "last_span_time", "computed_at")
_FLOAT_FIELDS = ("value", "mean", "stddev", "min", "max", "p50", "p90", "p95", "p99", "quantile_error")
_REQUIRED = ("target_id", "metric", "scope", "aggregation", "unit", "sample_count", "state", "computed_at")
_DIGEST = re.compile(r"^[0-9a-f]{64}$")
MAX_WINDOWS_PER_REQUEST = 10_000


class WindowRejected(ValueError):
    """A window in a request is not valid; the message names the window and the field."""


def window_to_json(window: Window) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in WINDOW_COLUMN_NAMES:
        value = getattr(window, name)
        out[name] = value.isoformat() if isinstance(value, _dt.datetime) else value
    return out


def _time(value: Any, field: str) -> _dt.datetime | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"{field} must be an ISO 8601 time string")
    try:
        parsed = _dt.datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"{field} {value!r} is not an ISO 8601 time") from None
    if parsed.tzinfo is None:
        raise ValueError(f"{field} {value!r} has no time zone")
    return parsed


def _number(value: Any, field: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{field} must be a finite number or null, got {value!r}")
    return float(value)


def _count(value: Any, field: str, *, nullable: bool) -> int | None:
    if value is None and nullable:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{field} must be a non-negative integer, got {value!r}")
    return value


def _text(value: Any, field: str, *, nullable: bool, allow_empty: bool = False) -> str | None:
    if value is None and nullable:
        return None
    if not isinstance(value, str) or (not value and not allow_empty):
        raise ValueError(f"{field} must be a {'' if allow_empty else 'non-empty '}string, got {value!r}")
    return value


def window_from_json(payload: Any) -> Window:
    """A Window from its JSON form; raises ValueError naming the first problem."""
    if not isinstance(payload, dict):
        raise ValueError("a window must be a JSON object")
    unknown = sorted(set(payload) - set(WINDOW_COLUMN_NAMES))
    if unknown:
        raise ValueError(f"unknown fields {unknown}")
    missing = [name for name in _REQUIRED if name not in payload]
    if missing:
        raise ValueError(f"missing fields {missing}")
    fields: dict[str, Any] = {}
    for name in ("target_id", "metric", "scope"):
        fields[name] = _text(payload[name], name, nullable=False)
    fields["unit"] = _text(payload["unit"], "unit", nullable=False, allow_empty=True)
    try:
        fields["aggregation"] = Aggregation(payload["aggregation"]).value
    except ValueError:
        allowed = [a.value for a in Aggregation]
        raise ValueError(f"aggregation {payload['aggregation']!r} is not one of {allowed}") from None
    try:
        fields["state"] = WindowState(payload["state"]).value
    except ValueError:
        raise ValueError(f"state {payload['state']!r} is not one of {[s.value for s in WindowState]}") from None
    fields["sample_count"] = _count(payload["sample_count"], "sample_count", nullable=False)
    fields["count"] = _count(payload.get("count"), "count", nullable=True)
    for name in _FLOAT_FIELDS:
        fields[name] = _number(payload.get(name), name)
    for name in _TIME_FIELDS:
        fields[name] = _time(payload.get(name), name)
    if fields["computed_at"] is None:
        raise ValueError("computed_at is required")
    for name in ("evidence_uri", "evidence_media_type", "evidence_digest"):
        fields[name] = _text(payload.get(name), name, nullable=True)
    digest = fields["evidence_digest"]
    if digest is not None and not _DIGEST.match(digest):
        raise ValueError("evidence_digest must be 64 lowercase hex characters (sha256)")
    state = fields["state"]
    if state in (WindowState.MEASURED.value, WindowState.INSUFFICIENT_EVIDENCE.value):
        if fields["value"] is None or fields["sample_count"] < 1:
            raise ValueError(f"a {state} window needs a value and a sample_count of at least 1")
        if fields["evidence_uri"] is None or digest is None:
            raise ValueError(f"a {state} window needs evidence_uri and evidence_digest")
    elif fields["value"] is not None:
        raise ValueError(f"a {state} window has no value (got {fields['value']!r}); missing is never a number")
    return Window(**fields)


def windows_from_json(payload: Any) -> list[Window]:
    """Windows from a request body ``{"windows": [...]}``; WindowRejected names the bad one."""
    if not isinstance(payload, dict) or not isinstance(payload.get("windows"), list):
        raise WindowRejected('body must be a JSON object {"windows": [ ... ]}')
    items = payload["windows"]
    if len(items) > MAX_WINDOWS_PER_REQUEST:
        raise WindowRejected(f"at most {MAX_WINDOWS_PER_REQUEST} windows per request, got {len(items)}")
    windows = []
    keys = set()
    for index, item in enumerate(items):
        try:
            window = window_from_json(item)
        except ValueError as exc:
            label = ""
            if isinstance(item, dict):
                label = f" ({item.get('target_id')!r}, {item.get('metric')!r}, {item.get('scope')!r})"
            raise WindowRejected(f"window {index}{label}: {exc}") from None
        key = (window.target_id, window.metric, window.scope)
        if key in keys:
            raise WindowRejected(f"window {index}: the key {key} appears twice in one request")
        keys.add(key)
        windows.append(window)
    return windows
