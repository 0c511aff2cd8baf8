"""The examples a new user copies run offline against the real collector and produce the windows they claim."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent


def test_every_example_imports_only_what_make_run_installs():
    """The README runs the examples after `make run`: every module they import is the standard
    library's, the examples' own, or comes from a distribution `make run` installs (meritlens, its
    dependencies and the extras the Makefile's run install names)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    run_install = re.search(r"^\$\(RUN_STAMP\):.*\n\t.*pip install --quiet -e '\.\[([\w,]+)\]'",
                            (ROOT / "Makefile").read_text(), re.M)
    assert run_install, "the Makefile's `make run` install was not found"
    requirements = project["dependencies"] + [r for extra in run_install.group(1).split(",")
                                              for r in project["optional-dependencies"][extra]]
    installed = {canonicalize_name(Requirement(r).name) for r in requirements} | {"meritlens"}
    own = {p.stem for p in (ROOT / "examples").rglob("*.py")} | {"calls_per_task"}
    distributions = packages_distributions()
    for path in (ROOT / "examples").rglob("*.py"):
        tree = ast.parse(path.read_text())
        names = {a.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names}
        names |= {node.module.split(".")[0] for node in ast.walk(tree)
                  if isinstance(node, ast.ImportFrom) and node.module and node.level == 0}
        for name in sorted(names - set(sys.stdlib_module_names) - own - {"__future__"}):
            providers = {canonicalize_name(d) for d in distributions.get(name, [])}
            assert providers & installed, (f"{path.relative_to(ROOT)} imports {name} "
                                           f"({providers or 'not installed'}), which `make run` does not install")


def _run_example(name: str, collector, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": collector.url, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / name), *args], capture_output=True, text=True,
                          env=env, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    return proc


def test_quickstart_end_to_end_through_observe(collector):
    """The README's walk: a decorated call, the real OTLP/HTTP exporter, the collector, a window via `meritlens sql`."""
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


def _windows(collector, target: str, scope: str = "all") -> dict[str, dict]:
    rows = collector.sql(f"select * from windows where target_id = '{target}' and scope = '{scope}'")
    return {r["metric"]: r for r in rows}


def test_openai_app_with_tools_and_streaming(collector):
    out = _run_example("openai_tools_streaming.py", collector)
    assert "ships tomorrow" in out.stdout
    windows = _windows(collector, "order-bot/agent")
    # two calls per task, 120 input tokens each with 64 cached inside: counted once
    assert (windows["input_tokens"]["value"], windows["input_tokens"]["sample_count"]) == (720.0, 3)
    assert windows["output_tokens"]["value"] == 18 * 2 * 3
    assert windows["task_success"]["value"] == 1.0
    assert windows["agent_steps"]["value"] == 2.0
    tools = collector.sql("select count(*) n from spans where name = 'execute_tool lookup_order' and kind = 1")
    assert tools == [{"n": 3}]
    requested = collector.sql("select sum(tool_calls) n from spans"
                              " where target_id = 'order-bot/agent' and operation = 'chat'")
    assert requested == [{"n": 3}]
    streamed = collector.sql("select count(*) n from spans where target_id = 'order-bot/agent' and ttft_s is not null")
    assert streamed == [{"n": 3}]


def test_anthropic_app_counts_cached_tokens_once(collector):
    _run_example("anthropic_app.py", collector)
    windows = _windows(collector, "refund-bot/answer")
    assert (windows["input_tokens"]["value"], windows["input_tokens"]["sample_count"]) == (4 * (30 + 200), 4)
    assert windows["task_quality"]["value"] == 0.9
    assert collector.sql("select distinct cache_read_tokens c, provider p from spans where operation = 'chat'") == [
        {"c": 200, "p": "anthropic"}]


def test_assessment_readiness_follows_the_evidence(tmp_path):
    from tests.conftest import CollectorProcess, run_cli

    profile = str(ROOT / "examples" / "assessment" / "profile.toml")
    for cases, ready in ((5, False), (12, True)):
        proc = CollectorProcess(tmp_path / f"assessment-{cases}.duckdb").start()
        try:
            _run_example("assessment/run_assessment.py", proc, str(cases))
            check = run_cli("readiness", "--profile", profile, "--baseline", "--db", str(proc.db), check=False)
            assert check.returncode == (0 if ready else 1), check.stdout + check.stderr
            if not ready:
                assert "5 of 12 samples" in check.stdout
            windows = _windows(proc, "support-bot/answer", "baseline-2026-11")
            assert windows["task_success"]["sample_count"] == cases
        finally:
            proc.stop()


def test_plugin_metric_package_is_discovered_and_evaluated(collector, tmp_path):
    from tests.conftest import run_cli

    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--target", str(site), str(ROOT / "examples" / "plugin_metric")], check=True, capture_output=True)
    env = {"PYTHONPATH": str(site)}
    assert "calls_per_task" in run_cli("metrics", env=env).stdout
    _run_example("openai_tools_streaming.py", collector)
    run_cli("evaluate", "--target", "order-bot/agent", "--metrics", "calls_per_task", "--db", str(collector.db),
            "--run-dir", str(tmp_path / "run"), env=env)
    window = _windows(collector, "order-bot/agent")["calls_per_task"]
    assert (window["value"], window["sample_count"], window["state"]) == (2.0, 3, "measured")
