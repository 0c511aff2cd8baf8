"""What the ingest path reports as it goes: the spans it received, acknowledged and refused, the
exports it answered as overloaded, and how long its durable writes took. The receivers, `Ingest` and
`IngestPipeline` are each given the one `IngestHealth` of their collector (serve/_health.py counts
it for /metrics and /healthz); without one they report to `NO_HEALTH`."""

from __future__ import annotations

from typing import Protocol

REFUSAL_REASONS = ("invalid", "too_many_spans", "overloaded", "bad_request", "internal")
"""Why spans were refused: invalid (one by one, in partial_success), or with their whole request."""
OVERLOAD_REASONS = ("memory_limit", "in_flight_bytes", "grpc_calls", "write_queue", "store_failed", "shutting_down")
"""Which limit refused an export with 503 / UNAVAILABLE and a retry delay."""


def refusal_reason(http_status: int) -> str:
    """The refusal reason of spans whose whole request was answered ``http_status``."""
    if http_status == 413:
        return "too_many_spans"
    if http_status in (429, 503):
        return "overloaded"
    if http_status == 400:
        return "bad_request"
    return "internal"


class IngestHealth(Protocol):
    """Where the ingest path reports."""

    def received(self, spans: int) -> None:
        """A request's spans were decoded and counted."""

    def accepted(self, spans: int) -> None:
        """Spans were acknowledged as durable (new or already stored)."""

    def refused(self, reason: str, spans: int) -> None:
        """Spans were refused for ``reason`` (one of `REFUSAL_REASONS`)."""

    def overloaded(self, reason: str) -> None:
        """An export was answered 503 / UNAVAILABLE for ``reason`` (one of `OVERLOAD_REASONS`)."""

    def wrote(self, seconds: float) -> None:
        """One coalesced group of export batches was made durable in ``seconds``."""


class _NoHealth:
    """Reports to no one: an `Ingest` or pipeline outside a collector (tests, bulk loads)."""

    def received(self, spans: int) -> None:
        pass

    def accepted(self, spans: int) -> None:
        pass

    def refused(self, reason: str, spans: int) -> None:
        pass

    def overloaded(self, reason: str) -> None:
        pass

    def wrote(self, seconds: float) -> None:
        pass


NO_HEALTH: IngestHealth = _NoHealth()
