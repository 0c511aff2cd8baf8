"""Cost in USD of one LLM call, from offline price data.

Prices come from the ``genai-prices`` package (its bundled snapshot, never fetched at run time) and from an
optional user price file (TOML) that adds or overrides models. This module does not use OpenTelemetry, so the
collector reuses :func:`price_call` to price spans that other instrumentations emitted.

Token counts follow the OpenTelemetry GenAI rule: ``input_tokens`` includes the cache-read and cache-creation
tokens, ``output_tokens`` includes the reasoning tokens. Cached input, cache writes and ordinary input are each
priced at their own rate; reasoning tokens are priced as output (every provider bills them so).

A model without a known price has no cost: :func:`price_call` returns ``None`` (never ``0.0``) and logs one
warning per provider and model.

User price file format (USD per million tokens)::

    [[price]]
    model = "ft:gpt-4o-mini:acme::abc123"   # exact model name, case-insensitive
    provider = "openai"                      # optional; without it the entry matches any provider
    input = 0.30
    cached_input = 0.15                      # optional; defaults to `input`
    cache_write = 0.30                       # optional; defaults to `input`
    output = 1.20
    date = 2025-06-01                        # the day this price took effect

Several entries for one model form a price history: a call is priced with the latest entry whose date is on
or before the call's day (calls before the first date use the first entry).
"""

from __future__ import annotations

import datetime as _dt
import logging
import math
import os
import threading
import time
import tomllib
from dataclasses import dataclass
from typing import Any

from meritlens.instrumentation._once import WarnOnce

__all__ = [
    "PRICE_FILE_ENV",
    "PriceFileError",
    "UserPrice",
    "load_price_file",
    "price_call",
    "set_price_file",
]

log = logging.getLogger(__name__)

PRICE_FILE_ENV = "MERITLENS_PRICE_FILE"
"""Environment variable naming a user price file, read on first use when configure() named none."""

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


class PriceFileError(ValueError):
    """The user price file cannot be read or has an invalid entry."""


@dataclass(frozen=True, slots=True)
class UserPrice:
    """One dated price of one model from the user price file, in USD per million tokens."""

    model: str
    provider: str | None
    input: float
    cached_input: float
    cache_write: float
    output: float
    date: _dt.date


@dataclass(frozen=True, slots=True)
class _Rates:
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


class _SlowPath:
    """Marks a model whose price structure the fast formula does not reproduce: ask genai-prices each call."""

    __slots__ = ("provider_id", "model_ref")

    def __init__(self, provider_id: str, model_ref: str) -> None:
        self.provider_id = provider_id
        self.model_ref = model_ref


_lock = threading.Lock()
# (provider, model, day) -> _Rates | _SlowPath | None
_catalogue_cache: dict[tuple[str, str, _dt.date], _Rates | _SlowPath | None] = {}
_user_prices: dict[tuple[str | None, str], list[UserPrice]] = {}
_user_file_loaded = False
_warn_once = WarnOnce(log)


def price_call(
    provider: str | None,
    model: str | None,
    input_tokens: int,
    output_tokens: int,
    cache_read_tokens: int = 0,
    cache_creation_tokens: int = 0,
    reasoning_tokens: int = 0,
    *,
    at: _dt.datetime | None = None,
) -> float | None:
    """Cost in USD of one call, or ``None`` when the model has no known price or the counts are inconsistent.

    ``input_tokens`` includes ``cache_read_tokens`` and ``cache_creation_tokens``; ``output_tokens`` includes
    ``reasoning_tokens`` (the GenAI rule). ``provider`` is a GenAI ``gen_ai.provider.name`` value such as
    ``openai`` or ``anthropic`` (``None`` matches by model name alone). ``at`` is when the call happened
    (default: now); dated prices are chosen by its UTC day. Never touches the network.
    """
    return _price(
        provider,
        model,
        None,
        input_tokens,
        output_tokens,
        cache_read_tokens,
        cache_creation_tokens,
        reasoning_tokens,
        at,
    )


def _price(
    provider: str | None,
    model: str | None,
    fallback_model: str | None,
    input_tokens: int,
    output_tokens: int,
    cache_read_tokens: int = 0,
    cache_creation_tokens: int = 0,
    reasoning_tokens: int = 0,
    at: _dt.datetime | None = None,
) -> float | None:
    """price_call, trying ``fallback_model`` (e.g. the requested model) when ``model`` has no price."""
    if not model:
        model, fallback_model = fallback_model, None
        if not model:
            return None
    if not (
        type(input_tokens) is int
        and type(output_tokens) is int
        and type(cache_read_tokens) is int
        and type(cache_creation_tokens) is int
        and type(reasoning_tokens) is int
        and input_tokens >= 0
        and output_tokens >= 0
        and cache_read_tokens >= 0
        and cache_creation_tokens >= 0
        and reasoning_tokens >= 0
    ) and not all(
        _is_count(count)
        for count in (input_tokens, output_tokens, cache_read_tokens, cache_creation_tokens, reasoning_tokens)
    ):
        _warn_once(
            ("invalid-counts", f"{provider}/{model}"),
            "token counts for %s/%s are not non-negative integers; no cost",
            provider,
            model,
        )
        return None
    if cache_read_tokens + cache_creation_tokens > input_tokens or reasoning_tokens > output_tokens:
        _warn_once(
            ("inconsistent-counts", f"{provider}/{model}"),
            "token counts for %s/%s are inconsistent (cached tokens exceed input, or reasoning exceeds output); "
            "no cost",
            provider,
            model,
        )
        return None

    if at is None:
        moment = None
        day = _today()
    else:
        moment = at if at.tzinfo is not None else at.replace(tzinfo=_UTC)
        day = moment.astimezone(_UTC).date()
    key = (provider, model, fallback_model, day)
    rates = _resolved.get(key, _MISSING)
    if rates is _MISSING:
        rates = _resolve(provider, model, fallback_model, day)
        with _lock:
            _resolved[key] = rates
    if rates is None:
        _warn_once(
            (provider or "", model.lower()),
            "no price known for model %r of provider %r; no cost recorded",
            model,
            provider,
        )
        return None
    if rates.__class__ is _Rates:
        return rates.cost(input_tokens, output_tokens, cache_read_tokens, cache_creation_tokens)
    return _genai_prices_cost(
        rates, input_tokens, output_tokens, cache_read_tokens, cache_creation_tokens, moment or _dt.datetime.now(_UTC)
    )


_MISSING: Any = object()
# (provider, model, fallback model, day) as given -> what prices them; cleared when the user prices change.
_resolved: dict[tuple[str | None, str, str | None, _dt.date], Any] = {}
# (provider, model, fallback model) -> (UTC day number, what prices them that day): the per-call fast path.
_resolved_today: dict[tuple[str | None, str | None, str | None], tuple[float, Any]] = {}
_SECONDS_PER_DAY = 86400.0
_time = time.time


def _price_now(
    provider: str | None,
    model: str | None,
    fallback_model: str | None,
    input_tokens: int,
    output_tokens: int,
    cache_read_tokens: int,
    cache_creation_tokens: int,
    reasoning_tokens: int,
) -> float | None:
    """_price for a call made now whose counts are ints (never bools): one look-up and the formula.

    Anything but a consistent call of a model with its own rates, already looked up today, goes through _price.
    """
    entry = _resolved_today.get((provider, model, fallback_model))
    if (
        entry is not None
        and entry[0] == _time() // _SECONDS_PER_DAY
        and cache_read_tokens >= 0
        and cache_creation_tokens >= 0
        and cache_read_tokens + cache_creation_tokens <= input_tokens
        and 0 <= reasoning_tokens <= output_tokens
    ):
        rates = entry[1]
        if rates is None:
            return None  # warned when first looked up
        if rates.__class__ is _Rates:
            return rates.cost(input_tokens, output_tokens, cache_read_tokens, cache_creation_tokens)
    day_number = _time() // _SECONDS_PER_DAY
    cost = _price(
        provider,
        model,
        fallback_model,
        input_tokens,
        output_tokens,
        cache_read_tokens,
        cache_creation_tokens,
        reasoning_tokens,
    )
    if model:
        key = (provider, model, fallback_model)
    else:
        key = (provider, fallback_model, None)
    day = _EPOCH + _dt.timedelta(days=int(day_number))
    resolved = _resolved.get((*key, day), _MISSING) if key[1] else None
    if resolved is not _MISSING:
        _resolved_today[(provider, model, fallback_model)] = (day_number, resolved)
    return cost


def _resolve(provider: str | None, model: str, fallback_model: str | None, day: _dt.date) -> _Rates | _SlowPath | None:
    """The user price, else the catalogue price, of the model, else of the fallback model."""
    provider_key = provider.lower() if provider else ""
    model_key = model.lower()
    fallback_key = fallback_model.lower() if fallback_model and fallback_model.lower() != model_key else None
    if not _user_file_loaded:
        _load_env_price_file()
    if _user_prices:
        for candidate in (model_key, fallback_key):
            user = _user_price(provider_key, candidate, day) if candidate is not None else None
            if user is not None:
                return _Rates(user.input, user.cached_input, user.cache_write, user.output)
    rates = _catalogue_rates(provider_key, model_key, day)
    if rates is None and fallback_key is not None:
        rates = _catalogue_rates(provider_key, fallback_key, day)
    return rates


def _catalogue_rates(provider_key: str, model_key: str, day: _dt.date) -> _Rates | _SlowPath | None:
    cache_key = (provider_key, model_key, day)
    rates = _catalogue_cache.get(cache_key, _MISSING)
    if rates is _MISSING:
        rates = _resolve_catalogue(provider_key, model_key, day)
        with _lock:
            _catalogue_cache[cache_key] = rates
    return rates


_EPOCH = _dt.date(1970, 1, 1)
_today_cache: tuple[int, _dt.date] = (-1, _EPOCH)


def _today() -> _dt.date:
    """Today's UTC date, recomputed only when the UTC day changes."""
    global _today_cache
    day_number = int(time.time() // 86400)
    cached_number, cached_day = _today_cache
    if day_number == cached_number:
        return cached_day
    day = _EPOCH + _dt.timedelta(days=day_number)
    _today_cache = (day_number, day)
    return day


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


# --- user price file ------------------------------------------------------------------------------------


def load_price_file(path: str | os.PathLike[str]) -> list[UserPrice]:
    """Parse a user price file (see the module docstring) without installing it. Raises PriceFileError."""
    try:
        with open(path, "rb") as handle:
            document = tomllib.load(handle)
    except OSError as err:
        raise PriceFileError(f"cannot read price file {os.fspath(path)!r}: {err}") from err
    except tomllib.TOMLDecodeError as err:
        raise PriceFileError(f"price file {os.fspath(path)!r} is not valid TOML: {err}") from err
    entries = document.get("price")
    if not isinstance(entries, list) or not entries:
        raise PriceFileError(f"price file {os.fspath(path)!r} has no [[price]] entries")
    return [_parse_entry(entry, index, path) for index, entry in enumerate(entries)]


def _parse_entry(entry: object, index: int, path: str | os.PathLike[str]) -> UserPrice:
    where = f"price file {os.fspath(path)!r}, entry {index + 1}"
    if not isinstance(entry, dict):
        raise PriceFileError(f"{where}: not a table")
    known = {"model", "provider", "input", "cached_input", "cache_write", "output", "date"}
    unknown = set(entry) - known
    if unknown:
        raise PriceFileError(f"{where}: unknown keys {sorted(unknown)}")
    model = entry.get("model")
    if not isinstance(model, str) or not model:
        raise PriceFileError(f"{where}: `model` must be a non-empty string")
    provider = entry.get("provider")
    if provider is not None and (not isinstance(provider, str) or not provider):
        raise PriceFileError(f"{where}: `provider` must be a non-empty string")

    def rate(key: str, default: float | None = None) -> float:
        value = entry.get(key, default)
        if value is None:
            raise PriceFileError(f"{where}: `{key}` (USD per million tokens) is required")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise PriceFileError(f"{where}: `{key}` must be a finite non-negative number")
        return float(value)

    input_rate = rate("input")
    date = entry.get("date")
    if isinstance(date, _dt.datetime):
        date = date.date()
    if not isinstance(date, _dt.date):
        raise PriceFileError(f"{where}: `date` must be a TOML date such as 2025-06-01")
    return UserPrice(
        model=model,
        provider=provider,
        input=input_rate,
        cached_input=rate("cached_input", input_rate),
        cache_write=rate("cache_write", input_rate),
        output=rate("output"),
        date=date,
    )


def set_price_file(path: str | os.PathLike[str] | None) -> None:
    """Install the prices of a user price file (replacing any earlier one); ``None`` removes them.

    Raises PriceFileError when the file is invalid, leaving the installed prices unchanged.
    """
    global _user_file_loaded
    prices = load_price_file(path) if path is not None else []
    table: dict[tuple[str | None, str], list[UserPrice]] = {}
    for price in prices:
        key = (price.provider.lower() if price.provider else None, price.model.lower())
        table.setdefault(key, []).append(price)
    for history in table.values():
        history.sort(key=lambda price: price.date)
    with _lock:
        _user_prices.clear()
        _user_prices.update(table)
        _resolved.clear()
        _resolved_today.clear()
        _user_file_loaded = True


def _load_env_price_file() -> None:
    global _user_file_loaded
    path = os.environ.get(PRICE_FILE_ENV)
    if not path:
        _user_file_loaded = True
        return
    try:
        set_price_file(path)
    except PriceFileError as err:
        _user_file_loaded = True
        log.error("%s ignored: %s", PRICE_FILE_ENV, err)


def _reset_for_tests() -> None:
    global _user_file_loaded
    with _lock:
        _user_prices.clear()
        _catalogue_cache.clear()
        _resolved.clear()
        _resolved_today.clear()
        _warn_once.forget()
        _user_file_loaded = False


def _user_price(provider: str, model: str, day: _dt.date) -> UserPrice | None:
    history = _user_prices.get((provider, model)) or _user_prices.get((None, model))
    if not history:
        return None
    chosen = history[0]
    for price in history:
        if price.date <= day:
            chosen = price
    return chosen


# --- genai-prices ---------------------------------------------------------------------------------------


def _snapshot() -> Any:
    from genai_prices import data_snapshot  # heavy import (the whole price table): only when first needed

    return data_snapshot.get_snapshot()


def _resolve_catalogue(provider: str, model: str, day: _dt.date) -> _Rates | _SlowPath | None:
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
    slow = _SlowPath(found_provider.id, model)
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


def _fast_rates(model_info: Any, day: _dt.date) -> _Rates | None:
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
    return _Rates(*(at_threshold(part, None) for part in parts), tiers=tiers)  # type: ignore[arg-type]


def _agrees_with_genai_prices(rates: _Rates, slow: _SlowPath, day: _dt.date) -> bool:
    """Check the fast formula against genai-prices on probe usages, below and above every tier threshold."""
    probes = [(1_000_000, 400_000, 150_000, 50_000)]
    for threshold, *_ in rates.tiers:
        probes.append((threshold + 1_000, 500, 500, 300))
        probes.append((max(threshold, 4_000), 1_000, 1_000, 700))
    for input_tokens, output_tokens, cache_read, cache_write in probes:
        expected = _genai_prices_cost(slow, input_tokens, output_tokens, cache_read, cache_write, _noon(day))
        if expected is None:
            return False
        got = rates.cost(input_tokens, output_tokens, cache_read, cache_write)
        if not math.isclose(got, expected, rel_tol=1e-9, abs_tol=1e-12):
            return False
    return True


def _genai_prices_cost(
    target: _SlowPath, input_tokens: int, output_tokens: int, cache_read: int, cache_write: int, moment: _dt.datetime
) -> float | None:
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
    except Exception:
        _warn_once(
            ("genai-prices", f"{target.provider_id}/{target.model_ref}"),
            "genai-prices could not price %s/%s; no cost recorded",
            target.provider_id,
            target.model_ref,
        )
        return None
    return float(result.total_price)
