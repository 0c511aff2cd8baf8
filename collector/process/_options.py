"""How the collector fills what a span did not say: a target for LLM calls that carry none, and a
cost for calls that carry tokens but no cost."""

from __future__ import annotations

import datetime as _dt
import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from meritlens.collector._settings import DEFAULT_TARGET_FALLBACK

PriceFunction = Callable[..., "float | None"]
"""price(provider, model, input_tokens, output_tokens, cache_read_tokens, cache_creation_tokens,
reasoning_tokens, *, at) -> USD or None when the model has no price (meritlens.instrumentation.price_call)."""

@dataclass(frozen=True)
class NormalizeOptions:
    """How the collector fills what a span did not say.

    target_fallback: a template for spans of LLM calls that carry no target ID, with the fields
    ``{service.name}``, ``{model}`` (request model, else response model), ``{provider}`` and
    ``{scope}``; None turns the fallback off. A span missing a field of the template gets no target.
    price: prices spans that carry tokens but no cost (None: never price in the collector).
    """

    target_fallback: str | None = DEFAULT_TARGET_FALLBACK
    price: PriceFunction | None = None


_TEMPLATE_FIELD = re.compile(r"\{([^{}]+)\}")


def fallback_target(template: str, values: dict, service_name, scope_name) -> str | None:
    model = values.get("request_model") or values.get("response_model")
    if model is None and values.get("input_tokens") is None and values.get("output_tokens") is None:
        return None  # not an LLM call: task roots, HTTP and tool spans get no invented target
    fields = {"service.name": service_name, "model": model, "provider": values.get("provider"), "scope": scope_name}
    missing = False

    def field(match: re.Match) -> str:
        nonlocal missing
        value = fields.get(match.group(1))
        if value is None:
            missing = True
            return ""
        return value

    target = _TEMPLATE_FIELD.sub(field, template)
    return None if missing else target


def price_span(price: PriceFunction, values: dict, end_unix_nano: int) -> float | None:
    """The span's cost from its model and tokens; None unless both token counts are known. Cache and
    reasoning counts a span does not report are priced as ordinary tokens (an upper bound)."""
    model = values.get("response_model") or values.get("request_model")
    if model is None or values.get("input_tokens") is None or values.get("output_tokens") is None:
        return None
    try:
        cost = price(
            values.get("provider"), model, values["input_tokens"], values["output_tokens"],
            values.get("cache_read_tokens") or 0, values.get("cache_creation_tokens") or 0,
            values.get("reasoning_tokens") or 0,
            at=_dt.datetime.fromtimestamp(end_unix_nano / 1e9, _dt.UTC),
        )
    except Exception:  # a price lookup failure leaves the cost unknown
        return None
    return cost if cost is not None and math.isfinite(cost) and cost >= 0 else None


TARGET_FALLBACK_FIELDS = ("service.name", "model", "provider", "scope")


def check_target_fallback(template: str) -> str:
    """Return ``template`` if every ``{field}`` in it is known; raise ValueError naming the others."""
    unknown = [f for f in _TEMPLATE_FIELD.findall(template) if f not in TARGET_FALLBACK_FIELDS]
    if unknown:
        raise ValueError(
            f"target fallback {template!r} uses unknown field(s) {', '.join(unknown)};"
            f" known: {', '.join(TARGET_FALLBACK_FIELDS)}"
        )
    if not _TEMPLATE_FIELD.search(template):
        raise ValueError(f"target fallback {template!r} names no field; known: {', '.join(TARGET_FALLBACK_FIELDS)}")
    return template


