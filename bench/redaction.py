"""What a redaction policy costs the collector, with the example policy (examples/redaction.toml, a fresh key
beside a copy of it).

``ingest``: the throughput of bench/ingest.py (the real collector, spans queryable in `spans` and `windows`)
with `serve --redact` against without, in alternating runs (the machine's load changes between them), on
bench/spangen.py's spans as generated.

``cpu``: the CPU time of `SpanRedactor.redact` per span, against the CPU time of turning the same requests into
rows (decode, normalize, Arrow), in two cases:

* clean: the spans as generated, with nothing the policy acts on (the common case: each batch is searched
  once, nothing is decoded);
* content: the same rows with an e-mail address and a phone number written into the output message of a share
  of the LLM calls (those spans are decoded, masked and encoded again).

Checks: every clean batch comes back as the same table; in the content case no address is left and the counts
equal what was written. Exits non-zero otherwise.

usage: python bench/redaction.py ingest [--spans 300000] [--rounds 3] [--batch 1000] [--clients 2]
       python bench/redaction.py cpu [--spans 100000] [--batch 1000] [--share 0.05] [--policy PATH]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import ingest  # noqa: E402
import spangen  # noqa: E402
from meritlens.collector.process import _otlp  # noqa: E402
from meritlens.collector.process._normalize import normalize  # noqa: E402
from meritlens.collector.process._redact import SpanRedactor  # noqa: E402

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "redaction.toml"
# Written into the output messages (inside the JSON of a JSON attribute of an event, as spangen writes them).
_MARK = "the plan moves in two steps"


def _with_content(table: pa.Table, share: float, first: int) -> tuple[pa.Table, int]:
    """``table`` with an address and a phone number in the output message of about ``share`` of its calls."""
    events = table.column("events").to_pylist()
    every = max(1, round(1 / share)) if share > 0 else 0
    written = 0
    for i, value in enumerate(events):
        if every and value and _MARK in value and (first + i) % every == 0:
            events[i] = value.replace(_MARK, f"{_MARK}; write to ana{first + i}@example.com or call +1 555 010 4477", 1)
            written += 1
    index = table.schema.get_field_index("events")
    return table.set_column(index, table.field(index), pa.array(events, pa.string())), written


def _policy_copy(folder: str, policy: Path) -> Path:
    shutil.copy(policy, Path(folder) / policy.name)
    (Path(folder) / "redaction.key").write_bytes(os.urandom(32))
    return Path(folder) / policy.name


def run_ingest(spans: int = 300_000, rounds: int = 3, batch: int = 1000, clients: int = 2,
               policy: Path = EXAMPLE) -> dict:
    """Alternating bench/ingest.py runs without and with the policy: each run's spans/s queryable and the
    collector's CPU time a span while sending (less disturbed by other work on the machine), and the load."""
    runs: dict[str, list[float]] = {"none": [], "policy": []}
    cpu: dict[str, list[float]] = {"none": [], "policy": []}
    loads = []
    with tempfile.TemporaryDirectory() as folder:
        serve_args = ("--redact", str(_policy_copy(folder, policy)))
        for _ in range(rounds):
            for name, args in (("none", ()), ("policy", serve_args)):
                loads.append(os.getloadavg()[0])
                r = ingest.run(spans, batch, clients, serve_args=args)
                runs[name].append(r["spans_per_s"])
                cpu[name].append(r["cpu_pct"] / 100 * r["acked_s"] / r["sent"] * 1e6)
    return {"runs": runs, "cpu_us": cpu, "load_min": min(loads), "load_max": max(loads)}


def run(spans: int = 100_000, batch: int = 1000, share: float = 0.05, policy: Path = EXAMPLE) -> dict:
    stream = spangen.SpanStream(0)
    requests = list(stream.requests(spans, batch))
    started = time.process_time()
    tables = []
    for request in requests:
        decoded = _otlp.decode_lean(request.body, _otlp.PROTOBUF)
        tables.append(normalize(decoded.lean, body=request.body).to_arrow())
    normalize_s = time.process_time() - started
    count = sum(t.num_rows for t in tables)

    with tempfile.TemporaryDirectory() as folder:
        path = _policy_copy(folder, policy)
        clean, content = SpanRedactor.from_file(path), SpanRedactor.from_file(path)

    started = time.process_time()
    unchanged = sum(clean.redact(table) is table for table in tables)
    clean_s = time.process_time() - started
    if unchanged != len(tables) or clean.counts():
        raise SystemExit(f"the policy changed clean spans: {len(tables) - unchanged} batches, {clean.counts()}")

    with_content, written, first = [], 0, 0
    for table in tables:
        changed, n = _with_content(table, share, first)
        with_content.append(changed)
        written, first = written + n, first + table.num_rows
    started = time.process_time()
    stored = [content.redact(table) for table in with_content]
    content_s = time.process_time() - started
    left = sum(pc.sum(pc.match_substring(t.column("events"), "@example.com")).as_py() or 0 for t in stored)
    counts = content.counts()
    if left or counts.get(("email", "masked")) != written or counts.get(("phone", "masked")) != written:
        raise SystemExit(f"content spans: {left} addresses left, {written} written, counts {counts}")
    return {"spans": count, "batches": len(tables), "normalize_us": normalize_s / count * 1e6,
            "clean_us": clean_s / count * 1e6, "content_us": content_s / count * 1e6, "written": written,
            "load": os.getloadavg()[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("part", choices=("ingest", "cpu"))
    parser.add_argument("--spans", type=int, default=None, help="spans a run (ingest: 300,000; cpu: 100,000)")
    parser.add_argument("--rounds", type=int, default=3, help="ingest: runs without and with the policy each")
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=2, help="ingest: sending threads")
    parser.add_argument("--share", type=float, default=0.05, help="cpu: share of the LLM calls given content to mask")
    parser.add_argument("--policy", type=Path, default=EXAMPLE)
    args = parser.parse_args()
    if args.part == "ingest":
        r = run_ingest(args.spans or 300_000, args.rounds, args.batch, args.clients, args.policy)
        none, policy = (sorted(r["runs"][k]) for k in ("none", "policy"))
        print(f"{args.spans or 300_000:,} spans a run, {args.rounds} runs each, alternating; load average "
              f"{r['load_min']:.1f}-{r['load_max']:.1f}")
        print("no policy:      " + ", ".join(f"{v:,.0f}" for v in none) + " spans/s queryable")
        print("example policy: " + ", ".join(f"{v:,.0f}" for v in policy) + " spans/s queryable")
        print(f"median with the policy: {policy[len(policy) // 2] / none[len(none) // 2]:.0%} of without")
        cpu_none, cpu_policy = (sorted(r["cpu_us"][k]) for k in ("none", "policy"))
        print("collector CPU a span while sending, no policy:      " + ", ".join(f"{v:.1f}" for v in cpu_none) + " µs")
        print("collector CPU a span while sending, example policy: " + ", ".join(f"{v:.1f}" for v in cpu_policy)
              + f" µs (median {cpu_policy[len(cpu_policy) // 2] / cpu_none[len(cpu_none) // 2]:.0%} of without)")
        return
    r = run(args.spans or 100_000, args.batch, args.share, args.policy)
    print(f"{r['spans']:,} spans in {r['batches']} batches of ~{args.batch}; load average {r['load']:.1f}")
    print(f"normalize (decode, rows, Arrow): {r['normalize_us']:.2f} µs CPU a span")
    print(f"redact, nothing to mask:         {r['clean_us']:.2f} µs CPU a span "
          f"({r['clean_us'] / r['normalize_us']:.0%} of normalize)")
    print(f"redact, {r['written']:,} spans with content: {r['content_us']:.2f} µs CPU a span "
          f"({r['content_us'] / r['normalize_us']:.0%} of normalize)")


if __name__ == "__main__":
    main()
