"""Every page of the dashboard, as a person sees it, on a collector fed with the examples' spans (the
programs in examples/ run against it with the real OTLP exporter)."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.parse
from pathlib import Path

import httpx
import pytest

from tests.browser import DevToolsPage, dump_dom, parse_dom, screenshot, squash
from tests.conftest import CollectorProcess

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = {"quickstart.py": "support-bot/answer", "openai_tools_streaming.py": "order-bot/agent",
            "anthropic_app.py": "refund-bot/answer"}


@pytest.fixture(scope="module")
def fed(tmp_path_factory):
    """A collector that received the spans of the three examples."""
    folder = tmp_path_factory.mktemp("examples")
    collector = CollectorProcess(folder / "meritlens.duckdb").start()
    try:
        env = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": collector.url, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}
        for name in EXAMPLES:
            proc = subprocess.run([sys.executable, str(ROOT / "examples" / name)], capture_output=True, text=True,
                                  env=env, timeout=120, cwd=ROOT)
            assert proc.returncode == 0, proc.stderr
        yield collector
    finally:
        collector.stop()


def _api(collector, view: str, **params) -> dict:
    return httpx.get(f"{collector.url}/api/dashboard/{view}", params=params).json()


def _page(collector, **params) -> str:
    return f"{collector.url}/?{urllib.parse.urlencode({'refresh': '0', **params})}"


def test_the_overview_of_the_examples(fed, tmp_path):
    rows = {r["target_id"]: r for r in _api(fed, "overview")["targets"]}
    assert set(rows) == set(EXAMPLES.values())
    costliest = max(rows.values(), key=lambda r: r["total_cost"])["target_id"]
    slowest = max(rows.values(), key=lambda r: r["latency_p95"])["target_id"]
    dom = parse_dom(dump_dom(_page(fed), tmp_path / "chromium"))
    assert dom.find("div", data_callout="costs-most").find("a").text == costliest
    assert dom.find("div", data_callout="slowest").find("a").text == slowest
    table = dom.find("table", id="overview-table")
    for target, row in rows.items():
        tr = table.find("tr", data_target=target)
        assert tr.find("td", data_col="tasks").text == str(row["tasks"])
        assert tr.find("td", data_col="success_rate").text == "100.0%"  # every example records its outcome
        assert tr.find("a").attrs["href"] == "/?" + urllib.parse.urlencode(
            {"view": "target", "target": target, "refresh": "0"})
    assert screenshot(_page(fed), tmp_path / "overview.png", tmp_path / "chromium") == (1280, 900)


@pytest.mark.parametrize("target", sorted(EXAMPLES.values()))
def test_each_target_page_of_the_examples(fed, tmp_path, target):
    models = _api(fed, "models", target=target)["models"]
    windows = {w["metric"]: w for w in _api(fed, "windows", target=target, scope="all")["windows"]}
    url = _page(fed, view="target", target=target)
    section = parse_dom(dump_dom(url, tmp_path / "chromium")).find("section", data_target=target)
    model_rows = section.find("table", class_="models").find_all("tr", data_model=True)
    assert [r.attrs["data-model"] for r in model_rows] == [m["model"] for m in models]
    assert section.find("svg", data_plot="series-cost").attrs["data-n"] != "0"
    row = section.find("tr", data_metric="input_tokens")
    assert squash(row.find("td", class_="value").text) == f"{int(windows['input_tokens']['value']):,} tokens"
    assert row.find("a", class_="evidence-link")
    # the histogram's axis says the unit its ticks are in: read in that unit, they span the latencies
    latencies = [t["end_to_end_latency"] for t in _api(fed, "tasks", target=target)["tasks"]]
    histogram = section.find("svg", data_plot="latency")
    title = histogram.find_all("text", class_="axis-title")[0].text
    scale = {"latency per task (ms)": 1e-3, "latency per task (s)": 1.0}[title]
    ticks = [float(t.text) * scale for t in histogram.find_all("text", class_="tick") if "x" in t.attrs["class"].split()]
    assert ticks[0] <= min(latencies) and max(latencies) / 2 <= ticks[-1] <= 2 * max(latencies) + 0.5
    assert screenshot(url, tmp_path / "target.png", tmp_path / "chromium", size=(1280, 1600)) == (1280, 1600)


def test_the_calls_by_model_are_the_calls_the_windows_count(fed):
    """Target by target, the dashboard's calls per model add up to the LLM calls of the windows' rule
    (the `tasks` view's `llm_calls`: LLM-like spans that wrap no other call)."""
    for target in EXAMPLES.values():
        by_model = _api(fed, "models", target=target)["models"]
        [counted] = fed.sql(f"select sum(llm_calls) as calls from tasks where target_id = '{target}'")
        assert counted["calls"] > 0
        assert sum(m["calls"] for m in by_model) == counted["calls"], target


def test_traces_a_trace_and_evidence_of_the_examples_stay_on_this_machine(fed, tmp_path):
    traces = _api(fed, "traces", target="order-bot/agent")["traces"]
    assert len(traces) == 3 and all(t["tool_calls"] == 1 for t in traces)
    with DevToolsPage(tmp_path / "chromium") as page:
        page.call("Network.enable")
        page.navigate(_page(fed, view="traces", target="order-bot/agent"))
        page.wait_for("document.querySelectorAll('table.traces tbody tr').length === 3")
        page.evaluate("document.querySelector('table.traces tbody tr a').click()")
        page.wait_for("document.querySelectorAll('li.span').length === 4")
        names = page.evaluate("[...document.querySelectorAll('li.span')].map(li => "
                              "[li.dataset.depth, li.querySelector('.span-name').textContent])")
        assert names[0] == ["0", "task order-bot/agent"]
        assert sorted(names[1:]) == [["1", "chat gpt-4o-mini"], ["1", "chat gpt-4o-mini"], ["1", "execute_tool lookup_order"]]
        figures = page.evaluate("[...document.querySelectorAll('li.span .span-figures')].map(s => s.textContent)")
        assert any("1 tool call" in f for f in figures) and any("tool lookup_order" in f for f in figures)
        page.navigate(_page(fed, view="evidence", target="refund-bot/answer", metric="input_tokens"))
        page.wait_for("!!document.querySelector('[data-digest]')")
        assert page.evaluate("document.querySelector('[data-digest]').dataset.digest") == "matches"
        assert page.evaluate("document.querySelectorAll('table.samples tbody tr').length") == 4
        page.call("Page.captureScreenshot")
        assert page.exceptions == []
        assert page.requests and all(url.startswith(fed.url + "/") for url in page.requests), page.requests
    pages = {"traces.png": _page(fed, view="traces"), "trace.png": _page(fed, view="trace", trace=traces[0]["trace_id"]),
             "evidence.png": _page(fed, view="evidence", target="order-bot/agent", metric="end_to_end_latency")}
    for name, url in pages.items():
        assert screenshot(url, tmp_path / name, tmp_path / "chromium") == (1280, 900)
