"""DuckDB's working memory for the window pass's sample statement, and for rewrites of it (issue 7).

`sample_rows_sql` (analytics/_windows.py) is what a window pass runs over its new spans. This
registers N of bench/loadgen.py's spans (normalized as the receiver does), runs the statement and
variants of it on one DuckDB thread, and prints the median, over three runs, of how far DuckDB's
jemalloc `stats.allocated` rose above its level before the statement (sampled every 2 ms) and of its
wall time (DuckDB plans a `PREPARE`d statement again at each `EXECUTE`: ~10 ms of it at any size):

* as shipped;
* `count(DISTINCT trace_id)` for the task's trace count instead of `len(list_distinct(list(trace_id)))`;
* the same, and `sum`/`avg` instead of the sorted-list sum and mean (differs in the last bits of a
  float sum: measured only, no check);
* the CTEs `NOT MATERIALIZED`;
* only the `tasks` aggregate (`SELECT * FROM tasks`): measured only.

Correctness: each rewrite that must give the same rows (the first, second and fourth) returns the
shipped statement's rows exactly; and the shipped statement gives one task sample and one call sample
per span (every loadgen span is an LLM call in a trace of its own).

usage: python bench/window_statement_memory.py [--spans 1000 16000]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import duckdb
import pyarrow as pa

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from checkpoint_memory import MIB, AllocatedPeak  # noqa: E402
from window_pass import loadgen_tables  # noqa: E402

from meritlens.analytics._windows import sample_rows_sql  # noqa: E402
from meritlens.collector._store import _WINDOW_INPUT, stamp_received_at  # noqa: E402

SOURCE = "_after"


def variants() -> dict[str, tuple[str, bool]]:
    """name -> (SQL, whether it must return the shipped statement's rows)."""
    shipped = sample_rows_sql(SOURCE)
    distinct = shipped.replace("len(list_distinct(list(trace_id)))", "count(DISTINCT trace_id)")
    no_lists = distinct.replace(
        "list_sum(list_sort(list(cost_usd) FILTER (WHERE is_call)))", "sum(cost_usd) FILTER (WHERE is_call)"
    ).replace("list_avg(list_sort(list(quality_score) FILTER (WHERE quality_score BETWEEN 0 AND 1)))",
              "avg(quality_score) FILTER (WHERE quality_score BETWEEN 0 AND 1)")
    inline = shipped
    for cte in ("app", "keyed", "scoped"):
        inline = inline.replace(f"{cte} AS (", f"{cte} AS NOT MATERIALIZED (", 1)
    tasks_only = shipped.split("SELECT target_id, scope, epoch_us")[0] + "SELECT * FROM tasks"
    for name, sql in (("count distinct", distinct), ("no list aggregates", no_lists), ("not materialized", inline)):
        if sql == shipped:
            raise SystemExit(f"window statement bench: the {name} rewrite no longer applies to sample_rows_sql")
    return {"as shipped": (shipped, True), "count distinct": (distinct, True),
            "no list aggregates": (no_lists, False), "not materialized": (inline, True),
            "tasks aggregate only": (tasks_only, False)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, nargs="+", default=[1000, 16000])
    args = parser.parse_args()
    if min(args.spans) < 1:
        parser.error("--spans must be at least 1")
    spans = stamp_received_at(pa.concat_tables(loadgen_tables(max(args.spans))), 1).select(_WINDOW_INPUT)
    con = duckdb.connect(config={"threads": 1})
    peaks = AllocatedPeak()
    shipped_rows: dict[int, list] = {}
    try:
        for name, (sql, same_rows) in variants().items():
            con.register(SOURCE, spans.slice(0, 1))
            con.execute(f"PREPARE q AS {sql}")
            cells = []
            for n in args.spans:
                con.register(SOURCE, spans.slice(0, n))
                rises, seconds = [], []
                for _ in range(3):
                    before = peaks.allocated()
                    time.sleep(0.005)
                    peaks.take()
                    started = time.perf_counter()
                    result = con.sql("EXECUTE q").to_arrow_table()
                    seconds.append(time.perf_counter() - started)
                    time.sleep(0.005)
                    rises.append((peaks.take() - before) / MIB)
                cells.append(f"{n:,} spans +{sorted(rises)[1]:.1f} MiB {1000 * sorted(seconds)[1]:.0f} ms")
                rows = sorted(result.to_pylist(), key=repr)
                if name == "as shipped":
                    shipped_rows[n] = rows
                    if len(rows) != 2 * n:
                        raise SystemExit(f"window statement bench: WRONG RESULT: {len(rows)} samples for {n} spans")
                elif same_rows and rows != shipped_rows[n]:
                    raise SystemExit(f"window statement bench: WRONG RESULT: {name} differs from the shipped statement")
            con.execute("DEALLOCATE q")
            print(f"{name:22s} " + "; ".join(cells), flush=True)
    finally:
        peaks.stop()
    print("correctness checks passed")


if __name__ == "__main__":
    main()
