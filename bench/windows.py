"""Cost of refreshing windows after a batch of new spans, at two stored sizes.

For each stored size N: a fresh DuckDB file, N history spans inserted (Arrow, windows refreshed once),
then a batch of new spans over the same targets is written the way the collector writes it, and
both steps are timed: `SpanStore.append(batch)` (the idempotent insert and its commit — what an
export waits for) and `WindowProcessor.update_windows()` (the window refresh: the touched keys' delta and
the window rows, one commit — what the window thread does). Repeated; the median and the mean of
each are reported. The means include the DuckDB checkpoints that some commits trigger (every ~16 MB
of write-ahead log), which the medians hide. Ratio large/small of each is the figure the issue
bounds (≤ 1.5) for the window refresh.

`--continue-fraction F` makes that fraction of each new batch's spans join stored traces among the
newest 100,000 stored spans (10 s at 10k spans/s), as spans of a trace do when an exporter sends them
in several batches: their traces' stored spans are then read back through the key locator's
commit-time ranges. (Traces picked anywhere in the history would make every range a candidate: the
locator has no per-key precision beyond its blocks.)

Correctness: after the timed writes, `spans` holds exactly N + repeats*batch rows, and every target's
`input_tokens` window (scope all) equals the independently computed sum of what was written.

usage: python bench/windows.py [--sizes 100000,1000000] [--batch 10000] [--repeats 3] [--targets 8]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import numpy as np
import pyarrow as pa

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _history import check_input_tokens_windows, load, span_table  # noqa: E402

from meritlens.collector.windows import LocalStore  # noqa: E402


def join_stored_traces(table: pa.Table, stored: int, fraction: float, rng: np.random.Generator) -> pa.Table:
    """``table`` with ``fraction`` of its spans moved into stored traces among the newest 100k
    (span i's trace is ``'0' * 16 + '%016x' % (i + 1)`` in bench/_history.py)."""
    n = int(table.num_rows * fraction)
    if n == 0:
        return table
    rows = rng.choice(table.num_rows, n, replace=False)
    picked = rng.integers(max(0, stored - 100_000), stored, n)
    traces = table.column("trace_id").to_pylist()
    for row, j in zip(rows, picked):
        traces[row] = "0" * 16 + "%016x" % (j + 1)
    return table.set_column(table.schema.get_field_index("trace_id"), "trace_id", pa.array(traces, pa.string()))


def measure(stored: int, batch: int, repeats: int, targets: int, continue_fraction: float = 0.0) -> dict:
    with tempfile.TemporaryDirectory(prefix="meritlens-bench-") as tmp:
        local = LocalStore.open(os.path.join(tmp, "bench.duckdb"))
        store, processor = local.store, local.windows
        try:
            t0 = time.perf_counter()
            load(local, stored, targets)
            load_s = time.perf_counter() - t0
            rng = np.random.default_rng(stored)
            batches = [join_stored_traces(span_table(stored + r * batch, batch, targets), stored, continue_fraction, rng)
                       for r in range(repeats)]
            times, appends, refreshes = [], [], []
            lookups_before = dict(processor.delta.stats)
            for table in batches:
                t = time.perf_counter()
                result = store.append(table)
                t1 = time.perf_counter()
                processor.update_windows()
                t2 = time.perf_counter()
                appends.append(t1 - t)
                refreshes.append(t2 - t1)
                times.append(t2 - t)
                assert result.inserted == batch, result
            total = stored + repeats * batch
            rows = store.query("select count(*) from spans").rows[0][0]
            if rows != total:
                raise SystemExit(f"windows bench: spans holds {rows} rows, expected {total}")
            check_input_tokens_windows(store, total, targets, "windows")
        finally:
            local.close()
        return {"stored": stored, "load_s": load_s, "times": times, "median_s": statistics.median(times),
                "mean_s": statistics.mean(times), "append_times": appends, "refresh_times": refreshes,
                "append_median_s": statistics.median(appends), "append_mean_s": statistics.mean(appends),
                "refresh_median_s": statistics.median(refreshes), "refresh_mean_s": statistics.mean(refreshes),
                "keys_looked_up": processor.delta.stats["closure_keys"] - lookups_before["closure_keys"],
                "ranges_read": processor.delta.stats["closure_ranges"] - lookups_before["closure_ranges"]}


def run(sizes: list[int], batch: int, repeats: int, targets: int, continue_fraction: float = 0.0) -> list[dict]:
    results = [measure(n, batch, repeats, targets, continue_fraction) for n in sizes]
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100000,1000000")
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--targets", type=int, default=8)
    parser.add_argument("--continue-fraction", type=float, default=0.0,
                        help="fraction of each new batch's spans that join stored traces")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    results = run(sizes, args.batch, args.repeats, args.targets, args.continue_fraction)
    def runs(times):
        return ", ".join(f"{t * 1000:.0f}" for t in times)

    for r in results:
        print(f"stored {r['stored']:>10,} (history load {r['load_s']:.1f}s), batch {args.batch:,}; "
              f"stored keys the key filter could not rule out, looked up: {r['keys_looked_up']:,} "
              f"in {args.repeats} batches ({args.continue_fraction:.0%} of spans joining stored traces); "
              f"commit-time ranges read: {r['ranges_read']:,}")
        for name, key in (("append (spans)", "append"), ("update_windows", "refresh"), ("both", "")):
            med, mean = (r[f"{key}_median_s"], r[f"{key}_mean_s"]) if key else (r["median_s"], r["mean_s"])
            times = r[f"{key}_times"] if key else r["times"]
            print(f"  {name:15} median {med * 1000:8.1f} ms, mean {mean * 1000:8.1f} ms (runs: {runs(times)} ms)")
    small, large = results[0], results[-1]
    for name, key in (("window refresh", "refresh_"), ("append", "append_"), ("both", "")):
        print(f"ratio {large['stored']:,} / {small['stored']:,} stored, {name}: median "
              f"{large[key + 'median_s'] / small[key + 'median_s']:.2f}, mean "
              f"{large[key + 'mean_s'] / small[key + 'mean_s']:.2f}")
    print("(target ≤ 1.5 for the window refresh); correctness checks passed")


if __name__ == "__main__":
    main()
