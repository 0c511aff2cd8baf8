"""Cost of refreshing windows after a batch of new spans, at two stored sizes (issue 7).

For each stored size N: a fresh DuckDB file, N history spans inserted (Arrow, windows refreshed once),
then `SpanStore.write(batch)` of new spans over the same targets is timed (insert + window update of
the touched keys, one commit) — repeated; the median and the mean are reported. The mean includes the
DuckDB checkpoints that some commits trigger (every ~16 MB of write-ahead log), which the median
hides. Ratio large/small of each is the figure the issue bounds (≤ 1.5).

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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _history import expected_input_tokens, load, span_table  # noqa: E402

from meritlens.collector._store import SpanStore  # noqa: E402


def measure(stored: int, batch: int, repeats: int, targets: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="meritlens-bench-") as tmp:
        store = SpanStore(os.path.join(tmp, "bench.duckdb"))
        store.start()
        try:
            t0 = time.perf_counter()
            load(store, stored, targets)
            load_s = time.perf_counter() - t0
            batches = [span_table(stored + r * batch, batch, targets) for r in range(repeats)]
            times = []
            for table in batches:
                t = time.perf_counter()
                result = store.write(table)
                times.append(time.perf_counter() - t)
                assert result.inserted == batch, result
            total = stored + repeats * batch
            rows = store.query("select count(*) from spans").rows[0][0]
            if rows != total:
                raise SystemExit(f"windows bench: spans holds {rows} rows, expected {total}")
            expected = expected_input_tokens(0, total, targets)
            got = dict(store.query(
                "select target_id, value from windows where metric = 'input_tokens' and scope = 'all'").rows)
            if got != {k: float(v) for k, v in expected.items()}:
                raise SystemExit(f"windows bench: input_tokens windows {got} != expected {expected}")
        finally:
            store.shutdown()
        return {"stored": stored, "load_s": load_s, "times": times, "median_s": statistics.median(times),
                "mean_s": statistics.mean(times)}


def run(sizes: list[int], batch: int, repeats: int, targets: int) -> list[dict]:
    results = [measure(n, batch, repeats, targets) for n in sizes]
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100000,1000000")
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--targets", type=int, default=8)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    results = run(sizes, args.batch, args.repeats, args.targets)
    for r in results:
        print(f"stored {r['stored']:>10,}: write({args.batch:,}) median {r['median_s'] * 1000:8.1f} ms, "
              f"mean {r['mean_s'] * 1000:8.1f} ms (runs: {', '.join(f'{t * 1000:.0f}' for t in r['times'])} ms; "
              f"history load {r['load_s']:.1f}s)")
    print(f"ratio {results[-1]['stored']:,} / {results[0]['stored']:,} stored: median "
          f"{results[-1]['median_s'] / results[0]['median_s']:.2f}, mean {results[-1]['mean_s'] / results[0]['mean_s']:.2f}"
          " (target ≤ 1.5); correctness checks passed")


if __name__ == "__main__":
    main()
