"""End to end: instrumented SDK calls exported over OTLP/HTTP into a real `meritlens serve` process."""

from __future__ import annotations

import asyncio

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider

import meritlens.instrumentation as ml
from meritlens.instrumentation import conventions as c
from tests.instrumentation.llm_fakes import (
    RETRY_NOW,
    Script,
    anthropic_client,
    anthropic_message,
    async_openai_client,
    chat_completion,
    chat_stream_handler,
    expected_cost,
    json_response,
    openai_client,
    status_response,
)

TARGET = "e2e-bot/answer"


@pytest.mark.slow
def test_spans_reach_the_collector_with_their_evidence(collector):
    provider = TracerProvider(resource=Resource.create({c.SERVICE_NAME: "e2e-bot"}))
    ml.configure(tracer_provider=provider, span_exporter=OTLPSpanExporter(endpoint=collector.traces_url))

    openai = ml.instrument(
        openai_client(
            Script(status_response(429, RETRY_NOW), json_response(chat_completion(cached_tokens=40))), max_retries=2
        ),
        target=TARGET,
    )
    streaming = ml.instrument(openai_client(Script(chat_stream_handler())), target=TARGET)
    claude = ml.instrument(
        anthropic_client(Script(json_response(anthropic_message(cache_read=1000, cache_creation=200)))), target=TARGET
    )
    judge = ml.instrument(async_openai_client(Script(json_response(chat_completion()))), role="orchestration")

    with ml.task("task-e2e", case_id="case-1", run_id="run-1", target=TARGET):
        openai.chat.completions.create(model="gpt-4o-mini", messages=[])
        ml.step()
        assert len(list(streaming.chat.completions.create(model="gpt-4o-mini", messages=[], stream=True))) == 4
        with ml.tool("lookup"):
            claude.messages.create(model="claude-3-5-sonnet-20241022", max_tokens=10, messages=[])
        asyncio.run(judge.chat.completions.create(model="gpt-4o-mini", messages=[]))
        ml.record_outcome(success=True, quality=0.75, human_intervention=False)
    ml.shutdown()  # flushes the batch processor into the collector

    rows = collector.sql(
        "select name, target_id, role, task_id, case_id, run_id, provider, operation, request_model, "
        "response_model, input_tokens, output_tokens, cache_read_tokens, cache_creation_tokens, cost_usd, "
        "retries, ttft_s, tool_calls, agent_step, tool_name, outcome_success, quality_score, "
        "human_intervention, trace_id from spans order by start_time"
    )
    by_name: dict[str, list[dict]] = {}
    for row in rows:
        by_name.setdefault(row["name"], []).append(row)

    assert sorted(by_name) == [
        "chat claude-3-5-sonnet-20241022",
        "chat gpt-4o-mini",
        "execute_tool lookup",
        f"task {TARGET}",
    ]
    assert len({row["trace_id"] for row in rows}) == 1  # the task is one trace
    for row in rows:
        assert row["task_id"] == "task-e2e" and row["case_id"] == "case-1" and row["run_id"] == "run-1"
        assert row["target_id"] == TARGET

    [task_row] = by_name[f"task {TARGET}"]
    assert task_row["outcome_success"] is True
    assert task_row["quality_score"] == 0.75
    assert task_row["human_intervention"] is False
    assert task_row["agent_step"] == 1

    plain, stream, judged = by_name["chat gpt-4o-mini"]
    assert (plain["input_tokens"], plain["output_tokens"], plain["cache_read_tokens"]) == (100, 20, 40)
    assert plain["retries"] == 1
    assert plain["role"] == "application"
    assert plain["cost_usd"] == pytest.approx(expected_cost("openai", "gpt-4o-mini-2024-07-18", 100, 20, cache_read=40))
    assert plain["agent_step"] is None
    assert (stream["input_tokens"], stream["output_tokens"], stream["retries"], stream["agent_step"]) == (10, 2, 0, 1)
    assert stream["ttft_s"] > 0
    assert judged["role"] == "orchestration"

    [anthropic_row] = by_name["chat claude-3-5-sonnet-20241022"]
    assert anthropic_row["provider"] == "anthropic"
    assert anthropic_row["input_tokens"] == 1250  # 50 + 1000 cache read + 200 cache write, counted once
    assert (anthropic_row["cache_read_tokens"], anthropic_row["cache_creation_tokens"]) == (1000, 200)
    assert anthropic_row["cost_usd"] == pytest.approx((50 * 3 + 1000 * 0.3 + 200 * 3.75 + 30 * 15) / 1e6)
    assert anthropic_row["tool_calls"] == 0
    assert by_name["execute_tool lookup"][0]["tool_name"] == "lookup"
