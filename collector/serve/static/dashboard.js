// meritlens dashboard: reads the collector's read-only JSON endpoints and draws each target's
// windows, per-task latency and cost plots (inline SVG) and readiness. Hand-written, no build step.
// Every string from the data is put into the page as text (textContent / setAttribute), never as HTML.
"use strict";

(function () {
  const params = new URLSearchParams(window.location.search);
  const REFRESH_SECONDS = clampInt(params.get("refresh"), 5, 1, 3600);
  const SVG_NS = "http://www.w3.org/2000/svg";
  const STATE_LABELS = {
    measured: "measured",
    insufficient_evidence: "insufficient evidence",
    not_configured: "not configured",
    not_applicable: "not applicable",
  };
  const GROUP_LABELS = {
    quality_and_behaviour: "Quality and behaviour",
    cost_and_resources: "Cost and resources",
    latency_and_operations: "Latency and operations",
  };
  const GROUP_ORDER = ["quality_and_behaviour", "cost_and_resources", "latency_and_operations"];
  const DISTRIBUTION_AGGREGATIONS = new Set(["distribution", "percentile"]);

  const selectedScope = new Map(); // target id -> scope shown
  let timer = null;
  let loading = false;

  function clampInt(raw, fallback, lo, hi) {
    const n = Number.parseInt(raw, 10);
    return Number.isFinite(n) ? Math.min(hi, Math.max(lo, n)) : fallback;
  }

  // ---- DOM helpers (text only) ---------------------------------------------------------------
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    setAttrs(node, attrs);
    append(node, children);
    return node;
  }

  function svgEl(tag, attrs, ...children) {
    const node = document.createElementNS(SVG_NS, tag);
    setAttrs(node, attrs);
    append(node, children);
    return node;
  }

  function setAttrs(node, attrs) {
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      node.setAttribute(key, String(value));
    }
  }

  function append(node, children) {
    for (const child of children.flat()) {
      if (child === null || child === undefined || child === false) continue;
      node.appendChild(child instanceof Node ? child : document.createTextNode(String(child)));
    }
  }

  // ---- formatting ----------------------------------------------------------------------------
  const intFormat = new Intl.NumberFormat("en-US", { maximumFractionDigits: 0 });

  function formatNumber(value, unit) {
    if (value === null || value === undefined || !Number.isFinite(value)) return null;
    switch (unit) {
      case "USD":
        if (Math.abs(value) >= 100) return "$" + value.toFixed(2);
        // per-call LLM costs are often fractions of a cent: keep three significant digits
        if (value !== 0 && Math.abs(value) < 0.01) return "$" + Number(value.toPrecision(3));
        return "$" + value.toFixed(4);
      case "s":
        if (Math.abs(value) >= 100) return value.toFixed(0) + " s";
        if (Math.abs(value) >= 1) return value.toFixed(2) + " s";
        return (value * 1000).toFixed(0) + " ms";
      case "ratio":
        return (value * 100).toFixed(1) + "%";
      case "score":
        return value.toFixed(3);
      case "tokens":
      case "steps":
        return Number.isInteger(value) ? intFormat.format(value) : value.toFixed(1);
      default:
        return Number.isInteger(value) ? intFormat.format(value) : value.toPrecision(4);
    }
  }

  // The value cell: the number, and the unit when the formatted number does not already carry it.
  function valueText(value, unit) {
    const text = formatNumber(value, unit);
    if (text === null) return null;
    const withUnit = ["tokens", "steps", "tasks/s"].includes(unit);
    return withUnit ? text + " " + unit : text;
  }

  // The value cell: the number with its unit, and for a distribution its p50 and p95 beneath.
  function valueCell(w) {
    const text = valueText(w.value, w.unit);
    if (text === null) return el("td", { class: "num value missing" }, el("span", { class: "val" }, "—"));
    const cell = el("td", { class: "num value", "data-value": w.value }, el("span", { class: "val" }, text));
    if (DISTRIBUTION_AGGREGATIONS.has(w.aggregation) && w.p50 !== null && w.p95 !== null) {
      cell.appendChild(el("span", { class: "spread", "data-p50": w.p50, "data-p95": w.p95 },
        `p50 ${valueText(w.p50, w.unit)} · p95 ${valueText(w.p95, w.unit)}`));
    }
    return cell;
  }

  function formatTime(iso) {
    if (!iso) return "—";
    const date = new Date(iso);
    if (Number.isNaN(date.getTime())) return String(iso);
    return date.toISOString().replace("T", " ").slice(0, 19) + " UTC";
  }

  function stateBadge(state) {
    return el("span", { class: "state state-" + state, "data-state": state }, STATE_LABELS[state] || state);
  }

  // ---- data ----------------------------------------------------------------------------------
  // A collector started with a bearer token wants it on every API call. The page takes it from the
  // URL fragment (/#token=...), which the browser never sends to the server or puts in its logs.
  const TOKEN = new URLSearchParams(window.location.hash.slice(1)).get("token");

  async function getJSON(path) {
    const headers = { Accept: "application/json" };
    if (TOKEN) headers.Authorization = "Bearer " + TOKEN;
    const response = await fetch(path, { cache: "no-store", headers });
    if (response.status === 401) {
      throw new Error("the collector wants a bearer token: open this page as /#token=<token>");
    }
    let body = null;
    try {
      body = await response.json();
    } catch (err) {
      body = null;
    }
    if (!response.ok) {
      const reason = body && body.error ? body.error : "HTTP " + response.status;
      throw new Error(path.split("?")[0] + ": " + reason);
    }
    return body;
  }

  function query(path, values) {
    const search = new URLSearchParams(values);
    return path + "?" + search.toString();
  }

  async function loadTarget(target) {
    const scope = selectedScope.get(target.target_id) || "all";
    const [windows, tasks, readiness] = await Promise.all([
      getJSON(query("/api/dashboard/windows", { target: target.target_id, scope })),
      getJSON(query("/api/dashboard/tasks", { target: target.target_id, scope })),
      getJSON(query("/api/dashboard/profiles", { target: target.target_id })),
    ]);
    return { target, scope, windows: windows.windows, notStored: windows.not_stored || [], tasks, readiness };
  }

  async function refresh() {
    if (loading) return;
    loading = true;
    const banner = document.getElementById("banner");
    try {
      const overview = await getJSON("/api/dashboard/targets");
      const views = await Promise.all(overview.targets.map(loadTarget));
      render(overview, views);
      banner.hidden = true;
      document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString("en-GB");
    } catch (err) {
      banner.textContent = "Could not load data from the collector: " + err.message;
      banner.hidden = false;
      document.getElementById("updated").textContent = "update failed";
    } finally {
      loading = false;
    }
  }

  // ---- rendering -----------------------------------------------------------------------------
  function render(overview, views) {
    document.getElementById("db").textContent = overview.db;
    document.title = "meritlens · " + overview.db;
    const nav = document.getElementById("target-nav");
    const main = document.getElementById("targets");
    nav.replaceChildren();
    main.replaceChildren();
    if (views.length === 0) {
      main.appendChild(el("p", { class: "empty", id: "no-targets" },
        "No target has sent application spans yet. Point an OTLP exporter at this collector ",
        "(OTEL_EXPORTER_OTLP_ENDPOINT=", window.location.origin, ") and the windows appear here."));
      return;
    }
    views.forEach((view, index) => {
      const anchor = "target-" + index;
      const link = el("a", { href: "#" + anchor }, view.target.target_id);
      link.addEventListener("click", (event) => {  // keep #token=... in the address bar
        event.preventDefault();
        document.getElementById(anchor).scrollIntoView();
      });
      nav.appendChild(link);
      main.appendChild(renderTarget(view, anchor, overview.readiness_profiles));
    });
  }

  function renderTarget(view, anchor, profilesLoaded) {
    const t = view.target;
    const select = el("select", { "aria-label": "scope" });
    for (const scope of t.scopes) {
      const option = el("option", {}, scope === "all" ? "all spans" : "assessment " + scope);
      option.value = scope;
      option.selected = scope === view.scope;
      select.appendChild(option);
    }
    select.addEventListener("change", () => {
      selectedScope.set(t.target_id, select.value);
      refresh();
    });
    const head = el("div", { class: "target-head" },
      el("h2", { class: "target-id" }, t.target_id),
      el("div", { class: "facts" },
        el("span", {}, el("b", { "data-fact": "spans" }, intFormat.format(t.spans)), " spans"),
        el("span", {}, el("b", { "data-fact": "tasks" }, intFormat.format(t.tasks)), " tasks"),
        el("span", {}, "last span ", el("b", {}, formatTime(t.last_span_time)))),
      el("label", {}, "scope ", select));

    const byMetric = new Map(view.windows.map((w) => [w.metric, w]));
    const left = el("div", { class: "panel windows-panel" }, el("h3", {}, "Windows"),
      windowsTable(view.windows, view.notStored));
    const right = el("div", { class: "plots" },
      el("div", { class: "panel" }, el("h3", {}, "End-to-end latency per task"),
        latencyPlot(view.tasks, byMetric.get("end_to_end_latency"))),
      el("div", { class: "panel" }, el("h3", {}, "Cost per task"), costPlot(view.tasks)),
      el("div", { class: "panel readiness" }, el("h3", {}, "Readiness"), readinessView(view.readiness, profilesLoaded)));
    return el("section", { class: "target", id: anchor, "data-target": t.target_id, "data-scope": view.scope },
      head, el("div", { class: "grid" }, left, right));
  }

  function windowsTable(windows, notStored) {
    const table = el("table", { class: "windows" },
      el("thead", {}, el("tr", {},
        el("th", {}, "metric"), el("th", {}, "state"), el("th", { class: "num" }, "value"),
        el("th", { class: "num" }, "samples"))));
    const body = el("tbody");
    const groups = new Map();
    const groupOf = (w) => (w.metric_info ? w.metric_info.group : "other");
    for (const w of windows.concat(notStored)) {
      if (!groups.has(groupOf(w))) groups.set(groupOf(w), { stored: [], notStored: [] });
    }
    windows.forEach((w) => groups.get(groupOf(w)).stored.push(w));
    notStored.forEach((m) => groups.get(groupOf(m)).notStored.push(m));
    const order = [...GROUP_ORDER, ...[...groups.keys()].filter((g) => !GROUP_ORDER.includes(g))];
    for (const group of order) {
      const members = groups.get(group);
      if (!members) continue;
      body.appendChild(el("tr", { class: "group" }, el("td", { colspan: 4 }, GROUP_LABELS[group] || group)));
      members.stored.sort(byCatalogue).forEach((w) => body.appendChild(windowRow(w)));
      if (members.notStored.length) body.appendChild(notStoredRow(members.notStored.sort(byCatalogue)));
    }
    if (windows.length === 0 && notStored.length === 0) {
      body.appendChild(el("tr", {}, el("td", { colspan: 4, class: "missing" }, "no windows in this scope")));
    }
    table.appendChild(body);
    return table;
  }

  function byCatalogue(a, b) {
    const rank = (w) => (w.metric_info ? w.metric_info.order : 1e6);
    return rank(a) - rank(b) || a.metric.localeCompare(b.metric);
  }

  function windowRow(w) {
    const title = (w.metric_info ? w.metric_info.description + " " : "") +
      (w.evidence_digest ? "Evidence sha256 " + w.evidence_digest : "No evidence yet.");
    return el("tr", { "data-metric": w.metric, "data-state": w.state, title },
      el("td", { class: "metric" }, el("span", { class: "mono" }, w.metric),
        el("span", { class: "aggregation", "data-aggregation": w.aggregation }, w.aggregation + " · " + w.unit)),
      el("td", {}, stateBadge(w.state)),
      valueCell(w),
      el("td", { class: "num", "data-samples": w.sample_count }, intFormat.format(w.sample_count)));
  }

  // Catalogue metrics with no stored window: nothing feeds them, so they are not configured.
  function notStoredRow(metrics) {
    return el("tr", { class: "not-stored" }, el("td", { colspan: 4 },
      el("span", { class: "muted" }, "not configured, no window stored: "),
      metrics.map((m) => el("span", {
        class: "state state-not_configured chip", "data-metric": m.metric, "data-state": "not_configured",
        title: (m.metric_info ? m.metric_info.description + " " : "") + "No collector or evaluator has fed this metric.",
      }, m.metric))));
  }

  // ---- plots ---------------------------------------------------------------------------------
  const PLOT = { width: 520, height: 200, left: 62, right: 26, top: 24, bottom: 34 };

  function niceStep(span, count) {
    const raw = span / Math.max(1, count);
    const power = Math.pow(10, Math.floor(Math.log10(raw)));
    const fraction = raw / power;
    const nice = fraction <= 1 ? 1 : fraction <= 2 ? 2 : fraction <= 2.5 ? 2.5 : fraction <= 5 ? 5 : 10;
    return nice * power;
  }

  function ticks(lo, hi, count) {
    if (hi <= lo) hi = lo + (lo === 0 ? 1 : Math.abs(lo));
    const step = niceStep(hi - lo, count);
    const start = Math.floor(lo / step) * step;
    const out = [];
    for (let v = start; v <= hi + step * 1e-9; v += step) out.push(Number(v.toPrecision(12)));
    if (out[out.length - 1] < hi) out.push(Number((out[out.length - 1] + step).toPrecision(12)));
    return out;
  }

  function frame(kind, attrs) {
    return svgEl("svg", Object.assign({
      class: "plot", viewBox: `0 0 ${PLOT.width} ${PLOT.height}`, role: "img", "data-plot": kind,
    }, attrs));
  }

  function axes(svg, xScale, yScale, xTicks, yTicks, xFormat, yFormat, xLabel, yLabel) {
    const x0 = PLOT.left, x1 = PLOT.width - PLOT.right;
    const y0 = PLOT.height - PLOT.bottom, y1 = PLOT.top;
    for (const t of yTicks) {
      const y = yScale(t);
      svg.appendChild(svgEl("line", { class: "grid", x1: x0, x2: x1, y1: y, y2: y }));
      svg.appendChild(svgEl("text", { x: x0 - 6, y: y + 4, "text-anchor": "end" }, yFormat(t)));
    }
    for (const t of xTicks) {
      const x = xScale(t);
      svg.appendChild(svgEl("line", { class: "axis", x1: x, x2: x, y1: y0, y2: y0 + 4 }));
      svg.appendChild(svgEl("text", { x, y: y0 + 16, "text-anchor": "middle" }, xFormat(t)));
    }
    svg.appendChild(svgEl("line", { class: "axis", x1: x0, x2: x1, y1: y0, y2: y0 }));
    svg.appendChild(svgEl("line", { class: "axis", x1: x0, x2: x0, y1: y0, y2: y1 }));
    svg.appendChild(svgEl("text", { x: (x0 + x1) / 2, y: PLOT.height - 4, "text-anchor": "middle" }, xLabel));
    svg.appendChild(svgEl("text", { x: 12, y: (y0 + y1) / 2, "text-anchor": "middle",
      transform: `rotate(-90 12 ${(y0 + y1) / 2})` }, yLabel));
  }

  function latencyPlot(tasks, window) {
    const values = tasks.tasks.map((t) => t.end_to_end_latency).filter((v) => v !== null && Number.isFinite(v));
    if (values.length === 0) {
      return el("p", { class: "plot-empty", "data-plot": "latency", "data-n": 0 }, "No task has a latency yet.");
    }
    let lo = Math.min(...values), hi = Math.max(...values);
    if (hi === lo) { lo = Math.max(0, lo - 0.5); hi = hi + 0.5; }
    const edges = ticks(Math.max(0, lo), hi, Math.min(20, Math.max(5, Math.ceil(Math.sqrt(values.length)) + 2)));
    const width = edges[1] - edges[0];
    const counts = new Array(edges.length - 1).fill(0);
    for (const v of values) {
      const i = Math.min(counts.length - 1, Math.max(0, Math.floor((v - edges[0]) / width)));
      counts[i] += 1;
    }
    const xLo = edges[0], xHi = edges[edges.length - 1];
    const yTicks = ticks(0, Math.max(...counts), 4).filter((t) => Number.isInteger(t));
    const yHi = yTicks[yTicks.length - 1];
    const xScale = (v) => PLOT.left + (v - xLo) / (xHi - xLo) * (PLOT.width - PLOT.left - PLOT.right);
    const yScale = (v) => PLOT.height - PLOT.bottom - v / yHi * (PLOT.height - PLOT.top - PLOT.bottom);
    const svg = frame("latency", { "data-n": values.length, "aria-label": "histogram of task latency" });
    const xTicks = ticks(xLo, xHi, 6).filter((t) => t >= xLo && t <= xHi);
    axes(svg, xScale, yScale, xTicks, yTicks, (t) => formatNumber(t, "s"), (t) => String(t), "seconds per task", "tasks");
    counts.forEach((count, i) => {
      if (count === 0) return;
      const x = xScale(edges[i]) + 1, w = Math.max(1, xScale(edges[i + 1]) - xScale(edges[i]) - 2);
      svg.appendChild(svgEl("rect", { class: "bar", x, y: yScale(count), width: w, height: yScale(0) - yScale(count) },
        svgEl("title", {}, `${count} task${count === 1 ? "" : "s"} from ${formatNumber(edges[i], "s")} to ${formatNumber(edges[i + 1], "s")}`)));
    });
    const markers = [];
    if (window && window.p50 !== null && window.p50 !== undefined) markers.push(["p50", window.p50]);
    if (window && window.p95 !== null && window.p95 !== undefined) markers.push(["p95", window.p95]);
    markers.forEach(([name, value], i) => {
      const x = xScale(Math.min(xHi, Math.max(xLo, value)));
      svg.appendChild(svgEl("line", { class: "marker " + name, x1: x, x2: x, y1: PLOT.top - 4, y2: PLOT.height - PLOT.bottom }));
      const anchor = x > PLOT.width - 90 ? "end" : "start";
      svg.appendChild(svgEl("text", { class: "marker-label " + name, x: anchor === "end" ? x - 4 : x + 4,
        y: PLOT.top + 4 + i * 13, "text-anchor": anchor, "data-marker": name, "data-value": value },
        `${name} ${formatNumber(value, "s")}`));
    });
    const caption = el("div", { class: "caption" },
      `${values.length} task${values.length === 1 ? "" : "s"}` +
      (tasks.truncated ? ` (the most recent of ${intFormat.format(tasks.total_tasks)})` : "") +
      (window ? ` · window state: ${STATE_LABELS[window.state] || window.state}` : ""));
    return el("div", {}, svg, caption);
  }

  function costPlot(tasks) {
    const ordered = tasks.tasks.slice().reverse(); // oldest first
    const priced = ordered.filter((t) => t.total_task_cost !== null && Number.isFinite(t.total_task_cost));
    const unpriced = ordered.length - priced.length;
    const unpricedNote = unpriced > 0
      ? ` · ${unpriced} task${unpriced === 1 ? "" : "s"} without a complete price (no cost, not $0)` : "";
    if (priced.length === 0) {
      return el("p", { class: "plot-empty", "data-plot": "cost", "data-n": 0 },
        ordered.length === 0 ? "No task yet."
          : `No task has a cost: none of the ${ordered.length} task${ordered.length === 1 ? "" : "s"} ` +
            "had every LLM call priced. A missing price is shown as missing, never as $0.");
    }
    const shown = priced.slice(-120);
    const costs = shown.map((t) => t.total_task_cost);
    const total = priced.reduce((sum, t) => sum + t.total_task_cost, 0);
    const mean = total / priced.length;
    const yTicks = ticks(0, Math.max(...costs), 4);
    const yHi = yTicks[yTicks.length - 1];
    const plotWidth = PLOT.width - PLOT.left - PLOT.right;
    const step = plotWidth / shown.length;
    const xScale = (i) => PLOT.left + i * step;
    const yScale = (v) => PLOT.height - PLOT.bottom - v / yHi * (PLOT.height - PLOT.top - PLOT.bottom);
    const svg = frame("cost", { "data-n": priced.length, "aria-label": "cost of each task, oldest first" });
    const labelEvery = Math.max(1, Math.ceil(shown.length / 6));
    const xTicks = shown.map((_, i) => i).filter((i) => i % labelEvery === 0);
    axes(svg, (i) => xScale(i) + step / 2, yScale, xTicks, yTicks,
      (i) => String(priced.length - shown.length + i + 1), (t) => "$" + Number(t.toPrecision(3)), "task (oldest first)", "USD");
    shown.forEach((t, i) => {
      const gap = step > 4 ? Math.min(3, step * 0.2) : 0;
      svg.appendChild(svgEl("rect", {
        class: "bar cost", x: xScale(i) + gap / 2, y: yScale(t.total_task_cost), width: Math.max(0.5, step - gap),
        height: yScale(0) - yScale(t.total_task_cost),
      }, svgEl("title", {}, `task ${t.task_key}: ${formatNumber(t.total_task_cost, "USD")}`)));
    });
    const y = yScale(mean);
    svg.appendChild(svgEl("line", { class: "marker mean", x1: PLOT.left, x2: PLOT.width - PLOT.right, y1: y, y2: y }));
    svg.appendChild(svgEl("text", { class: "marker-label mean", x: PLOT.width - PLOT.right, y: PLOT.top - 8,
      "text-anchor": "end", "data-marker": "mean", "data-value": mean }, `- - mean ${formatNumber(mean, "USD")}`));
    const caption = el("div", { class: "caption", "data-total-cost": total },
      `${priced.length} priced task${priced.length === 1 ? "" : "s"} · total ${formatNumber(total, "USD")}` +
      (shown.length < priced.length ? ` · last ${shown.length} shown` : "") + unpricedNote);
    return el("div", {}, svg, caption);
  }

  // ---- readiness ----------------------------------------------------------------------------
  function readinessView(doc, profilesLoaded) {
    const live = (doc && doc.reports) || [];
    const recorded = (doc && doc.recorded) || [];
    if (live.length > 0) {
      return el("div", { "data-readiness": "profiles" }, live.map((r) => reportView(r, "profile " + r.profile)));
    }
    const parts = [];
    if (profilesLoaded) {
      parts.push(el("p", { class: "muted", "data-readiness": "no-matching-profile" },
        "None of the loaded profiles names this target."));
    }
    if (recorded.length > 0) {
      parts.push(el("div", { "data-readiness": "recorded" },
        recorded.map((r) => reportView(r, "last recorded check, scope " + r.scope))));
    } else if (!profilesLoaded) {
      parts.push(el("p", { class: "muted", "data-readiness": "no-profile" },
        "No task profile loaded. Start the collector with ",
        el("code", {}, "meritlens serve --profile profile.toml"), " to check this target's readiness here."));
    }
    return el("div", {}, parts);
  }

  function reportView(report, label) {
    const covered = new Set(report.covered || []);
    const required = report.required || [];
    const details = new Map((report.metrics || []).map((m) => [m.metric, m]));
    const verdict = (ok, yes, no, kind) =>
      el("span", { class: "verdict " + (ok ? "ready" : "not-ready"), "data-verdict": kind }, ok ? yes : no);
    const parts = [
      el("div", { class: "verdicts" },
        verdict(report.ready, "coverage ready", "coverage not ready", "coverage"),
        report.baseline_ready === undefined || report.baseline_ready === null ? null
          : verdict(report.baseline_ready, "baseline ready", "baseline not ready", "baseline")),
      el("div", { class: "muted caption" },
        `${covered.size} of ${required.length} required metrics covered · ${label}`),
      el("ul", { class: "metrics" }, required.map((metric) => {
        const d = details.get(metric);
        const enough = d && d.state === "measured" && d.value !== null && d.sample_count >= d.min_samples && d.evidence_uri;
        const kind = !covered.has(metric) ? "missing" : enough || !d ? "covered" : "short";
        const counts = d ? ` ${intFormat.format(d.sample_count)}/${intFormat.format(d.min_samples)}` : "";
        return el("li", { class: kind, "data-metric": metric, "data-coverage": kind,
          title: d ? `state ${d.state}, ${d.sample_count} of ${d.min_samples} samples needed` : "" },
          (kind === "missing" ? "✗ " : kind === "short" ? "◐ " : "✓ ") + metric + counts);
      })),
    ];
    const shortfalls = report.shortfalls || [];
    if (shortfalls.length) {
      const shown = shortfalls.slice(0, 6);
      parts.push(el("ul", { class: "problems" }, shown.map((p) => el("li", {}, p)),
        shortfalls.length > shown.length ? el("li", {}, `and ${shortfalls.length - shown.length} more`) : null));
    }
    if (report.checked_at) parts.push(el("div", { class: "caption" }, "checked " + formatTime(report.checked_at)));
    return el("div", { class: "profile", "data-profile": report.profile || null, "data-ready": report.ready,
      "data-baseline-ready": report.baseline_ready }, parts);
  }

  // ---- refresh loop --------------------------------------------------------------------------
  function schedule() {
    if (timer) clearInterval(timer);
    timer = null;
    if (document.getElementById("auto-refresh").checked) timer = setInterval(refresh, REFRESH_SECONDS * 1000);
  }

  document.addEventListener("DOMContentLoaded", () => {
    const toggle = document.getElementById("auto-refresh");
    if (params.get("refresh") === "0") toggle.checked = false;
    else document.getElementById("refresh-seconds").textContent = String(REFRESH_SECONDS);
    toggle.addEventListener("change", schedule);
    schedule();
    refresh();
  });
})();
