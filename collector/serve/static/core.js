// meritlens dashboard, shared helpers: DOM building (text only), number and time formatting, links
// between the pages, and the collector's JSON endpoints. Every string from the data is put into the
// page as text (textContent / setAttribute), never as HTML.
"use strict";

window.ML = window.ML || {};

(function (ML) {
  const SVG_NS = "http://www.w3.org/2000/svg";
  ML.params = new URLSearchParams(window.location.search);
  ML.STATE_LABELS = {
    measured: "measured",
    insufficient_evidence: "insufficient evidence",
    not_configured: "not configured",
    not_applicable: "not applicable",
  };

  // ---- DOM helpers ---------------------------------------------------------------------------
  function setAttrs(node, attrs) {
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      node.setAttribute(key, String(value));
    }
  }

  function append(node, children) {
    for (const child of children.flat(Infinity)) {
      if (child === null || child === undefined || child === false) continue;
      node.appendChild(child instanceof Node ? child : document.createTextNode(String(child)));
    }
  }

  ML.el = function (tag, attrs, ...children) {
    const node = document.createElement(tag);
    setAttrs(node, attrs);
    append(node, children);
    return node;
  };

  ML.svgEl = function (tag, attrs, ...children) {
    const node = document.createElementNS(SVG_NS, tag);
    setAttrs(node, attrs);
    append(node, children);
    return node;
  };

  // ---- formatting ----------------------------------------------------------------------------
  ML.intFormat = new Intl.NumberFormat("en-US", { maximumFractionDigits: 0 });
  // A number without a unit, for people: four significant digits, never float noise or an exponent.
  const plainFormat = new Intl.NumberFormat("en-US", { maximumSignificantDigits: 4, useGrouping: false });
  const centsFormat = new Intl.NumberFormat("en-US", { maximumSignificantDigits: 3 });
  ML.isNum = (v) => v !== null && v !== undefined && typeof v === "number" && Number.isFinite(v);

  ML.formatNumber = function (value, unit) {
    if (!ML.isNum(value)) return null;
    switch (unit) {
      case "USD":
        if (Math.abs(value) >= 100) return "$" + value.toFixed(2);
        // per-call LLM costs are often fractions of a cent: keep three significant digits
        if (value !== 0 && Math.abs(value) < 0.01) return "$" + centsFormat.format(value);
        return "$" + value.toFixed(4);
      case "s":
        if (Math.abs(value) >= 100) return value.toFixed(0) + " s";
        if (Math.abs(value) >= 1) return value.toFixed(2) + " s";
        return (value * 1000).toFixed(0) + " ms";
      case "ratio":
        return (value * 100).toFixed(1) + "%";
      case "score":
        return ML.plainNumber(value);
      case "tokens":
      case "steps":
        return Number.isInteger(value) ? ML.intFormat.format(value) : value.toFixed(1);
      default:
        return Number.isInteger(value) ? ML.intFormat.format(value) : plainFormat.format(value);
    }
  };

  // Any value of the data as text for people: integers as they are (ids, codes), other numbers
  // rounded, numbers inside objects and lists too. The exact value is the JSON's and the CSV's.
  ML.plainNumber = (value) => Number.isInteger(value) ? String(value) : plainFormat.format(value);
  ML.plainText = function (value) {
    if (typeof value === "number") return ML.plainNumber(value);
    if (value !== null && typeof value === "object") {
      return JSON.stringify(value, (key, v) => typeof v === "number" && !Number.isInteger(v) ? Number(plainFormat.format(v)) : v);
    }
    return String(value);
  };

  // The number with its unit, when the formatted number does not already carry it.
  ML.valueText = function (value, unit) {
    const text = ML.formatNumber(value, unit);
    if (text === null) return null;
    return ["tokens", "steps", "tasks/s"].includes(unit) ? text + " " + unit : text;
  };

  // A missing figure is shown as such, never as zero; `why` says why on hover.
  ML.missing = (why) => ML.el("span", { class: "missing", "data-missing": "true", title: why || "not measured" }, "—");

  ML.valueOrMissing = function (value, unit, why) {
    const text = ML.valueText(value, unit);
    return text === null ? ML.missing(why) : text;
  };

  ML.formatTime = function (iso) {
    if (!iso) return "—";
    const date = new Date(iso);
    if (Number.isNaN(date.getTime())) return String(iso);
    return date.toISOString().replace("T", " ").slice(0, 19) + " UTC";
  };

  ML.plural = (n, word) => `${ML.intFormat.format(n)} ${word}${n === 1 ? "" : "s"}`;

  ML.stateBadge = (state) =>
    ML.el("span", { class: "state state-" + state, "data-state": state }, ML.STATE_LABELS[state] || state);

  // ---- links and data ------------------------------------------------------------------------
  // A collector started with a bearer token wants it on every API call. The page takes it from the
  // URL fragment (/#token=...), which the browser never sends to the server or puts in its logs.
  ML.TOKEN = new URLSearchParams(window.location.hash.slice(1)).get("token");

  // The address of another page of the dashboard, keeping the token fragment and refresh setting.
  ML.pageHref = function (values) {
    const search = new URLSearchParams();
    for (const [key, value] of Object.entries(values)) {
      if (value !== null && value !== undefined && value !== "") search.set(key, value);
    }
    if (ML.params.has("refresh")) search.set("refresh", ML.params.get("refresh"));
    return "/?" + search.toString() + (ML.TOKEN ? "#token=" + encodeURIComponent(ML.TOKEN) : "");
  };

  ML.link = (values, ...children) => ML.el("a", { href: ML.pageHref(values) }, ...children);

  ML.getJSON = async function (path, values) {
    const search = new URLSearchParams();
    for (const [key, value] of Object.entries(values || {})) {
      if (value !== null && value !== undefined && value !== "") search.set(key, value);
    }
    const url = path + (search.toString() ? "?" + search.toString() : "");
    const headers = { Accept: "application/json" };
    if (ML.TOKEN) headers.Authorization = "Bearer " + ML.TOKEN;
    const response = await fetch(url, { cache: "no-store", headers });
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
      throw new Error(path + ": " + (body && body.error ? body.error : "HTTP " + response.status));
    }
    return body;
  };

  // The range parameters of the page (range, from, to) for an API call.
  ML.rangeQuery = function (source) {
    const values = { range: source.get("range") || "all" };
    if (values.range === "custom") {
      values.from = source.get("from") || "";
      values.to = source.get("to") || "";
    }
    return values;
  };
})(window.ML);
