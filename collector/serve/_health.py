"""The collector's own health as Prometheus metrics: spans received and refused (by reason) and
how long span writes take. One registry per process, as there is one collector per process;
`/metrics` (collector/serve/_metrics.py) exposes it beside the windows.

The receive and write paths call in here; `count_exports` and `time_writes` wrap them from the
outside so the code they wrap stays free of metrics.
"""

from __future__ import annotations

import contextvars
import functools

from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics

disable_created_metrics()  # the `_created` series double every counter and no alert reads them
REGISTRY = CollectorRegistry(auto_describe=True)

SPANS_RECEIVED = Counter(
    "meritlens_spans_received", "Spans in export requests the collector decoded (OTLP/HTTP and gRPC).",
    registry=REGISTRY)
SPANS_REFUSED = Counter(
    "meritlens_spans_refused", "Spans the collector refused, by reason: invalid (refused one by one in "
    "partial_success), too_many_spans, overloaded, bad_request, internal.", ["reason"], registry=REGISTRY)
SPANS_ACCEPTED = Counter(
    "meritlens_spans_accepted", "Spans acknowledged as durable (new or already stored).", registry=REGISTRY)
WRITE_SECONDS = Histogram(
    "meritlens_span_write_duration_seconds", "Time to make one coalesced group of export batches durable.",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0), registry=REGISTRY)

EXPORTS_OVERLOADED = Counter(
    "meritlens_exports_overloaded", "Export requests answered 503 / UNAVAILABLE with a retry delay, by the limit "
    "that refused them: memory_limit (the process above the memory limiter's soft limit; refused before the body "
    "is read), in_flight_bytes, grpc_calls, write_queue, store_failed, shutting_down.", ["reason"],
    registry=REGISTRY)

REFUSAL_REASONS = ("invalid", "too_many_spans", "overloaded", "bad_request", "internal")
for _reason in REFUSAL_REASONS:  # every reason is exposed from the start, so a rate() sees its first refusal
    SPANS_REFUSED.labels(_reason)
OVERLOAD_REASONS = ("memory_limit", "in_flight_bytes", "grpc_calls", "write_queue", "store_failed", "shutting_down")
for _reason in OVERLOAD_REASONS:
    EXPORTS_OVERLOADED.labels(_reason)

_request_spans: contextvars.ContextVar[int | None] = contextvars.ContextVar("meritlens_request_spans", default=None)


def received(spans: int) -> None:
    """Called by the receive path once a request's spans are counted."""
    SPANS_RECEIVED.inc(spans)
    _request_spans.set(spans)


def overloaded(reason: str) -> None:
    """Called by both receivers when they answer an export 503 / UNAVAILABLE for ``reason``."""
    EXPORTS_OVERLOADED.labels(reason).inc()


def overloaded_totals() -> dict[str, int]:
    """Export requests refused so far, by reason, read through the counter's public samples."""
    [family] = EXPORTS_OVERLOADED.collect()
    return {s.labels["reason"]: int(s.value) for s in family.samples if s.name.endswith("_total")}


def accepted_total() -> int:
    """Spans acknowledged so far, read through the counter's public samples."""
    [family] = SPANS_ACCEPTED.collect()
    return int(next(s.value for s in family.samples if s.name.endswith("_total")))


def _reason(http_status: int) -> str:
    if http_status == 413:
        return "too_many_spans"
    if http_status in (429, 503):
        return "overloaded"
    if http_status == 400:
        return "bad_request"
    return "internal"


def count_exports(ingest) -> None:
    """Count what each `Ingest.export` of ``ingest`` accepted and refused. A request refused before
    its spans were counted (unreadable or too large a body) refuses no countable span."""
    from meritlens.collector.receive._ingest import IngestError

    export = ingest.export

    @functools.wraps(export)
    async def counted(*args, **kwargs):
        token = _request_spans.set(None)
        try:
            outcome = await export(*args, **kwargs)
        except IngestError as exc:
            spans = _request_spans.get()
            if spans:
                SPANS_REFUSED.labels(_reason(exc.http_status)).inc(spans)
            raise
        finally:
            _request_spans.reset(token)
        SPANS_ACCEPTED.inc(outcome.accepted)
        if outcome.rejected:
            SPANS_REFUSED.labels("invalid").inc(outcome.rejected)
        return outcome

    ingest.export = counted


def time_writes(pipeline) -> None:
    """Time every durable write of ``pipeline`` (its `_write` of a coalesced group)."""
    write = pipeline._write

    @functools.wraps(write)
    def timed(*args, **kwargs):
        with WRITE_SECONDS.time():
            return write(*args, **kwargs)

    pipeline._write = timed
