// meritlens dashboard, the page's frame: which view the address asks for (?view=overview, target,
// traces, trace or evidence), its first paint from the data the server inlined, and the refresh loop.
"use strict";

(function (ML) {
  const { el } = ML;
  const VIEWS = {
    overview: {
      title: () => "overview",
      load: (state, initial) => initial || ML.getJSON("/api/dashboard/overview"),
      render: (main, doc) => ML.renderOverview(main, doc),
    },
    target: {
      title: (state) => state.get("target"),
      load: (state, initial) => ML.loadTarget(state, initial),
      render: (main, doc, state, apply) => ML.renderTarget(main, doc, state, apply),
    },
    traces: {
      title: () => "traces",
      load: (state, initial) => initial || ML.getJSON("/api/dashboard/traces", {
        target: state.get("target"), model: state.get("model"), status: state.get("status"), ...ML.rangeQuery(state) }),
      render: (main, doc, state, apply) => ML.renderTraces(main, doc, state, apply),
    },
    trace: {
      title: (state) => "trace " + (state.get("trace") || "").slice(0, 8),
      load: (state, initial) => initial || ML.getJSON("/api/dashboard/trace", { trace: state.get("trace") }),
      render: (main, doc) => ML.renderTrace(main, doc),
      still: true, // a trace does not change once stored; refreshing would close the open spans
    },
    evidence: {
      title: (state) => "evidence of " + state.get("metric"),
      load: (state, initial) => initial || ML.getJSON("/api/dashboard/evidence", {
        target: state.get("target"), scope: state.get("scope") || "all", metric: state.get("metric") }),
      render: (main, doc) => ML.renderEvidence(main, doc),
      still: true,
    },
  };

  const state = new URLSearchParams(window.location.search);
  const viewName = VIEWS[state.get("view")] ? state.get("view") : "overview";
  const view = VIEWS[viewName];
  const REFRESH_SECONDS = (() => {
    const n = Number.parseInt(ML.params.get("refresh"), 10);
    return Number.isFinite(n) ? Math.min(3600, Math.max(1, n)) : 5;
  })();
  let timer = null, loading = false, pending = false;

  // The data the server put in the page for this view, used once for the first paint.
  function inlined() {
    const node = document.getElementById("initial-data");
    if (!node) return null;
    try {
      const data = JSON.parse(node.textContent);
      return data.view === viewName ? data.document : null;
    } catch (err) {
      return null;
    }
  }

  // A control changed the view's parameters: keep them in the address (shareable), then reload.
  function apply(changes) {
    for (const [key, value] of Object.entries(changes)) {
      if (value === null || value === undefined || value === "") state.delete(key);
      else state.set(key, value);
    }
    history.replaceState(null, "", "/?" + state.toString() + window.location.hash);
    refresh();
  }

  async function refresh(initial) {
    if (loading) { pending = true; return; }
    loading = true;
    const banner = document.getElementById("banner");
    const main = document.getElementById("view");
    try {
      const doc = await view.load(state, initial);
      view.render(main, doc, state, apply);
      if (doc && doc.db) document.getElementById("db").textContent = doc.db;
      banner.hidden = true;
      document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString("en-GB");
    } catch (err) {
      banner.textContent = "Could not load data from the collector: " + err.message;
      banner.hidden = false;
      document.getElementById("updated").textContent = "update failed";
    } finally {
      loading = false;
      if (pending) { pending = false; refresh(); }
    }
  }

  function schedule() {
    if (timer) clearInterval(timer);
    timer = null;
    if (document.getElementById("auto-refresh").checked) timer = setInterval(tick, REFRESH_SECONDS * 1000);
  }

  // A refresh redraws the view: not while a person is typing in one of its fields.
  function tick() {
    const active = document.activeElement;
    if (active && active.matches("#view input, #view select")) return;
    refresh();
  }

  function navigation() {
    const nav = document.getElementById("views");
    const here = (name) => (viewName === name ? "page" : null);
    nav.replaceChildren(
      el("a", { href: ML.pageHref({}), "aria-current": here("overview") }, "Overview"),
      el("a", { href: ML.pageHref({ view: "traces" }), "aria-current": here("traces") }, "Traces"));
  }

  document.addEventListener("DOMContentLoaded", () => {
    document.title = "meritlens · " + view.title(state);
    document.body.dataset.view = viewName;
    navigation();
    const toggle = document.getElementById("auto-refresh");
    if (ML.params.get("refresh") === "0" || (view.still && !ML.params.has("refresh"))) toggle.checked = false;
    if (ML.params.get("refresh") !== "0") document.getElementById("refresh-seconds").textContent = String(REFRESH_SECONDS);
    toggle.addEventListener("change", schedule);
    schedule();
    refresh(inlined());
  });
})(window.ML);
