"""What the window processor keeps in the database besides the window rows: its state, one blob per
(target, scope) (`WindowBook.export_key`), and the watermark that state is at (the state includes
every span committed up to it).

State and watermark are written together in one transaction (`save_state`), so a start always finds
a state that matches its watermark; the window rows may be ahead of it (they are written on every
pass), and a start brings the state up to them again from the spans committed since.
"""

from __future__ import annotations

import datetime as _dt
import logging

import duckdb
import pyarrow as pa

from meritlens.analytics.engine import (
    EVIDENCE_MEDIA_TYPE,
    SPANS_TABLE,
    WINDOWS_TABLE,
    WINDOW_COLUMNS,
    WINDOW_COLUMN_NAMES,
    WINDOW_KEY_COLUMNS,
    WINDOW_STATE_TABLE,
    WINDOW_WATERMARK_COLUMN_NAMES,
    WINDOW_WATERMARK_TABLE,
)
from meritlens.collector.store._database import count, transaction

log = logging.getLogger("meritlens.collector.windows")


def stored_watermark(con: duckdb.DuckDBPyConnection) -> tuple[int, str] | None:
    """(windowed_us, definitions_digest) of the saved state, or None."""
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


def load_states(con: duckdb.DuckDBPyConnection, keys: list[tuple[str, str]]) -> dict[tuple[str, str], bytes]:
    """The saved state blobs of those of ``keys`` that have one."""
    if not keys:
        return {}
    con.register("_keys", pa.table({"target_id": [k[0] for k in keys], "scope": [k[1] for k in keys]}))
    try:
        rows = con.execute(f"SELECT s.target_id, s.scope, s.state FROM {WINDOW_STATE_TABLE} s"
                           " JOIN _keys k USING (target_id, scope)").fetchall()
    finally:
        con.unregister("_keys")
    return {(target, scope): state for target, scope, state in rows}


def saved_keys(con: duckdb.DuckDBPyConnection) -> int:
    return con.execute(f"SELECT count(*) FROM {WINDOW_STATE_TABLE}").fetchall()[0][0]


def save_state(con: duckdb.DuckDBPyConnection, states: dict[tuple[str, str], bytes], windowed_us: int, digest: str,
               *, replace_all: bool = False) -> None:
    """Save the blobs of ``states`` (replacing those keys' saved blobs; with ``replace_all``, every
    saved blob) and the watermark they are at, in one transaction."""
    with transaction(con):
        if replace_all:
            con.execute(f"DELETE FROM {WINDOW_STATE_TABLE}")
        if states:
            keys = list(states)
            con.register("_states", pa.table({"target_id": [k[0] for k in keys], "scope": [k[1] for k in keys],
                                              "state": pa.array(list(states.values()), pa.binary())}))
            try:
                con.execute(f"INSERT OR REPLACE INTO {WINDOW_STATE_TABLE} (target_id, scope, state)"
                            " SELECT target_id, scope, state FROM _states")
            finally:
                con.unregister("_states")
        write_watermark(con, windowed_us, digest, _dt.datetime.now(_dt.timezone.utc))


def delete_state(con: duckdb.DuckDBPyConnection) -> None:
    """Forget the saved state and its watermark (the next start recomputes every window)."""
    with transaction(con):
        con.execute(f"DELETE FROM {WINDOW_STATE_TABLE}")
        delete_watermark(con)


def replay_chunks(batches: list[tuple[int, int]], start_us: int, max_rows: int):
    """(after_us, until_us] ranges of whole committed batches (``batches``: (commit time, rows), in
    order, all after ``start_us``) of about ``max_rows`` rows each."""
    lo, hi, rows = start_us, None, 0
    for us, n in batches:
        if hi is not None and rows + n > max_rows:
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
_UPSERT_WINDOWS = (f"INSERT OR REPLACE INTO {WINDOWS_TABLE} ({', '.join(WINDOW_COLUMN_NAMES)})"
                   f" SELECT {', '.join('n.' + c for c in WINDOW_COLUMN_NAMES)} FROM _windows n"
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
