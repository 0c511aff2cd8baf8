"""Run the issue 7 benchmarks at small sizes (a few minutes in all) and print one table.

Each benchmark keeps its own correctness check and exits non-zero on a wrong result. Larger runs:
call bench/normalize.py, bench/ingest.py, bench/windows.py, bench/queries.py and bench/store_memory.py with their options (see
bench/README.md).
usage: python bench/run_all.py
"""

from __future__ import annotations

import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import ingest  # noqa: E402


def main() -> None:
    started = time.perf_counter()
    rows: list[tuple[str, str, str, str]] = []

    burst = ingest.run(60 * 1000, 1000, 4)
    ingest.check(burst)
    rows.append(("ingest burst 60x1000 spans, 4 clients", f"{burst['spans_per_s']:,.0f} spans/s",
                 "≥ 50,000 spans/s", f"CPU {burst['cpu_s']:.1f}s, peak RSS {burst['rss_peak_mib']:.0f} MiB"))

    rate, seconds = 10_000, 15
    sustained = ingest.run(rate * seconds, 1000, 4, rate, 2 * seconds)
    ingest.check(sustained)
    rows.append((f"ingest sustained {rate:,}/s for {seconds}s",
                 f"sent {sustained['sent']:,}/{sustained['planned']:,}, lost {sustained['lost']}, CPU {sustained['cpu_pct']:.0f}%, RSS {sustained['rss_peak_mib']:.0f} MiB",
                 "lost 0, ≤ 30% CPU, ≤ 200 MiB",
                 f"achieved {sustained['spans_per_s']:,.0f} spans/s; RSS peaks: anonymous "
                 f"{sustained['anon_peak_mib']:.0f}, library code {sustained['file_peak_mib']:.0f} MiB"))

    # Imported only now: the collectors above run first in a process that has not loaded DuckDB or
    # Arrow, because the kernel leaves resident the start-up pages a collector releases if another
    # process (this one) also maps them, which a collector running alone would not keep.
    import normalize
    import queries
    import store_memory
    import windows

    walk = normalize.run(10_000, 1000, 3, 1000)["results"]["loadgen"]
    rows.insert(0, ("receive path bytes -> Arrow, no store, 1 thread",
                    f"{statistics.median(walk['production']):,.0f} spans/s", "(per-span CPU of ingest)",
                    f"obvious walk {statistics.median(walk['obvious']):,.0f} spans/s"))

    small, large = windows.run([20_000, 200_000], 10_000, 5, 8)
    rows.append(("window refresh after 10k new spans, 20k vs 200k stored",
                 f"ratio median {large['refresh_median_s'] / small['refresh_median_s']:.2f}, "
                 f"mean {large['refresh_mean_s'] / small['refresh_mean_s']:.2f}",
                 "≤ 1.5 (1M vs 10M)",
                 f"median {small['refresh_median_s'] * 1000:.0f} vs {large['refresh_median_s'] * 1000:.0f} ms"))
    rows.append(("span append of 10k (insert + commit), 20k vs 200k stored",
                 f"ratio median {large['append_median_s'] / small['append_median_s']:.2f}, "
                 f"mean {large['append_mean_s'] / small['append_mean_s']:.2f}",
                 "—",
                 f"median {small['append_median_s'] * 1000:.0f} vs {large['append_median_s'] * 1000:.0f} ms"))

    new = store_memory.run(700_000, 128 * 2**20, 350_000, echo=lambda line: None)
    if not new["ok"]:
        raise SystemExit(f"store memory bench: WRONG RESULT or failure: {new}")
    old = store_memory.run(700_000, 128 * 2**20, 350_000, btree=True, echo=lambda line: None)
    rows.append(("store filled to 700k random-id spans, DuckDB limit 128MiB",
                 f"stored all; append(10k) median {new['first_median_ms']:.0f} -> {new['last_median_ms']:.0f} ms",
                 "memory bounded by configuration",
                 "earlier B-tree table: " + (f"failed after {old['sent']:,} spans" if old["failed"]
                                              else f"stored all, {old['last_median_ms']:.0f} ms")))

    q = queries.run(200_000, 20, 8)
    rows.append(("windows query, 200k stored", f"{q['windows_ms']:.2f} ms", "≤ 10 ms",
                 f"prepared, no guard: {q['windows_raw_ms']:.2f} ms"))
    rows.append(("typed sum vs JSON extraction, 200k stored", f"{q['typed_ms']:.1f} vs {q['json_ms']:.1f} ms",
                 "typed faster", f"{q['json_ms'] / q['typed_ms']:.1f}x"))

    headers = ("benchmark", "measured", "issue 7 target", "detail")
    widths = [max(len(str(r[i])) for r in rows + [headers]) for i in range(4)]
    line = lambda r: "| " + " | ".join(str(v).ljust(w) for v, w in zip(r, widths)) + " |"  # noqa: E731
    print(line(headers))
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in rows:
        print(line(r))
    print(f"all correctness checks passed; {time.perf_counter() - started:.0f}s "
          "(small sizes: see bench/README.md for the full-size figures)")


if __name__ == "__main__":
    main()
