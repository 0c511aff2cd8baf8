"""Cost of refreshing windows after a batch of new spans, at two stored sizes.

For each stored size N: a fresh DuckDB file holding the first N spans of bench/spangen.py's stream
(20 targets, agent tasks of 3–10 spans, made as export requests of ``--batch`` spans and normalized as
the collector normalizes them; written in groups of ~200,000, windows computed once, checkpointed).
Then the next ``--repeats`` requests of the same stream are written the way the collector writes
them, each step timed: `SpanStore.append(batch)` (the idempotent insert and its commit: what an export
waits for) and `WindowProcessor.update_windows()` (the window refresh: what the window thread does).
A third of the stream's tasks continue in a later request, so each batch also carries the later spans
of tasks stored in the 1–3 requests before it (the shares of its spans and of the tasks it touches are
printed). The median and the mean of each step are reported; the means include the DuckDB
checkpoints that some commits trigger, which the medians hide. Ratio large/small of the window
refresh is the figure bounded at ≤ 1.5.

Correctness (exit 1 otherwise): after the timed writes, per target, `spans` holds exactly the spans
written and the windows (scope all) count exactly their tasks, LLM calls and tool spans.

usage: python bench/windows.py [--sizes 1000000,10000000] [--batch 10000] [--repeats 9] [--targets 20]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _collector import check_stored
from _history import load
from _tally import Tally
from meritlens.collector.windows import LocalStore
from spangen import SpanStream, rows


def measure(stored: int, batch: int, repeats: int, targets: int, seed: int = 0) -> dict:
    with tempfile.TemporaryDirectory(prefix="meritlens-bench-") as tmp:
        local = LocalStore.open(os.path.join(tmp, "bench.duckdb"))
        store, processor = local.store, local.windows
        try:
            stream = SpanStream(seed, targets=targets)
            t0 = time.perf_counter()
            tally = load(local, stream, stored, batch)
            load_s = time.perf_counter() - t0
            requests = [stream.next_request(batch) for _ in range(repeats)]
            tables = [rows(r) for r in requests]
            appends, refreshes = [], []
            for request, table in zip(requests, tables, strict=True):
                t = time.perf_counter()
                result = store.append(table)
                t1 = time.perf_counter()
                processor.update_windows()
                t2 = time.perf_counter()
                appends.append(t1 - t)
                refreshes.append(t2 - t1)
                tally += request.tally
                if result.inserted != request.spans:
                    raise SystemExit(f"windows bench: {result.inserted} of {request.spans} new spans inserted")
            check_stored(lambda sql: store.query(sql).rows, tally, "windows")
        finally:
            local.close()
    new = Tally(targets)
    for request in requests:
        new += request.tally
    touched = new.total("tasks") + new.total("continued_tasks")
    times = [a + r for a, r in zip(appends, refreshes, strict=True)]
    return {"stored": stored, "load_s": load_s, "times": times, "append_times": appends, "refresh_times": refreshes,
            "median_s": statistics.median(times), "mean_s": statistics.mean(times),
            "append_median_s": statistics.median(appends), "append_mean_s": statistics.mean(appends),
            "refresh_median_s": statistics.median(refreshes), "refresh_mean_s": statistics.mean(refreshes),
            "continued_span_share": new.total("continued_spans") / new.total("spans"),
            "continued_task_share": new.total("continued_tasks") / touched}


def run(sizes: list[int], batch: int, repeats: int, targets: int, seed: int = 0) -> list[dict]:
    return [measure(n, batch, repeats, targets, seed) for n in sizes]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000000,10000000")
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--targets", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    results = run([int(s) for s in args.sizes.split(",")], args.batch, args.repeats, args.targets, args.seed)

    def runs(times):
        return ", ".join(f"{t * 1000:.0f}" for t in times)

    for r in results:
        print(f"stored {r['stored']:>10,} (history load {r['load_s']:.1f}s), batches of {args.batch:,} spans: "
              f"{r['continued_span_share']:.0%} of their spans and {r['continued_task_share']:.0%} of the tasks they "
              f"touch continue stored tasks")
        for name, key in (("append (spans)", "append_"), ("update_windows", "refresh_"), ("both", "")):
            print(f"  {name:15} median {r[key + 'median_s'] * 1000:8.1f} ms, mean {r[key + 'mean_s'] * 1000:8.1f} ms "
                  f"(runs: {runs(r[key + 'times'] if key else r['times'])} ms)")
    small, large = results[0], results[-1]
    for name, key in (("window refresh", "refresh_"), ("append", "append_"), ("both", "")):
        print(f"ratio {large['stored']:,} / {small['stored']:,} stored, {name}: median "
              f"{large[key + 'median_s'] / small[key + 'median_s']:.2f}, mean "
              f"{large[key + 'mean_s'] / small[key + 'mean_s']:.2f}")
    print("(target ≤ 1.5 for the window refresh); correctness: spans and window counts per target equal what was"
          " written")


if __name__ == "__main__":
    main()
