"""The dashboard's explore views: a target over time and by model, traces, one trace and the evidence
behind a window; their endpoints' numbers, and the pages in real headless Chromium."""

from __future__ import annotations

import json
import re
import urllib.parse

import httpx
import pytest

from meritlens.analytics._evidence import span_keys_digest
from meritlens.instrumentation import conventions as c
from tests.browser import DevToolsPage, dump_dom, parse_dom, screenshot, squash
from tests.collector.dashboard_spans import MODEL, T0, TARGET, TASK5_TRACE, XSS_TARGET, known_spans, post
from tests.otlp_builders import make_span


def _get(collector, path: str, **params) -> dict:
    response = httpx.get(collector.url + path, params=params)
    assert response.status_code == 200, response.text
    return response.json()


def _page(collector, **params) -> str:
    return f"{collector.url}/?{urllib.parse.urlencode({'refresh': '0', **params})}"


def _failing_trace(collector) -> str:
    """One trace of err-bot/answer: a call that failed after two retries, under a task span."""
    trace = bytes.fromhex("cd" * 16)
    root = make_span({c.TARGET_ID: "err-bot/answer", c.TASK_ID: "t-err"}, trace_id=trace, span_id=bytes.fromhex("01" * 8),
                     start_ns=T0, duration_s=3.0, name="task err-bot/answer")
    call = make_span({c.TARGET_ID: "err-bot/answer", c.TASK_ID: "t-err", c.GEN_AI_OPERATION_NAME: "chat",
                      c.GEN_AI_REQUEST_MODEL: "other-model", c.GEN_AI_USAGE_INPUT_TOKENS: 40, c.RETRIES: 2,
                      c.ERROR_TYPE: "timeout", "app.note": "kept <b>as text</b>"},
                     trace_id=trace, span_id=bytes.fromhex("02" * 8), parent_span_id=bytes.fromhex("01" * 8),
                     start_ns=T0 + 10**9, duration_s=1.5, name="chat other-model")
    call.status.code = 2
    post(collector, [root, call])
    return "cd" * 16


def test_a_target_over_time_and_by_model_is_computed_per_bucket(collector):
    known_spans(collector)
    doc = _get(collector, "/api/dashboard/timeseries", target=TARGET, bucket="1m")
    assert doc["bucket_seconds"] == 60
    buckets = doc["buckets"]
    # one task per minute; the bucket between the fourth and fifth task holds none and is absent, not zero
    assert [b["tasks"] for b in buckets] == [1, 1, 1, 1, 1]
    costs = [b["cost_usd"] for b in buckets]
    assert costs[:4] == pytest.approx([0.01, 0.02, 0.03, 0.04])
    assert costs[4] is None and buckets[4]["priced_tasks"] == 0  # an unpriced call: no cost, not $0
    assert [b["latency_p50"] for b in buckets] == pytest.approx([1, 2, 3, 4, 5])
    assert [b["input_tokens"] for b in buckets] == [100, 100, 100, 100, 100]
    assert [b["error_rate"] for b in buckets] == [0, 0, 0, 0, 0]
    assert [b["retries"] for b in buckets] == [None] * 5  # no call reported retries: unknown, not 0
    starts = [b["bucket"] for b in buckets]
    assert starts == sorted(starts) and len(set(starts)) == 5

    auto = _get(collector, "/api/dashboard/timeseries", target=TARGET)
    assert auto["bucket_seconds"] == 10 and sum(b["tasks"] for b in auto["buckets"]) == 5  # 305 s in <= 60 buckets
    custom = _get(collector, "/api/dashboard/timeseries", target=TARGET, range="custom",
                  **{"from": "2023-11-14T22:14:00Z", "to": "2023-11-14T22:16:00Z"}, bucket="1h")
    assert [b["tasks"] for b in custom["buckets"]] == [2]  # the tasks ending 62 s and 123 s after T0
    assert _get(collector, "/api/dashboard/timeseries", target=TARGET, range="hour")["buckets"] == []  # 2023 is not the last hour

    [model] = _get(collector, "/api/dashboard/models", target=TARGET)["models"]
    assert (model["provider"], model["model"], model["calls"], model["priced_calls"]) == ("acme", MODEL, 6, 5)
    assert model["cost_usd"] == pytest.approx(0.6) and model["input_tokens"] == 500
    assert model["latency_p50"] == pytest.approx(2.0)


def test_a_wrapper_around_a_call_is_no_call_of_its_model(collector):
    """An observed function around an instrumented call: the wrapper names the model it asked for but
    carries no usage; the call under it is the one call, by model as in the windows."""
    trace = bytes.fromhex("ef" * 16)
    target = {c.TARGET_ID: "wrap-bot/answer", c.TASK_ID: "t-wrap"}
    asked = {c.GEN_AI_OPERATION_NAME: "chat", c.GEN_AI_REQUEST_MODEL: MODEL}
    wrapper = make_span({**target, **asked}, trace_id=trace, span_id=bytes.fromhex("01" * 8), start_ns=T0,
                        duration_s=2.0, name="answer")
    call = make_span({**target, **asked, c.GEN_AI_USAGE_INPUT_TOKENS: 30}, trace_id=trace,
                     span_id=bytes.fromhex("02" * 8), parent_span_id=bytes.fromhex("01" * 8), start_ns=T0 + 10**8,
                     duration_s=1.0, name=f"chat {MODEL}")
    post(collector, [wrapper, call])
    [model] = _get(collector, "/api/dashboard/models", target="wrap-bot/answer")["models"]
    assert (model["model"], model["calls"], model["input_tokens"]) == (MODEL, 1, 30)
    assert collector.sql("select llm_calls from tasks where target_id = 'wrap-bot/answer'") == [{"llm_calls": 1}]


def test_traces_are_listed_filtered_and_opened_as_a_span_tree(collector):
    known_spans(collector)
    failing = _failing_trace(collector)
    everything = _get(collector, "/api/dashboard/traces")["traces"]
    assert len(everything) == 7  # four single-call tasks, task 5's trace, the markup target's, err-bot's
    listed = next(t for t in everything if t["trace_id"] == failing)
    assert (listed["root_name"], listed["spans"], listed["errors"], listed["retries"]) == ("task err-bot/answer", 2, 1, 2)
    assert listed["duration_s"] == pytest.approx(3.0) and listed["cost_usd"] is None  # nothing priced: unknown
    mine = _get(collector, "/api/dashboard/traces", target=TARGET)["traces"]
    assert len(mine) == 5 and mine[0]["trace_id"] == TASK5_TRACE  # most recent first
    assert mine[0]["cost_usd"] == pytest.approx(0.5) and mine[0]["priced_spans"] == 1 and mine[0]["spans"] == 2
    assert [t["trace_id"] for t in _get(collector, "/api/dashboard/traces", status="error")["traces"]] == [failing]
    assert len(_get(collector, "/api/dashboard/traces", status="ok")["traces"]) == 6
    assert [t["trace_id"] for t in _get(collector, "/api/dashboard/traces", model="other-model")["traces"]] == [failing]
    assert _get(collector, "/api/dashboard/traces", range="day")["traces"] == []
    assert len(_get(collector, "/api/dashboard/traces", limit="2")["traces"]) == 2

    trace = _get(collector, "/api/dashboard/trace", trace=failing)
    root, call = trace["spans"]
    assert (root["name"], root["parent_span_id"], call["parent_span_id"]) == ("task err-bot/answer", None, "01" * 8)
    assert (call["retries"], call["error_type"], call["status_code"], call["input_tokens"]) == (2, "timeout", 2, 40)
    assert call["attributes"]["app.note"] == "kept <b>as text</b>"
    assert _get(collector, "/api/dashboard/trace", trace="ef" * 16)["spans"] == []

    with DevToolsPage(collector.db.parent / "chromium") as page:
        page.navigate(_page(collector, view="traces"))
        page.wait_for("document.querySelectorAll('table.traces tbody tr').length === 7")
        page.evaluate("""(() => { const s = document.querySelector('select[name="status"]');
                                  s.value = 'error'; s.dispatchEvent(new Event('change')); })()""")
        page.wait_for("document.querySelectorAll('table.traces tbody tr').length === 1")
        assert "status=error" in page.evaluate("location.search")  # the filter is kept in the address
        page.evaluate("document.querySelector('table.traces tbody tr a').click()")
        page.wait_for(f"!!document.querySelector('section.trace-view[data-trace=\"{failing}\"]')")
        trace_url = page.evaluate("location.href")
        spans = page.evaluate("[...document.querySelectorAll('li.span')].map(li => [li.dataset.depth, "
                              "li.querySelector('.span-name').textContent, li.querySelector('.span-figures').textContent])")
        assert spans == [["0", "task err-bot/answer", ""], ["1", "chat other-model", "40 in / — out tokens · 2 retries"]]
        # a span opens with the keyboard and shows its attributes, as text
        page.evaluate("document.querySelector('li.span[data-depth=\"1\"] summary').focus()")
        page.call("Input.dispatchKeyEvent", type="keyDown", key="Enter", code="Enter", windowsVirtualKeyCode=13, text="\r")
        page.call("Input.dispatchKeyEvent", type="keyUp", key="Enter", code="Enter", windowsVirtualKeyCode=13)
        page.wait_for("!!document.querySelector('li.span[data-depth=\"1\"] details').open")
        rows = dict(page.evaluate("[...document.querySelectorAll('li.span[data-depth=\"1\"] table.attributes tr')]"
                                  ".map(tr => [tr.cells[0].textContent, tr.cells[1].textContent])"))
        assert rows["attributes.app.note"] == "kept <b>as text</b>" and rows["error_type"] == "timeout"
        assert page.evaluate("document.querySelectorAll('li.span b').length") == 0
        page.call("Page.captureScreenshot")  # renders without error
        # a custom time range: the traces that started from 22:15 on (T0 is 22:13:20 UTC)
        page.navigate(_page(collector, view="traces", range="custom", **{"from": "2023-11-14T22:15:00Z"}))
        page.wait_for("document.querySelectorAll('table.traces tbody tr').length === 3")
        assert page.evaluate("document.querySelector('input[name=\"from\"]').value") == "2023-11-14T22:15:00Z"
        assert page.exceptions == []
    assert trace_url.startswith(collector.url + "/?view=trace&trace=" + failing)


def test_every_window_leads_to_its_spans_and_two_clicks_to_a_trace(collector):
    known_spans(collector)
    evidence = _get(collector, "/api/dashboard/evidence", target=TARGET, metric="input_tokens")
    assert (evidence["sample_count"], evidence["span_count"], evidence["digest_matches"]) == (5, 6, True)
    keys = [s["key"] for sample in evidence["samples"] for s in sample["spans"]]
    assert evidence["digest"] == evidence["window"]["evidence_digest"] == span_keys_digest(keys)
    assert sorted(s["v"] for s in evidence["samples"]) == [100, 100, 100, 100, 100]
    task5 = next(s for s in evidence["samples"] if s["sample_key"] == "task-5")
    assert {s["trace_id"] for s in task5["spans"]} == {TASK5_TRACE} and len(task5["spans"]) == 2
    scoped = _get(collector, "/api/dashboard/evidence", target=TARGET, scope="a1", metric="input_tokens")
    assert (scoped["sample_count"], scoped["digest_matches"]) == (2, True)
    plugin = _get(collector, "/api/dashboard/evidence", target=TARGET, metric="consistency")
    assert (plugin["window"], plugin["computed_from_spans"]) == (None, False)

    with DevToolsPage(collector.db.parent / "chromium") as page:
        page.navigate(_page(collector, view="target", target=TARGET))
        page.wait_for("!!document.querySelector('a[data-evidence=\"total_task_cost\"]')")
        page.evaluate("document.querySelector('a[data-evidence=\"total_task_cost\"]').click()")  # click 1
        page.wait_for("!!document.querySelector('section.evidence-view [data-digest]')")
        assert page.evaluate("document.querySelector('[data-digest]').dataset.digest") == "matches"
        assert page.evaluate("document.querySelectorAll('table.samples tbody tr').length") == 4  # the priced tasks
        page.evaluate("document.querySelector('table.samples a').click()")  # click 2
        page.wait_for("!!document.querySelector('section.trace-view li.span')")
        assert page.evaluate("location.search").startswith("?view=trace&trace=")
        assert page.evaluate("document.querySelector('li.span .span-figures').textContent").startswith("100 in")
        assert page.exceptions == []


def test_the_overview_answers_the_first_questions_at_first_paint(collector, tmp_path):
    known_spans(collector)
    post(collector, [make_span({c.TARGET_ID: "cheap-bot/answer", c.GEN_AI_USAGE_INPUT_TOKENS: 5, c.COST_USD: 0.001,
                                c.OUTCOME_SUCCESS: ok}, start_ns=T0 + i * 10**9, duration_s=9.0 + i)
                     for i, ok in enumerate((True, False, True))])
    overview = {r["target_id"]: r for r in _get(collector, "/api/dashboard/overview")["targets"]}
    cheap, support = overview["cheap-bot/answer"], overview[TARGET]
    assert support["total_cost"] == pytest.approx(0.10) and support["mean_cost"] == pytest.approx(0.025)
    assert (support["latency_p50"], support["success_rate"]) == (pytest.approx(3.0), None)  # no outcome: unknown
    assert cheap["success_rate"] == pytest.approx(2 / 3) and cheap["latency_p95"] == pytest.approx(10.9)
    # one task: its latency window holds too little evidence, so the overview shows no latency for it
    assert overview[XSS_TARGET]["latency_p50"] is None and overview[XSS_TARGET]["latency_state"] == "insufficient_evidence"

    # The page as served already holds the overview: nothing needs to be fetched for the first paint.
    html = httpx.get(collector.url + "/").text
    inline = json.loads(re.search(r'<script type="application/json" id="initial-data">(.*?)</script>', html).group(1))
    assert {r["target_id"] for r in inline["document"]["targets"]} == set(overview)
    assert "<img" not in html.split('id="initial-data">')[1].split("</script>")[0]  # the markup target, escaped

    with DevToolsPage(tmp_path / "chromium") as page:
        page.call("Network.enable")
        page.call("Network.setBlockedURLs", urls=["*/api/*"])  # only the inlined data can fill the page
        page.navigate(_page(collector))
        page.wait_for("document.querySelectorAll('#overview-table tbody tr').length === 3")
        callout = "document.querySelector('[data-callout=\"{}\"] .callout-body').textContent"
        assert page.evaluate(callout.format("costs-most")) == TARGET
        assert page.evaluate(callout.format("slowest")) == "cheap-bot/answer"
        assert page.evaluate(callout.format("readiness")) == "—"  # no profile: not known, not "ready"
        assert page.evaluate("document.querySelector('[data-callout=\"readiness\"] .callout-label').textContent") == \
            "Readiness"
        order = "[...document.querySelectorAll('#overview-table tbody tr')].map(r => r.dataset.target)"
        assert page.evaluate(order) == [TARGET, "cheap-bot/answer", XSS_TARGET]  # by total cost; unpriced last
        # Sorting by keyboard: focus a column's button and press Enter.
        page.evaluate("document.querySelector('button[data-sort=\"latency_p95\"]').focus()")
        page.call("Input.dispatchKeyEvent", type="keyDown", key="Enter", code="Enter", windowsVirtualKeyCode=13, text="\r")
        page.call("Input.dispatchKeyEvent", type="keyUp", key="Enter", code="Enter", windowsVirtualKeyCode=13)
        page.wait_for(f"{order}[0] === 'cheap-bot/answer'")
        assert page.evaluate(order) == ["cheap-bot/answer", TARGET, XSS_TARGET]
        assert page.evaluate("document.activeElement.dataset.sort") == "latency_p95"  # focus stays on the column
        assert page.evaluate("document.querySelector('th[aria-sort=\"descending\"] button').dataset.sort") == "latency_p95"
        missing = page.evaluate(f"[...document.querySelectorAll('#overview-table tr[data-target=\"{TARGET}\"] "
                                "td[data-col=\"success_rate\"] [data-missing]')].map(s => s.textContent)")
        assert missing == ["—"]  # an unknown success rate is shown as missing, not 0%
        # The three answers are in view without scrolling.
        bottom = page.evaluate("Math.max(...[...document.querySelectorAll('.callout, #overview-table tbody tr')]"
                               ".map(e => e.getBoundingClientRect().bottom))")
        assert bottom <= page.evaluate("window.innerHeight")
        assert page.exceptions == []
    screenshot(_page(collector), tmp_path / "overview.png", tmp_path / "chromium")


def test_the_target_page_draws_each_figure_over_time_with_labelled_axes(collector, tmp_path):
    known_spans(collector)
    url = _page(collector, view="target", target=TARGET, bucket="1m")
    dom = parse_dom(dump_dom(url, tmp_path / "chromium"))
    section = dom.find("section", data_target=TARGET)
    cost = section.find("svg", data_plot="series-cost")
    assert cost.attrs["data-n"] == "4"  # four priced buckets; the unpriced task's bucket is a gap
    assert len(cost.find_all("circle")) == 4
    titles = {svg.attrs["data-plot"]: [t.text for t in svg.find_all("text", class_="axis-title")]
              for svg in section.find_all("svg", class_="plot")}
    assert titles["series-cost"] == ["time (UTC), per minute", "cost per bucket (USD)"]
    assert titles["series-latency"] == ["time (UTC), per minute", "latency (s)"]
    assert titles["series-tokens"][1] == "tokens per bucket (tokens)"
    assert titles["latency"] == ["latency per task (s)", "tasks"]
    assert titles["cost"] == ["task number (oldest first)", "cost per task (USD)"]
    retries = section.find("p", data_plot="series-retries")  # no call reported retries: said, not drawn as 0
    assert retries.text == "No call reported its retries in this range."
    caption = squash(section.find("div", data_series_tasks="5").text)
    assert caption == ("5 tasks in 5 of 6 buckets of 1 minute (the line breaks where a bucket has none) · 1 task "
                       "without a complete price (no cost, not $0)")
    # the line breaks at the empty minute between the fourth and fifth task: two pieces, never one line across it
    latency = section.find("svg", data_plot="series-latency")
    pieces = [p.attrs["d"].count("M") for p in latency.find_all("path", class_="line")]
    assert pieces == [2, 2], pieces  # p50 and p95
    # auto: 10 s buckets over the 305 s the tasks span, one task a minute: every point stands alone
    auto = parse_dom(dump_dom(_page(collector, view="target", target=TARGET), tmp_path / "chromium"))
    latency = auto.find("svg", data_plot="series-latency")
    assert latency.attrs["data-bucket-seconds"] == "10"
    assert [p.attrs["d"].count("M") for p in latency.find_all("path", class_="line")] == [5, 5]
    assert [p.attrs["d"].count("L") for p in latency.find_all("path", class_="line")] == [0, 0]
    model = section.find("table", class_="models").find("tr", data_model=MODEL)
    assert squash(model.find("td", data_col="cost").text) == "$0.6000"

    with DevToolsPage(tmp_path / "chromium") as page:
        page.navigate(url)
        page.wait_for("!!document.querySelector('svg[data-plot=\"series-cost\"]')")
        # no tick label or axis title leaves its chart
        clipped = page.evaluate("""[...document.querySelectorAll('svg.plot')].flatMap(svg => {
            const box = svg.getBoundingClientRect();
            return [...svg.querySelectorAll('text')].filter(t => {
              const b = t.getBoundingClientRect();  // after the rotation of the vertical axis title
              return b.left < box.left - 1 || b.top < box.top - 1 || b.right > box.right + 1 || b.bottom > box.bottom + 1;
            }).map(t => svg.dataset.plot + ': ' + t.textContent);
        })""")
        assert clipped == []
        assert page.exceptions == []
    screenshot(url, tmp_path / "target.png", tmp_path / "chromium", size=(1280, 1600))


def test_a_refresh_waits_while_a_person_types_in_a_field(collector, tmp_path):
    known_spans(collector)
    tokens = ("document.querySelector('tr[data-metric=\"input_tokens\"] td.value').textContent")
    with DevToolsPage(tmp_path / "chromium") as page:
        page.navigate(_page(collector, view="target", target=TARGET, range="custom", refresh="1"))
        page.wait_for(f"{tokens} === '500 tokens'")
        page.evaluate("""(() => { const field = document.querySelector('input[name="from"]');
                                  field.focus(); field.value = '2023-11'; field.dataset.mark = 'typing'; })()""")
        post(collector, [make_span({c.TARGET_ID: TARGET, c.GEN_AI_USAGE_INPUT_TOKENS: 100}, start_ns=T0)])
        page.evaluate("new Promise(r => setTimeout(r, 2500))")  # two refresh periods
        assert page.evaluate("document.activeElement.dataset.mark") == "typing"  # the field was not redrawn
        assert page.evaluate(tokens) == "500 tokens"
        page.evaluate("document.activeElement.blur()")
        page.wait_for(f"{tokens} === '600 tokens'")
        assert page.exceptions == []
