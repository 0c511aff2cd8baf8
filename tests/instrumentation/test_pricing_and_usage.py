"""price_call (offline prices, user price file) and the one provider-normalization function."""

from __future__ import annotations

import datetime as dt
import socket

import anthropic
import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meritlens.instrumentation import TokenUsage, normalize_usage, price_call, pricing
from llm_fakes import expected_cost

counts = st.integers(min_value=0, max_value=2_000_000)


# --- normalization -----------------------------------------------------------------------------------------------


@given(prompt=counts, cached=counts, completion=counts, reasoning=counts)
def test_openai_chat_cached_tokens_are_not_added_again(prompt, cached, completion, reasoning):
    cached = min(cached, prompt)
    reasoning = min(reasoning, completion)
    raw = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
        "completion_tokens_details": {"reasoning_tokens": reasoning},
    }
    expected = TokenUsage(prompt, completion, cached, None, reasoning)
    assert normalize_usage("openai", raw) == expected
    assert normalize_usage("openai", openai.types.CompletionUsage.model_validate(raw)) == expected


@given(input_tokens=counts, cached=counts, output=counts, reasoning=counts)
def test_openai_responses_cached_tokens_are_not_added_again(input_tokens, cached, output, reasoning):
    cached = min(cached, input_tokens)
    reasoning = min(reasoning, output)
    raw = {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
        "output_tokens": output,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": input_tokens + output,
    }
    expected = TokenUsage(input_tokens, output, cached, 0, reasoning)
    assert normalize_usage("openai", raw) == expected
    assert normalize_usage("openai", openai.types.responses.ResponseUsage.model_validate(raw)) == expected


@given(uncached=counts, cache_read=counts, cache_creation=counts, output=counts)
def test_anthropic_cache_tokens_are_added_exactly_once(uncached, cache_read, cache_creation, output):
    raw = {
        "input_tokens": uncached,
        "cache_read_input_tokens": cache_read,
        "cache_creation_input_tokens": cache_creation,
        "output_tokens": output,
    }
    expected = TokenUsage(uncached + cache_read + cache_creation, output, cache_read, cache_creation, None)
    assert normalize_usage("anthropic", raw) == expected
    assert normalize_usage("anthropic", anthropic.types.Usage.model_validate(raw)) == expected


def test_missing_counts_stay_missing():
    assert normalize_usage("anthropic", {"input_tokens": 5, "output_tokens": 1}) == TokenUsage(5, 1, None, None, None)
    assert normalize_usage("openai", None) is None
    assert normalize_usage("openai", {"prompt_tokens": 3}) == TokenUsage(3, None, None, None, None)


# --- pricing -----------------------------------------------------------------------------------------------------

CATALOGUE_MODELS = [
    ("openai", "gpt-4o-mini"),
    ("openai", "gpt-4o-2024-08-06"),
    ("openai", "o3-mini"),
    ("openai", "gpt-5"),
    ("anthropic", "claude-3-5-sonnet-20241022"),
    ("anthropic", "claude-sonnet-4-5"),  # tiered above 200k input tokens
    ("anthropic", "claude-opus-4-1-20250805"),
    ("google", "gemini-2.5-pro"),  # tiered
]


@settings(max_examples=150, deadline=None)
@given(
    model=st.sampled_from(CATALOGUE_MODELS),
    input_tokens=st.integers(min_value=0, max_value=400_000),
    output_tokens=st.integers(min_value=0, max_value=100_000),
    read_share=st.floats(min_value=0, max_value=1),
    write_share=st.floats(min_value=0, max_value=1),
)
def test_fast_path_matches_genai_prices(model, input_tokens, output_tokens, read_share, write_share):
    provider, name = model
    cache_read = int(input_tokens * read_share)
    cache_write = int((input_tokens - cache_read) * write_share)
    got = price_call(provider, name, input_tokens, output_tokens, cache_read, cache_write)
    assert got == pytest.approx(
        expected_cost(provider, name, input_tokens, output_tokens, cache_read, cache_write), rel=1e-9, abs=1e-12
    )


def test_cached_and_cache_write_tokens_have_their_own_rates():
    model = "claude-3-5-sonnet-20241022"
    plain = price_call("anthropic", model, 1_000_000, 0)
    assert plain == pytest.approx(3.0)
    assert price_call("anthropic", model, 1_000_000, 0, cache_read_tokens=1_000_000) == pytest.approx(0.30)
    assert price_call("anthropic", model, 1_000_000, 0, cache_creation_tokens=1_000_000) == pytest.approx(3.75)
    assert price_call("anthropic", model, 0, 1_000_000) == pytest.approx(15.0)


def test_reasoning_tokens_are_priced_as_the_output_they_are_part_of():
    with_reasoning = price_call("openai", "o3-mini", 1000, 500, reasoning_tokens=400)
    assert with_reasoning == price_call("openai", "o3-mini", 1000, 500)
    assert with_reasoning == pytest.approx((1000 * 1.1 + 500 * 4.4) / 1e6)


def test_unknown_model_is_none_never_zero_and_warns_once(caplog):
    with caplog.at_level("WARNING"):
        assert price_call("openai", "no-such-model-xyz", 10, 10) is None
        assert price_call("openai", "no-such-model-xyz", 20, 20) is None
    assert len([record for record in caplog.records if "no-such-model-xyz" in record.getMessage()]) == 1
    assert price_call("openai", None, 10, 10) is None


def test_inconsistent_counts_get_no_cost():
    assert price_call("openai", "gpt-4o-mini", 10, 10, cache_read_tokens=11) is None
    assert price_call("openai", "gpt-4o-mini", 10, 10, reasoning_tokens=11) is None
    assert price_call("openai", "gpt-4o-mini", -1, 10) is None
    assert price_call("openai", "gpt-4o-mini", True, 10) is None


def test_other_providers_and_semconv_names():
    assert price_call("azure.ai.openai", "gpt-4o", 1000, 1000) is not None
    assert price_call(None, "gpt-4o", 1000, 1000) == pytest.approx(price_call("openai", "gpt-4o", 1000, 1000))


def test_pricing_never_touches_the_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("pricing tried to reach the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    pricing._reset_for_tests()  # force fresh look-ups in the price table
    for provider, model in CATALOGUE_MODELS:
        assert price_call(provider, model, 300_000, 1000, 1000, 1000) > 0  # the slow and fast paths both run
    assert price_call("deepseek", "deepseek-chat", 1000, 1000) is not None  # time-of-day prices: slow path


def test_pricing_module_depends_on_nothing_but_the_stdlib_and_genai_prices():
    # The collector reuses price_call for spans of other instrumentations: no OpenTelemetry in this module.
    import ast
    import sys

    from pathlib import Path

    imported, files = set(), [Path(pricing.__file__)]
    while files:  # the pricing module and the modules of this package it imports
        tree = ast.parse(files.pop().read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                imported.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                if node.module.startswith("meritlens.instrumentation."):
                    files.append(Path(pricing.__file__).with_name(node.module.rsplit(".", 1)[1] + ".py"))
                else:
                    imported.add(node.module.split(".")[0])
    assert imported - set(sys.stdlib_module_names) - {"__future__"} == {"genai_prices"}


# --- user price file ---------------------------------------------------------------------------------------------

PRICE_FILE = """
[[price]]
model = "acme-llm"
input = 2.0
cached_input = 0.5
cache_write = 2.5
output = 8.0
date = 2025-01-01

[[price]]
model = "acme-llm"
input = 1.0
output = 4.0
date = 2025-06-01

[[price]]
model = "gpt-4o-mini"
provider = "openai"
input = 10.0
output = 20.0
date = 2024-07-18
"""


@pytest.fixture
def price_file(tmp_path):
    path = tmp_path / "prices.toml"
    path.write_text(PRICE_FILE)
    return path


def test_user_prices_add_and_override_models(price_file):
    pricing.set_price_file(price_file)
    assert price_call("openai", "gpt-4o-mini", 1_000_000, 1_000_000) == pytest.approx(30.0)  # overridden
    assert price_call("azure.ai.openai", "gpt-4o-mini", 1_000_000, 0) != pytest.approx(10.0)  # provider-specific
    early = dt.datetime(2025, 3, 1, tzinfo=dt.timezone.utc)
    late = dt.datetime(2025, 7, 1, tzinfo=dt.timezone.utc)
    # added model, any provider; the entry in force on the call's date applies
    assert price_call(
        "vllm", "ACME-LLM", 1_000_000, 0, cache_read_tokens=400_000, cache_creation_tokens=100_000, at=early
    ) == (pytest.approx(500_000 * 2.0 / 1e6 + 400_000 * 0.5 / 1e6 + 100_000 * 2.5 / 1e6))
    assert price_call("vllm", "acme-llm", 1_000_000, 1_000_000, at=late) == pytest.approx(5.0)
    # cached_input and cache_write default to input
    assert price_call("vllm", "acme-llm", 1_000_000, 0, cache_read_tokens=1_000_000, at=late) == pytest.approx(1.0)


def test_price_file_from_environment(price_file, monkeypatch):
    monkeypatch.setenv(pricing.PRICE_FILE_ENV, str(price_file))
    pricing._reset_for_tests()
    assert price_call("x", "acme-llm", 1_000_000, 0) == pytest.approx(1.0)


@pytest.mark.parametrize(
    "content",
    [
        "not toml = = =",
        "[[price]]\nmodel = 'm'\noutput = 1.0\ndate = 2025-01-01\n",  # no input price
        "[[price]]\nmodel = 'm'\ninput = -1.0\noutput = 1.0\ndate = 2025-01-01\n",
        "[[price]]\nmodel = 'm'\ninput = 1.0\noutput = 1.0\n",  # no date
        "[[price]]\nmodel = 'm'\ninput = 1.0\noutput = 1.0\ndate = 2025-01-01\nsurprise = 1\n",
        "[models]\n",
    ],
)
def test_invalid_price_files_are_refused(tmp_path, content):
    path = tmp_path / "bad.toml"
    path.write_text(content)
    with pytest.raises(pricing.PriceFileError):
        pricing.set_price_file(path)


def test_invalid_price_file_from_environment_is_logged_not_raised(tmp_path, monkeypatch, caplog):
    path = tmp_path / "bad.toml"
    path.write_text("[[price]]\n")
    monkeypatch.setenv(pricing.PRICE_FILE_ENV, str(path))
    pricing._reset_for_tests()
    with caplog.at_level("ERROR"):
        assert price_call("openai", "gpt-4o-mini", 100, 10) is not None
    assert any(pricing.PRICE_FILE_ENV in record.getMessage() for record in caplog.records)
