"""Runs the official openai SDK against a mock transport under one third-party instrumentation and
exports its spans to a collector. Run as a subprocess: instrumentors patch the SDK process-wide.

usage: python drive_openai.py {openinference|openllmetry|otel-v2|none} ENDPOINT CALLS
"""

from __future__ import annotations

import json
import sys
import time

import httpx2

BODY = {
    "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-4o-mini-2024-07-18",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120,
              "prompt_tokens_details": {"cached_tokens": 40}, "completion_tokens_details": {"reasoning_tokens": 5}},
}
LATENCY_S = 0.05


def _chunks():
    base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": BODY["model"]}
    yield {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "hi"}, "finish_reason": None}]}
    yield {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    yield {**base, "choices": [], "usage": BODY["usage"]}


def handler(request: httpx2.Request) -> httpx2.Response:
    time.sleep(LATENCY_S)
    if json.loads(request.content).get("stream"):
        data = "".join(f"data: {json.dumps(c)}\n\n" for c in _chunks()) + "data: [DONE]\n\n"
        return httpx2.Response(200, content=data.encode(), headers={"content-type": "text/event-stream"})
    return httpx2.Response(200, json=BODY)


def instrument_with(which: str, provider) -> None:
    """Install one third-party instrumentation of the openai SDK (none for "meritlens" and "none")."""
    if which == "openinference":
        from openinference.instrumentation.openai import OpenAIInstrumentor
        OpenAIInstrumentor().instrument(tracer_provider=provider)
    elif which == "openllmetry":
        from opentelemetry.instrumentation.openai import OpenAIInstrumentor
        OpenAIInstrumentor().instrument(tracer_provider=provider)
    elif which == "otel-v2":
        httpx2.alias_httpx()
        from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
        OpenAIInstrumentor().instrument(tracer_provider=provider)


def main() -> None:
    which, endpoint, calls = sys.argv[1], sys.argv[2], int(sys.argv[3])
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": f"svc-{which}"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    trace.set_tracer_provider(provider)
    instrument_with(which, provider)
    import openai

    client = openai.OpenAI(api_key="test", http_client=httpx2.Client(transport=httpx2.MockTransport(handler)))
    if which == "meritlens":
        from meritlens.instrumentation import instrument
        client = instrument(client, target=f"svc-{which}/gpt-4o-mini")
    messages = [{"role": "user", "content": "hello"}]
    for i in range(calls):
        if i % 2:
            stream = client.chat.completions.create(
                model="gpt-4o-mini", messages=messages, stream=True, stream_options={"include_usage": True})
            for _ in stream:
                pass
        else:
            client.chat.completions.create(model="gpt-4o-mini", messages=messages)
    provider.shutdown()


if __name__ == "__main__":
    main()
