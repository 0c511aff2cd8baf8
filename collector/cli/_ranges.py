"""The windows of a time range for `meritlens windows --since/--between`: merged from the windows by
time where the spans are (a running collector, a DuckDB file, a lake)."""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
from typing import Iterator

from meritlens.analytics.engine import WINDOW_COLUMN_NAMES, parse_duration
from meritlens.collector._paths import WINDOWS_RANGE_PATH
from meritlens.collector.cli._client import CollectorClient, QueryError
from meritlens.collector.cli._query import opened_store
from meritlens.collector.store._sqlguard import open_read_only
from meritlens.collector.cli._resolve import Source
from meritlens.collector.store._results import QueryResult

__all__ = ["parse_duration", "parse_time", "range_result", "to_us"]


def parse_time(text: str) -> _dt.datetime:
    """An ISO 8601 date or time; UTC when it names no zone."""
    try:
        value = _dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"{text!r} is not an ISO 8601 time such as 2026-12-01 or 2026-12-01T09:00") from None
    return value if value.tzinfo else value.replace(tzinfo=_dt.timezone.utc)


def to_us(value: _dt.datetime) -> int:
    return int(value.timestamp() * 1_000_000)


def range_result(source: Source, since_us: int | None, until_us: int | None, *, target: str | None = None,
                 scope: str | None = None, metric: str | None = None) -> tuple[QueryResult, str]:
    """The windows of [since, until) as query rows, and a line saying what the buckets cover."""
    if source.is_collector:
        with CollectorClient(source.url, token=source.token, ca_file=source.ca_file) as client:
            body = client.post_json(WINDOWS_RANGE_PATH, {"since_us": since_us, "until_us": until_us,
                                                         "target": target, "scope": scope})
        rows, start, end, buckets = [tuple(r) for r in body["rows"]], body["start_us"], body["end_us"], body["buckets"]
    else:
        rows, start, end, buckets = _merged_here(source, since_us, until_us, target, scope)
    if metric is not None:
        metric_at = WINDOW_COLUMN_NAMES.index("metric")
        rows = [r for r in rows if r[metric_at] == metric]
    if start is None:
        covered = "no window by time holds samples of that range"
    else:
        covered = (f"samples that ended from {_iso(start)} to {_iso(end)} ({buckets} time bucket"
                   f"{'s' if buckets != 1 else ''}; a range is rounded out to whole buckets)")
    return QueryResult(list(WINDOW_COLUMN_NAMES), [], rows), covered


@contextlib.contextmanager
def bucket_connection(source: Source) -> Iterator[tuple[object, str]]:
    """(a read-only connection to the saved windows by time, the database's name) of a file or lake source."""
    with contextlib.ExitStack() as stack:
        if source.is_lake:
            reader = stack.enter_context(opened_store(source, read_only=True))
            yield stack.enter_context(contextlib.closing(reader.connection())), reader.db_name
            return
        try:
            con = stack.enter_context(contextlib.closing(open_read_only(source.db)))
        except Exception as exc:  # noqa: BLE001 - one line naming the file
            raise QueryError(f"cannot open {source.db}: {str(exc).splitlines()[0]}") from None
        yield con, os.path.basename(source.db)


def _merged_here(source: Source, since_us, until_us, target, scope):
    from meritlens.analytics.engine import merge_range
    from meritlens.collector.windows._state import load_range

    with bucket_connection(source) as (con, db_name):
        ranged = merge_range(load_range(con, since_us, until_us, target, scope), since_us, until_us)
    windows = ranged.windows(db_name, _dt.datetime.now(_dt.timezone.utc))
    rows = [tuple(getattr(w, c) for c in WINDOW_COLUMN_NAMES) for w in windows]
    return rows, ranged.start_us, ranged.end_us, ranged.buckets


def _iso(us: int) -> str:
    return (_dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc) + _dt.timedelta(microseconds=us)).isoformat()
