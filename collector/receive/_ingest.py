"""What both OTLP receivers do with a request: decode, check, normalize, submit, answer.

The HTTP and gRPC receivers differ only in transport. Each hands the (decompressed) body to
`Ingest.export` and maps an `IngestError` to its own status: HTTP status plus a
`google.rpc.Status` body, or a gRPC status with the same code and message.

Memory is bounded by an `InflightBudget` (the in-flight share of `--memory-limit`): a request holds
a `Reservation` of its decompressed body bytes (taken while the body streams in) plus what its
decoded copies cost (`request_memory_bytes`), until it is answered. When the budget cannot cover a
request, it is refused at once as overloaded (HTTP 503 + Retry-After, gRPC UNAVAILABLE + RetryInfo)
instead of waiting in memory; so is every export while the process is above the memory limiter's
soft limit (`admit`, before the body is read).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import uuid
from dataclasses import dataclass

import pyarrow as pa
from google.rpc import code_pb2

from meritlens.collector._settings import RETRY_AFTER_SECONDS, request_memory_bytes
from meritlens.collector.process import _otlp
from meritlens.collector.process._normalize import normalize
from meritlens.collector.process._options import NormalizeOptions
from meritlens.collector.process._redact import SpanRedactor
from meritlens.collector.process._walk import SpanBatch
from meritlens.collector.receive._memory import MemoryLimiter
from meritlens.collector.receive._pipeline import IngestPipeline, Overloaded
from meritlens.collector.receive._report import NO_HEALTH, IngestHealth, refusal_reason

_DECODE_THREAD = "meritlens-decode"

log = logging.getLogger("meritlens.collector.ingest")

_MAX_REASONS_IN_MESSAGE = 20


class IngestError(Exception):
    """A request that is answered with an error: HTTP status, RPC code, message, maybe a retry delay
    and, for an overload, which limit refused it (`_report.OVERLOAD_REASONS`)."""

    def __init__(self, http_status: int, rpc_code: int, message: str, *, retry_after_s: float | None = None,
                 overload: str | None = None):
        super().__init__(message)
        self.http_status = http_status
        self.rpc_code = rpc_code
        self.message = message
        self.retry_after_s = retry_after_s
        self.overload = overload


def bad_request(message: str) -> IngestError:
    return IngestError(400, code_pb2.INVALID_ARGUMENT, message)


def too_large(message: str) -> IngestError:
    return IngestError(413, code_pb2.RESOURCE_EXHAUSTED, message)


def overloaded(message: str, reason: str) -> IngestError:
    return IngestError(
        503, code_pb2.UNAVAILABLE, f"{message}; retry after {RETRY_AFTER_SECONDS}s",
        retry_after_s=RETRY_AFTER_SECONDS, overload=reason,
    )


class InflightBudget:
    """A byte budget shared by every request being processed, on both receivers."""

    def __init__(self, limit: int):
        self.limit = limit
        self._used = 0
        self._peak = 0
        self._lock = threading.Lock()

    @property
    def used(self) -> int:
        return self._used

    @property
    def peak(self) -> int:
        return self._peak

    def try_take(self, n: int) -> bool:
        with self._lock:
            if self._used + n > self.limit:
                return False
            self._used += n
            self._peak = max(self._peak, self._used)
            return True

    def give_back(self, n: int) -> None:
        with self._lock:
            self._used -= n


class Reservation:
    """The bytes one request holds in the budget; `release()` (or leaving `with`) gives them back."""

    def __init__(self, budget: InflightBudget):
        self._budget = budget
        self.held = 0

    def ensure(self, total: int) -> None:
        """Hold at least ``total`` bytes; raise an overloaded IngestError when the budget is spent."""
        extra = total - self.held
        if extra <= 0:
            return
        if not self._budget.try_take(extra):
            raise overloaded(
                f"the collector is holding {self._budget.used} of its {self._budget.limit} in-flight bytes"
                " (a quarter of --memory-limit)", "in_flight_bytes")
        self.held = total

    def shrink(self, total: int) -> None:
        """Hold no more than ``total`` bytes."""
        if self.held > total:
            self._budget.give_back(self.held - total)
            self.held = total

    def release(self) -> None:
        if self.held:
            self._budget.give_back(self.held)
            self.held = 0

    def __enter__(self) -> Reservation:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


@dataclass(frozen=True)
class ExportOutcome:
    """A request that was answered OK: how many spans were stored or already held, how many refused."""

    accepted: int
    rejected: int
    message: str


class Ingest:
    """The shared receive path. One instance serves both receivers of a collector; it reports the
    spans it received, acknowledged and refused to ``health``, and so do the receivers, through
    `refused`, each export they answer as overloaded."""

    def __init__(
        self, pipeline: IngestPipeline, budget: InflightBudget, *, max_spans_per_request: int,
        limits: _otlp.SpanLimits, normalize_options: NormalizeOptions = NormalizeOptions(), decode_threads: int = 2,
        limiter: MemoryLimiter | None = None, health: IngestHealth = NO_HEALTH, redactor: SpanRedactor | None = None,
    ):
        self._pipeline = pipeline
        self.health = health
        self.budget = budget
        self.limiter = limiter
        self._max_spans = max_spans_per_request
        self._limits = limits
        self._normalize_options = normalize_options
        self._redactor = redactor
        # Decoding and normalizing are CPU work; doing them off the event loop keeps health checks,
        # SQL and the other receiver answering. Two threads bound the transient memory they use.
        self._executor = concurrent.futures.ThreadPoolExecutor(
            decode_threads, thread_name_prefix=_DECODE_THREAD)

    @property
    def redacting(self) -> bool:
        """Whether a redaction policy applies to the spans before they are stored."""
        return self._redactor is not None

    def reservation(self) -> Reservation:
        return Reservation(self.budget)

    def admit(self) -> None:
        """Refuse a new export (an overloaded IngestError) while the process is above its soft memory limit."""
        if self.limiter is not None and self.limiter.limited:
            raise overloaded(self.limiter.refusal(), "memory_limit")

    def close(self) -> None:
        self._executor.shutdown(wait=True)

    def refused(self, err: IngestError) -> IngestError:
        """``err``, which a receiver answers now: an overload is reported to ``health``."""
        if err.overload:
            self.health.overloaded(err.overload)
        return err

    async def export(self, body: bytes, media_type: str, reservation: Reservation) -> ExportOutcome:
        """Store the spans of one decompressed OTLP body; returns once they are committed.

        ``reservation`` must already hold the body's bytes; this adds what its decoded copies cost.
        Raises IngestError for anything that is not a (possibly partial) success. A request refused
        before its spans were counted (an unreadable body) refuses no countable span.
        """
        loop = asyncio.get_running_loop()
        try:
            decoded = await loop.run_in_executor(self._executor, _otlp.decode_lean, body, media_type)
        except _otlp.BadRequest as exc:
            raise bad_request(str(exc)) from None
        except Exception:  # a decoder bug must not take the server down; the client gets a Status
            raise _internal("decoding the request failed") from None
        spans = _otlp.count_spans(decoded.lean)
        self.health.received(spans)
        try:
            if spans > self._max_spans:
                raise IngestError(
                    413, code_pb2.INVALID_ARGUMENT,
                    f"the request carries {spans} spans; the limit is {self._max_spans} per request; send smaller"
                    " batches",
                )
            reservation.ensure(request_memory_bytes(len(body), spans))
            try:
                batch, table = await loop.run_in_executor(self._executor, self._prepare, decoded)
            except _otlp.BadRequest as exc:  # a part of the body only parsed while normalizing
                raise bad_request(str(exc)) from None
            except _RedactionFailed as exc:
                raise _refuse_unredacted(exc) from None
            except Exception:
                raise _internal("normalizing the spans failed") from None
            del decoded
            if table is not None:
                await self._submit(table)
        except IngestError as err:
            if spans:
                self.health.refused(refusal_reason(err.http_status), spans)
            raise
        refused = batch.refused
        message = "; ".join(refused[:_MAX_REASONS_IN_MESSAGE])
        if len(refused) > _MAX_REASONS_IN_MESSAGE:
            message += f"; and {len(refused) - _MAX_REASONS_IN_MESSAGE} more"
        self.health.accepted(batch.size)
        if refused:
            self.health.refused("invalid", len(refused))
        return ExportOutcome(accepted=batch.size, rejected=len(refused), message=message)

    async def _submit(self, table: pa.Table) -> None:
        try:
            await self._pipeline.submit(table)
        except Overloaded as exc:
            raise overloaded(str(exc), "write_queue") from None
        except Exception:
            # Nothing of this request was acknowledged; the client may retry (idempotent).
            incident = uuid.uuid4().hex[:12]
            log.exception("storing spans failed (incident %s)", incident)
            raise overloaded(f"storing spans failed (incident {incident})", "store_failed") from None

    def _prepare(self, decoded: _otlp.DecodedRequest):
        batch, table = prepare(decoded, self._limits, self._normalize_options)
        if table is not None and self._redactor is not None:
            try:
                table = self._redactor.redact(table)
            except Exception as exc:
                raise _RedactionFailed(type(exc).__name__) from None
        return batch, table


def prepare(decoded: _otlp.DecodedRequest, limits: _otlp.SpanLimits,
            options: NormalizeOptions) -> tuple[SpanBatch, pa.Table | None]:
    """Check and normalize a decoded request: its SpanBatch, and its rows as an Arrow table (None if none)."""
    body = decoded.body
    lean = decoded.lean_view()
    checks = _otlp.SpanChecks(lean, limits, None if body is None else len(body))
    batch = normalize(lean, decoded.refusals, options, checks=checks, body=body)
    return batch, (batch.to_arrow() if batch.size else None)


class _RedactionFailed(Exception):
    """The policy could not be applied to a batch; its text is the error's type only (never a value)."""


def _refuse_unredacted(exc: _RedactionFailed) -> IngestError:
    """Spans the policy could not be applied to are never stored; the log names the error's type only, as a
    traceback's text could hold a value the policy hides."""
    incident = uuid.uuid4().hex[:12]
    log.error("applying the redaction policy failed (%s, incident %s); the request was refused", exc, incident)
    return IngestError(500, code_pb2.INTERNAL, f"applying the redaction policy failed: an internal error "
                                               f"(incident {incident}); this is a bug")


def _internal(what: str) -> IngestError:
    incident = uuid.uuid4().hex[:12]
    log.exception("%s (incident %s)", what, incident)
    return IngestError(500, code_pb2.INTERNAL, f"{what}: an internal error (incident {incident}); this is a bug")
