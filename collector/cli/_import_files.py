"""Reading span files for `meritlens import`: OTLP JSON or protobuf (gzip too), the OTel Collector's
file exporter's JSON lines or length-prefixed protobuf, and meritlens Parquet exports turned back
into OTLP requests."""

from __future__ import annotations

import gzip
import json
import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.parquet as pq
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from meritlens.analytics.engine import SPAN_COLUMN_NAMES, WINDOW_COLUMN_NAMES
from meritlens.collector.process import _otlp
from meritlens.collector.process._walk import BOOL, COUNT, PROMOTED, STR

PARQUET_MAGIC = b"PAR1"
GZIP_MAGIC = b"\x1f\x8b"
ROWS_PER_REQUEST = 2000
"""Spans per request sent to a collector, and rows per batch read from a Parquet export."""
SKIPPED_IN_DIRECTORIES = ("windows.parquet",)

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
        for batch in parquet.iter_batches(batch_size=ROWS_PER_REQUEST, columns=list(_REQUIRED_PARQUET_COLUMNS)):
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
