"""The dashboard at `/`: its JSON endpoints, and the page itself in real headless Chromium."""

from __future__ import annotations

import urllib.parse

import httpx
import pytest

from meritlens.analytics._definitions import PLUGIN_ONLY_METRICS, SPAN_WINDOW_METRICS
from meritlens.instrumentation import conventions as c
from tests.browser import DevToolsPage, dump_dom, parse_dom, screenshot, squash
from tests.collector.collector_proc import CollectorProcess as TokenCollector
from tests.conftest import CollectorProcess, run_cli
from tests.collector.dashboard_spans import T0, TARGET, XSS_TARGET, known_spans, post
from tests.otlp_builders import make_request, make_span

_post = post
_known_spans = known_spans


def _target_url(collector, target: str = TARGET, **params) -> str:
    """The address of a target's page."""
    query = urllib.parse.urlencode({"refresh": "0", **params, "view": "target", "target": target})
    return f"{collector.url}/?{query}"


def _get(collector, path: str, **params) -> httpx.Response:
    return httpx.get(collector.url + path, params=params)


def test_json_endpoints_give_targets_windows_and_per_task_samples(collector):
    _known_spans(collector)
    targets = _get(collector, "/api/dashboard/targets").json()
    assert targets["db"] == "meritlens.duckdb" and targets["readiness_profiles"] is False
    by_id = {t["target_id"]: t for t in targets["targets"]}
    assert set(by_id) == {TARGET, XSS_TARGET}
    assert (by_id[TARGET]["spans"], by_id[TARGET]["tasks"], by_id[TARGET]["scopes"]) == (6, 5, ["all", "a1"])

    windows = _get(collector, "/api/dashboard/windows", target=TARGET, scope="all").json()["windows"]
    w = {row["metric"]: row for row in windows}
    assert (w["input_tokens"]["value"], w["input_tokens"]["sample_count"]) == (500.0, 5)
    assert w["total_task_cost"]["value"] == pytest.approx(0.10) and w["total_task_cost"]["sample_count"] == 4
    assert w["end_to_end_latency"]["p50"] == pytest.approx(3.0) and w["end_to_end_latency"]["p95"] == pytest.approx(4.8)
    assert w["output_tokens"]["state"] == "not_configured" and w["output_tokens"]["value"] is None
    assert w["input_tokens"]["metric_info"]["group"] == "cost_and_resources"
    not_stored = {m["metric"] for m in _get(collector, "/api/dashboard/windows", target=TARGET).json()["not_stored"]}
    assert not_stored == set(PLUGIN_ONLY_METRICS)  # catalogue metrics only a plugin could have stored
    scoped = _get(collector, "/api/dashboard/windows", target=TARGET, scope="a1").json()["windows"]
    assert {r["metric"]: r["value"] for r in scoped}["input_tokens"] == 200.0

    tasks = _get(collector, "/api/dashboard/tasks", target=TARGET).json()
    assert (tasks["total_tasks"], tasks["truncated"]) == (5, False)
    by_task = {t["task_key"]: t for t in tasks["tasks"]}
    assert by_task["task-5"]["end_to_end_latency"] == pytest.approx(5.0)
    assert by_task["task-5"]["total_task_cost"] is None  # an unpriced call: no cost, never 0
    assert by_task["task-5"]["span_count"] == 2
    assert sorted(t["end_to_end_latency"] for t in tasks["tasks"]) == pytest.approx([1, 2, 3, 4, 5])
    limited = _get(collector, "/api/dashboard/tasks", target=TARGET, limit="2").json()
    assert (len(limited["tasks"]), limited["truncated"], limited["tasks"][0]["task_key"]) == (2, True, "task-5")

    xss = _get(collector, "/api/dashboard/windows", target=XSS_TARGET).json()["windows"]
    assert {r["target_id"] for r in xss} == {XSS_TARGET}  # quoted as a SQL literal, quotes and all
    assert len(xss) == len(SPAN_WINDOW_METRICS)
    assert _get(collector, "/api/dashboard/tasks", target=XSS_TARGET).json()["total_tasks"] == 1
    assert _get(collector, "/api/dashboard/profiles", target=TARGET).json() == {
        "target_id": TARGET, "profiles_loaded": 0, "reports": [], "recorded": []}


def test_endpoints_refuse_bad_requests_with_a_message(collector):
    for path, params, needle in (
        ("/api/dashboard/tasks", {}, "give the target"),
        ("/api/dashboard/tasks", {"target": "x", "limit": "0"}, "limit must be an integer"),
        ("/api/dashboard/tasks", {"target": "x", "limit": "lots"}, "limit must be an integer"),
        ("/api/dashboard/profiles", {}, "give the target"),
        ("/api/arrow", {"table": "pg_catalog"}, "table must be one of spans, windows"),
        ("/api/dashboard/timeseries", {}, "give the target"),
        ("/api/dashboard/timeseries", {"target": "x", "range": "month"}, "range must be one of hour, day, week, all, custom"),
        ("/api/dashboard/timeseries", {"target": "x", "bucket": "3m"}, "bucket must be auto or one of"),
        ("/api/dashboard/models", {"target": "x", "range": "custom", "from": "yesterday"}, "from must be an ISO 8601 time"),
        ("/api/dashboard/traces", {"limit": "0"}, "limit must be an integer from 1 to 500"),
        ("/api/dashboard/traces", {"status": "broken"}, "status must be ok or error"),
        ("/api/dashboard/trace", {"trace": "x' or 1=1"}, "trace must be 32 lowercase hex characters"),
        ("/api/dashboard/evidence", {"target": "x"}, "give the metric"),
    ):
        r = _get(collector, path, **params)
        assert r.status_code == 400 and needle in r.json()["error"], (path, r.text)
    assert _get(collector, "/static/../_store.py").status_code == 404
    assert _get(collector, "/static/secret.txt").status_code == 404
    page = _get(collector, "/")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert _get(collector, "/static/app.js").headers["content-type"].startswith("text/javascript")


def test_the_page_shows_the_windows_plots_and_escapes_target_ids(collector, tmp_path):
    _known_spans(collector)
    dom = parse_dom(dump_dom(_target_url(collector), tmp_path / "chromium"))
    section = dom.find("section", data_target=TARGET)

    def row(metric: str):
        return section.find("tr", data_metric=metric)

    assert row("input_tokens").attrs["data-state"] == "measured"
    assert squash(row("input_tokens").find("td", class_="value").text) == "500 tokens"
    assert row("input_tokens").find("td", data_samples="5")
    assert squash(row("total_task_cost").find("td", class_="value").text) == "$0.1000"
    assert row("total_task_cost").find("td", data_samples="4")
    latency = row("end_to_end_latency").find("td", class_="value")
    assert latency.find("span", class_="val").text == "4.80 s"
    assert latency.find("span", class_="spread").text == "p50 3.00 s · p95 4.80 s"
    assert row("output_tokens").attrs["data-state"] == "not_configured"
    assert squash(row("output_tokens").find("td", class_="value").text) == "—"  # missing is not 0
    assert row("output_tokens").find("span", class_="state").text == "not configured"
    # Every catalogue metric is shown: those without a stored window as not configured.
    table = section.find("table", class_="windows")
    stored = {r.attrs["data-metric"] for r in table.find_all("tr", data_metric=True)}
    not_stored = {c.attrs["data-metric"]: c for c in table.find_all("span", class_="chip")}
    assert len(stored) + len(not_stored) == 23 and not stored & set(not_stored)
    assert not_stored["consistency"].attrs["data-state"] == "not_configured"
    assert "state-not_configured" in not_stored["consistency"].attrs["class"]
    assert row("task_quality").attrs["data-state"] == "not_configured"  # stored, nothing fed it

    histogram = section.find("svg", data_plot="latency")
    assert histogram.attrs["data-n"] == "5"
    labels = {t.attrs["data-marker"]: t.text for t in histogram.find_all("text", class_="marker-label")}
    assert labels == {"p50": "p50 3.00 s", "p95": "p95 4.80 s"}
    bars = histogram.find_all("rect", class_="bar")
    assert sum(int(b.find("title").text.split()[0]) for b in bars) == 5

    cost = section.find("svg", data_plot="cost")
    assert cost.attrs["data-n"] == "4" and len(cost.find_all("rect", class_="bar")) == 4
    assert cost.find("text", data_marker="mean").text.endswith("mean $0.0250")
    caption = squash(cost.parent.find("div", class_="caption").text)
    assert caption.startswith("4 priced tasks · total $0.1000")
    assert "1 task without a complete price" in caption
    assert section.find("p", data_readiness="no-profile")
    assert [o.text for o in section.find("select", name="scope").find_all("option")] == ["all spans", "assessment a1"]
    # Each window links to the spans behind it.
    link = row("input_tokens").find("a", class_="evidence-link")
    assert urllib.parse.parse_qs(link.attrs["href"].split("?", 1)[1]) == {
        "view": ["evidence"], "target": [TARGET], "scope": ["all"], "metric": ["input_tokens"], "refresh": ["0"]}
    assert row("output_tokens").find_all("a") == []  # no sample: no evidence to show

    # A target id full of markup is shown as text and never runs: in the overview and on its page.
    html = dump_dom(collector.url + "/?refresh=0", tmp_path / "chromium")
    overview = parse_dom(html)
    assert any(a.text == XSS_TARGET for a in overview.find("table", id="overview-table").find_all("a"))
    assert overview.find_all("img") == [] and "data-pwned" not in html and "<img" not in html
    html = dump_dom(_target_url(collector, XSS_TARGET), tmp_path / "chromium")
    evil = parse_dom(html).find("section", data_target=XSS_TARGET)
    assert evil.find("h2", class_="target-id").text == XSS_TARGET
    assert parse_dom(html).find_all("img") == [] and "data-pwned" not in html and "<img" not in html
    assert evil.find("tr", data_metric="end_to_end_latency").attrs["data-state"] == "insufficient_evidence"

    width, height = screenshot(_target_url(collector), tmp_path / "dashboard.png", tmp_path / "chromium")
    assert (width, height) == (1280, 900)
    assert (tmp_path / "dashboard.png").stat().st_size > 20_000  # a rendered page, not a blank one


def test_the_page_refreshes_itself_and_switches_scope(collector, tmp_path):
    _known_spans(collector)
    value = ("(document.querySelector('section[data-target=\"support-bot/answer\"] "
             "tr[data-metric=\"input_tokens\"] td.value') || {}).textContent")
    with DevToolsPage(tmp_path / "chromium") as page:
        page.navigate(_target_url(collector, refresh="1"))
        assert page.wait_for(f"{value} === '500 tokens' && {value}")
        _post(collector, [make_span({c.TARGET_ID: TARGET, c.GEN_AI_USAGE_INPUT_TOKENS: 100}, start_ns=T0)])
        assert page.wait_for(f"{value} === '600 tokens'", timeout=10)
        assert page.evaluate("document.getElementById('updated').textContent").startswith("updated ")

        page.evaluate("""(() => { const s = document.querySelector('section[data-target="support-bot/answer"] select[name="scope"]');
                                  s.value = 'a1'; s.dispatchEvent(new Event('change')); })()""")
        page.wait_for("document.querySelector('section[data-target=\"support-bot/answer\"]').dataset.scope === 'a1'")
        assert page.wait_for(f"{value} === '200 tokens'")
        assert page.evaluate("document.querySelector('section[data-target=\"support-bot/answer\"] "
                             "svg[data-plot=\"latency\"]').dataset.n") == "2"
        # Turning auto-refresh off stops the updates.
        page.evaluate("document.getElementById('auto-refresh').click()")
        page.evaluate("new Promise(r => setTimeout(r, 1500))")  # let a refresh already under way finish
        _post(collector, [make_span({c.TARGET_ID: TARGET, c.ASSESSMENT_ID: "a1", c.GEN_AI_USAGE_INPUT_TOKENS: 1},
                                    start_ns=T0)])
        page.evaluate("new Promise(r => setTimeout(r, 2500))")
        assert page.evaluate(value) == "200 tokens"
        assert page.exceptions == []


def test_an_empty_collector_says_how_to_send_spans(collector, tmp_path):
    dom = parse_dom(dump_dom(collector.url + "/?refresh=0", tmp_path / "chromium"))
    message = squash(dom.find("p", id="no-targets").text)
    assert "No target has sent application spans yet" in message and collector.url in message
    assert dom.find("div", id="banner").attrs.get("hidden") is not None


def test_the_page_says_when_the_collector_is_unreachable(collector, tmp_path):
    url = collector.url
    with DevToolsPage(tmp_path / "chromium") as page:
        page.navigate(url + "/?refresh=1")
        page.wait_for("document.getElementById('updated').textContent.startsWith('updated')")
        collector.stop()
        banner = page.wait_for("!document.getElementById('banner').hidden && document.getElementById('banner').textContent")
        assert banner.startswith("Could not load data from the collector")
        assert page.evaluate("document.getElementById('updated').textContent") == "update failed"


PROFILE = """
target = "support-bot/answer"
description = "answer quality at a known cost"

[metrics.input_tokens]
direction = "lower"
strategy = "representative_task_set"
cases = 5
repetitions = 1
aggregation = "sum"
min_samples = 5
rationale = "every task of the set"

[metrics.total_task_cost]
direction = "lower"
strategy = "representative_task_set"
cases = 5
repetitions = 1
aggregation = "sum"
min_samples = 5
rationale = "budget"

[metrics.end_to_end_latency]
direction = "lower"
strategy = "representative_task_set"
cases = 5
repetitions = 1
aggregation = "percentile"
min_samples = 5
rationale = "p95 over the set"

[metrics.task_success]
direction = "higher"
strategy = "representative_task_set"
cases = 5
repetitions = 1
aggregation = "rate"
min_samples = 5
rationale = "graded outcomes"
"""


def _profiles(tmp_path):
    folder = tmp_path / "profiles"
    folder.mkdir()
    (folder / "support.toml").write_text(PROFILE)
    (folder / "newcomer.toml").write_text(PROFILE.replace(TARGET, "new-bot/answer"))
    return folder


def test_readiness_against_the_profiles_serve_loaded(tmp_path):
    collector = CollectorProcess(tmp_path / "meritlens.duckdb", ("--profile", str(_profiles(tmp_path)))).start()
    try:
        _known_spans(collector)
        document = _get(collector, "/api/dashboard/profiles", target=TARGET).json()
        assert document["profiles_loaded"] == 2
        [report] = document["reports"]
        assert report["profile"] == "support" and report["target"] == TARGET
        assert report["covered"] == ["input_tokens", "total_task_cost", "end_to_end_latency"]
        assert report["missing"] == ["task_success"]
        assert (report["ready"], report["baseline_ready"]) == (False, False)
        assert "total_task_cost: 4 of 5 samples" in report["shortfalls"]
        # The profile's target without spans is listed, with nothing covered.
        targets = {t["target_id"]: t for t in _get(collector, "/api/dashboard/targets").json()["targets"]}
        assert targets["new-bot/answer"]["spans"] == 0
        assert _get(collector, "/api/dashboard/profiles", target="new-bot/answer").json()["reports"][0]["covered"] == []

        dom = parse_dom(dump_dom(_target_url(collector), tmp_path / "chromium"))
        panel = dom.find("section", data_target=TARGET).find("div", class_="readiness")
        profile = panel.find("div", data_profile="support")
        assert profile.find("span", data_verdict="coverage").text == "coverage not ready"
        assert profile.find("span", data_verdict="baseline").text == "baseline not ready"
        chips = {li.attrs["data-metric"]: (li.attrs["data-coverage"], li.text) for li in profile.find_all("li", data_metric=True)}
        assert chips == {
            "input_tokens": ("covered", "✓ input_tokens 5/5"),
            "total_task_cost": ("short", "◐ total_task_cost 4/5"),
            "end_to_end_latency": ("covered", "✓ end_to_end_latency 5/5"),
            "task_success": ("missing", "✗ task_success 0/5"),
        }
        assert "total_task_cost: 4 of 5 samples" in [li.text for li in profile.find("ul", class_="problems").find_all("li")]
        newcomer = parse_dom(dump_dom(_target_url(collector, "new-bot/answer"), tmp_path / "chromium")).find(
            "section", data_target="new-bot/answer")
        assert newcomer.find("div", data_profile="newcomer").find("span", data_verdict="coverage").text == "coverage not ready"
        assert newcomer.find("p", data_plot="latency").text == "No task has a latency yet."
        screenshot(_target_url(collector), tmp_path / "readiness.png", tmp_path / "chromium", size=(1280, 1400))

        # The overview says which targets are not ready, and what each misses.
        rows = {r["target_id"]: r for r in _get(collector, "/api/dashboard/overview").json()["targets"]}
        assert rows[TARGET]["readiness"] == {"source": "profile", "profiles": ["support"], "ready": False,
                                             "baseline_ready": False, "missing": ["task_success"]}
        assert rows["new-bot/answer"]["spans"] == 0 and rows["new-bot/answer"]["total_cost"] is None
        assert rows[XSS_TARGET]["readiness"] is None  # no profile names it
        overview = parse_dom(dump_dom(collector.url + "/?refresh=0", tmp_path / "chromium"))
        not_ready = overview.find("div", data_callout="readiness")
        assert (not_ready.attrs["data-verdict"], not_ready.find("div", class_="callout-label").text) == (
            "not-ready", "Not ready")
        assert sorted(a.text for a in not_ready.find_all("a")) == ["new-bot/answer", TARGET]
        assert squash(not_ready.find("div", class_="callout-note").text) == "2 of 2 profiled targets not ready"
        cell = overview.find("tr", data_target=TARGET).find("td", data_col="readiness")
        assert cell.text == "not ready" and cell.find("span").attrs["title"] == "missing: task_success"
        assert overview.find("tr", data_target=XSS_TARGET).find("td", data_col="readiness").text == "no profile"
    finally:
        collector.stop()


def test_the_readiness_card_is_headed_by_what_its_body_says(collector, tmp_path):
    """Every profiled target ready: the card says "Ready" above "every profiled target is ready"."""
    _known_spans(collector)
    profile = tmp_path / "tokens.toml"
    profile.write_text(PROFILE.split("\n[metrics.total_task_cost]")[0])  # input_tokens only: 5 of 5 samples
    check = run_cli("readiness", "--profile", str(profile), "--baseline", "--db", str(collector.db), check=False)
    assert check.returncode == 0, check.stdout + check.stderr
    card = parse_dom(dump_dom(collector.url + "/?refresh=0", tmp_path / "chromium")).find("div", data_callout="readiness")
    assert card.attrs["data-verdict"] == "ready"
    assert card.find("div", class_="callout-label").text == "Ready"
    assert squash(card.find("div", class_="callout-body").text) == "every profiled target is ready"
    assert squash(card.find("div", class_="callout-note").text) == "1 of 1 profiled target ready"
    assert not card.find_all("a")


def test_the_last_recorded_check_shows_without_a_profile(collector, tmp_path):
    _known_spans(collector)
    profile = _profiles(tmp_path) / "support.toml"
    proc = run_cli("readiness", "--profile", str(profile), "--db", str(collector.db), check=False)
    assert proc.returncode == 1  # not ready; the check is recorded by the collector
    [recorded] = _get(collector, "/api/dashboard/profiles", target=TARGET).json()["recorded"]
    assert (recorded["scope"], recorded["ready"], recorded["missing"]) == ("all", False, ["task_success"])
    dom = parse_dom(dump_dom(_target_url(collector), tmp_path / "chromium"))
    panel = dom.find("section", data_target=TARGET).find("div", data_readiness="recorded")
    assert panel.find("span", data_verdict="coverage").text == "coverage not ready"
    assert "last recorded check, scope all" in squash(panel.find("div", class_="caption").text)


def test_serve_refuses_a_bad_profile_naming_the_problem(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text(PROFILE.replace('aggregation = "sum"\nmin_samples = 5\nrationale = "budget"',
                                   'aggregation = "mean"\nmin_samples = 5\nrationale = "budget"'))
    proc = run_cli("serve", "--db", str(tmp_path / "x.duckdb"), "--http-port", "0", "--profile", str(bad), check=False)
    assert proc.returncode == 2
    assert "bad.toml" in proc.stderr and "total_task_cost" in proc.stderr and "Traceback" not in proc.stderr


def test_with_a_bearer_token_the_page_loads_and_sends_the_token_from_the_fragment(tmp_path):
    collector = TokenCollector(tmp_path / "meritlens.duckdb", args=("--token", "s3cret-token"),
                               token="s3cret-token").start()
    try:
        spans = [make_span({c.TARGET_ID: TARGET, c.GEN_AI_USAGE_INPUT_TOKENS: 100}, start_ns=T0)]
        with collector.client() as client:
            r = client.post("/v1/traces", content=make_request(spans).SerializeToString(),
                            headers={"Content-Type": "application/x-protobuf"})
        assert r.status_code == 200
        page = _get(collector, "/")
        assert page.status_code == 200 and "initial-data" not in page.text  # without the token it holds no data
        assert TARGET in httpx.get(collector.url + "/", headers=collector.headers()).text  # with it, the first paint does
        assert _get(collector, "/static/app.js").status_code == 200
        for path in ("/api/dashboard/targets", "/api/dashboard/windows", "/api/arrow", "/api/dashboard/overview",
                     "/api/dashboard/traces", "/metrics"):
            assert _get(collector, path).status_code == 401, path
        assert httpx.post(collector.url + "/", content=b"x").status_code == 401  # only GET is public

        dom = parse_dom(dump_dom(_target_url(collector) + "#token=s3cret-token", tmp_path / "chromium"))
        row = dom.find("section", data_target=TARGET).find("tr", data_metric="input_tokens")
        assert squash(row.find("td", class_="value").text) == "100 tokens"
        # links between the pages keep the token
        assert row.find("a", class_="evidence-link").attrs["href"].endswith("#token=s3cret-token")
        overview = parse_dom(dump_dom(collector.url + "/?refresh=0#token=s3cret-token", tmp_path / "chromium"))
        assert overview.find("tr", data_target=TARGET).find("td", data_col="tasks").text == "1"

        dom = parse_dom(dump_dom(collector.url + "/?refresh=0", tmp_path / "chromium"))
        banner = dom.find("div", id="banner")
        assert "hidden" not in banner.attrs and "wants a bearer token" in banner.text
        assert dom.find_all("section") == []
    finally:
        collector.stop()
