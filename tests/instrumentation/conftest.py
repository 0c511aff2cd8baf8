from __future__ import annotations

from collections.abc import Iterator
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import meritlens.instrumentation as ml
from meritlens.instrumentation import _state, pricing


class Spans:
    """The spans meritlens emitted during a test, through the SDK's InMemorySpanExporter."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))

    def all(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def one(self) -> ReadableSpan:
        spans = self.all()
        assert len(spans) == 1, [span.name for span in spans]
        return spans[0]

    def named(self, name: str) -> list[ReadableSpan]:
        return [span for span in self.all() if span.name == name]


@pytest.fixture
def spans() -> Iterator[Spans]:
    recorded = Spans()
    ml.configure(tracer_provider=recorded.provider)
    yield recorded
    ml.shutdown()


@pytest.fixture(autouse=True)
def _fresh_state(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test starts unconfigured, with no user prices and no once-only warnings already spent."""
    monkeypatch.delenv(pricing.PRICE_FILE_ENV, raising=False)
    pricing._reset_for_tests()
    _state.warn_once.forget()
    yield
    ml.shutdown()
    pricing._reset_for_tests()
