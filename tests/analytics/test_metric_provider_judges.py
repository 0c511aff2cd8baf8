"""The OpenAI and Anthropic judges through their official SDKs, against a local stand-in of each API
(a paid LLM API cannot be reached from tests)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from meritlens.analytics import JudgeError, JudgeSession
from meritlens.analytics._judge import AnthropicJudge, OpenAIJudge, judge_from_spec


class _ProviderStandIn(BaseHTTPRequestHandler):
    seen: list[dict] = []
    fail_with: int | None = None

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization"),
                                "api_key": self.headers.get("x-api-key")})
        if type(self).fail_with:
            reply = {"error": {"type": "invalid_request_error", "message": "model not found"}}
            status = type(self).fail_with
        elif self.path.endswith("/chat/completions"):
            reply, status = {
                "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": body["model"],
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": '{"score": 0.7, "reason": "good"}'}}],
                "usage": {"prompt_tokens": 42, "completion_tokens": 9, "total_tokens": 51},
            }, 200
        else:
            reply, status = {
                "id": "msg_1", "type": "message", "role": "assistant", "model": body["model"],
                "content": [{"type": "text", "text": '{"score": 0.25, "reason": "meh"}'}],
                "stop_reason": "end_turn", "stop_sequence": None, "usage": {"input_tokens": 40, "output_tokens": 8},
            }, 200
        data = json.dumps(reply).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def provider():
    _ProviderStandIn.seen = []
    _ProviderStandIn.fail_with = None
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ProviderStandIn)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", _ProviderStandIn
    server.shutdown()
    server.server_close()


def test_openai_judge_sends_the_pinned_model_and_reads_score_and_usage(provider):
    url, handler = provider
    judge = OpenAIJudge("gpt-4o-mini-2024-07-18", base_url=url + "/v1", api_key="sk-test")
    session = JudgeSession(judge, target_id="t", scope="all", replicas=2)
    judged = session.score_task("task_quality", "t1", "task_quality.j2",
                                {"metric": "task_quality", "input": "Q", "output": "A", "instructions": None})
    assert judged.mean == 0.7
    assert [s["body"]["model"] for s in handler.seen] == ["gpt-4o-mini-2024-07-18"] * 2
    assert handler.seen[0]["auth"] == "Bearer sk-test"
    assert "A" in handler.seen[0]["body"]["messages"][0]["content"]
    call = session.calls[0]
    assert (call.input_tokens, call.output_tokens, call.provider) == (42, 9, "openai")


def test_anthropic_judge(provider):
    url, handler = provider
    judge = AnthropicJudge("claude-haiku-4-5-20251001", base_url=url, api_key="ak-test")
    reply = judge.complete("grade this")
    assert json.loads(reply.text)["score"] == 0.25
    assert (reply.input_tokens, reply.output_tokens) == (40, 8)
    assert handler.seen[0]["path"] == "/v1/messages"
    # The SDK sends the key as x-api-key or (newer releases) as a bearer token.
    assert "ak-test" in (handler.seen[0]["api_key"] or "") + (handler.seen[0]["auth"] or "")


@pytest.mark.parametrize("judge_class, path", [(OpenAIJudge, "/v1"), (AnthropicJudge, "")])
def test_a_provider_error_is_a_judge_error(provider, judge_class, path):
    url, handler = provider
    handler.fail_with = 404
    judge = judge_class("some-model-2025-01-01", base_url=url + path, api_key="k")
    with pytest.raises(JudgeError, match="model not found"):
        judge.complete("x")


def test_judge_specs():
    assert judge_from_spec("fake").model == "fake-judge-2025-01-01"
    assert judge_from_spec("fake:fake-other-1").model == "fake-other-1"
    # The fake judge never records its hash-derived scores under a real model's name.
    for real in ("gpt-4o-2024-08-06", "claude-sonnet-4-20250514", "judge-2025-01-01"):
        with pytest.raises(JudgeError, match="must start with 'fake-'"):
            judge_from_spec(f"fake:{real}")
    with pytest.raises(JudgeError, match="exact model"):
        judge_from_spec("openai")
    with pytest.raises(JudgeError, match="moving alias"):
        judge_from_spec("anthropic:claude-3-5-sonnet-latest")
    with pytest.raises(JudgeError, match="unknown judge"):
        judge_from_spec("gemini:x")
