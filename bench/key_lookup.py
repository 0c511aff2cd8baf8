"""Why the store keeps a key locator: finding stored spans by key with it and with DuckDB alone.

A window pass reads back the stored spans of the traces a batch continues, and an insert checks a
batch's span keys against the stored ones (a retried export). `spans` has no index (DuckDB holds a
B-tree index whole in memory). On the first N spans of bench/spangen.py's stream (bench/_history.py),
this times, for the trace keys of the stream's next request of 10,000 spans (a quarter of the tasks it
touches continue tasks stored in the requests just before it):

* the locator: the commit-time ranges that may hold the keys, read through DuckDB's min/max pruning;
* DuckDB alone: a semi-join of the keys with every stored span (a scan of `trace_id`);
* DuckDB alone over a retry horizon: the same, pruned to the newest 10% of `received_at`;

and the anti-join an insert of those 10,000 new spans needs (every stored span, or the locator's answer).

Correctness (exit 1 otherwise): the three lookups find the same stored spans, as many as the stored
part of the continuing tasks holds; no span of the request is found stored.

usage: python bench/key_lookup.py [--sizes 1000000,10000000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _history import load
from meritlens.collector.store._keyhash import key_hashes, string_hashes
from meritlens.collector.store._rows import ranges_sql
from meritlens.collector.windows import LocalStore
from spangen import SpanStream, rows


def timed(fn, repeats: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), result


def measure(stored: int, repeats: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="meritlens-bench-") as tmp:
        local = LocalStore.open(os.path.join(tmp, "bench.duckdb"))
        try:
            stream = SpanStream(0)
            load(local, stream, stored)
            con = local.store.connection()
            request = stream.next_request(10_000)
            batch = rows(request)
            keys = batch.select(["trace_id"]).group_by("trace_id").aggregate([]).rename_columns(["k"])
            con.register("_keys", keys)
            horizon = con.execute("SELECT quantile_disc(received_at, 0.9) FROM spans").fetchall()[0][0]
            continued = request.tally.total("continued_tasks")

            def by_locator():
                ranges = local.store.ranges(string_hashes(keys.column("k")), gated=False)
                return con.sql(f"SELECT count(*) FROM ({ranges_sql(ranges, 'trace_id')})"
                               " WHERE trace_id IN (SELECT k FROM _keys)").fetchall()[0][0]

            def by_scan():
                return con.sql("SELECT count(*) FROM spans WHERE trace_id IN (SELECT k FROM _keys)").fetchall()[0][0]

            def by_horizon():
                return con.execute("SELECT count(*) FROM spans WHERE received_at >= ? AND trace_id IN"
                                   " (SELECT k FROM _keys)", [horizon]).fetchall()[0][0]

            con.register("_batch", batch)
            hashes = key_hashes(batch)

            def dedup_by_scan():
                return con.sql("SELECT count(*) FROM _batch b WHERE NOT EXISTS (SELECT 1 FROM spans s"
                               " WHERE s.trace_id = b.trace_id AND s.span_id = b.span_id)").fetchall()[0][0]

            def dedup_by_locator():
                return len(local.store.ranges(hashes.column("s").to_numpy()))

            results = {name: timed(fn, repeats) for name, fn in (
                ("locator", by_locator), ("scan", by_scan), ("horizon", by_horizon),
                ("dedup_scan", dedup_by_scan), ("dedup_locator", dedup_by_locator))}
            found = {results[n][1] for n in ("locator", "scan", "horizon")}
            stored_spans = con.sql("SELECT count(*) FROM spans WHERE task_id IN (SELECT task_id FROM _batch)"
                                   ).fetchall()[0][0]
            if len(found) != 1 or results["dedup_scan"][1] != batch.num_rows or results["dedup_locator"][1] != 0 \
                    or not continued or found != {stored_spans}:
                raise SystemExit(f"key lookup bench: WRONG RESULT {results}, {stored_spans} stored spans of the "
                                 f"{continued:.0f} continuing tasks")
            con.close()
        finally:
            local.close()
    return {"stored": stored, "keys": keys.num_rows, "found": stored_spans,
            **{name: t for name, (t, _) in results.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000000,10000000")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    for size in (int(s) for s in args.sizes.split(",")):
        r = measure(size, args.repeats)
        print(f"stored {r['stored']:>11,}: stored spans ({r['found']:,}) of {r['keys']:,} traces: "
              f"locator {r['locator'] * 1e3:7.1f} ms, "
              f"scan {r['scan'] * 1e3:7.1f} ms, newest 10% {r['horizon'] * 1e3:7.1f} ms; "
              f"10,000 new spans checked: scan {r['dedup_scan'] * 1e3:7.1f} ms, "
              f"locator {r['dedup_locator'] * 1e3:5.1f} ms")
    print("correctness: the three lookups found the same spans, the stored spans of the continuing tasks; "
          "no new span was found stored")


if __name__ == "__main__":
    main()
