"""Cost in USD of one LLM call, from offline price data.

Prices come from the ``genai-prices`` package (its bundled snapshot, never fetched at run time; read in
``_price_catalogue``) and from an optional user price file (TOML) that adds or overrides models. This module
does not use OpenTelemetry, so the collector reuses :func:`price_call` to price spans that other
instrumentations emitted.

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
from meritlens.instrumentation._price_catalogue import Rates, SlowPath, catalogue_rates, genai_prices_cost

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

_UTC = _dt.timezone.utc

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

_lock = threading.Lock()
# (provider, model, day) -> Rates | SlowPath | None
_catalogue_cache: dict[tuple[str, str, _dt.date], Rates | SlowPath | None] = {}
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
    if rates.__class__ is Rates:
        return rates.cost(input_tokens, output_tokens, cache_read_tokens, cache_creation_tokens)
    cost = genai_prices_cost(
        rates, input_tokens, output_tokens, cache_read_tokens, cache_creation_tokens, moment or _dt.datetime.now(_UTC)
    )
    if cost is None:
        _warn_once(
            ("genai-prices", f"{rates.provider_id}/{rates.model_ref}"),
            "genai-prices could not price %s/%s; no cost recorded",
            rates.provider_id,
            rates.model_ref,
        )
    return cost


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
        if rates.__class__ is Rates:
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


def _resolve(provider: str | None, model: str, fallback_model: str | None, day: _dt.date) -> Rates | SlowPath | None:
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
                return Rates(user.input, user.cached_input, user.cache_write, user.output)
    rates = _catalogue_rates(provider_key, model_key, day)
    if rates is None and fallback_key is not None:
        rates = _catalogue_rates(provider_key, fallback_key, day)
    return rates


def _catalogue_rates(provider_key: str, model_key: str, day: _dt.date) -> Rates | SlowPath | None:
    cache_key = (provider_key, model_key, day)
    rates = _catalogue_cache.get(cache_key, _MISSING)
    if rates is _MISSING:
        rates = catalogue_rates(provider_key, model_key, day)
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
