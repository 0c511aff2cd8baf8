// meritlens dashboard, charts drawn as inline SVG: a time series (gaps where nothing was measured),
// the latency histogram and the cost of each task. Every axis has a title with its unit, and the
// left margin grows with the widest tick label so that no label is clipped.
"use strict";

(function (ML) {
  const { el, svgEl } = ML;
  const W = 560, H = 210, TOP = 22, RIGHT = 18, BOTTOM = 44;
  const CHAR_PX = 6.6; // width of one 11px tick label character, generously

  function niceStep(span, count) {
    const raw = span / Math.max(1, count);
    const power = Math.pow(10, Math.floor(Math.log10(raw)));
    const fraction = raw / power;
    const nice = fraction <= 1 ? 1 : fraction <= 2 ? 2 : fraction <= 2.5 ? 2.5 : fraction <= 5 ? 5 : 10;
    return nice * power;
  }

  ML.ticks = function (lo, hi, count) {
    if (hi <= lo) hi = lo + (lo === 0 ? 1 : Math.abs(lo));
    const step = niceStep(hi - lo, count);
    const start = Math.floor(lo / step) * step;
    const out = [];
    for (let v = start; v <= hi + step * 0.5; v += step) out.push(Number(v.toPrecision(12)));
    if (out[out.length - 1] < hi) out.push(Number((out[out.length - 1] + step).toPrecision(12)));
    return out;
  };

  // An empty SVG frame plus its scales: `x` and `y` give [lo, hi] data ranges.
  function frame(plot, attrs, yLabels) {
    const left = 30 + Math.max(...yLabels.map((t) => t.length)) * CHAR_PX;
    const svg = svgEl("svg", { class: "plot", "data-plot": plot, viewBox: `0 0 ${W} ${H}`, role: "img",
      "data-left": Math.round(left), ...attrs });
    return { svg, left, right: W - RIGHT, top: TOP, bottom: H - BOTTOM };
  }

  // Axes, grid lines, tick labels and the two axis titles (with units).
  function axes(f, xScale, yScale, xTicks, yTicks, xFormat, yFormat, xTitle, yTitle) {
    const { svg, left, right, top, bottom } = f;
    for (const t of yTicks) {
      const y = yScale(t);
      svg.appendChild(svgEl("line", { class: "grid", x1: left, x2: right, y1: y, y2: y }));
      svg.appendChild(svgEl("text", { class: "tick y", x: left - 6, y: y + 4, "text-anchor": "end" }, yFormat(t)));
    }
    xTicks.forEach((t, i) => {
      const anchor = i === 0 && xTicks.length > 1 ? "start" : i === xTicks.length - 1 && xTicks.length > 1 ? "end" : "middle";
      svg.appendChild(svgEl("text", { class: "tick x", x: xScale(t), y: bottom + 15, "text-anchor": anchor }, xFormat(t)));
    });
    svg.appendChild(svgEl("line", { class: "axis", x1: left, x2: right, y1: bottom, y2: bottom }));
    svg.appendChild(svgEl("line", { class: "axis", x1: left, x2: left, y1: top, y2: bottom }));
    svg.appendChild(svgEl("text", { class: "axis-title x", x: (left + right) / 2, y: H - 6, "text-anchor": "middle" }, xTitle));
    svg.appendChild(svgEl("text", { class: "axis-title y", x: 12, y: (top + bottom) / 2, "text-anchor": "middle",
      transform: `rotate(-90 12 ${(top + bottom) / 2})` }, yTitle));
  }

  // Tick labels of a value axis in `unit`; seconds switch to milliseconds below one second, and the
  // axis title says which.
  function valueAxis(hi, unit) {
    const ticks = ML.ticks(0, hi > 0 ? hi : 1, 4);
    if (unit === "s") {
      const ms = ticks[ticks.length - 1] < 1;
      return { ticks, unitLabel: ms ? "ms" : "s", format: (t) => ms ? String(Number((t * 1000).toPrecision(6))) : String(t) };
    }
    if (unit === "USD") return { ticks, unitLabel: "USD", format: (t) => "$" + Number(t.toPrecision(3)) };
    // a rate reads best on its whole scale, 0 to 100%
    if (unit === "ratio") return { ticks: ML.ticks(0, Math.max(hi, 1), 4), unitLabel: "%",
      format: (t) => String(Number((t * 100).toPrecision(4))) };
    if (unit === "count" || unit === "tokens") { // whole numbers: no repeated labels on a short axis
      const whole = ML.ticks(0, Math.max(hi, 1), 4).filter(Number.isInteger);
      return { ticks: whole.length > 1 ? whole : [0, 1], unitLabel: unit, format: (t) => ML.intFormat.format(t) };
    }
    return { ticks, unitLabel: unit, format: (t) => Number(t.toPrecision(6)).toString() };
  }

  function timeFormat(spanMs) {
    return (t) => {
      const iso = new Date(t).toISOString();
      if (spanMs <= 2 * 86400e3) return iso.slice(11, spanMs <= 600e3 ? 19 : 16);
      return iso.slice(5, 10) + (spanMs <= 8 * 86400e3 ? " " + iso.slice(11, 16) : "");
    };
  }

  // The buckets a range spans: [lo, hi) in ms, on the bucket grid DuckDB's time_bucket uses (from the
  // epoch), from the range's start (else the first bucket) to its end (else the last), and their count.
  ML.bucketSpan = function (buckets, bucketSeconds, from, to) {
    const ms = bucketSeconds * 1000, floor = (t) => Math.floor(t / ms) * ms;
    const times = buckets.map((b) => new Date(b).getTime());
    const starts = [...times, ...[from, to].filter(Boolean).map((t) => floor(new Date(t).getTime()))];
    if (starts.length === 0) return { lo: 0, hi: 0, count: 0 };
    const lo = Math.min(...starts), hi = Math.max(...starts) + ms;
    return { lo, hi, count: Math.round((hi - lo) / ms) };
  };

  // A time series: `series` = [{name, cls, values}] aligned with `buckets` (ISO starts of the buckets
  // with data) over the range `from`..`to`; a bucket without data, or a null value, is a gap: the line
  // breaks there, never joining two measured buckets across it, and nothing is drawn as zero.
  ML.timeChart = function ({ plot, title, unit, yTitle, buckets, bucketSeconds, from, to, series, empty }) {
    const times = buckets.map((b) => new Date(b).getTime());
    const all = series.flatMap((s) => s.values.filter(ML.isNum));
    if (all.length === 0) {
      return el("div", { class: "chart" }, el("h4", {}, title),
        el("p", { class: "plot-empty", "data-plot": plot, "data-n": 0 }, empty || "Not measured in this range."));
    }
    const axis = valueAxis(Math.max(...all), unit);
    const f = frame(plot, { "aria-label": title, "data-n": all.length, "data-bucket-seconds": bucketSeconds },
      axis.ticks.map(axis.format));
    const { lo, hi } = ML.bucketSpan(buckets, bucketSeconds, from, to);
    const xScale = (t) => f.left + (t - lo) / (hi - lo) * (f.right - f.left);
    const yHi = axis.ticks[axis.ticks.length - 1];
    const yScale = (v) => f.bottom - v / yHi * (f.bottom - f.top);
    // time ticks on bucket boundaries, at most six
    const bucketMs = bucketSeconds * 1000, count = Math.round((hi - lo) / bucketMs);
    const every = Math.max(1, Math.ceil(count / 5));
    const xTicks = [];
    for (let i = 0; i <= count; i += every) xTicks.push(lo + i * bucketMs);
    axes(f, xScale, yScale, xTicks, axis.ticks, timeFormat(hi - lo), axis.format, "time (UTC), per " +
      bucketLabel(bucketSeconds), `${yTitle} (${axis.unitLabel})`);
    const half = bucketSeconds * 500;
    series.forEach((s) => {
      let path = "";
      s.values.forEach((v, i) => {
        if (!ML.isNum(v)) { path += " "; return; }
        const x = xScale(times[i] + half), y = yScale(v);
        const joined = i > 0 && ML.isNum(s.values[i - 1]) && times[i] - times[i - 1] === bucketMs;
        path += (joined ? "L" : "M") + x.toFixed(1) + " " + y.toFixed(1);
        f.svg.appendChild(svgEl("circle", { class: "dot " + s.cls, cx: x, cy: y, r: 2.6 },
          svgEl("title", {}, `${s.name} ${ML.formatTime(buckets[i])}: ${ML.valueText(v, unit)}`)));
      });
      f.svg.appendChild(svgEl("path", { class: "line " + s.cls, d: path.replace(/ +/g, " ").trim(), fill: "none" }));
    });
    const legend = el("div", { class: "chart-legend" },
      series.map((s) => el("span", { class: "key " + s.cls },
        s.name + (s.values.some(ML.isNum) ? "" : " (not reported)"))));
    return el("div", { class: "chart" }, el("h4", {}, title), f.svg, series.length > 1 ? legend : null);
  };

  function bucketLabel(seconds) {
    const names = { 1: "second", 60: "minute", 3600: "hour", 86400: "day", 604800: "week" };
    if (names[seconds]) return names[seconds];
    if (seconds % 3600 === 0) return seconds / 3600 + " hours";
    if (seconds % 60 === 0) return seconds / 60 + " minutes";
    return seconds + " seconds";
  }
  ML.bucketLabel = bucketLabel;

  // The per-task latencies behind the latency window, with its p50 and p95 marked.
  ML.latencyPlot = function (tasks, window) {
    const values = tasks.tasks.map((t) => t.end_to_end_latency).filter(ML.isNum);
    if (values.length === 0) {
      return el("p", { class: "plot-empty", "data-plot": "latency", "data-n": 0 }, "No task has a latency yet.");
    }
    let lo = Math.min(...values), hi = Math.max(...values);
    if (hi === lo) { lo = Math.max(0, lo - 0.5); hi = hi + 0.5; }
    const edges = ML.ticks(Math.max(0, lo), hi, Math.min(20, Math.max(5, Math.ceil(Math.sqrt(values.length)) + 2)));
    const width = edges[1] - edges[0];
    const counts = new Array(edges.length - 1).fill(0);
    for (const v of values) counts[Math.min(counts.length - 1, Math.max(0, Math.floor((v - edges[0]) / width)))] += 1;
    const xLo = edges[0], xHi = edges[edges.length - 1];
    const yTicks = ML.ticks(0, Math.max(...counts), 4).filter((t) => Number.isInteger(t));
    const f = frame("latency", { "data-n": values.length, "aria-label": "histogram of task latency" }, yTicks.map(String));
    const yHi = yTicks[yTicks.length - 1];
    const xScale = (v) => f.left + (v - xLo) / (xHi - xLo) * (f.right - f.left);
    const yScale = (v) => f.bottom - v / yHi * (f.bottom - f.top);
    const xAxis = valueAxis(xHi, "s");
    // labels on the bins' own edges, so the first is where the first bin starts (ticks of another
    // step could start one bin or more to its right)
    const every = Math.ceil((edges.length - 1) / 6);
    const xTicks = edges.filter((_, i) => i % every === 0);
    axes(f, xScale, yScale, xTicks, yTicks, xAxis.format, String, `latency per task (${xAxis.unitLabel})`, "tasks");
    counts.forEach((count, i) => {
      if (count === 0) return;
      const x = xScale(edges[i]) + 1, w = Math.max(1, xScale(edges[i + 1]) - xScale(edges[i]) - 2);
      f.svg.appendChild(svgEl("rect", { class: "bar", x, y: yScale(count), width: w, height: yScale(0) - yScale(count) },
        svgEl("title", {}, `${count} task${count === 1 ? "" : "s"} from ${ML.formatNumber(edges[i], "s")} to ${ML.formatNumber(edges[i + 1], "s")}`)));
    });
    const markers = [];
    if (window && ML.isNum(window.p50)) markers.push(["p50", window.p50]);
    if (window && ML.isNum(window.p95)) markers.push(["p95", window.p95]);
    markers.forEach(([name, value], i) => {
      const x = xScale(Math.min(xHi, Math.max(xLo, value)));
      f.svg.appendChild(svgEl("line", { class: "marker " + name, x1: x, x2: x, y1: f.top - 4, y2: f.bottom }));
      const anchor = x > W - 90 ? "end" : "start";
      f.svg.appendChild(svgEl("text", { class: "marker-label " + name, x: anchor === "end" ? x - 4 : x + 4,
        y: f.top + 4 + i * 13, "text-anchor": anchor, "data-marker": name, "data-value": value },
        `${name} ${ML.formatNumber(value, "s")}`));
    });
    const caption = el("div", { class: "caption" },
      ML.plural(values.length, "task") +
      (tasks.truncated ? ` (the most recent of ${ML.intFormat.format(tasks.total_tasks)})` : "") +
      (window ? ` · window state: ${ML.STATE_LABELS[window.state] || window.state}` : ""));
    return el("div", {}, f.svg, caption);
  };

  // The cost of each priced task, oldest first, with the mean; unpriced tasks are counted, not drawn as $0.
  ML.costPlot = function (tasks) {
    const ordered = tasks.tasks.slice().reverse();
    const priced = ordered.filter((t) => ML.isNum(t.total_task_cost));
    const unpriced = ordered.length - priced.length;
    const unpricedNote = unpriced > 0
      ? ` · ${unpriced} task${unpriced === 1 ? "" : "s"} without a complete price (no cost, not $0)` : "";
    if (priced.length === 0) {
      return el("p", { class: "plot-empty", "data-plot": "cost", "data-n": 0 },
        ordered.length === 0 ? "No task yet."
          : `No task has a cost: none of the ${ML.plural(ordered.length, "task")} ` +
            "had every LLM call priced. A missing price is shown as missing, never as $0.");
    }
    const shown = priced.slice(-120);
    const total = priced.reduce((sum, t) => sum + t.total_task_cost, 0);
    const mean = total / priced.length;
    const axis = valueAxis(Math.max(...shown.map((t) => t.total_task_cost)), "USD");
    const f = frame("cost", { "data-n": priced.length, "aria-label": "cost of each task, oldest first" },
      axis.ticks.map(axis.format));
    const yHi = axis.ticks[axis.ticks.length - 1];
    const step = (f.right - f.left) / shown.length;
    const xScale = (i) => f.left + i * step;
    const yScale = (v) => f.bottom - v / yHi * (f.bottom - f.top);
    const labelEvery = Math.max(1, Math.ceil(shown.length / 6));
    const xTicks = shown.map((_, i) => i).filter((i) => i % labelEvery === 0);
    axes(f, (i) => xScale(i) + step / 2, yScale, xTicks, axis.ticks,
      (i) => String(priced.length - shown.length + i + 1), axis.format, "task number (oldest first)", "cost per task (USD)");
    shown.forEach((t, i) => {
      const gap = step > 4 ? Math.min(3, step * 0.2) : 0;
      f.svg.appendChild(svgEl("rect", { class: "bar cost", x: xScale(i) + gap / 2, y: yScale(t.total_task_cost),
        width: Math.max(0.5, step - gap), height: yScale(0) - yScale(t.total_task_cost) },
        svgEl("title", {}, `task ${t.task_key}: ${ML.formatNumber(t.total_task_cost, "USD")}`)));
    });
    const y = yScale(mean);
    f.svg.appendChild(svgEl("line", { class: "marker mean", x1: f.left, x2: f.right, y1: y, y2: y }));
    f.svg.appendChild(svgEl("text", { class: "marker-label mean", x: f.right, y: f.top - 8,
      "text-anchor": "end", "data-marker": "mean", "data-value": mean }, `- - mean ${ML.formatNumber(mean, "USD")}`));
    const caption = el("div", { class: "caption", "data-total-cost": total },
      `${priced.length} priced task${priced.length === 1 ? "" : "s"} · total ${ML.formatNumber(total, "USD")}` +
      (shown.length < priced.length ? ` · last ${shown.length} shown` : "") + unpricedNote);
    return el("div", {}, f.svg, caption);
  };
})(window.ML);
