"""Query speed on a stored history.

On a fresh DuckDB file holding the first N spans of bench/spangen.py's stream (bench/_history.py;
windows computed), times through `SpanStore.query` (the read path `meritlens sql` and /api/sql use):

* `select * from windows where target_id = '...'` (target ≤ 10 ms; the target's windows of every
  scope: all and its assessments), median over repeats; also the same query as a prepared statement on
  a plain DuckDB cursor (no read-only guard), to show the guard's share;
* a typed column against a JSON attribute of the same spans: `sum(input_tokens)` vs
  `sum((attributes->>'gen_ai.request.max_tokens')::BIGINT)` (an attribute the store does not promote).

Correctness (exit 1 otherwise): the windows query returns every window metric once per scope of the
target, its input_tokens window (scope all) equal to the generator's tally; both sums equal the tally's.

usage: python bench/queries.py [--stored 1000000] [--repeats 20] [--targets 20]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _history import load  # noqa: E402
from spangen import SpanStream  # noqa: E402

from meritlens.analytics.engine import SPAN_WINDOW_METRICS  # noqa: E402
from meritlens.collector.windows import LocalStore  # noqa: E402

TYPED = "select sum(input_tokens) from spans"
JSON = "select sum((attributes->>'gen_ai.request.max_tokens')::BIGINT) from spans"


def timed(store, sql: str, repeats: int) -> tuple[float, list]:
    times, rows = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        rows = store.query(sql).rows
        times.append(time.perf_counter() - t)
    return statistics.median(times), rows


def run(stored: int, repeats: int, targets: int, seed: int = 0) -> dict:
    with tempfile.TemporaryDirectory(prefix="meritlens-bench-") as tmp:
        local = LocalStore.open(os.path.join(tmp, "bench.duckdb"))
        store = local.store
        try:
            tally = load(local, SpanStream(seed, targets=targets), stored)
            target = "bot-1"
            windows_s, rows = timed(store, f"select * from windows where target_id = '{target}'", repeats)
            columns = store.query(f"select * from windows where target_id = '{target}' limit 0").columns
            metric, scope, value = (columns.index(c) for c in ("metric", "scope", "value"))
            scopes = {row[scope] for row in rows}
            by_metric = {row[metric]: row for row in rows if row[scope] == "all"}
            expected = tally.by_target("input_tokens")[target]
            if sorted(row[metric] for row in rows) != sorted(SPAN_WINDOW_METRICS * len(scopes)) or \
                    by_metric["input_tokens"][value] != expected:
                raise SystemExit(f"queries bench: windows of {target} wrong: {len(rows)} rows over {len(scopes)} "
                                 f"scopes, input_tokens {by_metric.get('input_tokens')}; expected {expected}")
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
            want = (tally.total("span_input_tokens"), tally.total("max_tokens"))
            if (typed_rows[0][0], json_rows[0][0]) != want:
                raise SystemExit(f"queries bench: sums {typed_rows} / {json_rows} != {want}")
        finally:
            local.close()
    return {"stored": stored, "windows_ms": windows_s * 1000, "window_rows": len(rows),
            "windows_raw_ms": statistics.median(raw_times) * 1000,
            "typed_ms": typed_s * 1000, "json_ms": json_s * 1000}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stored", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--targets", type=int, default=20)
    args = parser.parse_args()
    r = run(args.stored, args.repeats, args.targets)
    print(f"stored {r['stored']:,}: windows query {r['windows_ms']:.2f} ms ({r['window_rows']} rows; target ≤ 10 ms), "
          f"prepared on a plain cursor {r['windows_raw_ms']:.2f} ms; "
          f"sum(input_tokens) {r['typed_ms']:.1f} ms vs JSON extraction of max_tokens {r['json_ms']:.1f} ms "
          f"({r['json_ms'] / r['typed_ms']:.1f}x); correctness checks passed")


if __name__ == "__main__":
    main()
