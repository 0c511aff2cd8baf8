"""configure() / shutdown(): provider, exporter choice, resource, idempotence, flushing."""

from __future__ import annotations

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import meritlens.instrumentation as ml
from meritlens.instrumentation import _config
from meritlens.instrumentation import conventions as c
from tests.instrumentation.llm_fakes import attrs, chat_completion


@ml.observe(target="t/configure")
def _call():
    return chat_completion()


def test_second_configure_adds_no_second_exporter():
    first, second = InMemorySpanExporter(), InMemorySpanExporter()
    provider = ml.configure(span_exporter=first, service_name="svc")
    assert ml.configure(span_exporter=second) is provider
    assert ml.configure() is provider

    _call()
    ml.shutdown()  # flushes the batch processor

    assert len(first.get_finished_spans()) == 1
    assert second.get_finished_spans() == ()


def test_shutdown_flushes_pending_spans_and_allows_reconfiguring():
    exporter = InMemorySpanExporter()
    ml.configure(span_exporter=exporter)
    _call()
    assert exporter.get_finished_spans() == ()  # still in the batch queue
    ml.shutdown()
    assert len(exporter.get_finished_spans()) == 1

    again = InMemorySpanExporter()
    ml.configure(span_exporter=again)
    _call()
    ml.shutdown()
    assert len(again.get_finished_spans()) == 1


def test_resource_from_standard_variables_and_target(monkeypatch):
    monkeypatch.setenv("OTEL_SERVICE_NAME", "support-bot")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=staging,team=cx")
    exporter = InMemorySpanExporter()
    provider = ml.configure(span_exporter=exporter, target="support-bot/answer")
    resource = provider.resource.attributes
    assert resource[c.SERVICE_NAME] == "support-bot"
    assert resource["deployment.environment"] == "staging"
    assert resource[c.TARGET_ID] == "support-bot/answer"

    @ml.observe
    def untargeted():
        return chat_completion()

    untargeted()
    ml.shutdown()
    [span] = exporter.get_finished_spans()
    assert attrs(span)[c.TARGET_ID] == "support-bot/answer"  # on the span too, not only the resource
    assert span.resource.attributes[c.TARGET_ID] == "support-bot/answer"


def test_explicit_service_name_wins_over_environment(monkeypatch):
    monkeypatch.setenv("OTEL_SERVICE_NAME", "from-env")
    provider = ml.configure(span_exporter=InMemorySpanExporter(), service_name="explicit")
    assert provider.resource.attributes[c.SERVICE_NAME] == "explicit"


@pytest.mark.parametrize(
    ("general", "traces", "expected"),
    [
        (None, None, HttpExporter),
        ("grpc", None, GrpcExporter),
        ("http/protobuf", "grpc", GrpcExporter),
        ("grpc", "http/protobuf", HttpExporter),
        ("http/json", None, HttpExporter),
    ],
)
def test_exporter_protocol_from_environment(monkeypatch, general, traces, expected):
    for name, value in ((_config.PROTOCOL_ENV, general), (_config.TRACES_PROTOCOL_ENV, traces)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    exporter = _config._otlp_exporter()
    try:
        assert type(exporter) is expected
    finally:
        exporter.shutdown()


def test_http_exporter_honours_endpoint_variable(monkeypatch):
    monkeypatch.delenv(_config.PROTOCOL_ENV, raising=False)
    monkeypatch.delenv(_config.TRACES_PROTOCOL_ENV, raising=False)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4999")
    exporter = _config._otlp_exporter()
    try:
        assert exporter._endpoint == "http://127.0.0.1:4999/v1/traces"
    finally:
        exporter.shutdown()


def test_given_tracer_provider_is_used_and_global_untouched(spans):
    from opentelemetry import trace

    assert trace.get_tracer_provider() is not spans.provider
    _call()
    assert attrs(spans.one())[c.TARGET_ID] == "t/configure"


def test_price_file_through_configure(tmp_path, spans):
    price_file = tmp_path / "prices.toml"
    price_file.write_text(
        '[[price]]\nmodel = "gpt-4o-mini-2024-07-18"\n'
        "input = 1.0\ncached_input = 0.5\noutput = 2.0\ndate = 2024-01-01\n"
    )
    ml.configure(price_file=price_file)
    _call()  # 100 input, 20 output, no cache
    assert attrs(spans.one())[c.COST_USD] == pytest.approx((100 * 1.0 + 20 * 2.0) / 1e6)
