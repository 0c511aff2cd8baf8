"""Window versions on a lake: each run of the windows job publishes a whole new file, then points
``windows/CURRENT`` at it in one atomic replace. A reader reads CURRENT, then that file: it sees one
run's windows entirely or the previous run's, never a mix. The version before the current one is
kept (a reader may still be reading it); older ones are removed.
"""

from __future__ import annotations

import datetime as _dt
from typing import Callable

import pyarrow as pa
import pyarrow.fs as pafs

from meritlens.analytics.engine import WINDOWS_BY_TIME_COLUMN_NAMES, WINDOW_COLUMN_NAMES
from meritlens.collector.lake._layout import (
    BY_TIME_DIR,
    CURRENT,
    WINDOWS_DIR,
    Lake,
    unique_stem,
    windows_by_time_schema,
    windows_schema,
)

KEEP_VERSIONS = 2


def _current(lake: Lake) -> list[str]:
    """CURRENT's lines: the current version's file name, and when it was computed (ISO 8601)."""
    return (lake.read_text(WINDOWS_DIR, CURRENT) or "").split()


def current_windows_file(lake: Lake) -> str | None:
    """The path of the current windows version, None before the first run."""
    lines = _current(lake)
    return lake.path(WINDOWS_DIR, lines[0]) if lines else None


def current_by_time_file(lake: Lake) -> str | None:
    """The path of the current version's windows by time (published with it), None before the first run."""
    lines = _current(lake)
    path = lake.path(BY_TIME_DIR, lines[0]) if lines else None
    # a version published before windows by time had none: the next run makes one
    return path if path and lake.fs.get_file_info(path).type == pafs.FileType.File else None


def current_computed_at(lake: Lake) -> _dt.datetime | None:
    """When the current windows were computed (known even when the run found no windows)."""
    lines = _current(lake)
    return _dt.datetime.fromisoformat(lines[1]) if len(lines) > 1 else None


def windows_table(windows: list) -> pa.Table:
    """Window rows (`meritlens.analytics.Window`) as a table of the lake's windows schema."""
    columns = {name: [getattr(w, name) for w in windows] for name in WINDOW_COLUMN_NAMES}
    return pa.table(columns, schema=windows_schema())


def current_version(lake: Lake) -> str | None:
    """The current version's file name, None before the first run."""
    lines = _current(lake)
    return lines[0] if lines else None


def by_time_table(rows: list[tuple]) -> pa.Table:
    """`windows_by_time` rows ((window, bucket start, bucket seconds) each) as a table of the lake's schema."""
    columns = {name: [getattr(w, name) for w, _, _ in rows] for name in WINDOW_COLUMN_NAMES}
    columns.update(bucket_start=[start for _, start, _ in rows], bucket_seconds=[seconds for _, _, seconds in rows])
    return pa.table({name: columns[name] for name in WINDOWS_BY_TIME_COLUMN_NAMES}, schema=windows_by_time_schema())


def publish_windows(lake: Lake, windows: list, computed_at: _dt.datetime,
                    before_current: Callable[[str], None] | None = None, by_time: list[tuple] = ()) -> str:
    """Publish ``windows`` and ``by_time`` (`windows_by_time` rows) as the current version; return its
    file name. ``before_current(name)`` runs once the files are published and before they become
    current (the run's state is saved there)."""
    lake.make_dirs()
    name = unique_stem(f"windows-{computed_at.strftime('%Y%m%dT%H%M%S')}-") + ".parquet"
    lake.publish_parquet(WINDOWS_DIR, name, windows_table(windows))
    lake.publish_parquet(BY_TIME_DIR, name, by_time_table(list(by_time)))
    if before_current is not None:
        before_current(name)
    lake.write_text(WINDOWS_DIR, CURRENT, f"{name}\n{computed_at.isoformat()}\n")
    for directory in (WINDOWS_DIR, BY_TIME_DIR):
        for old in lake.files(directory)[:-KEEP_VERSIONS]:
            if not old.endswith("/" + name):
                lake.delete(old)
    return name
