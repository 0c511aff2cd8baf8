"""`meritlens export --parquet DIR`: the `spans` and `windows` tables as Parquet files.

The store refuses file access from SQL (``enable_external_access=false``), so DuckDB's own
``COPY ... TO`` is not used: the rows are read as Arrow record batches and written with
pyarrow. When no process holds the DuckDB file it is opened read-only; when the collector holds
it, the rows come from the collector's read-only ``GET /api/arrow?table=...`` endpoint as an
Arrow IPC stream. Either way the files are written batch by batch (memory stays bounded) under a
temporary name and renamed when complete.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from meritlens.collector.serve._dashboard import EXPORT_TABLES
from meritlens.collector.cli._client import CollectorClient, CollectorRefused, QueryError
from meritlens.collector.cli._query import opened_store
from meritlens.collector.cli._resolve import Source
from meritlens.collector._paths import API_ARROW_PATH, ARROW_ROW_COUNT_HEADER, ARROW_STREAM_MEDIA_TYPE
from meritlens.collector.store._store import SpanStore

COMPRESSIONS = ("snappy", "zstd", "gzip", "none")


class ExportFailed(RuntimeError):
    """The export could not be made; the message says why."""


@dataclass(frozen=True)
class ExportedTable:
    table: str
    path: str
    rows: int


@dataclass
class _Source:
    """Where the rows come from: ``open(table)`` yields (expected rows or None, a RecordBatchReader)."""

    description: str
    open: Callable


def _file_source(store: SpanStore) -> _Source:
    @contextmanager
    def open_table(table: str) -> Iterator[tuple[int | None, pa.RecordBatchReader]]:
        total = store.query(f"SELECT count(*) FROM {table}").rows[0][0]
        with store.query_arrow(EXPORT_TABLES[table]) as result:
            yield int(total), result.reader

    return _Source(store.path, open_table)


def _collector_source(url: str, *, token: str | None, ca_file: str | None, timeout: float = 300.0) -> _Source:
    base = url.rstrip("/")

    @contextmanager
    def open_table(table: str) -> Iterator[tuple[int | None, pa.RecordBatchReader]]:
        try:
            with CollectorClient(base, token=token, ca_file=ca_file, timeout=timeout) as client, \
                    client.get_stream(API_ARROW_PATH, {"table": table}) as (headers, body):
                media_type = headers.get("Content-Type", "")
                if not media_type.startswith(ARROW_STREAM_MEDIA_TYPE):
                    raise ExportFailed(f"{base} answered {media_type or 'no media type'}, not an Arrow stream; "
                                       "is it a meritlens collector?")
                raw_total = headers.get(ARROW_ROW_COUNT_HEADER)
                total = int(raw_total) if raw_total and raw_total.isdigit() else None
                try:
                    reader = pa.ipc.open_stream(body)
                except pa.ArrowInvalid as exc:
                    raise ExportFailed(f"{base} sent a broken Arrow stream for {table}: {exc}") from None
                yield total, reader
        except CollectorRefused as exc:
            raise ExportFailed(f"the collector at {base} refused to export {table}: HTTP {exc.status}: "
                               f"{_error_message(exc.body)}") from None
        except QueryError as exc:
            raise ExportFailed(str(exc)) from None

    return _Source(base, open_table)


def _error_message(body: bytes) -> str:
    try:
        message = str(json.loads(body)["error"])
    except (ValueError, KeyError, TypeError):
        message = body[:200].decode("utf-8", "replace")
    return " ".join(message.split()) or "(no message)"


@contextmanager
def open_source(source: Source) -> Iterator[_Source]:
    """The rows of ``source`` (collector/cli/_resolve.py): the file opened read-only, the lake, or the
    collector's Arrow endpoint (sent the token; over https verified against the CA file)."""
    if source.is_collector:
        yield _collector_source(source.url, token=source.token, ca_file=source.ca_file)
        return
    try:
        with opened_store(source, read_only=True) as store:
            yield _file_source(store)
    except QueryError as exc:
        raise ExportFailed(str(exc)) from None


ProgressCallback = Callable[[str, int, int | None], None]
"""Called with (table, rows written so far, rows expected or None)."""


def export_parquet(source: Source, out_dir: str, *, tables: tuple[str, ...] = tuple(EXPORT_TABLES),
                   compression: str = "snappy", progress: ProgressCallback | None = None) -> list[ExportedTable]:
    """Write each table to ``out_dir/<table>.parquet``; return what was written."""
    unknown = [t for t in tables if t not in EXPORT_TABLES]
    if unknown:
        raise ExportFailed(f"cannot export {', '.join(unknown)}; tables are {', '.join(EXPORT_TABLES)}")
    if compression not in COMPRESSIONS:
        raise ExportFailed(f"compression must be one of {', '.join(COMPRESSIONS)}")
    written: list[ExportedTable] = []
    with open_source(source) as tables_source:
        for table in tables:
            path = os.path.join(out_dir, f"{table}.parquet")
            with tables_source.open(table) as (total, reader):
                try:
                    os.makedirs(out_dir, exist_ok=True)
                except OSError as exc:
                    raise ExportFailed(f"cannot create {out_dir}: {exc.strerror or exc}") from None
                rows = _write_parquet(reader, path, compression,
                                      lambda n, t=table, total=total: progress and progress(t, n, total))
            written.append(ExportedTable(table, path, rows))
    return written


def _write_parquet(reader: pa.RecordBatchReader, path: str, compression: str, on_rows: Callable[[int], None]) -> int:
    partial = path + ".partial"
    rows = 0
    try:
        with pq.ParquetWriter(partial, reader.schema, compression=None if compression == "none" else compression) as writer:
            for batch in reader:
                if batch.num_rows:
                    writer.write_batch(batch)
                    rows += batch.num_rows
                    on_rows(rows)
        os.replace(partial, path)
    except OSError as exc:
        _remove(partial)
        raise ExportFailed(f"cannot write {path}: {exc.strerror or exc}") from None
    except BaseException:
        _remove(partial)
        raise
    on_rows(rows)
    return rows


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass
