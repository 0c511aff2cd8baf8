// meritlens dashboard, regressions: each metric's change from the baseline range to the recent one,
// with its interval and verdict (the report of `meritlens regressions`, /api/dashboard/regressions).
"use strict";

(function (ML) {
  const { el } = ML;
  const VERDICT_LABELS = { worse: "worse", better: "better", no_change: "no change", not_enough_samples: "not enough samples" };

  const signed = (value, unit) => (value < 0 ? "−" : "+") + ML.valueText(Math.abs(value), unit);
  const percent = (share) => (share < 0 ? "−" : "+") + Math.abs(share * 100).toFixed(1) + "%";

  // "+0.80 s [+0.55 s, +1.10 s]": a bound the samples cannot set is "unbounded".
  function interval(estimate, text) {
    const bound = (v) => (ML.isNum(v) ? text(v) : "unbounded");
    return `${text(estimate.value)} [${bound(estimate.low)}, ${bound(estimate.high)}]`;
  }

  ML.verdictBadge = (verdict) => el("span", { class: "verdict regression-" + verdict, "data-verdict": verdict },
    VERDICT_LABELS[verdict] || verdict);

  // What was compared and how: the ranges, the level and the correction.
  ML.regressionsCaption = function (report) {
    const recent = report.recent, baseline = report.baseline;
    const base = report.same_hours
      ? `the same hours of the ${ML.plural(baseline.length, "day")} before`
      : `${ML.formatTime(baseline[0].from)} to ${ML.formatTime(baseline[0].to)}`;
    const level = report.family_size
      ? ` · ${ML.plural(report.family_size, "comparison")} at ${(report.confidence * 100).toFixed(0)}% together ` +
        `(${report.correction}: each interval at ${(report.interval_confidence * 100).toPrecision(4)}%)`
      : "";
    return `Recent ${ML.formatTime(recent.from)} to ${ML.formatTime(recent.to)} against ${base}${level}.`;
  };

  // The same, short: how long each range is and how many comparisons share the level.
  ML.regressionsSummary = function (report) {
    const hours = (span) => (new Date(span.to) - new Date(span.from)) / 3600e3;
    const days = report.same_hours ? report.baseline.length : hours(report.baseline[0]) / 24;
    const base = report.same_hours ? `the same hours of the ${ML.plural(days, "day")} before`
      : `the ${Number.isInteger(days) ? ML.plural(days, "day") : ML.plural(hours(report.baseline[0]), "hour")} before`;
    return `Last ${ML.plural(hours(report.recent), "hour")} against ${base}` +
      (report.family_size ? ` · ${ML.plural(report.family_size, "comparison")} at ` +
        `${(report.confidence * 100).toFixed(0)}% together (${report.correction})` : "");
  };

  ML.regressionsPanel = function (report) {
    const panel = el("div", { class: "panel wide regressions", id: "regressions" }, el("h3", {}, "Regressions"));
    if (!report.available) {
      panel.append(el("p", { class: "plot-empty" }, "This collector keeps no windows by time (a lake's collector): ",
        "`meritlens regressions --lake` reads the lake's."));
      return panel;
    }
    panel.append(el("div", { class: "caption", "data-family": report.family_size }, ML.regressionsCaption(report)));
    if (report.regressions.length === 0) {
      panel.append(el("p", { class: "plot-empty", id: "no-regressions" }, "No window by time holds samples of these ranges."));
      return panel;
    }
    const head = ["metric", "statistic", "baseline", "recent", "change [interval]", "relative [interval]", "verdict", "samples"];
    panel.append(el("table", { class: "regressions" },
      el("thead", {}, el("tr", {}, head.map((h, i) => el("th", { scope: "col", class: i > 1 && i < 6 ? "num" : "" }, h)))),
      el("tbody", {}, report.regressions.map((r) => {
        const unit = r.unit;
        return el("tr", { "data-regression": r.metric, "data-verdict": r.verdict },
          el("th", { scope: "row" }, r.metric),
          el("td", {}, r.statistic),
          el("td", { class: "num", "data-col": "baseline" }, ML.valueOrMissing(r.baseline, unit, "no sample in the baseline")),
          el("td", { class: "num", "data-col": "recent" }, ML.valueOrMissing(r.recent, unit, "no sample in the recent range")),
          el("td", { class: "num", "data-col": "change" },
            r.difference ? interval(r.difference, (v) => signed(v, unit)) : ML.missing(r.reason)),
          el("td", { class: "num", "data-col": "relative" },
            r.relative ? interval(r.relative, percent) : ML.missing("no relative change without a positive baseline")),
          el("td", { title: r.reason || "" }, ML.verdictBadge(r.verdict)),
          el("td", { class: "num", "data-col": "samples" },
            `${ML.intFormat.format(r.recent_samples)} / ${ML.intFormat.format(r.baseline_samples)}`));
      }))));
    return panel;
  };
})(window.ML);
