// meritlens dashboard, a target's windows table (each window linking to the spans behind it) and its
// readiness against the loaded task profiles.
"use strict";

(function (ML) {
  const { el } = ML;
  const GROUP_LABELS = {
    quality_and_behaviour: "Quality and behaviour",
    cost_and_resources: "Cost and resources",
    latency_and_operations: "Latency and operations",
  };
  const GROUP_ORDER = ["quality_and_behaviour", "cost_and_resources", "latency_and_operations"];
  const DISTRIBUTION_AGGREGATIONS = new Set(["distribution", "percentile"]);

  function valueCell(w) {
    const text = ML.valueText(w.value, w.unit);
    if (text === null) return el("td", { class: "num value missing" }, el("span", { class: "val" }, "—"));
    const cell = el("td", { class: "num value", "data-value": w.value }, el("span", { class: "val" }, text));
    if (DISTRIBUTION_AGGREGATIONS.has(w.aggregation) && ML.isNum(w.p50) && ML.isNum(w.p95)) {
      cell.appendChild(el("span", { class: "spread", "data-p50": w.p50, "data-p95": w.p95 },
        `p50 ${ML.valueText(w.p50, w.unit)} · p95 ${ML.valueText(w.p95, w.unit)}`));
    }
    return cell;
  }

  function byCatalogue(a, b) {
    const rank = (w) => (w.metric_info ? w.metric_info.order : 1e6);
    return rank(a) - rank(b) || a.metric.localeCompare(b.metric);
  }

  function windowRow(w) {
    const title = (w.metric_info ? w.metric_info.description + " " : "") +
      (w.evidence_digest ? "Evidence sha256 " + w.evidence_digest : "No evidence yet.");
    const evidence = w.sample_count > 0
      ? ML.el("a", { class: "evidence-link", "data-evidence": w.metric,
        href: ML.pageHref({ view: "evidence", target: w.target_id, scope: w.scope, metric: w.metric }),
        "aria-label": `the ${ML.plural(w.sample_count, "sample")} behind ${w.metric}` }, "evidence →")
      : null;
    return el("tr", { "data-metric": w.metric, "data-state": w.state, title },
      el("td", { class: "metric" }, el("span", { class: "mono" }, w.metric),
        el("span", { class: "aggregation", "data-aggregation": w.aggregation }, w.aggregation + " · " + w.unit, evidence)),
      el("td", {}, ML.stateBadge(w.state)),
      valueCell(w),
      el("td", { class: "num", "data-samples": w.sample_count }, ML.intFormat.format(w.sample_count)));
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

  ML.windowsTable = function (windows, notStored) {
    const table = el("table", { class: "windows" },
      el("thead", {}, el("tr", {},
        el("th", { scope: "col" }, "metric"), el("th", { scope: "col" }, "state"),
        el("th", { class: "num", scope: "col" }, "value"), el("th", { class: "num", scope: "col" }, "samples"))));
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
  };

  // ---- readiness ----------------------------------------------------------------------------
  ML.readinessView = function (doc, profilesLoaded) {
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
  };

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
        const counts = d ? ` ${ML.intFormat.format(d.sample_count)}/${ML.intFormat.format(d.min_samples)}` : "";
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
    if (report.checked_at) parts.push(el("div", { class: "caption" }, "checked " + ML.formatTime(report.checked_at)));
    return el("div", { class: "profile", "data-profile": report.profile || null, "data-ready": report.ready,
      "data-baseline-ready": report.baseline_ready }, parts);
  }
})(window.ML);
