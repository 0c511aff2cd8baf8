// meritlens dashboard, the overview: which target costs most, which is slowest, which is not ready,
// which got worse, then one sortable table across targets; a row opens the target.
"use strict";

(function (ML) {
  const { el } = ML;
  let sortKey = "total_cost", sortDescending = true;

  function readinessText(r) {
    if (!r) return "no profile";
    return r.baseline_ready ? "ready" : r.ready ? "baseline not ready" : "not ready";
  }

  function regressionsText(r) {
    if (!r) return null;
    if (r.worse.length) return `${r.worse.length} worse`;
    if (r.better.length) return `${r.better.length} better`;
    return r.compared ? "no change" : "nothing compared";
  }

  const COLUMNS = [
    { key: "target_id", label: "target", text: true },
    { key: "spans", label: "spans", unit: "count" },
    { key: "tasks", label: "tasks", unit: "count" },
    { key: "total_cost", label: "total cost", unit: "USD", why: "no task of this target has a complete price" },
    { key: "mean_cost", label: "mean cost / task", unit: "USD", why: "no task of this target has a complete price" },
    { key: "latency_p50", label: "p50 latency", unit: "s", why: "latency not measured (fewer than two tasks)" },
    { key: "latency_p95", label: "p95 latency", unit: "s", why: "latency not measured (fewer than two tasks)" },
    { key: "success_rate", label: "success rate", unit: "ratio", why: "no task recorded an outcome" },
    { key: "readiness", label: "readiness", text: true, value: (r) => readinessText(r.readiness) },
    { key: "regressions", label: "regressions", text: true, value: (r) => regressionsText(r.regressions) },
    { key: "last_seen", label: "last seen", text: true },
  ];

  function cellValue(row, column) {
    if (column.value) return column.value(row);
    return row[column.key];
  }

  function compare(a, b) {
    const column = COLUMNS.find((c) => c.key === sortKey);
    const va = cellValue(a, column), vb = cellValue(b, column);
    const missingA = va === null || va === undefined, missingB = vb === null || vb === undefined;
    if (missingA || missingB) return missingA - missingB; // missing values last, whichever the order
    const order = typeof va === "number" ? va - vb : String(va).localeCompare(String(vb));
    return (sortDescending ? -order : order) || a.target_id.localeCompare(b.target_id);
  }

  // The three first questions, each answered with a link to the target.
  function callouts(rows, report) {
    const best = (key) => rows.filter((r) => ML.isNum(r[key])).sort((a, b) => b[key] - a[key])[0];
    const costly = best("total_cost"), slow = best("latency_p95");
    const notReady = rows.filter((r) => r.readiness && !r.readiness.baseline_ready);
    const withProfile = rows.filter((r) => r.readiness).length;
    const card = (kind, label, body, note, verdict) => el("div", { class: "callout", "data-callout": kind, "data-verdict": verdict },
      el("div", { class: "callout-label" }, label), el("div", { class: "callout-body" }, body),
      note ? el("div", { class: "callout-note" }, note) : null);
    const targetLink = (r) => ML.link({ view: "target", target: r.target_id }, r.target_id);
    return el("div", { class: "callouts" },
      card("costs-most", "Costs most", costly ? targetLink(costly) : ML.missing("no target has a priced task"),
        costly ? `${ML.formatNumber(costly.total_cost, "USD")} over ${ML.plural(costly.priced_tasks || 0, "priced task")}` : "no priced task yet"),
      card("slowest", "Slowest (p95 latency)", slow ? targetLink(slow) : ML.missing("no latency measured"),
        slow ? ML.formatNumber(slow.latency_p95, "s") + " p95 per task" : "no latency measured yet"),
      readinessCard(card, notReady, withProfile, targetLink),
      regressionsCard(card, rows, report, targetLink));
  }

  // The targets with a metric worse than in the baseline, by the dashboard's regressions report.
  function regressionsCard(card, rows, report, targetLink) {
    if (!report) return card("regressions", "Regressions", ML.missing("no windows by time"), "", "none");
    const worse = rows.filter((r) => r.regressions && r.regressions.worse.length);
    const note = ML.regressionsSummary(report);
    if (worse.length === 0) return card("regressions", "Got worse", "no metric is worse", note, "ready");
    return card("regressions", "Got worse", worse.map((r, i) => [i ? ", " : "", targetLink(r),
      ` (${r.regressions.worse.join(", ")})`]), note, "not-ready");
  }

  // Headed by what its body says: the targets not ready, every profiled target ready, or no profile.
  function readinessCard(card, notReady, withProfile, targetLink) {
    if (!withProfile) {
      return card("readiness", "Readiness", ML.missing("no task profile"), "start serve with --profile to check readiness",
        "none");
    }
    if (notReady.length === 0) {
      return card("readiness", "Ready", "every profiled target is ready",
        `${ML.intFormat.format(withProfile)} of ${ML.plural(withProfile, "profiled target")} ready`, "ready");
    }
    return card("readiness", "Not ready", notReady.map((r, i) => [i ? ", " : "", targetLink(r)]),
      `${ML.intFormat.format(notReady.length)} of ${ML.plural(withProfile, "profiled target")} not ready`, "not-ready");
  }

  function headerCell(column, rerender) {
    const active = column.key === sortKey;
    const button = el("button", { type: "button", class: "sort", "data-sort": column.key },
      column.label, active ? (sortDescending ? " ▼" : " ▲") : "");
    button.addEventListener("click", () => {
      if (sortKey === column.key) sortDescending = !sortDescending;
      else { sortKey = column.key; sortDescending = !column.text; }
      rerender();
    });
    return el("th", { scope: "col", class: column.text ? "" : "num",
      "aria-sort": active ? (sortDescending ? "descending" : "ascending") : "none" }, button);
  }

  function bodyCell(row, column) {
    const value = cellValue(row, column);
    if (column.key === "target_id") {
      return el("th", { scope: "row", class: "target-cell" }, ML.link({ view: "target", target: value }, value));
    }
    if (column.key === "readiness") {
      const r = row.readiness;
      return el("td", { "data-col": "readiness" }, el("span", {
        class: "verdict " + (!r ? "none" : r.baseline_ready ? "ready" : "not-ready"),
        title: !r ? "" : r.missing && r.missing.length ? "missing: " + r.missing.join(", ")
          : r.baseline_ready ? "" : "every required metric is covered; some lack the evidence the profile asks for" },
        value));
    }
    if (column.key === "regressions") {
      const r = row.regressions;
      if (!r) return el("td", { "data-col": "regressions" }, ML.missing("no windows by time on this collector"));
      const verdict = r.worse.length ? "worse" : r.better.length ? "better" : "no_change";
      return el("td", { "data-col": "regressions", "data-worse": r.worse.length },
        el("span", { class: "verdict regression-" + verdict, title: [...r.worse.map((m) => m + " worse"),
          ...r.better.map((m) => m + " better")].join(", ") }, value));
    }
    if (column.key === "last_seen") return el("td", { "data-col": "last_seen" }, ML.formatTime(value));
    if (column.unit === "count") return el("td", { class: "num", "data-col": column.key }, ML.intFormat.format(value || 0));
    return el("td", { class: "num", "data-col": column.key, "data-value": ML.isNum(value) ? value : null },
      ML.valueOrMissing(value, column.unit, column.why));
  }

  // What the collector's redaction policy changed since it started, rule by rule (absent without a policy).
  function redactionPanel(redaction) {
    if (!redaction) return null;
    return el("div", { class: "panel wide" }, el("table", { class: "overview", id: "redaction-table" },
      el("caption", {}, "Redaction before storage (", redaction.policy, "): values changed since the collector started. ",
        "Masked content is what the windows' evidence and judges see."),
      el("thead", {}, el("tr", {}, el("th", { scope: "col" }, "rule"), el("th", { scope: "col" }, "action"),
        el("th", { scope: "col", class: "num" }, "values"))),
      el("tbody", {}, redaction.rules.map((r) => el("tr", { "data-rule": r.rule, "data-action": r.action },
        el("th", { scope: "row" }, r.rule), el("td", {}, r.action),
        el("td", { class: "num", "data-col": "count" }, ML.intFormat.format(r.count)))))));
  }

  ML.renderOverview = function (main, doc) {
    const rows = doc.targets;
    if (rows.length === 0) {
      main.replaceChildren(el("p", { class: "empty", id: "no-targets" },
        "No target has sent application spans yet. Point an OTLP exporter at this collector ",
        "(OTEL_EXPORTER_OTLP_ENDPOINT=", window.location.origin, ") and the windows appear here."),
        ...[redactionPanel(doc.redaction)].filter(Boolean));
      return;
    }
    const rerender = () => ML.renderOverview(main, doc);
    const sorted = rows.slice().sort(compare);
    const table = el("table", { class: "overview", id: "overview-table" },
      el("caption", {}, "Every target, from its windows over all spans. Click a column to sort, a target to open it."),
      el("thead", {}, el("tr", {}, COLUMNS.map((c) => headerCell(c, rerender)))),
      el("tbody", {}, sorted.map((row) => {
        const tr = el("tr", { "data-target": row.target_id, class: "clickable" }, COLUMNS.map((c) => bodyCell(row, c)));
        tr.addEventListener("click", (event) => {
          if (event.target.closest("a")) return;
          window.location.href = ML.pageHref({ view: "target", target: row.target_id });
        });
        return tr;
      })));
    const focused = document.activeElement && document.activeElement.dataset.sort;
    main.replaceChildren(callouts(rows, doc.regressions), ML.alertsPanel(null), el("div", { class: "panel wide" }, table),
      ...[redactionPanel(doc.redaction)].filter(Boolean));
    if (focused) main.querySelector(`button[data-sort="${focused}"]`).focus(); // keep keyboard focus on re-sort
  };
})(window.ML);
