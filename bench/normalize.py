"""Per-span CPU cost of the collector's receive path without the store (issue 7, targets 1 and 2).

Times bytes -> parsed protobuf -> limit checks -> normalize -> Arrow table for realistic
ExportTraceServiceRequest bodies built as bench/loadgen.py builds them (15 attributes, 1 event per
span, 1000 spans per request, 4 targets), in one process and one thread, for two implementations in
the same run:

* obvious: the walk the collector had before issue 7 (bench/_obvious_normalize.py): every attribute
  becomes Python objects, the leftover attributes a dict JSON-encoded per span;
* production: `meritlens.collector._otlp.decode_lean` then `meritlens.collector._ingest.prepare` (the native
  span scanner), exactly what the receivers run for a request.

Workloads: `loadgen` (the spans carry their cost) and `unpriced` (the same spans without
`meritlens.cost.usd`, so the collector prices each one, as for spans of other instrumentations).

Correctness, checked before anything is timed (exit status 1 on a difference): for every body, both
implementations give equal Arrow tables (same rows, same order, same values) and the same refusals, on
the benchmark bodies and on a seeded random corpus of awkward spans (every promoted key and value
kind, duplicates, outranked and derived sources, invalid IDs and times, out-of-range kinds, events,
links, nested values, long values, several resources and scopes).

usage: python bench/normalize.py [--spans 20000] [--batch 1000] [--repeats 3] [--random-spans 3000]
"""

from __future__ import annotations

import argparse
import base64
import logging
import os
import random
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import _obvious_normalize as obvious  # noqa: E402
import loadgen  # noqa: E402
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest  # noqa: E402
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue  # noqa: E402
from opentelemetry.proto.trace.v1.trace_pb2 import Span  # noqa: E402

from meritlens.collector import _ingest, _otlp  # noqa: E402
from meritlens.collector._normalize import FIRST_CHUNK_EVENTS, PROMOTED  # noqa: E402
from meritlens.collector._server import normalize_options  # noqa: E402
from meritlens.collector._settings import ServerSettings  # noqa: E402
from meritlens.instrumentation import conventions as c  # noqa: E402

SETTINGS = ServerSettings()
OPTIONS = normalize_options(SETTINGS)  # what `meritlens serve` uses: target fallback on, collector pricing on
LIMITS = _otlp.SpanLimits(SETTINGS.max_attributes, SETTINGS.max_attribute_bytes)


def run_obvious(body: bytes, limits: _otlp.SpanLimits = LIMITS):
    decoded = _otlp.decode(body, _otlp.PROTOBUF)
    obvious.check_spans(decoded.request, limits, decoded.refusals)
    batch = obvious.normalize(decoded.request, decoded.refusals, OPTIONS)
    return batch.refused, (batch.to_arrow() if batch.size else None)


def run_production(body: bytes, limits: _otlp.SpanLimits = LIMITS):
    batch, table = _ingest.prepare(_otlp.decode_lean(body, _otlp.PROTOBUF), limits, OPTIONS)
    return batch.refused, table


def unpriced_bodies(bodies: list[bytes]) -> list[bytes]:
    out = []
    for body in bodies:
        request = ExportTraceServiceRequest.FromString(body)
        for rs in request.resource_spans:
            for ss in rs.scope_spans:
                for span in ss.spans:
                    kept = [kv for kv in span.attributes if kv.key != c.COST_USD]
                    del span.attributes[:]
                    span.attributes.extend(kept)
        out.append(request.SerializeToString())
    return out


# --- the random corpus of awkward spans -------------------------------------------------------------
def _source_keys() -> list[str]:
    return [s if isinstance(s, str) else s[0] for _, sources in PROMOTED.values() for s in sources]


_WORDS = ["application", "orchestration", "bogus", "LLM", "TOOL", "AGENT", "EMBEDDING", "chat", "completion",
          "embedding", "openai", "gpt-4o-mini", "claude-3-5-haiku-20241022", "stop", "", "ünïcödé ✓", 'quote"\\back']


def _random_value(rng: random.Random, depth: int = 0) -> AnyValue:
    kind = rng.choice(["str", "str", "int", "int", "float", "bool", "array", "kvlist", "bytes", "unset", "long"])
    if depth > 1 and kind in ("array", "kvlist"):
        kind = "str"
    v = AnyValue()
    if kind == "str":
        v.string_value = rng.choice(_WORDS)
    elif kind == "int":
        v.int_value = rng.choice([0, 1, 7, 150, -3, 2**63 - 1, -(2**63), 10**12])
    elif kind == "float":
        v.double_value = rng.choice([0.0, 1.0, 2.5, -1.5, 0.000123, 1e300, float("nan"), float("inf"), -float("inf"), 3.0])
    elif kind == "bool":
        v.bool_value = rng.random() < 0.5
    elif kind == "array":
        v.array_value.values.extend(_random_value(rng, depth + 1) for _ in range(rng.randint(0, 3)))
    elif kind == "kvlist":
        for _ in range(rng.randint(0, 3)):
            v.kvlist_value.values.add(key=rng.choice(["a", "b", "a"]), value=_random_value(rng, depth + 1))
    elif kind == "bytes":
        v.bytes_value = os.urandom(rng.randint(0, 6))
    elif kind == "long":
        v.string_value = "x" * rng.randint(200, 600)
    return v


def _random_attributes(rng: random.Random, keys: list[str], count: int) -> list[KeyValue]:
    return [KeyValue(key=rng.choice(keys), value=_random_value(rng)) for _ in range(count)]


def random_bodies(total: int, seed: int = 7) -> list[bytes]:
    rng = random.Random(seed)
    keys = _source_keys() + [c.ROLE, c.COST_USD, c.COST_PRICED_BY, c.SERVICE_NAME, "http.status_code", "x.y", "a"]
    event_names = sorted(FIRST_CHUNK_EVENTS) + ["gen_ai.choice", "exception"]
    bodies, made = [], 0
    while made < total:
        request = ExportTraceServiceRequest()
        for _ in range(rng.randint(1, 2)):
            rs = request.resource_spans.add()
            resource_keys = [c.SERVICE_NAME, c.TARGET_ID, c.ROLE, c.ASSESSMENT_ID, c.RUN_ID, c.TASK_ID, "host.name"]
            rs.resource.attributes.extend(_random_attributes(rng, resource_keys, rng.randint(0, 4)))
            if rng.random() < 0.5:
                rs.resource.attributes.add(key=c.SERVICE_NAME, value=AnyValue(string_value="svc"))
            for _ in range(rng.randint(1, 2)):
                ss = rs.scope_spans.add()
                ss.scope.name = rng.choice(["", "scope-a", "openinference.instrumentation.openai"])
                for _ in range(rng.randint(1, 40)):
                    ss.spans.append(_random_span(rng, keys, event_names))
                    made += 1
        bodies.append(request.SerializeToString())
    return bodies


def _random_span(rng: random.Random, keys: list[str], event_names: list[str]) -> Span:
    start = rng.choice([1_780_000_000_000_000_000 + rng.randint(0, 10**12)] * 18 + [0, 5])
    end = start + rng.choice([0, 1, 250_000_000, 250_000_000, 10**15] * 4 + [-1])
    span = Span(
        trace_id=rng.choice([os.urandom(16)] * 30 + [bytes(16), os.urandom(15), b""]),
        span_id=rng.choice([os.urandom(8)] * 30 + [bytes(8), os.urandom(7)]),
        parent_span_id=rng.choice([b"", os.urandom(8)] * 15 + [os.urandom(3)]),
        name=rng.choice(["chat gpt-4o-mini", "", "tool call"]),
        kind=rng.choice([0, 1, 2, 3, 3, 3] * 5 + [9]),
        start_time_unix_nano=start, end_time_unix_nano=max(0, min(end, 2**64 - 1)),
    )
    if rng.random() < 0.03:
        span.end_time_unix_nano = 2**63 + 5
    span.status.code = rng.choice([0, 0, 1, 2] * 8 + [7])
    span.status.message = rng.choice(["", "", "boom"])
    span.attributes.extend(_random_attributes(rng, keys, rng.randint(0, 12)))
    if rng.random() < 0.3:  # ordinary token counts, so pricing and the target fallback have work
        span.attributes.add(key=c.GEN_AI_REQUEST_MODEL, value=AnyValue(string_value="gpt-4o-mini"))
        span.attributes.add(key=c.GEN_AI_USAGE_INPUT_TOKENS, value=AnyValue(int_value=rng.randint(0, 500)))
        span.attributes.add(key=c.GEN_AI_USAGE_OUTPUT_TOKENS, value=AnyValue(int_value=rng.randint(0, 500)))
        span.attributes.add(key=c.GEN_AI_PROVIDER_NAME, value=AnyValue(string_value="openai"))
    for _ in range(rng.choice([0, 0, 1, 2])):
        event = span.events.add(name=rng.choice(event_names),
                                time_unix_nano=max(0, start + rng.choice([-5, 0, 1000, 10**8])))
        event.attributes.extend(_random_attributes(rng, ["index", "a", "finish_reason"], rng.randint(0, 3)))
    for _ in range(rng.choice([0, 0, 0, 1])):
        link = span.links.add(trace_id=os.urandom(16), span_id=os.urandom(8))
        link.attributes.extend(_random_attributes(rng, ["why", "a"], rng.randint(0, 2)))
    return span


def check_same(bodies: list[bytes], what: str, limits: _otlp.SpanLimits = LIMITS) -> int:
    """Both implementations on every body; exit 1 on the first difference. Returns rows compared."""
    rows = 0
    for i, body in enumerate(bodies):
        (refused_a, table_a), (refused_b, table_b) = run_obvious(body, limits), run_production(body, limits)
        if refused_a != refused_b:
            first = next(k for k in range(max(len(refused_a), len(refused_b)))
                         if refused_a[k:k + 1] != refused_b[k:k + 1])
            raise SystemExit(f"normalize bench: WRONG RESULT on {what} body {i}: refusal {first} differs:\n"
                             f"  obvious:    {refused_a[first:first + 1]}\n  production: {refused_b[first:first + 1]}\n"
                             f"  body (base64): {base64.b64encode(body).decode()[:200]}...")
        if (table_a is None) != (table_b is None) or (table_a is not None and not table_a.equals(table_b)):
            detail = ""
            if table_a is not None and table_b is not None and table_a.num_rows == table_b.num_rows:
                a, b = table_a.to_pylist(), table_b.to_pylist()
                for r, (ra, rb) in enumerate(zip(a, b)):
                    diff = {k: (repr(ra[k])[:300], repr(rb[k])[:300]) for k in ra if ra[k] != rb[k] and ra[k] == ra[k]}
                    if diff:
                        detail = f" first differing row {r}: {diff}"
                        break
                if not detail:
                    detail = f" schemas: {table_a.schema} vs {table_b.schema}"
            raise SystemExit(f"normalize bench: WRONG RESULT on {what} body {i}: tables differ;{detail}")
        rows += 0 if table_a is None else table_a.num_rows
    return rows


def time_run(run, bodies: list[bytes]) -> float:
    t0 = time.perf_counter()
    for body in bodies:
        run(body)
    return time.perf_counter() - t0


def stage_breakdown(bodies: list[bytes], spans: int) -> dict[str, float]:
    """Production stages one after another, µs per span (informational; the totals above are what count)."""
    times = dict.fromkeys(("parse (lean view)", "normalize (checks included)", "to_arrow"), 0.0)
    for body in bodies:
        t0 = time.perf_counter()
        decoded = _otlp.decode_lean(body, _otlp.PROTOBUF)
        t1 = time.perf_counter()
        checks = _otlp.SpanChecks(decoded.lean, LIMITS, len(body))
        batch = _ingest.normalize(decoded.lean, decoded.refusals, OPTIONS, checks=checks, body=body)
        t2 = time.perf_counter()
        batch.to_arrow()
        t3 = time.perf_counter()
        for name, dt in zip(times, (t1 - t0, t2 - t1, t3 - t2)):
            times[name] += dt
    return {name: 1e6 * dt / spans for name, dt in times.items()}


def run(spans: int, batch: int, repeats: int, random_spans: int) -> dict:
    workloads = {"loadgen": loadgen.build_bodies(spans, batch, 4)}
    workloads["unpriced"] = unpriced_bodies(workloads["loadgen"])
    checked = {name: check_same(bodies, name) for name, bodies in workloads.items()}
    awkward = random_bodies(random_spans)
    logging.disable(logging.WARNING)  # the random corpus names models without a price; each says so once
    try:
        checked["random"] = check_same(awkward, "random corpus")
        # Tight limits, so that requests and spans are longer than the text limit and counts exceed theirs.
        checked["random, tight limits"] = check_same(awkward, "random corpus, tight limits", _otlp.SpanLimits(6, 300))
    finally:
        logging.disable(logging.NOTSET)
    if checked["loadgen"] != spans or checked["unpriced"] != spans:
        raise SystemExit(f"normalize bench: WRONG RESULT: expected {spans} rows per workload, got {checked}")
    results = {}
    for name, bodies in workloads.items():
        runs = {"obvious": [], "production": []}
        for _ in range(repeats):
            for impl, fn in (("obvious", run_obvious), ("production", run_production)):
                runs[impl].append(spans / time_run(fn, bodies))
        results[name] = runs
    return {"results": results, "stages": stage_breakdown(workloads["loadgen"], spans), "checked": checked}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--random-spans", type=int, default=3000)
    args = parser.parse_args()
    r = run(args.spans, args.batch, args.repeats, args.random_spans)
    print("correctness: equal Arrow tables and refusals; rows compared: "
          + ", ".join(f"{what} {rows:,}" for what, rows in r["checked"].items()))
    print(f"{args.spans:,} spans in requests of {args.batch}, bytes -> Arrow table, one thread, "
          f"{args.repeats} runs (median, range):")
    for workload, runs in r["results"].items():
        for impl, values in runs.items():
            print(f"  {workload:9s} {impl:10s} {statistics.median(values):>9,.0f} spans/s "
                  f"({min(values):,.0f}-{max(values):,.0f}) = {1e6 / statistics.median(values):5.1f} µs/span")
        speedup = statistics.median(runs["production"]) / statistics.median(runs["obvious"])
        print(f"  {workload:9s} production / obvious: {speedup:.1f}x")
    print("production stages, µs per span: " + ", ".join(f"{k} {v:.2f}" for k, v in r["stages"].items()))


if __name__ == "__main__":
    main()
