// meritlens dashboard, from a number to its evidence: the trace list (filtered by target, model,
// status and time), one trace as a span tree with timings, tokens, cost, retries, tool calls and
// attributes, and the samples and spans a window was computed from.
"use strict";

(function (ML) {
  const { el } = ML;
  const traceLink = (id, text) => ML.link({ view: "trace", trace: id }, text || id.slice(0, 16) + "…");

  // ---- the trace list ------------------------------------------------------------------------
  function filters(state, apply) {
    const field = (name, label, placeholder) => {
      const input = el("input", { type: "text", name, value: state.get(name) || "", placeholder, "aria-label": label });
      input.addEventListener("change", () => apply({ [name]: input.value.trim() }));
      return el("label", {}, label + " ", input);
    };
    const status = el("select", { name: "status", "aria-label": "status" });
    for (const [key, text] of [["", "any"], ["ok", "ok"], ["error", "error"]]) {
      const option = el("option", {}, text);
      option.value = key;
      option.selected = key === (state.get("status") || "");
      status.appendChild(option);
    }
    status.addEventListener("change", () => apply({ status: status.value }));
    const form = el("form", { class: "controls", "aria-label": "trace filters" },
      field("target", "target", "any target"), field("model", "model", "any model"),
      el("label", {}, "status ", status), ML.rangeFields(state, apply, "started"));
    form.addEventListener("submit", (event) => event.preventDefault());
    return form;
  }

  ML.renderTraces = function (main, doc, state, apply) {
    const rows = doc.traces;
    const body = rows.length === 0
      ? el("p", { class: "empty", id: "no-traces" }, "No trace matches these filters.")
      : el("table", { class: "traces" },
        el("thead", {}, el("tr", {}, ["trace", "root span", "started", "duration", "spans", "targets", "models",
          "tokens in / out", "cost", "errors"].map((h, i) => el("th", { scope: "col", class: [3, 4, 7, 8, 9].includes(i) ? "num" : "" }, h)))),
        el("tbody", {}, rows.map((t) => el("tr", { "data-trace": t.trace_id, class: t.errors ? "has-error" : "" },
          el("th", { scope: "row", class: "mono" }, traceLink(t.trace_id)),
          el("td", {}, t.root_name || ML.missing("no name")),
          el("td", {}, ML.formatTime(t.start_time)),
          el("td", { class: "num" }, ML.formatNumber(t.duration_s, "s")),
          el("td", { class: "num" }, ML.intFormat.format(t.spans)),
          el("td", {}, (t.targets || []).join(", ") || ML.missing("no target")),
          el("td", {}, (t.models || []).join(", ") || ML.missing("no model")),
          el("td", { class: "num" }, ML.valueOrMissing(t.input_tokens, "count", "no span reported input tokens"), " / ",
            ML.valueOrMissing(t.output_tokens, "count", "no span reported output tokens")),
          el("td", { class: "num", "data-col": "cost" }, ML.valueOrMissing(t.cost_usd, "USD", "no span of the trace was priced")),
          el("td", { class: "num" }, t.errors ? el("span", { class: "bad" }, String(t.errors)) : "0")))));
    main.replaceChildren(el("section", { class: "traces-view" },
      el("div", { class: "target-head" }, el("h2", {}, "Traces"), filters(state, apply)),
      el("div", { class: "caption" }, `${ML.plural(rows.length, "trace")}, most recent first` +
        (rows.length >= doc.limit ? ` (the first ${doc.limit})` : "")),
      el("div", { class: "panel wide" }, body)));
  };

  // ---- one trace -----------------------------------------------------------------------------
  const STATUS = { 0: "unset", 1: "ok", 2: "error" };
  const KIND = { 1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer" };

  // Spans in tree order with their depth; a span whose parent is not in the trace is a root.
  function treeOrder(spans) {
    const ids = new Set(spans.map((s) => s.span_id));
    const children = new Map();
    for (const s of spans) {
      const parent = s.parent_span_id && ids.has(s.parent_span_id) ? s.parent_span_id : null;
      if (!children.has(parent)) children.set(parent, []);
      children.get(parent).push(s);
    }
    const out = [];
    const walk = (parent, depth) => (children.get(parent) || []).forEach((s) => {
      out.push([s, depth]);
      walk(s.span_id, depth + 1);
    });
    walk(null, 0);
    return out;
  }

  const TYPED_UNITS = { cost_usd: "USD", ttft_s: "s", quality_score: "score" };

  function attributeTable(span) {
    const rows = [];
    const typed = ["target_id", "role", "task_id", "case_id", "assessment_id", "operation", "provider",
      "request_model", "response_model", "input_tokens", "output_tokens", "cache_read_tokens", "reasoning_tokens",
      "cost_usd", "ttft_s", "retries", "tool_calls", "agent_step", "tool_name", "outcome_success", "quality_score",
      "error_type", "status_message", "service_name"];
    for (const key of typed) if (span[key] !== null && span[key] !== undefined) rows.push([key, span[key]]);
    for (const [key, value] of Object.entries(span.attributes || {})) rows.push(["attributes." + key, value]);
    for (const [key, value] of Object.entries(span.resource || {})) rows.push(["resource." + key, value]);
    (span.events || []).forEach((e, i) => rows.push([`event ${i + 1}`, e.name + (e.attributes ? " " + ML.plainText(e.attributes) : "")]));
    // A typed figure in its unit; any other number rounded for people, the exact value on hover.
    const shown = (key, v) => typeof v === "number" && TYPED_UNITS[key] ? ML.valueText(v, TYPED_UNITS[key]) : ML.plainText(v);
    return el("table", { class: "attributes" }, el("tbody", {}, rows.map(([k, v]) =>
      el("tr", {}, el("th", { scope: "row", class: "mono" }, k),
        el("td", { class: "mono", "data-attribute": k, title: typeof v === "number" ? String(v) : null }, shown(k, v))))));
  }

  ML.renderTrace = function (main, doc) {
    const spans = doc.spans;
    if (spans.length === 0) {
      main.replaceChildren(el("p", { class: "empty", id: "no-trace" }, `No span of trace ${doc.trace_id} is stored.`));
      return;
    }
    const t0 = Math.min(...spans.map((s) => s.start_unix_nano));
    const t1 = Math.max(...spans.map((s) => s.end_unix_nano));
    const total = Math.max(1, t1 - t0);
    const rows = treeOrder(spans).map(([s, depth]) => {
      const left = (s.start_unix_nano - t0) / total * 100, width = Math.max(0.4, (s.end_unix_nano - s.start_unix_nano) / total * 100);
      const figures = [
        ML.isNum(s.input_tokens) || ML.isNum(s.output_tokens)
          ? `${ML.formatNumber(s.input_tokens, "count") || "—"} in / ${ML.formatNumber(s.output_tokens, "count") || "—"} out tokens` : null,
        ML.isNum(s.cost_usd) ? ML.formatNumber(s.cost_usd, "USD") : null,
        ML.isNum(s.retries) && s.retries > 0 ? `${s.retries} ${s.retries === 1 ? "retry" : "retries"}` : null,
        ML.isNum(s.tool_calls) && s.tool_calls > 0 ? ML.plural(s.tool_calls, "tool call") : null,
        s.tool_name ? "tool " + s.tool_name : null,
      ].filter(Boolean).join(" · ");
      const error = s.status_code === 2 || s.error_type;
      return el("li", { class: "span" + (error ? " has-error" : ""), "data-span": s.span_id, "data-depth": depth },
        el("details", {},
          // The indentation stays inside the first column, so that every row's timing bar has the same
          // track (the widest column): a child's bar lies within its parent's.
          el("summary", {},
            el("span", { class: "span-label" },
              el("span", { class: "indent", "data-depth": depth }, "│ ".repeat(depth)),
              el("span", { class: "span-name" }, s.name || "(unnamed)"),
              error ? el("span", { class: "bad" }, " " + (s.error_type || STATUS[s.status_code])) : null),
            el("span", { class: "span-kind muted" }, KIND[s.kind] || ""),
            el("span", { class: "span-duration", "data-duration": s.duration_s }, ML.formatNumber(s.duration_s, "s")),
            el("span", { class: "waterfall", "aria-hidden": "true" },
              ML.svgEl("svg", { viewBox: "0 0 100 6", preserveAspectRatio: "none", class: "bar-track" },
                ML.svgEl("rect", { x: left, y: 0, width, height: 6, class: error ? "bar error" : "bar" }))),
            el("span", { class: "span-figures" }, figures)),
          attributeTable(s)));
    });
    main.replaceChildren(el("section", { class: "trace-view", "data-trace": doc.trace_id },
      el("div", { class: "target-head" }, el("h2", {}, "Trace ", el("span", { class: "mono" }, doc.trace_id)),
        el("div", { class: "facts" }, el("span", {}, ML.plural(spans.length, "span")),
          el("span", {}, "started " + ML.formatTime(spans[0].start_time)),
          el("span", {}, "duration " + ML.formatNumber(total / 1e9, "s")))),
      el("div", { class: "caption" }, "Open a span (Enter or click) for its attributes."),
      el("ol", { class: "span-tree panel wide" }, rows)));
  };

  // ---- the evidence behind a window ----------------------------------------------------------
  ML.renderEvidence = function (main, doc) {
    const w = doc.window;
    const head = el("div", { class: "target-head" },
      el("h2", {}, "Evidence of ", el("span", { class: "mono" }, doc.metric)),
      el("div", { class: "facts" }, "target ", ML.link({ view: "target", target: doc.target_id }, doc.target_id),
        el("span", {}, "scope " + doc.scope)));
    const parts = [head];
    if (!w) {
      parts.push(el("p", { class: "empty" }, "No window is stored for this target, scope and metric."));
    } else {
      parts.push(el("div", { class: "panel wide evidence-summary" },
        el("div", {}, ML.stateBadge(w.state), " value ", el("b", {}, ML.valueOrMissing(w.value, w.unit)),
          ` (${w.aggregation}) from ${ML.plural(w.sample_count, "sample")}`),
        el("div", { class: "mono small" }, "evidence digest " + (w.evidence_digest || "—")),
        doc.computed_from_spans ? el("div", { "data-digest": doc.digest_matches ? "matches" : "differs",
          class: doc.digest_matches ? "ok" : "bad" },
          doc.digest_matches ? `✓ the ${ML.plural(doc.span_count, "span")} below give this digest`
            : "✗ the spans stored now give another digest (the window may be about to be updated)")
          : el("div", {}, "Computed by a plugin or evaluator; its evidence is at ", el("code", {}, w.evidence_uri || "—"))));
    }
    if (doc.computed_from_spans && doc.samples) {
      parts.push(el("div", { class: "panel wide" }, el("h3", {}, "Samples"),
        el("table", { class: "samples" },
          el("thead", {}, el("tr", {}, ["sample", "case", "value", "outcome", "spans"].map((h) => el("th", { scope: "col" }, h)))),
          el("tbody", {}, doc.samples.map((s) => el("tr", { "data-sample": s.sample_key },
            el("th", { scope: "row", class: "mono" }, s.sample_key),
            el("td", {}, s.case_id || ML.missing("no case id")),
            el("td", { class: "num" }, ML.valueOrMissing(s.v, w ? w.unit : null)),
            el("td", {}, s.outcome_success === null ? ML.missing("no outcome recorded") : s.outcome_success ? "success" : "failure"),
            el("td", {}, s.spans.map((span) => el("div", { class: "sample-span" },
              span.trace_id ? traceLink(span.trace_id, (span.name || "span") + " · " + span.span_id) : span.key))))))),
        doc.truncated ? el("div", { class: "caption" }, `the first ${doc.samples.length} of ${doc.sample_count} samples`) : null));
    }
    main.replaceChildren(el("section", { class: "evidence-view" }, parts));
  };
})(window.ML);
