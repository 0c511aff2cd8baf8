"""Zero-code, end to end: the support bot (no meritlens code) under `opentelemetry-instrument`, exporting
with the agent's default OTLP exporter into a real `meritlens serve`, fills the same windows as the same bot
decorated by hand, with every other GenAI instrumentor installed or absent; each call counts once.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import CollectorProcess

APP = Path(__file__).with_name("app")
ONLY_NAMED = Path(__file__).with_name("only_named")  # a distro, on PYTHONPATH only when it is asked for
FAKES = Path(__file__).parent.parent / "instrumentation"
AGENT = str(Path(sys.executable).with_name("opentelemetry-instrument"))
TARGET = "support-bot/answer"
CALLS = 8  # LLM calls of app/support_bot.py, each its own trace
OPENAI_CALLS = 5  # of CALLS; the third-party instrumentors observe only these
# Windows whose values are timings (they differ from run to run); every other value must be equal.
TIMINGS = {"end_to_end_latency", "time_to_first_useful_output", "throughput"}
# ONLY_INSTRUMENTORS module prefixes (see app/only_named_distro.py) and how many spans each adds per call.
FOREIGN = {
    "openai-v2": ("opentelemetry.instrumentation.openai_v2", 1),
    "openinference": ("openinference.instrumentation.openai", 1),
    "openllmetry": ("opentelemetry.instrumentation.openai:", 1),
}


def _env(collector: CollectorProcess, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "MERITLENS_"))}
    env.update({
        "PYTHONPATH": os.pathsep.join([str(APP), str(FAKES)]),
        "OTEL_SERVICE_NAME": "support-bot",
        "OTEL_TRACES_EXPORTER": "otlp",  # the agent's default exporter: OTLP/gRPC unless a protocol is named
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_LOGS_EXPORTER": "none",
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{collector.grpc_port}",
    })
    env.update(extra)
    return env


def _run(args: list[str], env: dict[str, str]) -> None:
    proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120, cwd=APP)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr


def _run_agent(collector: CollectorProcess, *, only: str | None = None, **extra: str) -> None:
    """The bot under `opentelemetry-instrument`; ``only``: load just these third-party instrumentors
    (comma-separated FOREIGN keys, "" for none), else every installed one, as the agent does."""
    if only is not None:
        prefixes = ",".join(FOREIGN[name][0] for name in only.split(",") if name)
        path = os.pathsep.join([str(ONLY_NAMED), str(APP), str(FAKES)])
        extra = {"OTEL_PYTHON_DISTRO": "only_named", "ONLY_INSTRUMENTORS": prefixes, "PYTHONPATH": path, **extra}
    _run([AGENT, sys.executable, str(APP / "support_bot.py")], _env(collector, **extra))


def _windows(collector: CollectorProcess) -> dict[tuple[str, str], dict]:
    rows = collector.sql("select * from windows where scope = 'all'")
    return {(row["target_id"], row["metric"]): row for row in rows}


def _assert_same_windows(actual: dict, expected: dict) -> None:
    assert sorted(actual) == sorted(expected)
    for key, want in expected.items():
        got = actual[key]
        for column in ("aggregation", "unit", "state", "sample_count", "count"):
            assert got[column] == want[column], (key, column, got[column], want[column])
        assert (got["evidence_digest"] is None) == (want["evidence_digest"] is None), key
        if key[1] not in TIMINGS and want["value"] is not None:
            assert got["value"] == pytest.approx(want["value"], rel=1e-9), (key, got["value"], want["value"])
        elif key[1] not in TIMINGS:
            assert got["value"] is None, key


@pytest.fixture(scope="module")
def decorated(tmp_path_factory) -> dict:
    """The windows of the bot decorated by hand (`@observe` and `instrument(client)`), no agent."""
    proc = CollectorProcess(tmp_path_factory.mktemp("decorated") / "decorated.duckdb").start()
    try:
        env = _env(proc, OTEL_EXPORTER_OTLP_ENDPOINT=proc.url)  # configure(): OTLP/HTTP by default
        _run([sys.executable, str(APP / "decorated_bot.py"), TARGET], env)
        windows = _windows(proc)
    finally:
        proc.stop()
    assert windows[(TARGET, "input_tokens")]["sample_count"] == CALLS
    return windows


@pytest.mark.slow
@pytest.mark.parametrize("only", [None, "", "openai-v2", "openinference", "openllmetry"],
                         ids=["every-installed-instrumentor", "meritlens-alone", "openai-v2", "openinference",
                              "openllmetry"])
def test_resource_target_fills_the_windows_of_the_decorated_bot(collector, decorated, only):
    _run_agent(collector, only=only, OTEL_RESOURCE_ATTRIBUTES=f"meritlens.target.id={TARGET}")
    windows = _windows(collector)
    _assert_same_windows(windows, decorated)
    assert windows[(TARGET, "retry_rate")]["value"] == pytest.approx(1 / CALLS)  # the 429 retried once
    calls = collector.sql("select target_id, count(*) n, sum(retries) retries, sum(tool_calls) tools "
                          "from spans where role = 'application' group by target_id")
    assert calls == [{"target_id": TARGET, "n": CALLS, "retries": 1, "tools": 2}]
    # The other instrumentations' spans are stored as sent, marked, and counted nowhere.
    foreign = (FOREIGN if only is None else {name: FOREIGN[name] for name in only.split(",") if name})
    duplicates = collector.sql("select count(*) n from spans where role is null "
                               "and attributes->>'meritlens.role' = 'duplicate'")
    assert duplicates == [{"n": OPENAI_CALLS * sum(per_call for _, per_call in foreign.values())}]
    assert collector.sql("select count(*) n from spans") == [{"n": CALLS + duplicates[0]["n"]}]


@pytest.mark.slow
def test_target_from_meritlens_target_over_otlp_http(collector, decorated):
    # No target on the resource: the foreign spans would fall back to `support-bot/<model>` targets.
    _run_agent(collector, MERITLENS_TARGET=TARGET, OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
               OTEL_EXPORTER_OTLP_ENDPOINT=collector.url)
    _assert_same_windows(_windows(collector), decorated)
    assert collector.sql("select distinct target_id from windows") == [{"target_id": TARGET}]
    spans = collector.sql("select scope_name, count(*) n from spans where role = 'application' group by all")
    assert spans == [{"scope_name": "meritlens.instrumentation", "n": CALLS}]


@pytest.mark.slow
def test_without_a_target_the_spans_say_so(collector):
    _run_agent(collector, only="")
    rows = collector.sql("select target_id, attributes->>'meritlens.target.id' attribute, count(*) n from spans "
                         "where role = 'application' group by all order by target_id")
    # No target attribute: the collector's fallback names the target after service and model, as for any span.
    assert rows == [
        {"target_id": "support-bot/claude-3-5-sonnet-20241022", "attribute": None, "n": 3},
        {"target_id": "support-bot/gpt-4o-mini", "attribute": None, "n": OPENAI_CALLS},
    ]


@pytest.mark.slow
def test_disabled_by_otel_python_disabled_instrumentations(collector):
    _run_agent(collector, OTEL_PYTHON_DISABLED_INSTRUMENTATIONS="meritlens",
               OTEL_RESOURCE_ATTRIBUTES=f"meritlens.target.id={TARGET}")
    rows = collector.sql("select scope_name, count(*) n from spans where role = 'application' group by all")
    # Only the other instrumentations' spans (and the anthropic SDK's own), none marked: without meritlens
    # each call is counted once per instrumentation.
    assert {row["scope_name"]: row["n"] for row in rows} == {
        "opentelemetry.util.genai.handler": OPENAI_CALLS,  # openai-v2
        "openinference.instrumentation.openai": OPENAI_CALLS,
        "opentelemetry.instrumentation.openai.v1": OPENAI_CALLS,  # OpenLLMetry
        "com.anthropic.sdk.python": CALLS - OPENAI_CALLS,
    }
    assert collector.sql("select count(*) n from spans where role is null") == [{"n": 0}]
