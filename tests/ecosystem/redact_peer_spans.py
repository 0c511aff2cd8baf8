"""Runs the official openai SDK against a mock transport under one instrumentation that records message content,
and writes the spans it exports twice, as OTLP protobuf: as recorded (raw.pb) and as a RedactingSpanExporter
with the given policy passes them on (redacted.pb). Run as a subprocess: instrumentors patch the SDK process-wide.

usage: python redact_peer_spans.py {openinference|openllmetry|otel-v2|meritlens} POLICY OUT_DIR
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import httpx2

SECRETS = {
    "email": "jane.doe@example.com",
    "phone": "+1 (555) 123-4567",
    "payment_card": "4111 1111 1111 1111",
    "openai_key": "sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8t",
}
QUESTION = (f"I am Jane ({SECRETS['email']}), card {SECRETS['payment_card']}.\nMy key is \"{SECRETS['openai_key']}\"; "
            "what is my plan?")
ANSWER = f"Sure: we will call you at {SECRETS['phone']} about your café order."
BODY = {
    "id": "chatcmpl-redact-1", "object": "chat.completion", "created": 1, "model": "gpt-4o-mini-2024-07-18",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": ANSWER}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
}


def handler(request: httpx2.Request) -> httpx2.Response:
    return httpx2.Response(200, json=BODY)


def main() -> None:
    which, policy, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    os.environ.setdefault("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
    os.environ.setdefault("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "SPAN_ONLY")
    from drive_openai import instrument_with  # beside this script, which runs as a subprocess
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from meritlens.instrumentation import RedactingSpanExporter

    raw, redacted = InMemorySpanExporter(), InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": f"svc-{which}", "host.ip": "10.1.2.3"}))
    provider.add_span_processor(SimpleSpanProcessor(raw))
    provider.add_span_processor(SimpleSpanProcessor(RedactingSpanExporter(redacted, policy)))
    instrument_with(which, provider)
    import openai

    client = openai.OpenAI(api_key="test", http_client=httpx2.Client(transport=httpx2.MockTransport(handler)))
    if which == "meritlens":
        from meritlens.instrumentation import configure, instrument
        configure(tracer_provider=provider)
        client = instrument(client, target=f"svc-{which}/gpt-4o-mini")
    client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": QUESTION}])
    provider.force_flush()
    (out / "raw.pb").write_bytes(encode_spans(raw.get_finished_spans()).SerializeToString())
    (out / "redacted.pb").write_bytes(encode_spans(redacted.get_finished_spans()).SerializeToString())


if __name__ == "__main__":
    main()
