"""Quickstart: a decorated LLM call sends spans to `meritlens serve`. Runs offline.

    make run                                   # in one shell
    OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 .venv/bin/python examples/quickstart.py
    .venv/bin/meritlens sql "select target_id, metric, value, sample_count from windows"

The fake provider below returns OpenAI-shaped responses, so no API key is needed; replace
`fake_chat_completion` with `client.chat.completions.create(...)` in your application.
"""

from __future__ import annotations

import random
import time

from meritlens.instrumentation import configure, observe, record_outcome, shutdown, task

TARGET = "support-bot/answer"
QUESTIONS = ["How do I reset my password?", "Where is my invoice?", "Can I change my plan?",
             "Why was I charged twice?", "How do I delete my account?"]


def fake_chat_completion(question: str) -> dict:
    """What an OpenAI Chat Completions call returns (as a dict), after a realistic delay."""
    time.sleep(random.uniform(0.05, 0.2))
    prompt_tokens = 40 + len(question.split()) * 2
    return {
        "id": "chatcmpl-quickstart",
        "object": "chat.completion",
        "model": "gpt-4o-mini-2024-07-18",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": f"Here is help with: {question}"}}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 25, "total_tokens": prompt_tokens + 25},
    }


@observe(target=TARGET)
def answer(question: str) -> dict:
    return fake_chat_completion(question)


def main() -> None:
    configure(service_name="support-bot")  # OTLP exporter from OTEL_EXPORTER_OTLP_ENDPOINT
    for number, question in enumerate(QUESTIONS, start=1):
        with task(task_id=f"ticket-{number}", target=TARGET):
            response = answer(question)
            record_outcome(success="help" in response["choices"][0]["message"]["content"])
    shutdown()  # flush the exporter before exiting
    print(f"sent {len(QUESTIONS)} tasks for target {TARGET!r}")


if __name__ == "__main__":
    main()
