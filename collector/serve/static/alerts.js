// meritlens dashboard, the alerts that fire: on the overview (every target) and on a target's page,
// each with the evidence it rests on and links to the windows and the spans behind them. Read from
// /api/alerts; drawn from the last answer at once, then redrawn when the new one comes.
"use strict";

(function (ML) {
  const { el } = ML;
  let last = null;

  function spansLink(alert) {
    const windows = (alert.links && alert.links.windows) || [];
    const current = windows.find((w) => w.range === "current");
    if (!current) return null;
    return ML.link({ view: "traces", target: alert.target, range: "custom", from: current.from, to: current.to },
      "spans →");
  }

  function evidenceText(alert) {
    if (alert.kind === "no_data") return "no sample for the rule's range";
    const bits = [];
    const number = (v) => ML.formatNumber(v, alert.unit);
    const change = alert.kind === "regression" ? "change " : "";
    if (ML.isNum(alert.value)) bits.push(change + "estimate " + number(alert.value));
    if (ML.isNum(alert.bound)) bits.push("bound " + number(alert.bound));
    if (ML.isNum(alert.threshold)) bits.push((alert.kind === "regression" ? "tolerance " : "threshold ") +
      number(alert.threshold));
    if (ML.isNum(alert.samples)) bits.push(ML.plural(alert.samples, "sample"));
    return bits.join(" · ");
  }

  function row(alert) {
    return el("li", { class: "alert", "data-alert": alert.rule, "data-target": alert.target, "data-status": alert.status },
      el("span", { class: "verdict " + (alert.status === "firing" ? "not-ready" : "none") }, alert.status),
      " ", el("b", {}, alert.rule), " ",
      ML.link({ view: "target", target: alert.target }, alert.target), " · ", alert.metric,
      " · since ", ML.formatTime(alert.since),
      alert.silenced_until ? " · silenced until " + ML.formatTime(alert.silenced_until) : "",
      el("div", { class: "muted small" }, evidenceText(alert), " ",
        el("a", { class: "evidence-link", href: ML.pageHref({ view: "evidence", target: alert.target, scope: "all",
          metric: alert.metric }) }, "window →"), " ", spansLink(alert)));
  }

  function fill(panel, doc, target) {
    const firing = ((doc && doc.alerts) || []).filter((a) => a.firing && (!target || a.target === target));
    const rules = ((doc && doc.alerts) || []).filter((a) => !target || a.target === target);
    panel.hidden = rules.length === 0;
    panel.replaceChildren(el("h3", {}, "Alerts"),
      firing.length
        ? el("ul", { class: "alerts" }, firing.map(row))
        : el("p", { class: "muted", id: "no-alerts" }, `no alert fires (${ML.plural(rules.length, "rule")} evaluated)`));
  }

  // The panel of the alerts of ``target`` (every target when null); hidden when no rule watches them.
  ML.alertsPanel = function (target) {
    const panel = el("div", { class: "panel wide alerts-panel", id: "alerts" });
    fill(panel, last, target);
    ML.getJSON("/api/alerts").then((doc) => { last = doc; fill(panel, doc, target); }).catch(() => {});
    return panel;
  };
})(window.ML);
