"""What the window processor keeps in the database besides the window rows: the watermark (the
windows include every span committed up to it) and its saved state, so that a start takes the
windows up where they were left instead of rereading every span.

The state (`WindowBook.state_rows`) is saved periodically and at a clean shutdown. Rows are committed
statement by statement under an impossible watermark, then take the place of the state saved before
in one transaction (one transaction of every payload would hold them ~3x in DuckDB's memory until its
commit). A crash in between leaves rows that match no watermark; the next start ignores them.
"""

from __future__ import annotations

import datetime as _dt
import logging

import duckdb
import pyarrow as pa

from meritlens.analytics._accumulate import STATE_PART_BYTES, WindowBook
from meritlens.analytics._schema import (
    SPANS_TABLE,
    WINDOW_COLUMN_NAMES,
    WINDOW_COLUMNS,
    WINDOW_KEY_COLUMNS,
    WINDOW_STATE_COLUMN_NAMES,
    WINDOW_STATE_TABLE,
    WINDOW_WATERMARK_COLUMN_NAMES,
    WINDOW_WATERMARK_TABLE,
    WINDOWS_TABLE,
)
from meritlens.analytics._windows import EVIDENCE_MEDIA_TYPE
from meritlens.collector.store._database import count, transaction

log = logging.getLogger("meritlens.collector.windows")

UNFINISHED_STATE_US = -1
"""The watermark of saved window state rows until the last of them is written (no watermark is negative)."""


def stored_watermark(con: duckdb.DuckDBPyConnection) -> tuple[int, str] | None:
    """(windowed_us, definitions_digest) stored with the window rows, or None."""
    stored = con.execute(f"SELECT windowed_us, definitions_digest FROM {WINDOW_WATERMARK_TABLE}"
                         f" WHERE store = '{SPANS_TABLE}'").fetchall()
    return (int(stored[0][0]), stored[0][1]) if stored else None


def delete_watermark(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(f"DELETE FROM {WINDOW_WATERMARK_TABLE}")


def write_watermark(con: duckdb.DuckDBPyConnection, windowed_us: int, digest: str, now: _dt.datetime) -> None:
    watermark = [int(windowed_us), digest, now, SPANS_TABLE]
    if not count(con.execute(_UPDATE_WATERMARK, watermark)):
        con.execute(_UPSERT_WATERMARK, watermark)


def write_window_rows(con: duckdb.DuckDBPyConnection, windows: list) -> None:
    """Insert or update window rows; a stored row with a value and another producer's evidence (a
    plugin's) is never replaced by a row of ours without one."""
    con.register("_windows", _windows_table(windows))
    try:
        # An UPDATE costs DuckDB half an INSERT OR REPLACE: the rows exist after a key's first write,
        # and the upsert runs only when the UPDATE missed some.
        if count(con.execute(_UPDATE_WINDOWS)) < len(windows):
            con.execute(_UPSERT_WINDOWS)
    finally:
        con.unregister("_windows")


def load_saved_state(con: duckdb.DuckDBPyConnection, watermark: int, digest: str) -> tuple[WindowBook, int | None]:
    """The window state saved last and its watermark, if it was saved with the definitions ``digest``
    at ``watermark`` or before; else (none saved, another digest, a later watermark, unreadable) an
    empty book and None. Read target by target, so that at most one target's rows are held twice."""
    finished = f"windowed_us <> {UNFINISHED_STATE_US}"
    saved, watermarks, state_us, matching = con.execute(
        f"SELECT count(*), count(DISTINCT windowed_us), min(windowed_us), count(*) FILTER (WHERE definitions_digest = ?)"
        f" FROM {WINDOW_STATE_TABLE} WHERE {finished}", [digest]).fetchall()[0]
    if saved == 0:
        return WindowBook(), None
    if watermarks != 1 or matching != saved or state_us > watermark:
        log.info("the saved window state does not belong to the stored windows; targets are rebuilt from their spans")
        return WindowBook(), None
    columns = ", ".join(WINDOW_STATE_COLUMN_NAMES[2:])
    targets = [t for (t,) in con.execute(
        f"SELECT DISTINCT target_id FROM {WINDOW_STATE_TABLE} WHERE {finished} ORDER BY 1").fetchall()]

    def rows():
        for target in targets:  # insertion order within a target: each window's parts in order
            yield from con.execute(f"SELECT {columns} FROM {WINDOW_STATE_TABLE} WHERE {finished} AND target_id = ?",
                                   [target]).fetchall()

    try:
        book = WindowBook.restore(rows())
    except (ValueError, KeyError, TypeError) as exc:
        log.warning("the saved window state cannot be taken up (%s); targets are rebuilt from their spans", exc)
        return WindowBook(), None
    log.info("window state of %d keys taken up (saved %s the stored windows)", len(book.keys),
             "with" if state_us == watermark else "before")
    return book, int(state_us)


def keep_only_saved_state(con: duckdb.DuckDBPyConnection, windowed_us: int | None) -> None:
    """Delete every saved state but the one at ``windowed_us`` (None: all)."""
    if windowed_us is None:
        con.execute(f"DELETE FROM {WINDOW_STATE_TABLE}")
    else:
        con.execute(f"DELETE FROM {WINDOW_STATE_TABLE} WHERE windowed_us <> ?", [windowed_us])


def saved_at(con: duckdb.DuckDBPyConnection, windowed_us: int) -> bool:
    """Whether a state is saved at this watermark already."""
    return con.execute(f"SELECT count(*) FROM {WINDOW_STATE_TABLE} WHERE windowed_us = ?",
                       [windowed_us]).fetchall()[0][0] > 0


def save_state(con: duckdb.DuckDBPyConnection, book: WindowBook, windowed_us: int, digest: str) -> None:
    """Save ``book`` at the watermark ``windowed_us``, replacing the state saved before."""
    con.execute(f"DELETE FROM {WINDOW_STATE_TABLE} WHERE windowed_us = ?", [UNFINISHED_STATE_US])
    rows: list[tuple] = []
    held = 0

    def flush() -> None:
        con.register("_state", pa.table(dict(zip(WINDOW_STATE_COLUMN_NAMES[2:], zip(*rows)))))
        try:
            con.execute(f"INSERT INTO {WINDOW_STATE_TABLE} SELECT ?, ?, * FROM _state", [UNFINISHED_STATE_US, digest])
        finally:
            con.unregister("_state")
        rows.clear()

    for row in book.state_rows():
        rows.append(row)
        held += len(row[-1])
        if held >= STATE_PART_BYTES:  # the process holds a statement's rows twice: as rows and as Arrow
            flush()
            held = 0
    if rows:
        flush()
    with transaction(con):
        con.execute(f"DELETE FROM {WINDOW_STATE_TABLE} WHERE windowed_us <> ?", [UNFINISHED_STATE_US])
        con.execute(f"UPDATE {WINDOW_STATE_TABLE} SET windowed_us = ? WHERE windowed_us = ?",
                    [windowed_us, UNFINISHED_STATE_US])


def replay_chunks(batches: list[tuple[int, int]], start_us: int, floor_us: int, max_rows: int):
    """(after_us, until_us] ranges of whole committed batches (``batches``: (commit time, rows), in
    order, all after ``start_us``) of about ``max_rows`` rows each, none spanning ``floor_us``."""
    lo, hi, rows = start_us, None, 0
    for us, n in batches:
        if hi is not None and (rows + n > max_rows or hi <= floor_us < us):
            yield lo, hi
            lo, rows = hi, 0
        hi, rows = us, rows + n
    if hi is not None:
        yield lo, hi


_KEEPS_STORED_ROW = (f"n.value IS NULL AND w.value IS NOT NULL"
                     f" AND w.evidence_media_type IS DISTINCT FROM '{EVIDENCE_MEDIA_TYPE}'")
_SAME_WINDOW = " AND ".join(f'w."{c}" = n."{c}"' for c in WINDOW_KEY_COLUMNS)
_UPDATE_WINDOWS = (
    f"UPDATE {WINDOWS_TABLE} w SET "
    + ", ".join(f'"{c}" = n."{c}"' for c in WINDOW_COLUMN_NAMES if c not in WINDOW_KEY_COLUMNS)
    + f" FROM _windows n WHERE {_SAME_WINDOW} AND NOT ({_KEEPS_STORED_ROW})")
_UPSERT_WINDOWS = (f"INSERT OR REPLACE INTO {WINDOWS_TABLE} SELECT n.* FROM _windows n"
                   f" LEFT JOIN {WINDOWS_TABLE} w ON {_SAME_WINDOW} WHERE NOT ({_KEEPS_STORED_ROW})")
_WATERMARK_KEY, *_WATERMARK_FIELDS = WINDOW_WATERMARK_COLUMN_NAMES  # (store, windowed_us, definitions_digest, written_at)
_UPDATE_WATERMARK = (f"UPDATE {WINDOW_WATERMARK_TABLE} SET {', '.join(f'{c} = ?' for c in _WATERMARK_FIELDS)}"
                     f" WHERE {_WATERMARK_KEY} = ?")
_UPSERT_WATERMARK = (f"INSERT OR REPLACE INTO {WINDOW_WATERMARK_TABLE} ({', '.join(_WATERMARK_FIELDS)}, {_WATERMARK_KEY})"
                     f" VALUES ({', '.join('?' for _ in WINDOW_WATERMARK_COLUMN_NAMES)})")


def _windows_table(windows: list) -> pa.Table:
    types = {c.name: c.sql_type.split()[0] for c in WINDOW_COLUMNS}
    arrow = {"VARCHAR": pa.string(), "DOUBLE": pa.float64(), "BIGINT": pa.int64(),
             "TIMESTAMPTZ": pa.timestamp("us", tz="UTC")}
    return pa.table({name: pa.array([getattr(w, name) for w in windows], arrow[types[name]])
                     for name in WINDOW_COLUMN_NAMES})
