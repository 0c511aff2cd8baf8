"""Spans from OpenInference, OpenLLMetry and the official OTel openai-v2 instrumentation, sent to the real
collector unchanged, give the same token and latency windows — cached tokens counted once."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

DRIVER = Path(__file__).with_name("drive_openai.py")
CALLS = 6  # half of them streamed


def _drive(which: str, collector) -> None:
    proc = subprocess.run([sys.executable, str(DRIVER), which, collector.traces_url, str(CALLS)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def _windows(collector, target: str) -> dict[str, dict]:
    rows = collector.sql(f"select * from windows where target_id = '{target}' and scope = 'all'")
    return {r["metric"]: r for r in rows}


@pytest.fixture(scope="module")
def ours(tmp_path_factory):
    """The windows our own `instrument(client)` gives for the same calls."""
    from tests.conftest import CollectorProcess

    proc = CollectorProcess(tmp_path_factory.mktemp("ours") / "ours.duckdb").start()
    try:
        _drive("meritlens", proc)
        return _windows(proc, "svc-meritlens/gpt-4o-mini")
    finally:
        proc.stop()


@pytest.mark.parametrize("which, target", [
    ("openinference", "svc-openinference/gpt-4o-mini-2024-07-18"),  # reports only the response model
    ("openllmetry", "svc-openllmetry/gpt-4o-mini"),
    ("otel-v2", "svc-otel-v2/gpt-4o-mini"),
])
def test_windows_from_other_instrumentations(collector, ours, which, target):
    _drive(which, collector)
    spans = collector.sql(f"select input_tokens, output_tokens, cache_read_tokens, provider, operation, "
                          f"ttft_s, duration_s from spans where target_id = '{target}'")
    assert len(spans) == CALLS, spans
    assert {s["input_tokens"] for s in spans} == {100}  # 40 cached tokens inside, never added again
    assert {s["output_tokens"] for s in spans} == {20}
    assert {s["provider"] for s in spans} == {"openai"}
    assert {s["operation"] for s in spans} == {"chat"}
    if which != "otel-v2":  # openai-v2 records no cache tokens at all
        assert {s["cache_read_tokens"] for s in spans} == {40}
    windows = _windows(collector, target)
    assert windows["input_tokens"]["value"] == 100 * CALLS and windows["input_tokens"]["sample_count"] == CALLS
    assert windows["output_tokens"]["value"] == 20 * CALLS
    for metric in ("input_tokens", "output_tokens"):
        theirs_and_ours = [(w[metric]["value"], w[metric]["sample_count"]) for w in (windows, ours)]
        assert theirs_and_ours[0] == theirs_and_ours[1]
    assert (ours["end_to_end_latency"]["sample_count"], ours["end_to_end_latency"]["state"]) == (CALLS, "measured")
    # Cost: priced by the collector from the same price source as the instrumentation.
    cost, our_cost = windows["total_task_cost"], ours["total_task_cost"]
    assert cost["state"] == our_cost["state"] == "measured" and cost["sample_count"] == CALLS
    priced = collector.sql(f"select count(*) n from spans where target_id = '{target}' "
                           "and attributes->>'meritlens.cost.priced_by' = 'collector'")
    assert priced == [{"n": CALLS}]
    if which == "otel-v2":
        # openai-v2 reports no cached tokens, so its 40 cached tokens are priced as ordinary input.
        assert cost["value"] > our_cost["value"]
    else:
        assert cost["value"] == pytest.approx(our_cost["value"], rel=1e-9)
    latency = windows["end_to_end_latency"]
    assert latency["sample_count"] == CALLS and latency["state"] == "measured"
    assert latency["min"] >= 0.05  # the mock transport's delay
    if which in ("openinference", "openllmetry"):
        streamed = [s for s in spans if s["ttft_s"] is not None]
        assert len(streamed) == CALLS // 2  # time to first chunk from their stream events
        assert all(0 <= s["ttft_s"] <= s["duration_s"] for s in streamed)


def test_target_fallback_can_be_turned_off(tmp_path):
    from tests.conftest import CollectorProcess

    proc = CollectorProcess(tmp_path / "off.duckdb", ("--target-fallback", "none")).start()
    try:
        _drive("otel-v2", proc)
        assert proc.sql("select count(*) n, count(target_id) t from spans") == [{"n": CALLS, "t": 0}]
        assert proc.sql("select count(*) n from windows") == [{"n": 0}]
    finally:
        proc.stop()
