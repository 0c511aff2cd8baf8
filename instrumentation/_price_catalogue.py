"""Prices from the ``genai-prices`` package (its bundled snapshot, never fetched at run time): a
model's per-million-token rates on a day, computed here once (``Rates``), or, when its price depends on
more than the day and the token counts, a marker (``SlowPath``) to ask genai-prices at each call."""

from __future__ import annotations

import datetime as _dt
import logging
import math
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("meritlens.instrumentation.pricing")

_PER_MILLION = 1_000_000.0
_UTC = _dt.timezone.utc

# GenAI semantic-convention provider names -> genai-prices provider ids, where they differ.
_GENAI_PRICES_PROVIDER = {
    "azure.ai.openai": "azure",
    "azure.ai.inference": "azure",
    "aws.bedrock": "aws",
    "gcp.vertex_ai": "google",
    "gcp.gemini": "google",
    "gcp.gen_ai": "google",
    "x_ai": "x-ai",
    "mistral_ai": "mistral",
}


@dataclass(frozen=True, slots=True)
class Rates:
    """Per-million-token rates; tiered rates switch when total input tokens exceed a threshold."""

    input: float
    cache_read: float
    cache_write: float
    output: float
    # (threshold, input, cache_read, cache_write, output), highest threshold first.
    tiers: tuple[tuple[int, float, float, float, float], ...] = ()

    def cost(self, input_tokens: int, output_tokens: int, cache_read: int, cache_write: int) -> float:
        rate_in, rate_read, rate_write, rate_out = self.input, self.cache_read, self.cache_write, self.output
        for threshold, t_in, t_read, t_write, t_out in self.tiers:
            if input_tokens > threshold:
                rate_in, rate_read, rate_write, rate_out = t_in, t_read, t_write, t_out
                break
        uncached = input_tokens - cache_read - cache_write
        return (uncached * rate_in + cache_read * rate_read + cache_write * rate_write + output_tokens * rate_out) / (
            _PER_MILLION
        )


class SlowPath:
    """Marks a model whose price structure the fast formula does not reproduce: ask genai-prices each call."""

    __slots__ = ("provider_id", "model_ref")

    def __init__(self, provider_id: str, model_ref: str) -> None:
        self.provider_id = provider_id
        self.model_ref = model_ref




def _snapshot() -> Any:
    from genai_prices import data_snapshot  # heavy import (the whole price table): only when first needed

    return data_snapshot.get_snapshot()


def catalogue_rates(provider: str, model: str, day: _dt.date) -> Rates | SlowPath | None:
    """The rates of a model on a day, or a slow-path marker, or None when genai-prices does not know it."""
    try:
        snapshot = _snapshot()
        provider_id = _GENAI_PRICES_PROVIDER.get(provider, provider) or None
        try:
            found_provider, model_info = snapshot.find_provider_model(model, None, provider_id, None)
        except LookupError:
            if provider_id is None or _provider_known(snapshot, provider_id):
                return None
            found_provider, model_info = snapshot.find_provider_model(model, None, None, None)
    except LookupError:
        return None
    except Exception:  # a malformed snapshot must not break the application
        log.warning("genai-prices failed to look up %r/%r; no cost recorded", provider, model, exc_info=True)
        return None
    slow = SlowPath(found_provider.id, model)
    try:
        rates = _fast_rates(model_info, day)
    except Exception:
        rates = None
    if rates is None or not _agrees_with_genai_prices(rates, slow, day):
        return slow
    return rates


def _noon(day: _dt.date) -> _dt.datetime:
    return _dt.datetime.combine(day, _dt.time(12), _UTC)


def _provider_known(snapshot: Any, provider_id: str) -> bool:
    try:
        snapshot.find_provider(None, provider_id, None)
    except LookupError:
        return False
    return True


def _fast_rates(model_info: Any, day: _dt.date) -> Rates | None:
    """Flat (or input-tiered) token rates of a model on a day; None when prices depend on more than the day."""
    from genai_prices.types import ModelPrice, StartDateConstraint, TieredPrices

    prices = model_info.prices
    if not isinstance(prices, ModelPrice):
        if any(c.constraint is not None and not isinstance(c.constraint, StartDateConstraint) for c in prices):
            return None  # time-of-day prices vary within a day
    model_price = model_info.get_prices(_noon(day))
    base_input = getattr(model_price, "input_mtok", None)
    base_output = getattr(model_price, "output_mtok", None)
    if base_input is None or base_output is None:
        return None
    read = getattr(model_price, "cache_read_mtok", None)
    write = getattr(model_price, "cache_write_mtok", None)
    read = base_input if read is None else read
    write = base_input if write is None else write
    parts = (base_input, read, write, base_output)

    thresholds: set[int] = set()
    for part in parts:
        if isinstance(part, TieredPrices):
            thresholds.update(tier.start for tier in part.tiers)

    def at_threshold(part: Any, threshold: int | None) -> float:
        if not isinstance(part, TieredPrices):
            return float(part)
        applicable = part.base
        if threshold is not None:
            for tier in reversed(part.tiers):
                if threshold >= tier.start:
                    applicable = tier.price
                    break
        return float(applicable)

    tiers = tuple(
        (threshold, *(at_threshold(part, threshold) for part in parts))
        for threshold in sorted(thresholds, reverse=True)
    )
    return Rates(*(at_threshold(part, None) for part in parts), tiers=tiers)  # type: ignore[arg-type]


def _agrees_with_genai_prices(rates: Rates, slow: SlowPath, day: _dt.date) -> bool:
    """Check the fast formula against genai-prices on probe usages, below and above every tier threshold."""
    probes = [(1_000_000, 400_000, 150_000, 50_000)]
    for threshold, *_ in rates.tiers:
        probes.append((threshold + 1_000, 500, 500, 300))
        probes.append((max(threshold, 4_000), 1_000, 1_000, 700))
    for input_tokens, output_tokens, cache_read, cache_write in probes:
        expected = genai_prices_cost(slow, input_tokens, output_tokens, cache_read, cache_write, _noon(day))
        if expected is None:
            return False
        got = rates.cost(input_tokens, output_tokens, cache_read, cache_write)
        if not math.isclose(got, expected, rel_tol=1e-9, abs_tol=1e-12):
            return False
    return True


def genai_prices_cost(
    target: SlowPath, input_tokens: int, output_tokens: int, cache_read: int, cache_write: int, moment: _dt.datetime
) -> float | None:
    """genai-prices' own price of one call; None when it cannot price it."""
    from genai_prices import Usage, calc_price

    usage = Usage(
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cache_read_tokens=cache_read,
        cache_write_tokens=cache_write,
    )
    try:
        result = calc_price(
            usage,
            target.model_ref,
            provider_id=target.provider_id,
            genai_request_timestamp=moment,
        )
    except Exception:  # the caller says so, once per model
        return None
    return float(result.total_price)
