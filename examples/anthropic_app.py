"""An Anthropic Messages app observed by `instrument(client)`, with prompt caching. Runs offline.

    OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 .venv/bin/python examples/anthropic_app.py
"""

from __future__ import annotations

import anthropic
import httpx2

from fake_providers import anthropic_transport
from meritlens.instrumentation import configure, instrument, record_outcome, shutdown, task

TARGET = "refund-bot/answer"


def main() -> None:
    configure(service_name="refund-bot")
    http_client = httpx2.Client(transport=anthropic_transport())
    client = instrument(anthropic.Anthropic(api_key="offline", http_client=http_client), target=TARGET)
    for number in range(4):
        with task(task_id=f"refund-{number}", target=TARGET):
            message = client.messages.create(model="claude-3-5-haiku-20241022", max_tokens=200,
                                             messages=[{"role": "user", "content": "How long do refunds take?"}])
            record_outcome(success="5 business days" in message.content[0].text, quality=0.9)
    shutdown()
    print(f"sent 4 tasks for {TARGET!r}")


if __name__ == "__main__":
    main()
