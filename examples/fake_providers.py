"""Offline stand-ins for the OpenAI and Anthropic HTTP APIs, for the examples (no key, no network).

The official SDKs run their own code against these transports, exactly as against the real APIs.
"""

from __future__ import annotations

import json
import time

import httpx2


def _openai_chat(body: dict) -> httpx2.Response:
    time.sleep(0.02)
    wants_tool = body.get("tools") and not any(m.get("role") == "tool" for m in body["messages"])
    message = (
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": "call_1", "type": "function",
            "function": {"name": "lookup_order", "arguments": json.dumps({"order_id": "A-17"})}}]}
        if wants_tool else {"role": "assistant", "content": "Your order A-17 ships tomorrow."}
    )
    usage = {"prompt_tokens": 120, "completion_tokens": 18, "total_tokens": 138,
             "prompt_tokens_details": {"cached_tokens": 64}}
    base = {"id": "chatcmpl-example", "created": 1, "model": "gpt-4o-mini-2024-07-18"}
    if body.get("stream"):
        chunks = [{**base, "object": "chat.completion.chunk",
                   "choices": [{"index": 0, "delta": {"role": "assistant", "content": part}, "finish_reason": None}]}
                  for part in ("Your order ", "A-17 ships ", "tomorrow.")]
        chunks.append({**base, "object": "chat.completion.chunk",
                       "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        if (body.get("stream_options") or {}).get("include_usage"):
            chunks.append({**base, "object": "chat.completion.chunk", "choices": [], "usage": usage})
        data = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
        return httpx2.Response(200, content=data.encode(), headers={"content-type": "text/event-stream"})
    finish = "tool_calls" if wants_tool else "stop"
    return httpx2.Response(200, json={**base, "object": "chat.completion", "usage": usage,
                                      "choices": [{"index": 0, "message": message, "finish_reason": finish}]})


def openai_transport() -> httpx2.MockTransport:
    return httpx2.MockTransport(lambda request: _openai_chat(json.loads(request.content)))


def _anthropic_message(body: dict) -> httpx2.Response:
    time.sleep(0.02)
    return httpx2.Response(200, json={
        "id": "msg_example", "type": "message", "role": "assistant", "model": "claude-3-5-haiku-20241022",
        "content": [{"type": "text", "text": "Refunds take 5 business days."}],
        "stop_reason": "end_turn", "stop_sequence": None,
        # Anthropic reports cached tokens beside input_tokens; meritlens adds them once.
        "usage": {"input_tokens": 30, "output_tokens": 12, "cache_read_input_tokens": 200,
                  "cache_creation_input_tokens": 0},
    })


def anthropic_transport() -> httpx2.MockTransport:
    return httpx2.MockTransport(lambda request: _anthropic_message(json.loads(request.content)))
