"""Throughput: spans per second until every span sent is queryable in `spans` and counted in `windows`.

Starts the real collector (`meritlens serve --db TMP --no-grpc`, default settings unless
``--memory-limit``) on a free loopback port and sends it ``--spans`` spans of bench/spangen.py's agent
tasks (20 targets, 3–10 spans a task, a third of the tasks continuing in a later request) from
bench/loadgen.py in another process: ``--clients`` threads, ``--batch`` spans a request, as fast as
they are acknowledged (a 503 is retried after its Retry-After). The requests are made before the
clock starts. The clock starts when sending starts and stops when, read through /api/sql, `spans`
holds every span AND the windows (scope all) count every task (`end_to_end_latency`'s samples),
every LLM call (`retry_rate`'s) and every tool span (`tool_use_performance`'s).

Reported: spans/s queryable, spans/s acknowledged (the last acknowledgement), 503s, the collector's
CPU while sending. Correctness: per target, `spans` holds exactly the spans sent, and the windows
count exactly its tasks, LLM calls and tool spans, and sum exactly its input and output tokens and
(to 1e-9) its cost (bench/_collector.py `check_stored`); exit 1 otherwise.

usage: python bench/ingest.py [--spans 1000000] [--batch 1000] [--clients 2] [--memory-limit 512MiB]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _collector import WINDOWED_CALLS_SQL, Collector, Senders, check_stored, cpu_seconds

_PROGRESS_SQL = (f"SELECT (SELECT count(*) FROM spans), ({WINDOWED_CALLS_SQL}), (SELECT coalesce(sum(sample_count), 0)"
                 " FROM windows WHERE scope = 'all' AND metric = 'end_to_end_latency')")


def run(spans: int, batch: int = 1000, clients: int = 2, memory_limit: str | None = None, seed: int = 0,
        targets: int = 20, serve_args: tuple[str, ...] = ()) -> dict:
    """One run; ``serve_args``: more options of `meritlens serve` (e.g. a redaction policy)."""
    with tempfile.TemporaryDirectory(prefix="meritlens-bench-") as tmp:
        collector = Collector(tmp, memory_limit, serve_args)
        try:
            senders = Senders(collector.url, spans, batch=batch, clients=clients, seed=seed, targets=targets,
                              pregenerate=True)
            t0, cpu0 = senders.t0, cpu_seconds(collector.proc.pid)
            sent = senders.wait()
            acked_at, cpu_acked = sent["end"], cpu_seconds(collector.proc.pid)
            tally = sent["tally"]
            want = [sent["spans"], int(tally.total("llm_calls") + tally.total("tool_spans")), int(tally.total("tasks"))]
            while (held := [int(v) for v in collector.sql(_PROGRESS_SQL)[0]]) != want:
                if time.monotonic() - acked_at > 300:
                    raise SystemExit(f"ingest bench: WRONG RESULT: (spans, calls and tools, tasks) {held} held"
                                     f" of {want} sent, 300 s after the last acknowledgement")
                time.sleep(0.05)
            done = time.monotonic()
            check_stored(collector.sql, tally, "ingest")
        finally:
            collector.stop()
    return {"sent": sent["spans"], "tasks": want[2], "queryable_s": done - t0, "acked_s": acked_at - t0,
            "spans_per_s": sent["spans"] / (done - t0), "acked_per_s": sent["spans"] / (acked_at - t0),
            "refused": len(sent["refusals"]), "cpu_pct": 100 * (cpu_acked - cpu0) / (acked_at - t0)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--memory-limit", default=None, help="the collector's --memory-limit")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--targets", type=int, default=20)
    args = parser.parse_args()
    r = run(args.spans, args.batch, args.clients, args.memory_limit, args.seed, args.targets)
    print(f"sent {r['sent']:,} spans ({r['tasks']:,} tasks) in requests of ~{args.batch:,} from {args.clients} clients")
    print(f"queryable in spans and windows after {r['queryable_s']:.1f} s: {r['spans_per_s']:,.0f} spans/s "
          f"(acknowledged after {r['acked_s']:.1f} s: {r['acked_per_s']:,.0f} spans/s; {r['refused']} requests "
          f"refused with 503 and retried); collector CPU {r['cpu_pct']:.0f}% of one core while sending")
    print("correctness: per target, spans holds exactly the spans sent and the windows count exactly their "
          "tasks, LLM calls and tool spans, tokens and cost")


if __name__ == "__main__":
    main()
