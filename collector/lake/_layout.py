"""Where things live in a span lake, their Arrow schemas, and publishing a file atomically.

    PATH/spans/<collector>-<first µs>-<random>.parquet   immutable span segments (any number of writers)
    PATH/windows/windows-<µs>-<random>.parquet           window versions written by the windows job
    PATH/windows/CURRENT                                 the current version's name and time (replaced atomically)
    PATH/state/<version>.parquet, .json                  a run's window state and consumed segments
    PATH/coverage/<µs>-<random>.parquet                  one readiness check each
    PATH/collectors/<collector>.lock, .staging           a collector's lock and its staging log

A path with a scheme (``s3://bucket/lake``) goes through pyarrow's filesystems: there a single PUT
is atomic, so a file is written under its final name; the staging logs and locks stay local.
"""

from __future__ import annotations

import os
import secrets
import time
from functools import lru_cache

import duckdb
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from meritlens.analytics.engine import COVERAGE_DDL, SPANS_DDL, WINDOWS_BY_TIME_DDL, WINDOWS_DDL

SPANS_DIR = "spans"
WINDOWS_DIR = "windows"
BY_TIME_DIR = "windows_by_time"
COVERAGE_DIR = "coverage"
COLLECTORS_DIR = "collectors"
CURRENT = "CURRENT"
SEGMENT_SUFFIX = ".parquet"
_TMP_SUFFIX = ".tmp"
"""A file being written is hidden (a leading dot) and ends so: no reader lists it."""


@lru_cache(maxsize=None)
def _schema_of(ddl: str, table: str) -> pa.Schema:
    """The Arrow schema DuckDB gives a table created by ``ddl``: the lake's files have exactly it."""
    con = duckdb.connect()
    try:
        con.execute(ddl)
        return con.sql(f"SELECT * FROM {table} LIMIT 0").to_arrow_table().schema
    finally:
        con.close()


def spans_schema() -> pa.Schema:
    return _schema_of(SPANS_DDL, "spans")


def windows_schema() -> pa.Schema:
    return _schema_of(WINDOWS_DDL, "windows")


def windows_by_time_schema() -> pa.Schema:
    return _schema_of(WINDOWS_BY_TIME_DDL, "windows_by_time")


def coverage_schema() -> pa.Schema:
    return _schema_of(COVERAGE_DDL, "coverage_checks")


def unique_stem(prefix: str = "") -> str:
    """``<prefix><µs now>-<random>``: sorts by time, never equal to another writer's."""
    return f"{prefix}{time.time_ns() // 1000:017d}-{secrets.token_hex(4)}"


class Lake:
    """A lake root: a local directory or a pyarrow filesystem URI."""

    def __init__(self, root: str):
        if not root:
            raise ValueError("the lake path is empty")
        self.root = root
        self.remote = "://" in root
        if self.remote:
            self.fs, self._base = pafs.FileSystem.from_uri(root)
        else:
            self.fs, self._base = pafs.LocalFileSystem(), os.path.abspath(root)

    @property
    def name(self) -> str:
        """What evidence URIs call the span store."""
        return os.path.basename(self._base.rstrip("/")) or "lake"

    def path(self, *parts: str) -> str:
        return "/".join([self._base.rstrip("/"), *parts])

    def uri(self, *parts: str) -> str:
        """A location Spark reads (``file:`` for a local directory)."""
        return ("file://" + self.path(*parts)) if not self.remote else self.root.rstrip("/") + "/" + "/".join(parts)

    def make_dirs(self) -> None:
        for sub in (SPANS_DIR, WINDOWS_DIR, BY_TIME_DIR, COVERAGE_DIR):
            self.fs.create_dir(self.path(sub), recursive=True)
        if not self.remote:
            os.makedirs(self.path(COLLECTORS_DIR), exist_ok=True)

    def exists(self) -> bool:
        return self.fs.get_file_info(self.path(SPANS_DIR)).type == pafs.FileType.Directory

    def files(self, sub: str) -> list[str]:
        """The published Parquet files under ``sub``, sorted by name."""
        info = self.fs.get_file_info(pafs.FileSelector(self.path(sub), allow_not_found=True))
        return sorted(f.path for f in info if f.type == pafs.FileType.File and f.base_name.endswith(SEGMENT_SUFFIX))

    def publish_parquet(self, sub: str, name: str, table: pa.Table, *, row_group_rows: int = 122_880) -> str:
        """Write ``table`` as ``sub/name`` so that a reader sees all of it or nothing, durable on return."""
        final = self.path(sub, name)
        if self.remote:
            with self.fs.open_output_stream(final) as out:
                pq.write_table(table, out, row_group_size=row_group_rows, compression="zstd")
            return final
        tmp = os.path.join(os.path.dirname(final), "." + os.path.basename(final) + _TMP_SUFFIX)
        try:
            with open(tmp, "wb") as fh:
                pq.write_table(table, fh, row_group_size=row_group_rows, compression="zstd")
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, final)
        except BaseException:
            _remove(tmp)
            raise
        sync_directory(os.path.dirname(final))
        return final

    def write_text(self, sub: str, name: str, text: str) -> None:
        """Replace ``sub/name`` with ``text`` atomically (rename on a directory, one PUT on a store)."""
        final = self.path(sub, name)
        if self.remote:
            with self.fs.open_output_stream(final) as out:
                out.write(text.encode())
            return
        tmp = os.path.join(os.path.dirname(final), f".{os.path.basename(final)}.{secrets.token_hex(4)}{_TMP_SUFFIX}")
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, final)
        sync_directory(os.path.dirname(final))

    def read_text(self, sub: str, name: str) -> str | None:
        try:
            with self.fs.open_input_stream(self.path(sub, name)) as fh:
                return fh.read().decode()
        except (FileNotFoundError, OSError):
            return None

    def delete(self, path: str) -> None:
        try:
            self.fs.delete_file(path)
        except (FileNotFoundError, OSError):
            pass


def sync_directory(path: str) -> None:
    """A rename in ``path`` survives a crash once the directory itself is forced to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass
