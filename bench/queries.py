"""Query speed on a stored history.

On a fresh DuckDB file holding N spans (bench/_history.py; windows refreshed), times through
`SpanStore.query` (the read path `meritlens sql` and /api/sql use):

* `select * from windows where target_id = '...'` (target ≤ 10 ms), median over repeats; also the same
  query as a prepared statement on a plain DuckDB cursor (no read-only guard), to show the guard's share;
* the typed column against JSON extraction on the same values:
  `sum(input_tokens)` vs `sum((attributes->>'bench_input_tokens')::BIGINT)`.

Correctness: the windows query returns one row per window metric with the target's input_tokens value
equal to the independently computed sum; both sums equal the independently computed total.

usage: python bench/queries.py [--stored 1000000] [--repeats 20] [--targets 8]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _history import expected_input_tokens, load  # noqa: E402

from meritlens.analytics._windows import SPAN_WINDOW_METRICS  # noqa: E402
from meritlens.collector.windows import LocalStore  # noqa: E402

TYPED = "select sum(input_tokens) from spans"
JSON = "select sum((attributes->>'bench_input_tokens')::BIGINT) from spans"


def timed(store, sql: str, repeats: int) -> tuple[float, list]:
    times, rows = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        rows = store.query(sql).rows
        times.append(time.perf_counter() - t)
    return statistics.median(times), rows


def run(stored: int, repeats: int, targets: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="meritlens-bench-") as tmp:
        local = LocalStore.open(os.path.join(tmp, "bench.duckdb"))
        store = local.store
        try:
            load(local, stored, targets)
            expected = expected_input_tokens(0, stored, targets)
            target = "bot-1"
            windows_s, rows = timed(store, f"select * from windows where target_id = '{target}'", repeats)
            columns = store.query(f"select * from windows where target_id = '{target}' limit 0").columns
            by_metric = {row[columns.index("metric")]: row for row in rows}
            if len(rows) != len(SPAN_WINDOW_METRICS) * 1 or \
                    by_metric["input_tokens"][columns.index("value")] != float(expected[target]):
                raise SystemExit(f"queries bench: windows of {target} wrong: {len(rows)} rows, "
                                 f"input_tokens {by_metric.get('input_tokens')}; expected {expected[target]}")
            # The same query as a prepared statement on a plain cursor: the floor without the read-only guard.
            cursor = store.connection()
            raw_times = []
            for _ in range(repeats):
                t = time.perf_counter()
                raw_rows = cursor.execute("select * from windows where target_id = ?", [target]).fetchall()
                raw_times.append(time.perf_counter() - t)
            cursor.close()
            if len(raw_rows) != len(rows):
                raise SystemExit(f"queries bench: prepared windows query returned {len(raw_rows)} rows")
            typed_s, typed_rows = timed(store, TYPED, repeats)
            json_s, json_rows = timed(store, JSON, repeats)
            total = sum(expected.values())
            if typed_rows[0][0] != total or json_rows[0][0] != total:
                raise SystemExit(f"queries bench: sums {typed_rows} / {json_rows} != {total}")
        finally:
            local.close()
    return {"stored": stored, "windows_ms": windows_s * 1000, "window_rows": len(rows),
            "windows_raw_ms": statistics.median(raw_times) * 1000,
            "typed_ms": typed_s * 1000, "json_ms": json_s * 1000}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stored", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--targets", type=int, default=8)
    args = parser.parse_args()
    r = run(args.stored, args.repeats, args.targets)
    print(f"stored {r['stored']:,}: windows query {r['windows_ms']:.2f} ms ({r['window_rows']} rows; target ≤ 10 ms), "
          f"prepared on a plain cursor {r['windows_raw_ms']:.2f} ms; "
          f"sum(input_tokens) {r['typed_ms']:.1f} ms vs JSON extraction {r['json_ms']:.1f} ms "
          f"({r['json_ms'] / r['typed_ms']:.1f}x); correctness checks passed")


if __name__ == "__main__":
    main()
