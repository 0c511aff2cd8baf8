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
    BUCKET_KEY_COLUMNS,
    EVIDENCE_MEDIA_TYPE,
    SPANS_TABLE,
    WINDOW_BUCKET_CUTOFFS_TABLE,
    WINDOW_BUCKET_STATE_TABLE,
    WINDOW_COLUMN_NAMES,
    WINDOW_COLUMNS,
    WINDOW_KEY_COLUMNS,
    WINDOW_STATE_TABLE,
    WINDOW_WATERMARK_COLUMN_NAMES,
    WINDOW_WATERMARK_TABLE,
    WINDOWS_BY_TIME_COLUMN_NAMES,
    WINDOWS_BY_TIME_TABLE,
    WINDOWS_TABLE,
    BucketCutoffs,
    WindowBook,
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


def write_bucket_rows(con: duckdb.DuckDBPyConnection, rows: list[tuple]) -> None:
    """Insert or replace `windows_by_time` rows: (window, bucket start, bucket seconds) each."""
    if not rows:
        return
    table = _windows_table([w for w, _, _ in rows])
    at = WINDOW_COLUMN_NAMES.index("scope") + 1
    table = table.add_column(at, "bucket_start", pa.array([s for _, s, _ in rows], pa.timestamp("us", tz="UTC")))
    table = table.add_column(at + 1, "bucket_seconds", pa.array([n for _, _, n in rows], pa.int64()))
    con.register("_rows", table.select(list(WINDOWS_BY_TIME_COLUMN_NAMES)))
    try:
        con.execute(f"INSERT OR REPLACE INTO {WINDOWS_BY_TIME_TABLE} ({', '.join(WINDOWS_BY_TIME_COLUMN_NAMES)})"
                    f" SELECT {', '.join(WINDOWS_BY_TIME_COLUMN_NAMES)} FROM _rows")
    finally:
        con.unregister("_rows")


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


_STATE_TABLES = {2: (WINDOW_STATE_TABLE, ("target_id", "scope")),
                 len(BUCKET_KEY_COLUMNS): (WINDOW_BUCKET_STATE_TABLE, BUCKET_KEY_COLUMNS)}
"""Where a key's state is saved, by its length: a cumulative window's or a time bucket's."""


def _keys_table(keys: list[tuple], columns: tuple[str, ...], states: list[bytes] | None = None) -> pa.Table:
    data = {name: [k[i] for k in keys] for i, name in enumerate(columns)}
    if states is not None:
        data["state"] = pa.array(states, pa.binary())
    return pa.table(data)


def load_states(con: duckdb.DuckDBPyConnection, keys: list[tuple]) -> dict[tuple, bytes]:
    """The saved state blobs of those of ``keys`` that have one."""
    found: dict[tuple, bytes] = {}
    for size, (table, columns) in _STATE_TABLES.items():
        wanted = [k for k in keys if len(k) == size]
        if not wanted:
            continue
        con.register("_keys", _keys_table(wanted, columns))
        try:
            rows = con.execute(f"SELECT {', '.join('s.' + c for c in columns)}, s.state FROM {table} s"
                               f" JOIN _keys k USING ({', '.join(columns)})").fetchall()
        finally:
            con.unregister("_keys")
        found.update({tuple(row[:-1]): row[-1] for row in rows})
    return found


def saved_keys(con: duckdb.DuckDBPyConnection) -> int:
    return con.execute(f"SELECT count(*) FROM {WINDOW_STATE_TABLE}").fetchall()[0][0]


def saved_bucket_keys(con: duckdb.DuckDBPyConnection, before_us: int | None = None) -> list[tuple]:
    """The keys of the saved bucket states (of buckets that start before ``before_us``)."""
    where = "" if before_us is None else f" WHERE bucket_start_us < {int(before_us)}"
    return [tuple(row) for row in con.execute(
        f"SELECT {', '.join(BUCKET_KEY_COLUMNS)} FROM {WINDOW_BUCKET_STATE_TABLE}{where}").fetchall()]


def load_range(con: duckdb.DuckDBPyConnection, since_us: int | None, until_us: int | None,
               target: str | None = None, scope: str | None = None, book: WindowBook | None = None) -> WindowBook:
    """The saved bucket states that overlap [since, until) (of ``target`` and ``scope`` when given),
    in ``book`` (keys it holds already are left as they are) or a book of their scale."""
    where = ["true"]
    if since_us is not None:
        where.append(f"bucket_start_us + bucket_us > {int(since_us)}")
    if until_us is not None:
        where.append(f"bucket_start_us < {int(until_us)}")
    params = []
    for column, value in (("target_id", target), ("scope", scope)):
        if value is not None:
            where.append(f"{column} = ?")
            params.append(value)
    for row in con.execute(f"SELECT {', '.join(BUCKET_KEY_COLUMNS)}, state FROM {WINDOW_BUCKET_STATE_TABLE}"
                           f" WHERE {' AND '.join(where)}", params).fetchall():
        key = tuple(row[:-1])
        if book is None:
            book = WindowBook(WindowBook.scale_of(row[-1]))
        if key not in book:
            book.import_key(key, row[-1])
    return book if book is not None else WindowBook()


def save_state(con: duckdb.DuckDBPyConnection, states: dict[tuple, bytes], windowed_us: int, digest: str,
               cutoffs: BucketCutoffs, *, replace_all: bool = False, dropped: list[tuple] = ()) -> None:
    """Save the blobs of ``states`` (replacing those keys' saved blobs; with ``replace_all``, every
    saved blob), forget the ``dropped`` keys' (buckets merged into longer ones), and save the
    watermark and bucket cutoffs they are at, in one transaction."""
    with transaction(con):
        for size, (table, columns) in _STATE_TABLES.items():
            if replace_all:
                con.execute(f"DELETE FROM {table}")
            gone = [k for k in dropped if len(k) == size]
            if gone:
                con.register("_gone", _keys_table(gone, columns))
                try:
                    con.execute(f"DELETE FROM {table} t USING _gone g WHERE "
                                + " AND ".join(f"t.{c} = g.{c}" for c in columns))
                finally:
                    con.unregister("_gone")
            keys = [k for k in states if len(k) == size]
            if keys:
                con.register("_states", _keys_table(keys, columns, [states[k] for k in keys]))
                try:
                    con.execute(f"INSERT OR REPLACE INTO {table} ({', '.join(columns)}, state)"
                                f" SELECT {', '.join(columns)}, state FROM _states")
                finally:
                    con.unregister("_states")
        write_watermark(con, windowed_us, digest, _dt.datetime.now(_dt.UTC))
        con.execute(f"INSERT OR REPLACE INTO {WINDOW_BUCKET_CUTOFFS_TABLE} VALUES (?, ?, ?, ?)",
                    [SPANS_TABLE, cutoffs.hours_from, cutoffs.days_from, cutoffs.weeks_from])


def stored_cutoffs(con: duckdb.DuckDBPyConnection) -> BucketCutoffs | None:
    """The bucket cutoffs the saved state is at, or None."""
    rows = con.execute(f"SELECT hours_from_us, days_from_us, weeks_from_us FROM {WINDOW_BUCKET_CUTOFFS_TABLE}"
                       f" WHERE store = '{SPANS_TABLE}'").fetchall()
    return BucketCutoffs(*map(int, rows[0])) if rows else None


def delete_state(con: duckdb.DuckDBPyConnection) -> None:
    """Forget the saved state and its watermark (the next start recomputes every window)."""
    with transaction(con):
        for table, _ in _STATE_TABLES.values():
            con.execute(f"DELETE FROM {table}")
        delete_watermark(con)


def delete_window_rows(con: duckdb.DuckDBPyConnection, keys: list[tuple]) -> None:
    """Delete the `windows` rows of these (target_id, scope) keys."""
    for target, scope in keys:
        con.execute(f"DELETE FROM {WINDOWS_TABLE} WHERE target_id = ? AND scope = ?", [target, scope])


def delete_bucket_rows(con: duckdb.DuckDBPyConnection, keys: list[tuple] | None) -> None:
    """Delete the `windows_by_time` rows of these bucket keys (merged into longer buckets, or dropped;
    None: every row)."""
    if keys is None:
        con.execute(f"DELETE FROM {WINDOWS_BY_TIME_TABLE}")
        return
    if not keys:
        return
    con.register("_gone", pa.table({"target_id": [k[0] for k in keys], "scope": [k[1] for k in keys],
                                    "bucket_start": pa.array([k[2] for k in keys], pa.int64())}))
    try:
        con.execute(f"DELETE FROM {WINDOWS_BY_TIME_TABLE} w USING _gone g WHERE w.target_id = g.target_id"
                    " AND w.scope = g.scope AND epoch_us(w.bucket_start) = g.bucket_start")
    finally:
        con.unregister("_gone")


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
# (store, windowed_us, definitions_digest, written_at)
_WATERMARK_KEY, *_WATERMARK_FIELDS = WINDOW_WATERMARK_COLUMN_NAMES
_UPDATE_WATERMARK = (f"UPDATE {WINDOW_WATERMARK_TABLE} SET {', '.join(f'{c} = ?' for c in _WATERMARK_FIELDS)}"
                     f" WHERE {_WATERMARK_KEY} = ?")
_UPSERT_WATERMARK = (f"INSERT OR REPLACE INTO {WINDOW_WATERMARK_TABLE}"
                     f" ({', '.join(_WATERMARK_FIELDS)}, {_WATERMARK_KEY})"
                     f" VALUES ({', '.join('?' for _ in WINDOW_WATERMARK_COLUMN_NAMES)})")


def _windows_table(windows: list) -> pa.Table:
    types = {c.name: c.sql_type.split()[0] for c in WINDOW_COLUMNS}
    arrow = {"VARCHAR": pa.string(), "DOUBLE": pa.float64(), "BIGINT": pa.int64(),
             "TIMESTAMPTZ": pa.timestamp("us", tz="UTC")}
    return pa.table({name: pa.array([getattr(w, name) for w in windows], arrow[types[name]])
                     for name in WINDOW_COLUMN_NAMES})
