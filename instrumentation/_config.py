"""``configure()`` and ``shutdown()``: the tracer provider and OTLP exporter meritlens' spans go to."""

from __future__ import annotations

import os
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

from meritlens.instrumentation import conventions as c
from meritlens.instrumentation import pricing
from meritlens.instrumentation._state import config, log
from meritlens.instrumentation.redaction import RedactionPolicy, load_policy

PROTOCOL_ENV = "OTEL_EXPORTER_OTLP_PROTOCOL"
TRACES_PROTOCOL_ENV = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
DEFAULT_PROTOCOL = "http/protobuf"


def _otlp_exporter() -> SpanExporter:
    """The OTLP span exporter for the protocol the standard variables name (default http/protobuf).

    Endpoint, headers, timeout, compression and certificates come from the ``OTEL_EXPORTER_OTLP_*``
    variables, which the exporters read themselves.
    """
    protocol = (os.environ.get(TRACES_PROTOCOL_ENV) or os.environ.get(PROTOCOL_ENV) or DEFAULT_PROTOCOL).strip()
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter

        return GrpcExporter()
    if protocol != DEFAULT_PROTOCOL:
        log.warning("OTLP protocol %r is not supported by the Python exporter; using %s", protocol, DEFAULT_PROTOCOL)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter

    return HttpExporter()


def _redacting(exporter: SpanExporter, policy: RedactionPolicy | None) -> SpanExporter:
    if policy is None:
        return exporter
    from meritlens.instrumentation._redact_export import RedactingSpanExporter

    return RedactingSpanExporter(exporter, policy)


def configure(
    *,
    target: str | None = None,
    service_name: str | None = None,
    price_file: str | os.PathLike[str] | None = None,
    span_exporter: SpanExporter | None = None,
    tracer_provider: Any = None,
    redact: str | os.PathLike[str] | RedactionPolicy | None = None,
) -> Any:
    """Set up where meritlens' spans go; returns the tracer provider in use.

    Without arguments: a ``TracerProvider`` whose resource comes from ``OTEL_SERVICE_NAME`` and
    ``OTEL_RESOURCE_ATTRIBUTES``, with a ``BatchSpanProcessor`` feeding the OTLP exporter chosen by
    ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`` / ``OTEL_EXPORTER_OTLP_PROTOCOL`` (``http/protobuf`` by default,
    or ``grpc``); endpoint and headers come from the exporters' own ``OTEL_EXPORTER_OTLP_*`` variables. It
    becomes the global tracer provider unless the application already set one.

    ``target`` puts ``meritlens.target.id`` on the resource, and on every meritlens span that names no other
    target. ``service_name`` overrides ``OTEL_SERVICE_NAME``. ``price_file`` installs a user price file (else
    ``MERITLENS_PRICE_FILE`` is read on first use). ``span_exporter`` replaces the OTLP exporter (tests, other
    backends). ``tracer_provider`` uses the given provider as is (adding ``span_exporter`` to it if given)
    without touching the global one. ``redact`` (a policy file, or a loaded RedactionPolicy) wraps the
    exporter configure() adds in a RedactingSpanExporter, so the policy applies before spans leave the process
    (docs/redaction.md); an invalid policy raises RedactionPolicyError.

    Idempotent: a second call keeps the first provider and adds no second exporter (only ``price_file`` is
    applied again). Call :func:`shutdown` to flush and start over.
    """
    policy = redact if redact is None or isinstance(redact, RedactionPolicy) else load_policy(redact)
    with config.lock:
        if price_file is not None:
            pricing.set_price_file(price_file)
        if config.tracer_provider is not None:
            if span_exporter is not None or tracer_provider is not None or target is not None or service_name:
                log.info("meritlens is already configured; the new provider, exporter and resource are ignored")
            if policy is not None:
                log.warning("meritlens is already configured: the redaction policy %s is NOT applied; "
                            "call shutdown() before configure(redact=...)", policy.source)
            return config.tracer_provider
        if tracer_provider is not None:
            provider = tracer_provider
            if span_exporter is not None:
                provider.add_span_processor(BatchSpanProcessor(_redacting(span_exporter, policy)))
            owns = False
            resource_target = getattr(getattr(provider, "resource", None), "attributes", {}).get(c.TARGET_ID)
        else:
            attributes: dict[str, Any] = {}
            if service_name:
                attributes[c.SERVICE_NAME] = service_name
            if target is not None:
                attributes[c.TARGET_ID] = target
            resource = Resource.create(attributes)
            provider = TracerProvider(resource=resource)
            provider.add_span_processor(BatchSpanProcessor(_redacting(span_exporter or _otlp_exporter(), policy)))
            owns = True
            resource_target = resource.attributes.get(c.TARGET_ID)
            if not isinstance(trace.get_tracer_provider(), TracerProvider):
                trace.set_tracer_provider(provider)
            else:
                log.info("a global tracer provider is already set; meritlens sends its spans to its own provider")
        default_target = target if target is not None else resource_target
        config.default_attributes = {c.TARGET_ID: str(default_target)} if default_target else {}
        config.tracer_provider = provider
        config.owns_provider = owns
        config.tracer = None
        return provider


def shutdown(timeout_millis: int = 30_000) -> None:
    """Flush every pending span, shut down the provider configure() created, and forget the configuration."""
    with config.lock:
        provider = config.tracer_provider
        owns = config.owns_provider
        config.tracer_provider = None
        config.owns_provider = False
        config.tracer = None
        config.default_attributes = {}
    if provider is None:
        provider = trace.get_tracer_provider()
        owns = False
    force_flush = getattr(provider, "force_flush", None)
    if force_flush is not None:
        force_flush(timeout_millis)
    if owns:
        provider.shutdown()


def force_flush(timeout_millis: int = 30_000) -> bool:
    """Export every pending span now; returns whether it completed in time."""
    provider = config.tracer_provider or trace.get_tracer_provider()
    flush = getattr(provider, "force_flush", None)
    return bool(flush(timeout_millis)) if flush is not None else True
