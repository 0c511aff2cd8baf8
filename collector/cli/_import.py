"""`meritlens import`: load span files into a store, directly or through the running collector.

Accepted files (recognised by their content, optionally gzip-compressed):

- OTLP/JSON: one ``ExportTraceServiceRequest`` / ``TracesData`` document, or JSON lines of them
  (what the OpenTelemetry Collector's file exporter writes with ``format: json``);
- OTLP/protobuf: one serialized request, or a stream of messages each preceded by its 4-byte
  big-endian length (the file exporter's ``format: proto``);
- a meritlens Parquet export of the ``spans`` table (`meritlens export --parquet`).

Every span goes through the same decoding and normalization as one received on ``/v1/traces``,
so an imported span is stored exactly as if it had been sent; a span already stored (same
trace and span id) is not counted twice. Rows of a Parquet export are turned back into OTLP
spans first.
"""

from __future__ import annotations

import gzip
import json
import os
import time
import urllib.error
import urllib.request
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from meritlens.analytics._schema import SPAN_COLUMN_NAMES, WINDOW_COLUMN_NAMES
from meritlens.collector.process import _otlp
from meritlens.collector.process._normalize import BOOL, COUNT, PROMOTED, STR, NormalizeOptions, normalize
from meritlens.collector.receive._auth import authorization_header
from meritlens.collector.cli._query import QueryError, client_ssl_context
from meritlens.collector.cli._resolve import Source, describe_lock_holder, is_lock_conflict
from meritlens.collector._settings import TRACES_PATH
from meritlens.collector.store._store import SpanStore, touched_keys

PARQUET_MAGIC = b"PAR1"
GZIP_MAGIC = b"\x1f\x8b"
SKIPPED_IN_DIRECTORIES = ("windows.parquet",)
"""Files of a directory that are not imported: windows are recomputed from the spans."""

_ROWS_PER_REQUEST = 2000
_MAX_BUFFERED_ROWS = 50_000
_MAX_REQUEST_BYTES = 4 * 1024 * 1024
_RETRY_BUDGET_SECONDS = 60.0


class ImportFailed(RuntimeError):
    """The import cannot go on at all (no destination); the message says why."""


class FileProblem(ValueError):
    """One file, or one document in it, cannot be read; the message says what is wrong."""


@dataclass
class Chunk:
    """A decoded piece of a file: a request (or the problem that kept it from decoding) and how
    far into the file it ends (0..1)."""

    request: ExportTraceServiceRequest | None
    refusals: dict = field(default_factory=dict)
    fraction: float = 1.0
    problem: str | None = None
    from_export: bool = False
    """Rows of a meritlens export: already normalized once, so nothing is filled in again
    (no target fallback, no pricing) and they are stored as they were."""


@dataclass
class FileResult:
    """What became of one file's spans."""

    file: str
    format: str = "?"
    spans: int = 0
    refused: int = 0
    new: int | None = 0
    """Spans stored that were not stored before; None when the collector stored them (it does not say)."""
    duplicates: int | None = 0
    """Spans already stored (same trace and span id), not counted again; None as for ``new``."""
    problems: list[str] = field(default_factory=list)
    """Why the file, or a document in it, could not be read."""
    refusal_reasons: list[str] = field(default_factory=list)
    """The first few reasons spans were refused."""

    @property
    def accepted(self) -> int:
        return self.spans - self.refused

    @property
    def ok(self) -> bool:
        return not self.problems and not self.refused


# --- reading files -------------------------------------------------------------------------------
def expand_paths(paths: list[str]) -> list[str]:
    """Files to import: each file as given, each directory's regular files in name order
    (not recursive, hidden files and a meritlens export's windows.parquet left out)."""
    out: list[str] = []
    for path in paths:
        if os.path.isdir(path):
            names = sorted(n for n in os.listdir(path)
                           if not n.startswith(".") and n not in SKIPPED_IN_DIRECTORIES)
            out.extend(os.path.join(path, n) for n in names if os.path.isfile(os.path.join(path, n)))
        else:
            out.append(path)
    return out


def read_file(path: str) -> tuple[str, Iterator[Chunk]]:
    """Recognise a file by its content; return its format name and its decoded chunks.

    Raises FileProblem when the file is none of the accepted formats."""
    with open(path, "rb") as fh:
        head = fh.read(4)
    if head == PARQUET_MAGIC:
        return "meritlens-parquet", _parquet_chunks(path)
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise FileProblem(f"cannot read it: {exc.strerror or exc}") from None
    compressed = data[:2] == GZIP_MAGIC
    if compressed:
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            raise FileProblem(f"not valid gzip data: {exc}") from None
    suffix = "+gzip" if compressed else ""
    if compressed and data[:4] == PARQUET_MAGIC:
        raise FileProblem("is gzip-compressed Parquet; decompress it first (Parquet compresses itself)")
    stripped = data.lstrip()
    if not stripped:
        return "empty" + suffix, iter(())
    if stripped[:1] in (b"{", b"["):
        name, chunks = _json_chunks(data)
        return name + suffix, chunks
    name, chunks = _protobuf_chunks(data)
    return name + suffix, chunks


def _json_chunks(data: bytes) -> tuple[str, Iterator[Chunk]]:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FileProblem(f"JSON must be UTF-8: {exc}") from None
    lines = text.splitlines()
    first = next((line for line in lines if line.strip()), "")
    try:
        json.loads(first)
        one_document_per_line = sum(1 for line in lines if line.strip()) > 1
    except json.JSONDecodeError:
        one_document_per_line = False
    if not one_document_per_line:
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise FileProblem(f"not valid JSON: {exc}") from None
        return "otlp-json", iter([_decode_document(doc, 1.0, where="")])

    def chunks() -> Iterator[Chunk]:
        total = max(1, len(text))
        position = 0
        for number, line in enumerate(lines, start=1):
            position += len(line) + 1
            if not line.strip():
                continue
            try:
                doc = json.loads(line)
            except json.JSONDecodeError as exc:
                yield Chunk(None, fraction=min(1.0, position / total), problem=f"line {number}: not valid JSON: {exc}")
                continue
            yield _decode_document(doc, min(1.0, position / total), where=f"line {number}: ")

    return "otlp-jsonl", chunks()


def _decode_document(doc, fraction: float, *, where: str) -> Chunk:
    if isinstance(doc, dict) and "resourceSpans" not in doc and "resource_spans" not in doc:
        found = ", ".join(sorted(doc)[:3]) or "nothing"
        return Chunk(None, fraction=fraction, problem=(
            f"{where}has no resourceSpans (found {found}); only traces can be imported"))
    try:
        decoded = _otlp.decode_json_document(doc)
    except _otlp.BadRequest as exc:
        return Chunk(None, fraction=fraction, problem=f"{where}{exc}")
    return Chunk(decoded.request, decoded.refusals, fraction)


def _length_prefixed(data: bytes) -> list[tuple[int, bytes]] | None:
    """The messages of a 4-byte big-endian length-prefixed stream, or None if ``data`` is not one."""
    messages, position = [], 0
    while position < len(data):
        if position + 4 > len(data):
            return None
        size = int.from_bytes(data[position:position + 4], "big")
        position += 4
        if size > len(data) - position:
            return None
        messages.append((position + size, data[position:position + size]))
        position += size
    return messages


def _protobuf_chunks(data: bytes) -> tuple[str, Iterator[Chunk]]:
    # A serialized request starts with field 1's tag (0x0a); a length prefix of a message under
    # 16 MiB starts with 0x00.
    framed = None if data[:1] == b"\x0a" else _length_prefixed(data)
    if framed is None:
        return "otlp-protobuf", iter([_decode_protobuf(data, 1.0, where="")])
    total = len(data)

    def chunks() -> Iterator[Chunk]:
        for number, (end, message) in enumerate(framed, start=1):
            where = f"message {number}: "
            if message.lstrip()[:1] == b"{":  # the file exporter frames JSON too when it compresses
                try:
                    yield _decode_document(json.loads(message), end / total, where=where)
                except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                    yield Chunk(None, fraction=end / total, problem=f"{where}not valid JSON: {exc}")
            else:
                yield _decode_protobuf(message, end / total, where=where)

    return "otlp-protobuf-stream", chunks()


def _decode_protobuf(message: bytes, fraction: float, *, where: str) -> Chunk:
    request = ExportTraceServiceRequest()
    try:
        request.ParseFromString(message)
    except DecodeError as exc:
        return Chunk(None, fraction=fraction, problem=(
            f"{where}not OTLP JSON, OTLP protobuf or a meritlens Parquet export ({exc})"))
    if message and not request.resource_spans:
        # Arbitrary bytes can parse as a message of unknown fields only: that is not a trace.
        return Chunk(None, fraction=fraction, problem=(
            f"{where}not OTLP JSON, OTLP protobuf or a meritlens Parquet export (no resource spans in it)"))
    return Chunk(request, fraction=fraction)


# --- meritlens Parquet exports back to OTLP ------------------------------------------------------
_REQUIRED_PARQUET_COLUMNS = tuple(name for name in SPAN_COLUMN_NAMES if name != "received_at")


def _parquet_chunks(path: str) -> Iterator[Chunk]:
    try:
        parquet = pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as exc:
        raise FileProblem(f"not a readable Parquet file: {exc}") from None
    names = set(parquet.schema_arrow.names)
    if {"metric", "scope"} <= names and set(WINDOW_COLUMN_NAMES) <= names:
        raise FileProblem("is a windows export; windows are recomputed from spans, import spans.parquet")
    missing = [name for name in _REQUIRED_PARQUET_COLUMNS if name not in names]
    if missing:
        raise FileProblem(f"is not a meritlens spans export: missing columns {', '.join(missing)}")
    total = max(1, parquet.metadata.num_rows)

    def chunks() -> Iterator[Chunk]:
        done = 0
        for batch in parquet.iter_batches(batch_size=_ROWS_PER_REQUEST, columns=list(_REQUIRED_PARQUET_COLUMNS)):
            done += batch.num_rows
            try:
                request = rows_to_request(batch.to_pylist())
            except (ValueError, TypeError) as exc:
                yield Chunk(None, fraction=done / total, problem=f"rows {done - batch.num_rows + 1}-{done}: {exc}")
                continue
            yield Chunk(request, fraction=done / total, from_export=True)

    return chunks()


def to_any_value(value) -> AnyValue:
    """A JSON value (as stored in the `attributes`, `resource` and `events` columns) as an AnyValue."""
    if value is None:
        return AnyValue()
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        if -(2**63) <= value < 2**63:
            return AnyValue(int_value=value)
        return AnyValue(double_value=float(value))
    if isinstance(value, float):
        return AnyValue(double_value=value)
    if isinstance(value, str):
        return AnyValue(string_value=value)
    out = AnyValue()
    if isinstance(value, list):
        out.array_value.values.extend(to_any_value(v) for v in value)
    elif isinstance(value, dict):
        out.kvlist_value.values.extend(KeyValue(key=k, value=to_any_value(v)) for k, v in value.items())
    else:
        raise TypeError(f"cannot express {type(value).__name__} as an OTLP value")
    return out


def _promoted_value(kind: str, value) -> AnyValue:
    if kind == STR:
        return AnyValue(string_value=value)
    if kind == BOOL:
        return AnyValue(bool_value=bool(value))
    if kind == COUNT:
        return AnyValue(int_value=int(value))
    return AnyValue(double_value=float(value))


# Each typed column back to the attribute that sets it first (our names and the current GenAI names).
_COLUMN_KEYS: dict[str, tuple[str, str]] = {
    column: (kind, next(source for source in sources if isinstance(source, str)))
    for column, (kind, sources) in PROMOTED.items()
}


def _json_column(row: dict, name: str, default):
    raw = row.get(name)
    if raw is None:
        return default
    return json.loads(raw) if isinstance(raw, str) else raw


def rows_to_request(rows: list[dict]) -> ExportTraceServiceRequest:
    """Rows of the `spans` table as an OTLP request that normalizes back to the same rows
    (except `received_at`, which is set when they are stored again)."""
    request = ExportTraceServiceRequest()
    groups: dict[tuple[str, str], object] = {}
    for row in rows:
        resource_json = row.get("resource") or ""
        scope_name = row.get("scope_name") or ""
        key = (resource_json, scope_name)
        scope_spans = groups.get(key)
        if scope_spans is None:
            resource_spans = request.resource_spans.add()
            resource = _json_column(row, "resource", {})
            resource_spans.resource.attributes.extend(
                KeyValue(key=k, value=to_any_value(v)) for k, v in resource.items())
            scope_spans = resource_spans.scope_spans.add()
            scope_spans.scope.name = scope_name
            groups[key] = scope_spans
        span = scope_spans.spans.add()
        span.trace_id = bytes.fromhex(row["trace_id"])
        span.span_id = bytes.fromhex(row["span_id"])
        if row.get("parent_span_id"):
            span.parent_span_id = bytes.fromhex(row["parent_span_id"])
        span.name = row.get("name") or ""
        span.kind = row.get("kind") or 0
        span.start_time_unix_nano = row["start_unix_nano"]
        span.end_time_unix_nano = row["end_unix_nano"]
        span.status.code = row.get("status_code") or 0
        if row.get("status_message"):
            span.status.message = row["status_message"]
        attributes = _json_column(row, "attributes", {})
        span.attributes.extend(KeyValue(key=k, value=to_any_value(v)) for k, v in attributes.items())
        for column, (kind, key) in _COLUMN_KEYS.items():
            value = row.get(column)
            if value is not None:
                span.attributes.append(KeyValue(key=key, value=_promoted_value(kind, value)))
        for event in _json_column(row, "events", []):
            added = span.events.add()
            added.name = event.get("name") or ""
            added.time_unix_nano = event.get("time_unix_nano") or 0
            added.attributes.extend(
                KeyValue(key=k, value=to_any_value(v)) for k, v in (event.get("attributes") or {}).items())
        for link in _json_column(row, "links", []):
            added = span.links.add()
            added.trace_id = bytes.fromhex(link["trace_id"])
            added.span_id = bytes.fromhex(link["span_id"])
            added.attributes.extend(
                KeyValue(key=k, value=to_any_value(v)) for k, v in (link.get("attributes") or {}).items())
    return request


def _split(request: ExportTraceServiceRequest, max_spans: int) -> Iterator[ExportTraceServiceRequest]:
    """The request in parts of at most ``max_spans`` spans, each span with its resource and scope."""
    if _span_count(request) <= max_spans:
        yield request
        return
    part, count = ExportTraceServiceRequest(), 0
    for rs in request.resource_spans:
        for ss in rs.scope_spans:
            spans = list(ss.spans)
            while spans:
                room = max_spans - count
                taken, spans = spans[:room], spans[room:]
                new_rs = part.resource_spans.add()
                new_rs.resource.CopyFrom(rs.resource)
                new_rs.schema_url = rs.schema_url
                new_ss = new_rs.scope_spans.add()
                new_ss.scope.CopyFrom(ss.scope)
                new_ss.schema_url = ss.schema_url
                new_ss.spans.extend(taken)
                count += len(taken)
                if count >= max_spans:
                    yield part
                    part, count = ExportTraceServiceRequest(), 0
    if count:
        yield part


def _span_count(request: ExportTraceServiceRequest) -> int:
    return sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)


# --- destinations --------------------------------------------------------------------------------
_AS_EXPORTED = NormalizeOptions(target_fallback=None, price=None)


class StoreDestination:
    """Writes into the DuckDB file directly (nobody else holds it); windows are recomputed once
    for every touched key when the import ends."""

    via = "file"

    def __init__(self, store: SpanStore, options: NormalizeOptions):
        self._store = store
        self._options = options
        self._pending: list[pa.Table] = []
        self._pending_rows = 0
        self._touched: set[tuple[str, str]] = set()

    def send(self, chunk: Chunk, result: FileResult) -> None:
        batch = normalize(chunk.request, chunk.refusals, _AS_EXPORTED if chunk.from_export else self._options)
        result.refused += len(batch.refused)
        _note_refusals(result, batch.refused)
        if batch.size:
            self._pending.append(batch.to_arrow())
            self._pending_rows += batch.size
            if self._pending_rows >= _MAX_BUFFERED_ROWS:
                self.flush(result)

    def flush(self, result: FileResult) -> None:
        if not self._pending:
            return
        table = pa.concat_tables(self._pending) if len(self._pending) > 1 else self._pending[0]
        self._pending, self._pending_rows = [], 0
        written = self._store.write(table, refresh_windows=False)
        self._touched |= touched_keys(table)
        result.new += written.inserted
        result.duplicates += written.duplicates

    def close(self) -> None:
        try:
            self._store.refresh_windows(self._touched)
        finally:
            self._store.shutdown()


class CollectorDestination:
    """POSTs OTLP/protobuf (gzip) to a running collector's /v1/traces; waits and retries when
    it answers 503 or 429, as its Retry-After asks."""

    via = "collector"

    def __init__(self, url: str, *, token: str | None = None, ca_file: str | None = None, timeout: float = 60.0):
        self.url = url.rstrip("/")
        self._headers = {"Content-Type": _otlp.PROTOBUF, "Content-Encoding": "gzip", **authorization_header(token)}
        try:
            self._context = client_ssl_context(self.url, ca_file)
        except QueryError as exc:
            raise ImportFailed(str(exc)) from None
        self._timeout = timeout
        self._pending = ExportTraceServiceRequest()
        self._pending_spans = 0

    def send(self, chunk: Chunk, result: FileResult) -> None:
        request = chunk.request
        if chunk.refusals:
            # Spans refused while decoding keep their reason here; the rest are sent.
            kept = ExportTraceServiceRequest()
            for ri, rs in enumerate(request.resource_spans):
                new_rs = kept.resource_spans.add()
                new_rs.resource.CopyFrom(rs.resource)
                for si, ss in enumerate(rs.scope_spans):
                    new_ss = new_rs.scope_spans.add()
                    new_ss.scope.CopyFrom(ss.scope)
                    for pi, span in enumerate(ss.spans):
                        reason = chunk.refusals.get((ri, si, pi))
                        if reason:
                            result.refused += 1
                            _note_refusals(result, [
                                f"span {span.span_id.hex() or '?'} in trace {span.trace_id.hex() or '?'}: {reason}"])
                        else:
                            new_ss.spans.append(span)
            request = kept
        for part in _split(request, _ROWS_PER_REQUEST):
            self._pending.resource_spans.extend(part.resource_spans)
            self._pending_spans += _span_count(part)
            if self._pending_spans >= _ROWS_PER_REQUEST or self._pending.ByteSize() >= _MAX_REQUEST_BYTES:
                self.flush(result)

    def flush(self, result: FileResult) -> None:
        if not self._pending_spans:
            self._pending = ExportTraceServiceRequest()
            return
        body = gzip.compress(self._pending.SerializeToString(), compresslevel=5)
        self._pending, self._pending_spans = ExportTraceServiceRequest(), 0
        response = self._post(body)
        rejected = response.partial_success.rejected_spans
        result.refused += rejected
        if rejected and response.partial_success.error_message:
            _note_refusals(result, response.partial_success.error_message.split("; "))

    def _post(self, body: bytes) -> ExportTraceServiceResponse:
        deadline = time.monotonic() + _RETRY_BUDGET_SECONDS
        while True:
            request = urllib.request.Request(self.url + TRACES_PATH, data=body, method="POST", headers=self._headers)
            try:
                with urllib.request.urlopen(request, timeout=self._timeout, context=self._context) as answer:
                    response = ExportTraceServiceResponse()
                    response.ParseFromString(answer.read())
                    return response
            except urllib.error.HTTPError as exc:
                payload = exc.read()
                if exc.code in (429, 503) and time.monotonic() < deadline:
                    time.sleep(_retry_after(exc.headers.get("Retry-After")))
                    continue
                raise ImportFailed(f"the collector at {self.url} refused a batch: HTTP {exc.code}: "
                                   f"{_status_message(payload)}") from None
            except (urllib.error.URLError, OSError) as exc:
                reason = getattr(exc, "reason", exc)
                raise ImportFailed(f"no collector reachable at {self.url} ({reason})") from None

    def close(self) -> None:
        pass


def _note_refusals(result: FileResult, reasons: list[str], keep: int = 5) -> None:
    room = keep - len(result.refusal_reasons)
    if room > 0:
        result.refusal_reasons.extend(reasons[:room])


def _retry_after(raw: str | None) -> float:
    try:
        return min(10.0, max(0.1, float(raw)))
    except (TypeError, ValueError):
        return 1.0


def _status_message(payload: bytes) -> str:
    from google.rpc import status_pb2

    status = status_pb2.Status()
    message = ""
    try:
        status.ParseFromString(payload)
        message = status.message
    except DecodeError:
        pass
    message = message or payload[:200].decode("utf-8", "replace")
    return " ".join(message.split()) or "(no message)"


def open_destination(source: Source, options: NormalizeOptions | None = None) -> StoreDestination | CollectorDestination:
    """Where ``source`` points (collector/cli/_resolve.py, resolved with ``create``): the DuckDB file,
    created if absent, or the collector's /v1/traces. ``options`` normalize OTLP files written into
    the file directly (default: what `meritlens serve` would use); a collector applies its own."""
    if not source.is_file:
        return CollectorDestination(source.url, token=source.token, ca_file=source.ca_file)
    store = SpanStore(source.db)
    try:
        store.start()
    except duckdb.Error as exc:
        if is_lock_conflict(exc):
            raise ImportFailed(f"{source.db} is held by {describe_lock_holder(exc)}; give --url of the collector"
                               " that holds it") from None
        raise ImportFailed(f"cannot open {source.db}: {str(exc).splitlines()[0]}") from None
    if options is None:
        from meritlens.collector.serve._server import normalize_options
        from meritlens.collector._settings import ServerSettings

        options = normalize_options(ServerSettings())
    return StoreDestination(store, options)


# --- the whole import ----------------------------------------------------------------------------
ProgressCallback = Callable[[int, float, int], None]
"""Called with (file index, fraction of that file done, spans read from it so far)."""


def import_files(paths: list[str], destination, *, progress: ProgressCallback | None = None) -> list[FileResult]:
    """Import every file into ``destination``; a file that cannot be read is reported in its
    result and the others still go in. Always closes the destination."""
    results: list[FileResult] = []
    try:
        for index, path in enumerate(paths):
            counts_new = destination.via == "file"
            result = FileResult(file=path, new=0 if counts_new else None, duplicates=0 if counts_new else None)
            results.append(result)
            try:
                result.format, chunks = read_file(path)
                for chunk in chunks:
                    if chunk.problem is not None:
                        result.problems.append(chunk.problem)
                    else:
                        result.spans += _span_count(chunk.request)
                        destination.send(chunk, result)
                    if progress is not None:
                        progress(index, chunk.fraction, result.spans)
                destination.flush(result)
            except FileProblem as exc:
                result.problems.append(str(exc))
            except OSError as exc:
                result.problems.append(f"cannot read it: {exc.strerror or exc}")
            if progress is not None:
                progress(index, 1.0, result.spans)
    finally:
        destination.close()
    return results
