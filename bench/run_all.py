"""`make bench`: the figures users feel, at sizes that take a few minutes in all, in one table.

Each benchmark keeps its own correctness check and exits non-zero on a wrong result. The full-size
runs (1M spans sent, 10 minutes at 10k spans/s, 1M vs 10M stored) are the commands in bench/README.md.
usage: python bench/run_all.py
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import ingest  # noqa: E402
import queries  # noqa: E402
import windows  # noqa: E402


def main() -> None:
    started = time.perf_counter()
    rows: list[tuple[str, str, str]] = []

    r = ingest.run(300_000, 1000, 2)
    rows.append(("ingest 300k spans, 2 clients, queryable in spans and windows",
                 f"{r['spans_per_s']:,.0f} spans/s", f"acknowledged in {r['acked_s']:.1f} s, queryable in "
                 f"{r['queryable_s']:.1f} s, collector CPU {r['cpu_pct']:.0f}%"))

    rate, seconds = 10_000, 60
    r = ingest.run(rate * seconds, 1000, 2, rate, seconds)
    rows.append((f"sustained {rate:,} spans/s for {seconds} s",
                 f"CPU {r['cpu_pct']:.0f}% of a core",
                 f"anonymous peak {r['anon_first']:.0f} -> {r['anon_second']:.0f} MiB (ratio {r['flat']:.2f}), "
                 f"file-backed {r['file_peak']:.0f} MiB"))

    small, large = windows.run([100_000, 1_000_000], 10_000, 5, 8, continue_fraction=0.3)
    rows.append(("window refresh after 10k new spans (30% join stored traces), 100k vs 1M stored",
                 f"ratio {large['refresh_median_s'] / small['refresh_median_s']:.2f}",
                 f"median {small['refresh_median_s'] * 1000:.0f} vs {large['refresh_median_s'] * 1000:.0f} ms"))

    q = queries.run(200_000, 20, 8)
    rows.append(("reading `windows` of a target, 200k stored", f"{q['windows_ms']:.2f} ms",
                 f"typed sum {q['typed_ms']:.1f} ms vs JSON extraction {q['json_ms']:.1f} ms"))

    headers = ("benchmark", "measured", "detail")
    widths = [max(len(str(row[i])) for row in rows + [headers]) for i in range(3)]
    line = lambda row: "| " + " | ".join(str(v).ljust(w) for v, w in zip(row, widths)) + " |"  # noqa: E731
    print(line(headers))
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in rows:
        print(line(row))
    print(f"all correctness checks passed; {time.perf_counter() - started:.0f}s")


if __name__ == "__main__":
    main()
