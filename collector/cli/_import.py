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
from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from meritlens.collector._paths import TRACES_PATH
from meritlens.collector.cli._client import CollectorClient, CollectorRefused, QueryError
from meritlens.collector.cli._import_files import ROWS_PER_REQUEST, Chunk, FileProblem, _span_count, _split, read_file
from meritlens.collector.cli._resolve import Source, open_file_or_explain
from meritlens.collector.process import _otlp
from meritlens.collector.process._normalize import normalize
from meritlens.collector.process._options import NormalizeOptions
from meritlens.collector.store._store import SpanStore
from meritlens.collector.windows._delta import touched_keys
from meritlens.collector.windows._processor import WindowProcessor

_MAX_BUFFERED_ROWS = 50_000
_MAX_REQUEST_BYTES = 4 * 1024 * 1024
_RETRY_BUDGET_SECONDS = 60.0


class ImportFailed(RuntimeError):
    """The import cannot go on at all (no destination); the message says why."""


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


# --- destinations --------------------------------------------------------------------------------
_AS_EXPORTED = NormalizeOptions(target_fallback=None, price=None)


class StoreDestination:
    """Writes into the DuckDB file directly (nobody else holds it); windows are recomputed once
    for every touched key when the import ends."""

    via = "file"

    def __init__(self, store: SpanStore, options: NormalizeOptions, redactor=None):
        self._store = store
        self._windows = WindowProcessor(store)
        self._options = options
        self._redactor = redactor
        """The collector's redaction policy ($MERITLENS_REDACT), applied as `serve` would before storing."""
        self._pending: list[pa.Table] = []
        self._pending_rows = 0
        self._touched: set[tuple[str, str]] = set()

    def send(self, chunk: Chunk, result: FileResult) -> None:
        batch = normalize(chunk.request, chunk.refusals, _AS_EXPORTED if chunk.from_export else self._options)
        result.refused += len(batch.refused)
        _note_refusals(result, batch.refused)
        if batch.size:
            table = batch.to_arrow()
            self._pending.append(table if self._redactor is None else self._redactor.redact(table))
            self._pending_rows += batch.size
            if self._pending_rows >= _MAX_BUFFERED_ROWS:
                self.flush(result)

    def flush(self, result: FileResult) -> None:
        if not self._pending:
            return
        table = pa.concat_tables(self._pending) if len(self._pending) > 1 else self._pending[0]
        self._pending, self._pending_rows = [], 0
        written = self._windows.write(table, refresh_windows=False)
        self._touched |= touched_keys(table)
        result.new += written.inserted
        result.duplicates += written.duplicates

    def close(self) -> None:
        try:
            self._windows.refresh_windows(self._touched)
            self._windows.shutdown()
        finally:
            self._store.shutdown()


class CollectorDestination:
    """POSTs OTLP/protobuf (gzip) to a running collector's /v1/traces; waits and retries when
    it answers 503 or 429, as its Retry-After asks."""

    via = "collector"

    def __init__(self, url: str, *, token: str | None = None, ca_file: str | None = None, timeout: float = 60.0):
        self.url = url.rstrip("/")
        try:
            self._client = CollectorClient(self.url, token=token, ca_file=ca_file, timeout=timeout)
        except QueryError as exc:
            raise ImportFailed(str(exc)) from None
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
        for part in _split(request, ROWS_PER_REQUEST):
            self._pending.resource_spans.extend(part.resource_spans)
            self._pending_spans += _span_count(part)
            if self._pending_spans >= ROWS_PER_REQUEST or self._pending.ByteSize() >= _MAX_REQUEST_BYTES:
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
        try:
            reply = self._client.post(TRACES_PATH, body, _otlp.PROTOBUF, headers={"Content-Encoding": "gzip"},
                                      retry_for_s=_RETRY_BUDGET_SECONDS)
        except CollectorRefused as exc:
            raise ImportFailed(f"the collector at {self.url} refused a batch: HTTP {exc.status}: "
                               f"{_status_message(exc.body)}") from None
        except QueryError as exc:
            raise ImportFailed(str(exc)) from None
        return ExportTraceServiceResponse.FromString(reply)

    def close(self) -> None:
        self._client.close()


def _note_refusals(result: FileResult, reasons: list[str], keep: int = 5) -> None:
    room = keep - len(result.refusal_reasons)
    if room > 0:
        result.refusal_reasons.extend(reasons[:room])


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


def open_destination(source: Source,
                     options: NormalizeOptions | None = None) -> StoreDestination | CollectorDestination:
    """Where ``source`` points (collector/cli/_resolve.py, resolved with ``create``): the DuckDB file,
    created if absent, or the collector's /v1/traces. ``options`` normalize OTLP files written into
    the file directly (default: what `meritlens serve` would use); a collector applies its own."""
    if not source.is_file:
        return CollectorDestination(source.url, token=source.token, ca_file=source.ca_file)
    from meritlens.collector._settings import ServerSettings

    settings = ServerSettings.from_env()
    redactor = None
    if settings.redact:  # the policy `serve` applies, so that a file holds no span it would not store
        from meritlens.collector.process._redact import SpanRedactor
        from meritlens.instrumentation.redaction import RedactionPolicyError

        try:
            redactor = SpanRedactor.from_file(settings.redact)
        except RedactionPolicyError as exc:
            raise ImportFailed(str(exc)) from None
    store = SpanStore(source.db)
    open_file_or_explain(source.db, store.start, ImportFailed)
    if options is None:
        from meritlens.collector._settings import ServerSettings
        from meritlens.collector.serve._server import normalize_options

        options = normalize_options(settings)
    return StoreDestination(store, options, redactor)


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
