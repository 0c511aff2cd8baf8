"""Tasks (groups of calls, one trace each by default), agent steps, tool executions and outcomes."""

from __future__ import annotations

import functools
import inspect
import math
import uuid
from numbers import Real
from typing import Any, Callable, TypeVar, overload

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from meritlens.instrumentation import conventions as c
from meritlens.instrumentation._state import (
    check_role,
    Scope,
    current_scope,
    report_internal_error,
    scope_attributes,
    tracer,
    warn_once,
)

F = TypeVar("F", bound=Callable[..., Any])

_INTERNAL = SpanKind.INTERNAL
_TASK_SPAN_NAME = "task"
_OUTCOME_SPAN_NAME = "record_outcome"


def _end_span_with(span: Any, error: BaseException | None) -> None:
    if error is not None:
        span.set_attribute(c.ERROR_TYPE, type(error).__qualname__)
        span.set_status(Status(StatusCode.ERROR, str(error)[:500]))
        if isinstance(error, Exception):
            span.record_exception(error)
    span.end()


class Task:
    """One task of the measured application: a root span whose calls inherit its IDs, target and role.

    Use :func:`task` to make one; it is a context manager, sync (``with``) or async (``async with``).
    """

    __slots__ = (
        "task_id",
        "case_id",
        "run_id",
        "assessment_id",
        "target",
        "role",
        "new_trace",
        "step_count",
        "stepped",
        "span",
        "_tokens",
    )

    def __init__(
        self,
        task_id: str | None,
        case_id: str | None,
        run_id: str | None,
        assessment_id: str | None,
        target: str | None,
        role: str | None,
        new_trace: bool,
    ) -> None:
        check_role(role)
        self.task_id = task_id if task_id is not None else uuid.uuid4().hex
        self.case_id = case_id
        self.run_id = run_id
        self.assessment_id = assessment_id
        self.target = target
        self.role = role
        self.new_trace = new_trace
        self.step_count = 0
        self.stepped = False
        self.span: Any = None
        self._tokens: tuple[Any, Any] | None = None

    def step(self) -> int:
        """Advance the agent-step counter; spans opened afterwards carry the new step number."""
        self.step_count += 1
        self.stepped = True
        return self.step_count

    def record_outcome(
        self,
        success: bool | None = None,
        quality: float | None = None,
        evaluator: str | None = None,
        human_intervention: bool | None = None,
    ) -> None:
        """Attach the known outcome of this task to its root span (see :func:`record_outcome`)."""
        attributes = _outcome_attributes(success, quality, evaluator, human_intervention)
        if attributes and self.span is not None:
            self.span.set_attributes(attributes)

    def _scope_attributes(self, outer: Scope | None) -> dict[str, Any]:
        attributes = dict(outer.attributes) if outer is not None else {}
        attributes.pop(c.AGENT_STEP, None)
        attributes[c.TASK_ID] = self.task_id
        for key, value in (
            (c.CASE_ID, self.case_id),
            (c.RUN_ID, self.run_id),
            (c.ASSESSMENT_ID, self.assessment_id),
            (c.TARGET_ID, self.target),
            (c.ROLE, self.role),
        ):
            if value is not None:
                attributes[key] = value
        return attributes

    def __enter__(self) -> Task:
        try:
            outer = current_scope.get()
            inherited = self._scope_attributes(outer)
            span_attributes = scope_attributes({c.ROLE: c.ROLE_APPLICATION}, inherited)
            span_attributes[c.SPAN_TYPE] = c.SPAN_TYPE_TASK
            parent_context: Context | None = None
            links: list[Link] = []
            if self.new_trace:
                parent_context = Context()
                current = trace.get_current_span().get_span_context()
                if current.is_valid:
                    links.append(Link(current))
            name = f"{_TASK_SPAN_NAME} {self.target or span_attributes.get(c.TARGET_ID) or ''}".rstrip()
            self.span = tracer().start_span(
                name, context=parent_context, kind=_INTERNAL, attributes=span_attributes, links=links
            )
            scope_token = current_scope.set(Scope(inherited, self, None))
            context_token = otel_context.attach(trace.set_span_in_context(self.span))
            self._tokens = (scope_token, context_token)
        except Exception:
            report_internal_error("starting a task")
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        tokens, self._tokens = self._tokens, None
        if tokens is not None:
            try:
                otel_context.detach(tokens[1])
                current_scope.reset(tokens[0])
            except Exception:
                report_internal_error("leaving a task")
        span = self.span
        if span is None:
            return
        try:
            if self.stepped:
                span.set_attribute(c.AGENT_STEP, self.step_count)
            _end_span_with(span, exc)
        except Exception:
            report_internal_error("ending a task")

    async def __aenter__(self) -> Task:
        return self.__enter__()

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        self.__exit__(exc_type, exc, tb)


def task(
    task_id: str | None = None,
    *,
    case_id: str | None = None,
    run_id: str | None = None,
    assessment_id: str | None = None,
    target: str | None = None,
    role: str | None = None,
    new_trace: bool = True,
) -> Task:
    """Group the calls made inside ``with task(...):`` (or ``async with``) into one task.

    The task opens a root span (a new trace, linked to the span that was current, unless
    ``new_trace=False``); calls, tools and outcomes inside it are its children and carry its task, case, run
    and assessment IDs, target and role as span attributes. ``task_id`` defaults to a random UUID.
    """
    return Task(task_id, case_id, run_id, assessment_id, target, role, new_trace)


def current_task() -> Task | None:
    """The innermost task around this code, or None."""
    scope = current_scope.get()
    return scope.task if scope is not None else None


def step() -> int | None:
    """Advance the current task's agent-step counter and return the new step number.

    Spans opened afterwards carry ``meritlens.agent.step``; the task span records the final count.
    Outside a task it does nothing and returns None.
    """
    scope = current_scope.get()
    if scope is None or scope.task is None:
        warn_once("step-outside-task", "meritlens step() called outside a task; ignored")
        return None
    return scope.task.step()


# --- outcomes ------------------------------------------------------------------------------------------------


def _outcome_attributes(
    success: bool | None, quality: float | None, evaluator: str | None, human_intervention: bool | None
) -> dict[str, Any]:
    attributes: dict[str, Any] = {}
    if success is not None:
        if isinstance(success, bool):
            attributes[c.OUTCOME_SUCCESS] = success
        else:
            warn_once("outcome-success", "record_outcome: success must be a bool, got %r; not recorded", success)
    if quality is not None:
        if isinstance(quality, Real) and not isinstance(quality, bool) and math.isfinite(quality):
            attributes[c.QUALITY_SCORE] = float(quality)
        else:
            warn_once(
                "outcome-quality", "record_outcome: quality must be a finite number, got %r; not recorded", quality
            )
    if evaluator is not None:
        if isinstance(evaluator, str) and evaluator:
            attributes[c.EVALUATOR] = evaluator
        else:
            warn_once("outcome-evaluator", "record_outcome: evaluator must be a non-empty string; not recorded")
    if human_intervention is not None:
        if isinstance(human_intervention, bool):
            attributes[c.HUMAN_INTERVENTION] = human_intervention
        else:
            warn_once(
                "outcome-human",
                "record_outcome: human_intervention must be a bool, got %r; not recorded",
                human_intervention,
            )
    return attributes


def record_outcome(
    success: bool | None = None,
    quality: float | None = None,
    evaluator: str | None = None,
    human_intervention: bool | None = None,
    *,
    task_id: str | None = None,
    case_id: str | None = None,
    run_id: str | None = None,
    assessment_id: str | None = None,
    target: str | None = None,
) -> None:
    """Record the known outcome of the current task.

    Inside a task the attributes ``meritlens.outcome.success``, ``meritlens.quality.score``,
    ``meritlens.evaluator`` and ``meritlens.outcome.human_intervention`` are set on the task's root span.
    Outside a task (or when ``task_id`` names another task, e.g. an evaluator scoring a finished task) a small
    span named ``record_outcome`` is emitted carrying them, with ``meritlens.span.type = "outcome"``, the
    target and whatever IDs are given or inherited. Invalid values are logged and left out, never coerced.
    """
    try:
        attributes = _outcome_attributes(success, quality, evaluator, human_intervention)
        if not attributes:
            return
        scope = current_scope.get()
        current = scope.task if scope is not None else None
        if current is not None and current.span is not None and task_id in (None, current.task_id):
            current.span.set_attributes(attributes)
            return
        explicit = {
            key: value
            for key, value in (
                (c.TASK_ID, task_id),
                (c.CASE_ID, case_id),
                (c.RUN_ID, run_id),
                (c.ASSESSMENT_ID, assessment_id),
                (c.TARGET_ID, target),
            )
            if value is not None
        }
        span_attributes = scope_attributes({c.ROLE: c.ROLE_APPLICATION}, explicit)
        span_attributes.update(attributes)
        span_attributes[c.SPAN_TYPE] = c.SPAN_TYPE_OUTCOME
        tracer().start_span(_OUTCOME_SPAN_NAME, kind=_INTERNAL, attributes=span_attributes).end()
    except Exception:
        report_internal_error("recording an outcome")


# --- tools ---------------------------------------------------------------------------------------------------


class ToolSpan:
    """A tool execution span (``execute_tool {name}``, kind INTERNAL); a context manager and a decorator."""

    __slots__ = ("name", "call_id", "span", "_token")

    def __init__(self, name: str | None, call_id: str | None = None) -> None:
        self.name = name
        self.call_id = call_id
        self.span: Any = None
        self._token: Any = None

    def __enter__(self) -> ToolSpan:
        try:
            name = self.name or "tool"
            own = {c.GEN_AI_OPERATION_NAME: c.OP_EXECUTE_TOOL, c.GEN_AI_TOOL_NAME: name, c.ROLE: c.ROLE_APPLICATION}
            if self.call_id is not None:
                own[c.GEN_AI_TOOL_CALL_ID] = self.call_id
            attributes = scope_attributes(own, None)
            self.span = tracer().start_span(f"{c.OP_EXECUTE_TOOL} {name}", kind=_INTERNAL, attributes=attributes)
            self._token = otel_context.attach(trace.set_span_in_context(self.span))
        except Exception:
            report_internal_error("starting a tool span")
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        token, self._token = self._token, None
        try:
            if token is not None:
                otel_context.detach(token)
            if self.span is not None:
                _end_span_with(self.span, exc)
        except Exception:
            report_internal_error("ending a tool span")

    async def __aenter__(self) -> ToolSpan:
        return self.__enter__()

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        self.__exit__(exc_type, exc, tb)

    def __call__(self, func: F) -> F:
        name = self.name or getattr(func, "__name__", "tool")
        call_id = self.call_id
        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def async_tool(*args: Any, **kwargs: Any) -> Any:
                async with ToolSpan(name, call_id):
                    return await func(*args, **kwargs)

            return async_tool  # type: ignore[return-value]

        @functools.wraps(func)
        def sync_tool(*args: Any, **kwargs: Any) -> Any:
            with ToolSpan(name, call_id):
                return func(*args, **kwargs)

        return sync_tool  # type: ignore[return-value]


@overload
def tool(name: F) -> F: ...
@overload
def tool(name: str | None = None, *, call_id: str | None = None) -> ToolSpan: ...
def tool(name: Any = None, *, call_id: str | None = None) -> Any:
    """Trace a tool execution: ``@tool``, ``@tool("search")``, ``with tool("search"):`` or ``async with``.

    Emits a span ``execute_tool {name}`` of kind INTERNAL with ``gen_ai.operation.name = execute_tool``,
    ``gen_ai.tool.name`` and, when given, ``gen_ai.tool.call.id`` (the ID of the model's tool call), plus the
    current task's attributes. An exception marks the span as failed and propagates unchanged.
    """
    if callable(name):
        return ToolSpan(None)(name)
    return ToolSpan(name, call_id)
