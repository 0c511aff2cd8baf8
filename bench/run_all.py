"""`make bench`: every benchmark at a small size (a few minutes in all), in one table.

Each keeps its own correctness check and exits non-zero on a wrong result. These sizes show that the
benchmarks run and what they measure; the figures the targets are about come from the full-size
commands in bench/README.md, on a quiet machine.
usage: python bench/run_all.py
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

import ingest
import knee
import lake
import quantiles
import queries
import redaction
import retention
import sustained
import windows


def main() -> None:
    started = time.perf_counter()
    rows: list[tuple[str, str, str]] = []

    r = ingest.run(100_000)
    rows.append(("throughput, 100k spans, 2 clients: queryable in spans and windows",
                 f"{r['spans_per_s']:,.0f} spans/s",
                 f"acknowledged in {r['acked_s']:.1f} s, queryable in {r['queryable_s']:.1f} s, "
                 f"collector CPU {r['cpu_pct']:.0f}%"))

    r = sustained.run(5_000, 45)  # too short for a flat memory after the warm-up: shown, not a result
    failed = [name for name, ok in r["conditions"].items() if not ok]
    rows.append(("sustained 5,000 spans/s for 45 s", f"lag p99 {r['lag_p99_s']:.1f} s, CPU {r['cpu_pct']:.0f}%",
                 f"refused after warm-up {r['refused']}, anonymous peak {r['peak_mib']:.0f} MiB (flatness "
                 f"{r['flat']:.2f}); not met: {', '.join(failed) or 'none'}"))

    steps, held = knee.search(3_000, 12_000, 20, 1.0, unjudged=frozenset({"cpu", "flatness"}))
    rows.append(("knee, 20 s steps between 3,000 and 12,000 spans/s (memory flatness not judged)",
                 f"{held:,.0f} spans/s" if held else "below 3,000 spans/s",
                 "steps: " + ", ".join(f"{s['rate']:,.0f} {'held' if s['held'] else 'not held'}" for s in steps)))

    small, large = windows.run([50_000, 250_000], 10_000, 3, 20)
    rows.append(("window refresh after 10k new spans, 50k vs 250k stored",
                 f"ratio {large['refresh_median_s'] / small['refresh_median_s']:.2f}",
                 f"median {small['refresh_median_s'] * 1000:.0f} vs {large['refresh_median_s'] * 1000:.0f} ms; "
                 f"{large['continued_task_share']:.0%} of the tasks a batch touches continue stored ones"))

    results, _ = quantiles.run(1_000_000, 10_000, 0.01)
    worst = max(results, key=lambda r: max(r["errors"].values()))
    rows.append(("quantile accuracy, 1M samples a set", f"worst relative error {max(worst['errors'].values()):.1e}",
                 f"{len(results)} sets: {', '.join(r['values'] for r in results)}"))

    q = queries.run(100_000, 10, 20)
    rows.append(("reading `windows` of a target, 100k stored", f"{q['windows_ms']:.2f} ms",
                 f"typed sum {q['typed_ms']:.1f} ms vs JSON extraction {q['json_ms']:.1f} ms"))

    r = redaction.run(20_000, 1000, 0.05)
    rows.append(("redaction, example policy, 20k spans in batches of 1,000",
                 f"{r['clean_us'] / r['normalize_us']:.0%} of normalize",
                 f"{r['clean_us']:.2f} µs a span with nothing to mask, {r['content_us']:.2f} µs with content on "
                 f"{r['written']:,} spans; normalize {r['normalize_us']:.1f} µs"))

    c = lake.compute(50_000, 16_384, "local[2]")
    rows.append(("windows of 50k spans: DuckDB vs Spark local[2], rows equal", f"DuckDB {c['duckdb_s']:.1f} s",
                 f"Spark {c['spark_s']:.1f} s (+ {c['spark_start_s']:.1f} s driver start), {c['windows']} windows"))

    size, steady = retention.bytes_per_span(20_000), retention.steady(2_000, 60, "15s")
    rows.append(("retention, 2,000 spans/s for 60 s with --retain 15s (spans and windows checked)",
                 f"{size['duckdb']:.0f} B/span in DuckDB, {size['archive']:.0f} in the archive",
                 f"{steady['moved']:,} spans moved; DuckDB file per minute: "
                 + ", ".join(f"{m[0] / retention.MIB:.0f} MiB" for m in steady["minutes"])))

    headers = ("benchmark", "measured", "detail")
    widths = [max(len(str(row[i])) for row in rows + [headers]) for i in range(3)]

    def line(row) -> str:
        return "| " + " | ".join(str(v).ljust(w) for v, w in zip(row, widths, strict=True)) + " |"

    print(line(headers))
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in rows:
        print(line(row))
    print(f"all correctness checks passed; {time.perf_counter() - started:.0f}s")


if __name__ == "__main__":
    main()
