// meritlens dashboard, one target: its figures over time for a chosen range and bucket, its regressions
// (the recent day against the week before), the breakdown by model, its windows (each linking to its spans), per-task latency and cost, and readiness.
"use strict";

(function (ML) {
  const { el } = ML;
  const RANGES = [["hour", "last hour"], ["day", "last day"], ["week", "last week"], ["all", "all"], ["custom", "custom"]];
  const BUCKETS = ["auto", "1s", "10s", "1m", "5m", "15m", "1h", "6h", "1d", "1w"];

  ML.loadTarget = async function (state, initial) {
    const target = state.get("target");
    const scope = state.get("scope") || "all";
    const range = ML.rangeQuery(state);
    const series = initial || ML.getJSON("/api/dashboard/timeseries", { target, ...range, bucket: state.get("bucket") || "auto" });
    const [timeseries, models, windows, tasks, readiness, targets, regressions] = await Promise.all([
      series,
      ML.getJSON("/api/dashboard/models", { target, ...range }),
      ML.getJSON("/api/dashboard/windows", { target, scope }),
      ML.getJSON("/api/dashboard/tasks", { target, scope }),
      ML.getJSON("/api/dashboard/profiles", { target }),
      ML.getJSON("/api/dashboard/targets"),
      ML.getJSON("/api/dashboard/regressions", { target }),
    ]);
    const meta = targets.targets.find((t) => t.target_id === target) ||
      { target_id: target, spans: 0, tasks: 0, last_span_time: null, scopes: ["all"] };
    return { meta, scope, timeseries, models, windows: windows.windows, notStored: windows.not_stored || [],
      tasks, readiness, regressions, profilesLoaded: targets.readiness_profiles, db: targets.db };
  };

  function select(label, name, options, value, onChange) {
    const node = el("select", { name, "aria-label": label });
    for (const [key, text] of options) {
      const option = el("option", {}, text);
      option.value = key;
      option.selected = key === value;
      node.appendChild(option);
    }
    node.addEventListener("change", () => onChange(node.value));
    return el("label", {}, label + " ", node);
  }

  // The range selector, and with `custom` the from/to fields (ISO 8601, UTC).
  ML.rangeFields = function (state, apply, label) {
    const range = state.get("range") || "all";
    const input = (name) => {
      const node = el("input", { type: "text", name, size: 20, placeholder: "2026-01-31T12:00:00Z",
        value: state.get(name) || "", "aria-label": name === "from" ? "from (UTC, ISO 8601)" : "to (UTC, ISO 8601)" });
      node.addEventListener("change", () => apply({ [name]: node.value.trim() }));
      return node;
    };
    return [select(label || "range", "range", RANGES, range, (value) => apply({ range: value })),
      range === "custom" ? el("span", { class: "custom" }, "from ", input("from"), " to ", input("to")) : null];
  };

  function rangeControls(state, apply) {
    const form = el("form", { class: "controls", "aria-label": "time range" },
      ML.rangeFields(state, apply),
      select("bucket", "bucket", BUCKETS.map((b) => [b, b]), state.get("bucket") || "auto", (value) => apply({ bucket: value })));
    form.addEventListener("submit", (event) => event.preventDefault());
    return form;
  }

  function overTime(doc) {
    const b = doc.buckets;
    const starts = b.map((r) => r.bucket);
    const col = (key) => b.map((r) => r[key]);
    const from = doc.range.from || doc.first, to = doc.range.to || doc.last;
    const common = { buckets: starts, bucketSeconds: doc.bucket_seconds, from, to };
    const span = ML.bucketSpan(starts, doc.bucket_seconds, from, to);
    const label = ML.bucketLabel(doc.bucket_seconds), width = /^\d/.test(label) ? label : "1 " + label;
    const unpriced = b.reduce((n, r) => n + (r.tasks - r.priced_tasks), 0);
    const charts = [
      ML.timeChart({ ...common, plot: "series-cost", title: "Cost", unit: "USD", yTitle: "cost per bucket",
        series: [{ name: "cost", cls: "s-cost", values: col("cost_usd") }],
        empty: "No priced task in this range: cost is not known (not $0)." }),
      ML.timeChart({ ...common, plot: "series-tokens", title: "Tokens", unit: "tokens", yTitle: "tokens per bucket",
        series: [{ name: "input", cls: "s-input", values: col("input_tokens") },
                 { name: "output", cls: "s-output", values: col("output_tokens") }],
        empty: "No call reported tokens in this range." }),
      ML.timeChart({ ...common, plot: "series-latency", title: "End-to-end latency per task", unit: "s", yTitle: "latency",
        series: [{ name: "p50", cls: "s-p50", values: col("latency_p50") }, { name: "p95", cls: "s-p95", values: col("latency_p95") }] }),
      ML.timeChart({ ...common, plot: "series-errors", title: "Error rate", unit: "ratio", yTitle: "tasks with an error",
        series: [{ name: "error rate", cls: "s-errors", values: col("error_rate") }] }),
      ML.timeChart({ ...common, plot: "series-retries", title: "Retries", unit: "count", yTitle: "retries per bucket",
        series: [{ name: "retries", cls: "s-retries", values: col("retries") }],
        empty: "No call reported its retries in this range." }),
    ];
    const tasks = b.reduce((n, r) => n + r.tasks, 0);
    const caption = el("div", { class: "caption", "data-series-tasks": tasks, "data-buckets": span.count },
      b.length === 0 ? "No task ended in this range." :
        `${ML.plural(tasks, "task")} in ${ML.intFormat.format(b.length)} of ${ML.plural(span.count, "bucket")} of ` +
        `${width} (the line breaks where a bucket has none)` +
        (unpriced ? ` · ${ML.plural(unpriced, "task")} without a complete price (no cost, not $0)` : ""));
    return el("div", { class: "panel wide" }, el("h3", {}, "Over time"), caption, el("div", { class: "charts" }, charts));
  }

  function modelsTable(doc) {
    if (doc.models.length === 0) {
      return el("p", { class: "plot-empty", id: "no-models" }, "No LLM call with a model in this range.");
    }
    const head = ["provider", "model", "calls", "errors", "input tokens", "output tokens", "cost", "p50 latency", "p95 latency", "retries"];
    return el("table", { class: "models" },
      el("thead", {}, el("tr", {}, head.map((h, i) => el("th", { scope: "col", class: i > 1 ? "num" : "" }, h)))),
      el("tbody", {}, doc.models.map((m) => el("tr", { "data-model": m.model || "" },
        el("td", {}, m.provider || ML.missing("no provider reported")),
        el("th", { scope: "row" }, m.model ? ML.link({ view: "traces", model: m.model }, m.model) : ML.missing("no model reported")),
        el("td", { class: "num" }, ML.intFormat.format(m.calls)),
        el("td", { class: "num" }, ML.intFormat.format(m.errors)),
        el("td", { class: "num" }, ML.valueOrMissing(m.input_tokens, "count", "no call reported input tokens")),
        el("td", { class: "num" }, ML.valueOrMissing(m.output_tokens, "count", "no call reported output tokens")),
        el("td", { class: "num", "data-col": "cost", title: `${m.priced_calls} of ${m.calls} calls priced` },
          ML.valueOrMissing(m.cost_usd, "USD", "no call of this model was priced")),
        el("td", { class: "num" }, ML.valueOrMissing(m.latency_p50, "s")),
        el("td", { class: "num" }, ML.valueOrMissing(m.latency_p95, "s")),
        el("td", { class: "num" }, ML.valueOrMissing(m.retries, "count", "no call reported retries"))))));
  }

  ML.renderTarget = function (main, view, state, apply) {
    const t = view.meta;
    const byMetric = new Map(view.windows.map((w) => [w.metric, w]));
    const scopeSelect = select("scope", "scope", t.scopes.map((s) => [s, s === "all" ? "all spans" : "assessment " + s]),
      view.scope, (value) => apply({ scope: value }));
    const head = el("div", { class: "target-head" },
      el("h2", { class: "target-id" }, t.target_id),
      el("div", { class: "facts" },
        el("span", {}, el("b", { "data-fact": "spans" }, ML.intFormat.format(t.spans)), " spans"),
        el("span", {}, el("b", { "data-fact": "tasks" }, ML.intFormat.format(t.tasks)), " tasks"),
        el("span", {}, "last span ", el("b", {}, ML.formatTime(t.last_span_time))),
        ML.link({ view: "traces", target: t.target_id }, "traces of this target →")),
      rangeControls(state, apply));
    const windowsPanel = el("div", { class: "panel windows-panel" },
      el("div", { class: "panel-head" }, el("h3", {}, "Windows"), scopeSelect),
      ML.windowsTable(view.windows, view.notStored));
    const side = el("div", { class: "plots" },
      el("div", { class: "panel" }, el("h3", {}, "End-to-end latency per task"),
        ML.latencyPlot(view.tasks, byMetric.get("end_to_end_latency"))),
      el("div", { class: "panel" }, el("h3", {}, "Cost per task"), ML.costPlot(view.tasks)),
      el("div", { class: "panel readiness" }, el("h3", {}, "Readiness"), ML.readinessView(view.readiness, view.profilesLoaded)));
    main.replaceChildren(el("section", { class: "target", "data-target": t.target_id, "data-scope": view.scope },
      head, ML.alertsPanel(t.target_id), overTime(view.timeseries), ML.regressionsPanel(view.regressions),
      el("div", { class: "panel wide" }, el("h3", {}, "By model"), modelsTable(view.models)),
      el("div", { class: "grid" }, windowsPanel, side)));
  };
})(window.ML);
