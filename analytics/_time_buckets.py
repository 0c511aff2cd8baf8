"""Windows by time: every window definition kept per time bucket of its samples' end time.

A sample falls in the bucket of its own end time (a task's: its last span's end, so a late span moves
its task, as it moves its window's last time). Buckets are hours for the last `HOURS_KEPT_DAYS` days,
days before that for `DAYS_KEPT_WEEKS` weeks, weeks before that for `WEEKS_KEPT` weeks; older samples
are in no bucket (the cumulative windows keep them). As time passes, hours are merged into their day
and days into their week (`compact`): states merge exactly, so a day's state is the state of its
hours' samples, and the table stays bounded. Where the tiers begin (`BucketCutoffs`) is saved with
the state: a sample is put in, and later taken out of, the bucket the cutoffs in force give it.
"""

from __future__ import annotations

import datetime as _dt
import re
from dataclasses import dataclass
from urllib.parse import quote

import numpy as np
import pyarrow as pa

from meritlens.analytics._accumulate import WindowBook

HOUR_US = 3_600_000_000
DAY_US = 24 * HOUR_US
WEEK_US = 7 * DAY_US
_MONDAY_US = 4 * DAY_US
"""1970-01-05, a Monday: weeks start on Mondays at 00:00 UTC."""
HOURS_KEPT_DAYS = 14
DAYS_KEPT_WEEKS = 26
WEEKS_KEPT = 156
BUCKET_KEY_COLUMNS = ("target_id", "scope", "bucket_start_us", "bucket_us")
"""A bucket window's key: (target, scope, bucket start, bucket width), both in µs."""
NO_BUCKET = -1
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|min|h|d|w)\s*$")
_SECONDS = {"s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str) -> _dt.timedelta:
    """``90m``, ``24h``, ``7d``, ``2w`` as a duration; ValueError names what was wrong."""
    match = _DURATION.match(text) if isinstance(text, str) else None
    if not match or float(match.group(1)) <= 0:
        raise ValueError(f"{text!r} is not a duration such as 30m, 24h, 7d or 2w")
    return _dt.timedelta(seconds=float(match.group(1)) * _SECONDS[match.group(2)])


@dataclass(frozen=True)
class BucketCutoffs:
    """Where each tier of buckets begins (µs since the epoch): hours from ``hours_from``, days from
    ``days_from`` up to it, weeks from ``weeks_from`` up to that; nothing before ``weeks_from``."""

    hours_from: int
    days_from: int
    weeks_from: int

    @classmethod
    def at(cls, now_us: int) -> "BucketCutoffs":
        hours_from = now_us // DAY_US * DAY_US - HOURS_KEPT_DAYS * DAY_US
        week = (hours_from - _MONDAY_US) // WEEK_US * WEEK_US + _MONDAY_US  # the week holding hours_from
        days_from = week - DAYS_KEPT_WEEKS * WEEK_US
        return cls(hours_from, days_from, days_from - WEEKS_KEPT * WEEK_US)

    @classmethod
    def now(cls) -> "BucketCutoffs":
        return cls.at(int(_dt.datetime.now(_dt.timezone.utc).timestamp() * 1e6))

    def buckets(self, end_us: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(start, width) of the bucket of each end time; `NO_BUCKET` starts for those before every tier."""
        hour = end_us // HOUR_US * HOUR_US
        day = end_us // DAY_US * DAY_US
        week = (end_us - _MONDAY_US) // WEEK_US * WEEK_US + _MONDAY_US
        start = np.where(end_us >= self.hours_from, hour,
                         np.where(end_us >= self.days_from, day, np.where(end_us >= self.weeks_from, week, NO_BUCKET)))
        width = np.where(end_us >= self.hours_from, HOUR_US, np.where(end_us >= self.days_from, DAY_US, WEEK_US))
        return start, width

    def bucket_of(self, start_us: int, width_us: int) -> tuple[int, int] | None:
        """The bucket a bucket of earlier cutoffs belongs to now (itself, its day or its week), or None
        when it is now before every tier."""
        start, width = self.buckets(np.array([start_us], dtype=np.int64))
        return None if start[0] == NO_BUCKET else (int(start[0]), int(width[0]))


def merge_plan(keys, cutoffs: BucketCutoffs) -> tuple[list[tuple], dict[tuple, list[tuple]]]:
    """For bucket keys of earlier cutoffs: those not buckets of ``cutoffs`` (moved), and the key of
    each longer bucket they merge into with its parts (keys now before every tier merge into none)."""
    moved, groups = [], {}
    for key in keys:
        into = cutoffs.bucket_of(key[2], key[3])
        if into != (key[2], key[3]):
            moved.append(key)
            if into is not None:
                groups.setdefault((key[0], key[1], *into), []).append(key)
    return moved, groups


def compact(book: WindowBook, keys, cutoffs: BucketCutoffs) -> tuple[list[tuple], set[tuple], set[tuple]]:
    """Merge ``keys`` (bucket keys ``book`` holds) that are no buckets of ``cutoffs`` into the longer
    buckets they now belong to, in ``book``; drop them. Returns (the keys dropped, the keys merged
    into, the windows that must be recomputed from their samples)."""
    moved, groups = merge_plan(keys, cutoffs)
    recompute: set[tuple] = set()
    for into, parts in groups.items():
        book.take_key(book.merged([*parts, into], into), into)
        recompute |= book.needing_recompute(into)
    for key in moved:
        book.drop(key)
    return moved, set(groups), recompute


def bucketed(samples: pa.Table | None, cutoffs: BucketCutoffs) -> pa.Table | None:
    """Sample rows (``SAMPLE_ROW_COLUMNS``) with their bucket (``bucket_start_us``, ``bucket_us``) by
    their end time (``last_end_us``), leaving out those in no bucket."""
    if samples is None or samples.num_rows == 0:
        return samples
    start, width = cutoffs.buckets(samples.column("last_end_us").to_numpy(zero_copy_only=False).astype(np.int64))
    table = samples.append_column("bucket_start_us", pa.array(start)).append_column("bucket_us", pa.array(width))
    kept = start != NO_BUCKET
    return table if kept.all() else table.filter(pa.array(kept))


def bucket_range(key: tuple) -> tuple[_dt.datetime, _dt.datetime]:
    """The [start, end) times of a bucket key (`BUCKET_KEY_COLUMNS`)."""
    start = _from_us(key[2])
    return start, start + _dt.timedelta(microseconds=key[3])


def _from_us(us: int) -> _dt.datetime:
    return _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc) + _dt.timedelta(microseconds=us)


def keys_in(keys, since_us: int | None, until_us: int | None) -> list[tuple]:
    """The bucket keys whose bucket overlaps [since, until) (either end open when None)."""
    return [k for k in keys if (since_us is None or k[2] + k[3] > since_us) and (until_us is None or k[2] < until_us)]


@dataclass(frozen=True)
class RangeWindows:
    """The windows of a time range: each (target, scope)'s merge of its buckets that overlap the range."""

    book: WindowBook
    """Keys (target, scope)."""
    start_us: int | None
    end_us: int | None
    """What the buckets cover: whole buckets, so a range is rounded out to their edges (None: no bucket)."""
    buckets: int

    def windows(self, db_name: str, computed_at: _dt.datetime) -> list:
        """Window rows, (target, scope) by (target, scope), with evidence URIs naming the covered span."""
        if self.start_us is None:
            return []
        span = (f"&from={quote(_from_us(self.start_us).isoformat(), safe='')}"
                f"&to={quote(_from_us(self.end_us).isoformat(), safe='')}")
        return [w for key in sorted(self.book.keys) for w in self.book.windows(key, db_name, computed_at, span)]


def merge_range(book: WindowBook, since_us: int | None, until_us: int | None) -> RangeWindows:
    """The windows of [since, until) from ``book``'s bucket keys (e.g. loaded from the saved state)."""
    keys = keys_in([k for k in book.keys if len(k) == len(BUCKET_KEY_COLUMNS)], since_us, until_us)
    merged = WindowBook(book.scale)
    for target, scope in sorted({k[:2] for k in keys}):
        parts = [k for k in keys if k[:2] == (target, scope)]
        merged.take_key(book.merged(parts, (target, scope)), (target, scope))
    start = min((k[2] for k in keys), default=None)
    end = max((k[2] + k[3] for k in keys), default=None)
    return RangeWindows(merged, start, end, len(keys))


__all__ = ["BUCKET_KEY_COLUMNS", "BucketCutoffs", "DAY_US", "DAYS_KEPT_WEEKS", "HOURS_KEPT_DAYS", "HOUR_US",
           "NO_BUCKET", "RangeWindows", "WEEKS_KEPT", "WEEK_US", "bucket_range", "bucketed", "compact", "keys_in",
           "merge_plan", "merge_range", "parse_duration"]
