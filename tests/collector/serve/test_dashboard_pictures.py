"""What the dashboard's pictures say, measured in real headless Chromium: timing bars that use the
page's width and lie within their parents, numbers written for people (with the exact value kept),
and row separators under every cell of a row."""

from __future__ import annotations

import os
import re
import urllib.parse

from meritlens.instrumentation import conventions as c
from tests.browser import DevToolsPage, screenshot
from tests.collector.dashboard_spans import T0, TARGET, known_spans, post
from tests.otlp_builders import make_span

NOISY_COST = 2.2800000000000002e-05
NOISY_RATIO = 0.1 + 0.2  # 0.30000000000000004
WIDTH = 1400


def _trace(collector) -> tuple[str, dict[str, str | None]]:
    """One task's trace: a root, two children, a grandchild; the first child carries noisy floats.
    Returns the trace id and each span's parent."""
    trace = os.urandom(16)
    ids = {name: os.urandom(8) for name in ("root", "first", "second", "inner")}
    task = {c.TARGET_ID: TARGET, c.TASK_ID: "pictured"}
    second = T0 + 400 * 10**9
    spans = [
        make_span(task, trace_id=trace, span_id=ids["root"], start_ns=second, duration_s=2.0, name="task"),
        make_span({**task, c.COST_USD: NOISY_COST, "x.ratio": NOISY_RATIO, c.GEN_AI_OPERATION_NAME: "chat"},
                  trace_id=trace, span_id=ids["first"], parent_span_id=ids["root"], start_ns=second + 10**8,
                  duration_s=0.5, name="chat first"),
        make_span(task, trace_id=trace, span_id=ids["second"], parent_span_id=ids["root"],
                  start_ns=second + 12 * 10**8, duration_s=0.7, name="step second"),
        make_span(task, trace_id=trace, span_id=ids["inner"], parent_span_id=ids["second"],
                  start_ns=second + 13 * 10**8, duration_s=0.4, name="tool inner"),
    ]
    post(collector, spans)
    parents = {"root": None, "first": "root", "second": "root", "inner": "second"}
    return trace.hex(), {ids[k].hex(): (ids[v].hex() if v else None) for k, v in parents.items()}


def _page(collector, **params) -> str:
    return f"{collector.url}/?{urllib.parse.urlencode({'refresh': '0', **params})}"


def test_trace_bars_use_the_width_and_nest_inside_their_parents(collector, tmp_path):
    trace, parents = _trace(collector)
    url = _page(collector, view="trace", trace=trace)
    with DevToolsPage(tmp_path / "chromium", size=(WIDTH, 900)) as page:
        page.navigate(url)
        page.wait_for("document.querySelectorAll('li.span').length === 4")
        bars = page.evaluate("""Object.fromEntries([...document.querySelectorAll('li.span')].map(li => {
            const bar = li.querySelector('rect').getBoundingClientRect();
            const track = li.querySelector('svg.bar-track').getBoundingClientRect();
            return [li.dataset.span,
                    {left: bar.left, right: bar.right, trackLeft: track.left, trackWidth: track.width}];
        }))""")
        assert page.exceptions == []
    assert set(bars) == set(parents)
    # one track for every row, whatever the depth, and it takes a large part of the window
    assert len({(round(b["trackLeft"]), round(b["trackWidth"])) for b in bars.values()}) == 1, bars
    assert min(b["trackWidth"] for b in bars.values()) >= 0.35 * WIDTH, bars
    for span, parent in parents.items():
        if parent is not None:
            child, outer = bars[span], bars[parent]
            assert outer["left"] - 0.5 <= child["left"] and child["right"] <= outer["right"] + 0.5, (span, bars)
    # the root spans the whole trace: its bar is the whole track
    root = next(bars[s] for s, p in parents.items() if p is None)
    assert root["right"] - root["left"] >= 0.99 * root["trackWidth"]
    screenshot(url, tmp_path / "trace.png", tmp_path / "chromium", size=(WIDTH, 900))


def test_numbers_are_written_for_people_with_the_exact_value_kept(collector, tmp_path):
    trace, _ = _trace(collector)
    with DevToolsPage(tmp_path / "chromium", size=(WIDTH, 900)) as page:
        page.navigate(_page(collector, view="trace", trace=trace))
        page.wait_for("document.querySelectorAll('li.span').length === 4")
        page.evaluate("document.querySelectorAll('li.span details').forEach(d => d.open = true)")
        cells = page.evaluate("Object.fromEntries([...document.querySelectorAll('td[data-attribute]')]"
                              ".map(td => [td.dataset.attribute, [td.textContent, td.title]]))")
        text = page.evaluate("document.body.innerText")
        assert page.exceptions == []
    # shown rounded; the exact value on hover
    assert cells["cost_usd"][0] == "$0.0000228" and float(cells["cost_usd"][1]) == NOISY_COST
    assert cells["attributes.x.ratio"][0] == "0.3" and float(cells["attributes.x.ratio"][1]) == NOISY_RATIO
    # no float noise (long digit runs) and no exponent anywhere on the page
    assert not re.search(r"\d\.\d{8,}|\de-\d", text), re.findall(r"\S*(?:\d\.\d{8,}|\de-\d)\S*", text)


def test_row_separators_run_under_every_cell_of_a_row(collector, tmp_path):
    known_spans(collector)
    trace, _ = _trace(collector)
    pages = {"overview": _page(collector), "target": _page(collector, view="target", target=TARGET),
             "traces": _page(collector, view="traces"), "trace": _page(collector, view="trace", trace=trace)}
    rule = """[...document.querySelectorAll('table tbody tr')].filter(tr => tr.children.length > 1).map(tr =>
        [...new Set([...tr.children].map(cell => { const s = getComputedStyle(cell);
          return s.borderBottomStyle + ' ' + s.borderBottomWidth + ' ' + s.borderBottomColor; }))])"""
    with DevToolsPage(tmp_path / "chromium", size=(WIDTH, 900)) as page:
        for name, url in pages.items():
            page.navigate(url)
            page.wait_for("document.querySelectorAll('table tbody tr').length > 0")
            rows = page.evaluate(rule)
            assert rows and all(len(styles) == 1 for styles in rows), (name, rows)
            assert all(not styles[0].startswith("none") for styles in rows), (name, rows)
        assert page.exceptions == []
