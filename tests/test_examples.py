"""The examples a new user copies run offline against the real collector and produce the windows they claim."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _run_example(name: str, collector, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": collector.url, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / name), *args], capture_output=True, text=True,
                          env=env, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    return proc


def test_quickstart_end_to_end_through_observe(collector):
    """Issue 2's walk: a decorated call, the real OTLP/HTTP exporter, the collector, a window via `meritlens sql`."""
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import quickstart
    finally:
        sys.path.pop(0)
    out = _run_example("quickstart.py", collector)
    assert "sent 5 tasks" in out.stdout
    expected_input = sum(40 + len(q.split()) * 2 for q in quickstart.QUESTIONS)
    rows = collector.sql("select target_id, metric, value, sample_count, state from windows "
                         f"where target_id = '{quickstart.TARGET}' and scope = 'all'")
    windows = {r["metric"]: r for r in rows}
    assert windows["input_tokens"]["value"] == expected_input and windows["input_tokens"]["sample_count"] == 5
    assert windows["output_tokens"]["value"] == 25 * 5
    assert windows["task_success"]["value"] == 1.0 and windows["task_success"]["sample_count"] == 5
    latency = windows["end_to_end_latency"]
    assert latency["state"] == "measured" and latency["sample_count"] == 5 and latency["value"] >= 0.05
    cost = windows["total_task_cost"]
    assert cost["state"] == "measured" and cost["value"] > 0  # gpt-4o-mini has a price
    spans = collector.sql(f"select count(*) n from spans where target_id = '{quickstart.TARGET}' "
                          "and operation = 'chat' and response_model = 'gpt-4o-mini-2024-07-18'")
    assert spans == [{"n": 5}]
