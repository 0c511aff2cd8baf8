"""An OpenAI agent loop with a tool and a streamed answer, observed by `instrument(client)`. Runs offline.

    OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 .venv/bin/python examples/openai_tools_streaming.py
"""

from __future__ import annotations

import json

import httpx2
import openai

from fake_providers import openai_transport
from meritlens.instrumentation import configure, instrument, record_outcome, shutdown, step, task, tool

TARGET = "order-bot/agent"
TOOLS = [{"type": "function", "function": {
    "name": "lookup_order", "description": "Find an order",
    "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}}}}]


@tool(name="lookup_order")
def lookup_order(order_id: str) -> dict:
    return {"order_id": order_id, "ships": "tomorrow"}


def handle(client: openai.OpenAI, question: str) -> str:
    messages = [{"role": "user", "content": question}]
    step()  # agent step 1: let the model pick a tool
    reply = client.chat.completions.create(model="gpt-4o-mini", messages=messages, tools=TOOLS)
    call = reply.choices[0].message.tool_calls[0]
    result = lookup_order(**json.loads(call.function.arguments))
    messages += [reply.choices[0].message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)}]
    step()  # agent step 2: stream the answer
    stream = client.chat.completions.create(model="gpt-4o-mini", messages=messages, stream=True)
    return "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)


def main() -> None:
    configure(service_name="order-bot")
    client = instrument(openai.OpenAI(api_key="offline", http_client=httpx2.Client(transport=openai_transport())),
                        target=TARGET)
    for number in range(3):
        with task(task_id=f"order-question-{number}", target=TARGET):
            answer = handle(client, "When does order A-17 ship?")
            record_outcome(success="ships" in answer)
    shutdown()
    print(f"answered 3 questions as {TARGET!r}: {answer}")


if __name__ == "__main__":
    main()
