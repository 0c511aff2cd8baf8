"""task(), step(), tool() and record_outcome()."""

from __future__ import annotations

import asyncio

import pytest
from opentelemetry import trace
from opentelemetry.trace import SpanKind, StatusCode

import meritlens.instrumentation as ml
from meritlens.instrumentation import conventions as c
from tests.instrumentation.llm_fakes import (
    Script,
    async_openai_client,
    attrs,
    chat_completion,
    json_response,
    openai_client,
)


def _task_span(spans):
    [span] = [span for span in spans.all() if attrs(span).get(c.SPAN_TYPE) == c.SPAN_TYPE_TASK]
    return span


def test_task_is_one_trace_and_children_inherit_ids(spans):
    client = ml.instrument(openai_client(Script(json_response(chat_completion()))))
    outer_tracer = spans.provider.get_tracer("app")

    with outer_tracer.start_as_current_span("web request") as web_span:
        with ml.task("task-1", case_id="case-7", run_id="run-3", assessment_id="as-1", target="bot/answer") as current:
            assert ml.current_task() is current
            client.chat.completions.create(model="gpt-4o-mini", messages=[])
            client.chat.completions.create(model="gpt-4o-mini", messages=[])

    root = _task_span(spans)
    assert root.parent is None  # a task opens its own trace...
    assert root.links[0].context.span_id == web_span.get_span_context().span_id  # ...linked to the caller's
    assert root.kind is SpanKind.INTERNAL
    assert attrs(root) == {
        c.TASK_ID: "task-1",
        c.CASE_ID: "case-7",
        c.RUN_ID: "run-3",
        c.ASSESSMENT_ID: "as-1",
        c.TARGET_ID: "bot/answer",
        c.ROLE: "application",
        c.SPAN_TYPE: "task",
    }
    calls = spans.named("chat gpt-4o-mini")
    assert len(calls) == 2
    for call in calls:
        assert call.context.trace_id == root.context.trace_id
        assert call.parent.span_id == root.context.span_id
        call_attrs = attrs(call)
        for key in (c.TASK_ID, c.CASE_ID, c.RUN_ID, c.ASSESSMENT_ID, c.TARGET_ID):
            assert call_attrs[key] == attrs(root)[key]
    assert ml.current_task() is None


def test_new_trace_false_nests_in_the_current_trace(spans):
    with spans.provider.get_tracer("app").start_as_current_span("outer") as outer:
        with ml.task("t", new_trace=False):
            pass
    root = _task_span(spans)
    assert root.parent.span_id == outer.get_span_context().span_id


def test_call_site_target_beats_task_target(spans):
    client = ml.instrument(openai_client(Script(json_response(chat_completion()))), target="explicit")
    with ml.task(target="from-task"):
        client.chat.completions.create(model="gpt-4o-mini", messages=[])
    assert attrs(spans.named("chat gpt-4o-mini")[0])[c.TARGET_ID] == "explicit"


def test_task_role_reaches_calls(spans):
    client = ml.instrument(openai_client(Script(json_response(chat_completion()))))
    with ml.task(role="orchestration"):
        client.chat.completions.create(model="gpt-4o-mini", messages=[])
    assert attrs(spans.named("chat gpt-4o-mini")[0])[c.ROLE] == "orchestration"


def test_agent_steps(spans):
    client = ml.instrument(openai_client(Script(json_response(chat_completion()))))
    with ml.task("agent") as current:
        client.chat.completions.create(model="gpt-4o-mini", messages=[])
        for expected in (1, 2, 3):
            assert ml.step() == expected
            client.chat.completions.create(model="gpt-4o-mini", messages=[])
        with ml.tool("search"):
            pass
    calls = spans.named("chat gpt-4o-mini")
    assert [attrs(call).get(c.AGENT_STEP) for call in calls] == [None, 1, 2, 3]
    assert attrs(spans.named("execute_tool search")[0])[c.AGENT_STEP] == 3
    assert attrs(_task_span(spans))[c.AGENT_STEP] == 3
    assert current.step_count == 3


def test_task_without_steps_records_no_step_count(spans):
    with ml.task("plain"):
        pass
    assert c.AGENT_STEP not in attrs(_task_span(spans))


def test_step_outside_a_task_is_ignored(spans):
    assert ml.step() is None


def test_task_failure_marks_span_and_propagates(spans):
    error = KeyError("missing")
    with pytest.raises(KeyError) as caught:
        with ml.task("boom"):
            raise error
    assert caught.value is error
    root = _task_span(spans)
    assert root.status.status_code is StatusCode.ERROR
    assert attrs(root)[c.ERROR_TYPE] == "KeyError"


def test_async_tasks_are_isolated(spans):
    client = ml.instrument(async_openai_client(Script(json_response(chat_completion()))))

    async def one(task_id):
        async with ml.task(task_id):
            await asyncio.sleep(0)
            ml.step()
            await client.chat.completions.create(model="gpt-4o-mini", messages=[])

    async def main():
        await asyncio.gather(one("a"), one("b"))

    asyncio.run(main())
    roots = {attrs(span)[c.TASK_ID]: span for span in spans.all() if attrs(span).get(c.SPAN_TYPE) == "task"}
    assert set(roots) == {"a", "b"}
    for call in spans.named("chat gpt-4o-mini"):
        call_attrs = attrs(call)
        assert call.parent.span_id == roots[call_attrs[c.TASK_ID]].context.span_id
        assert call_attrs[c.AGENT_STEP] == 1
    assert roots["a"].context.trace_id != roots["b"].context.trace_id


def test_tool_decorator_and_context_manager(spans):
    @ml.tool
    def lookup(city):
        return f"sunny in {city}"

    @ml.tool(name="fetch_page", call_id="call_1")
    async def fetch(url):
        return url.upper()

    with ml.task("tools", target="agent/t"):
        assert lookup("Paris") == "sunny in Paris"
        assert asyncio.run(fetch("x")) == "X"
        with ml.tool("calculator") as calculator:
            assert trace.get_current_span() is calculator.span

    lookup_span = spans.named("execute_tool lookup")[0]
    assert lookup_span.kind is SpanKind.INTERNAL
    lookup_attrs = attrs(lookup_span)
    assert lookup_attrs[c.GEN_AI_OPERATION_NAME] == "execute_tool"
    assert lookup_attrs[c.GEN_AI_TOOL_NAME] == "lookup"
    assert lookup_attrs[c.TASK_ID] == "tools"
    assert lookup_attrs[c.TARGET_ID] == "agent/t"
    assert lookup_span.parent.span_id == _task_span(spans).context.span_id
    fetch_attrs = attrs(spans.named("execute_tool fetch_page")[0])
    assert fetch_attrs[c.GEN_AI_TOOL_CALL_ID] == "call_1"
    assert spans.named("execute_tool calculator")


def test_tool_failure(spans):
    @ml.tool("flaky")
    def flaky():
        raise TimeoutError("slow")

    with pytest.raises(TimeoutError):
        flaky()
    span = spans.named("execute_tool flaky")[0]
    assert span.status.status_code is StatusCode.ERROR
    assert attrs(span)[c.ERROR_TYPE] == "TimeoutError"


def test_outcome_lands_on_the_task_span(spans):
    with ml.task("scored", target="bot"):
        ml.record_outcome(success=True, quality=0.8, evaluator="judge-v1", human_intervention=False)
    root = _task_span(spans)
    root_attrs = attrs(root)
    assert root_attrs[c.OUTCOME_SUCCESS] is True
    assert root_attrs[c.QUALITY_SCORE] == 0.8
    assert root_attrs[c.EVALUATOR] == "judge-v1"
    assert root_attrs[c.HUMAN_INTERVENTION] is False
    assert len(spans.all()) == 1  # no extra span inside a task


def test_outcome_via_task_object(spans):
    with ml.task("scored") as current:
        current.record_outcome(success=False)
    assert attrs(_task_span(spans))[c.OUTCOME_SUCCESS] is False


def test_outcome_outside_a_task_gets_its_own_span(spans):
    ml.configure(target="ignored-already-configured")
    ml.record_outcome(success=False, quality=0.25, target="bot/answer", task_id="finished-task", run_id="r1")
    span = spans.one()
    assert span.name == "record_outcome"
    assert attrs(span) == {
        c.ROLE: "application",
        c.TARGET_ID: "bot/answer",
        c.TASK_ID: "finished-task",
        c.RUN_ID: "r1",
        c.OUTCOME_SUCCESS: False,
        c.QUALITY_SCORE: 0.25,
        c.SPAN_TYPE: "outcome",
    }


def test_invalid_outcome_values_are_dropped_not_coerced(spans, caplog):
    with caplog.at_level("WARNING"):
        with ml.task("t"):
            ml.record_outcome(success="yes", quality=float("nan"), evaluator="judge")
    root_attrs = attrs(_task_span(spans))
    assert c.OUTCOME_SUCCESS not in root_attrs
    assert c.QUALITY_SCORE not in root_attrs
    assert root_attrs[c.EVALUATOR] == "judge"
    assert len(caplog.records) == 2


def test_task_ids_default_to_unique_values(spans):
    with ml.task() as first:
        pass
    with ml.task() as second:
        pass
    assert first.task_id != second.task_id
    assert len(first.task_id) == 32
