"""Process-wide and per-context state shared by observe, instrument, task and tool."""

from __future__ import annotations

import logging
import threading
from contextvars import ContextVar
from typing import Any

from opentelemetry import trace

from meritlens.instrumentation import conventions as c
from meritlens.instrumentation._once import WarnOnce

log = logging.getLogger("meritlens.instrumentation")



class _Config:
    """What configure() decided; read on every call, so kept to plain attributes."""

    __slots__ = ("tracer_provider", "owns_provider", "tracer", "default_attributes", "lock")

    def __init__(self) -> None:
        self.tracer_provider: Any = None
        self.owns_provider = False
        self.tracer: trace.Tracer | None = None
        # Attributes every span gets unless the call site or the task says otherwise (the configured target).
        self.default_attributes: dict[str, Any] = {}
        self.lock = threading.RLock()


config = _Config()


def tracer() -> trace.Tracer:
    """The tracer of the configured provider, else of the global one (a proxy until the app sets it)."""
    cached = config.tracer
    if cached is None:
        provider = config.tracer_provider or trace.get_tracer_provider()
        cached = config.tracer = provider.get_tracer(c.TRACER_NAME, _version())
    return cached


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("meritlens")
    except Exception:
        return "0"


class Scope:
    """Attributes inherited by every span opened inside a task or an observed function."""

    __slots__ = ("attributes", "task", "frame")

    def __init__(self, attributes: dict[str, Any], task: Any, frame: Any) -> None:
        self.attributes = attributes
        # The enclosing `_task.Task` (it counts the agent steps), or None; typed loosely so that the
        # state every module reads imports none of them.
        self.task = task
        self.frame = frame


current_scope: ContextVar[Scope | None] = ContextVar("meritlens_scope", default=None)


def scope_attributes(own: dict[str, Any], explicit: dict[str, Any] | None) -> dict[str, Any]:
    """Span attributes: ``own`` constants, then the task/observe scope, then the call site's explicit values.

    The configured default target fills in when neither the scope nor the call site names one.
    """
    scope = current_scope.get()
    defaults = config.default_attributes
    if scope is None:
        if explicit:
            return {**defaults, **own, **explicit} if defaults else {**own, **explicit}
        return {**defaults, **own} if defaults else own.copy()
    attributes = {**defaults, **own, **scope.attributes}
    if explicit:
        attributes.update(explicit)
    task = scope.task
    if task is not None and task.step_count:
        attributes[c.AGENT_STEP] = task.step_count
    return attributes


# The instrumented LLM call in progress (read by instrument()'s retry hook to count its retries).
current_call: ContextVar[Any] = ContextVar("meritlens_call", default=None)

warn_once = WarnOnce(log)
"""``warn_once(key, message, *args)``: a warning about the application's use of meritlens, once per key."""


def report_internal_error(where: str) -> None:
    """Log one of our own failures once per place, with its traceback; never raises."""
    try:
        warn_once(("internal", where), "meritlens instrumentation failed in %s; the application is unaffected",
                  where, exc_info=True)
    except Exception:  # logging itself failed: nothing more we can do without risking the app
        pass


def check_role(role: str | None) -> None:
    """A ValueError unless ``role`` is None or one of the roles a span may carry."""
    if role is not None and role not in c.ROLES:
        raise ValueError(f"role must be one of {c.ROLES}, not {role!r}")
