"""Memory of the span store as it fills (issue 7, target 5: memory bounded by configuration).

Appends N spans with random trace and span ids (as real OTLP ids are) in 10k-span batches through
`SpanStore.append` on a temporary DuckDB file with `db_memory_bytes` as the collector passes it,
and prints, every `--every` spans: the process's RSS, DuckDB's own memory by tag, and the median
append time of the last stretch. `--btree` runs the same load into the table as earlier versions
made it (primary key on (trace_id, span_id), indexes on trace_id and task_id, INSERT OR IGNORE),
straight through DuckDB, for comparison.

Check: the row count equals the spans sent, and re-sending three earlier batches (first, middle,
last) inserts nothing.

usage: python bench/store_memory.py --spans 3000000 --db-memory 128MiB [--btree]
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
from _history import span_table  # noqa: E402

from meritlens.analytics._schema import SPAN_COLUMN_NAMES, SPAN_COLUMNS, SPANS_TABLE, create_table_sql  # noqa: E402
from meritlens.collector._settings import parse_bytes  # noqa: E402
from meritlens.collector._store import SpanStore  # noqa: E402

BATCH = 10_000


def batch(i: int, rng: np.random.Generator) -> pa.Table:
    t = span_table(i * BATCH, BATCH, 8)
    ids = rng.bytes(24 * BATCH)
    trace = [ids[k * 24:k * 24 + 16].hex() for k in range(BATCH)]
    span = [ids[k * 24 + 16:k * 24 + 24].hex() for k in range(BATCH)]
    t = t.set_column(t.schema.get_field_index("trace_id"), "trace_id", pa.array(trace))
    return t.set_column(t.schema.get_field_index("span_id"), "span_id", pa.array(span))


def rss_mib() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) // 1024 for line in f if line.startswith("VmRSS"))


class BTreeTable:
    """The earlier versions' table: primary key and two indexes, INSERT OR IGNORE."""

    def __init__(self, path: str, memory: int):
        import duckdb
        self.con = duckdb.connect(path, config={"memory_limit": f"{memory // 2**20}MiB"})
        self.con.execute(create_table_sql(SPANS_TABLE, SPAN_COLUMNS, ("trace_id", "span_id")))
        self.con.execute("CREATE INDEX spans_trace_id ON spans (trace_id)")
        self.con.execute("CREATE INDEX spans_task_id ON spans (task_id)")
        self.us = 1_780_000_000_000_000

    def append(self, table: pa.Table) -> int:
        self.us += 1
        received = pa.array(np.full(table.num_rows, self.us, dtype=np.int64)).cast(pa.timestamp("us", tz="UTC"))
        self.con.register("_in", table.append_column("received_at", received).select(list(SPAN_COLUMN_NAMES)))
        try:
            return self.con.execute("INSERT OR IGNORE INTO spans SELECT * FROM _in").fetchall()[0][0]
        finally:
            self.con.unregister("_in")

    def sql(self, query: str) -> list:
        return self.con.execute(query).fetchall()

    def close(self) -> None:
        self.con.close()


class Store:
    def __init__(self, path: str, memory: int):
        self.store = SpanStore(path, db_memory_bytes=memory)
        self.store.start()

    def append(self, table: pa.Table) -> int:
        return self.store.write(table, refresh_windows=False).inserted

    def sql(self, query: str) -> list:
        return self.store._con.execute(query).fetchall()

    def close(self) -> None:
        self.store.shutdown()


def run(spans: int, memory: int, every: int, btree: bool = False, *, echo=print) -> dict:
    """Fill a store with ``spans`` spans; returns the figures and whether the check passed."""
    batches = spans // BATCH
    with tempfile.TemporaryDirectory(prefix="meritlens-mem-") as tmp:
        path = os.path.join(tmp, "s.duckdb")
        target = BTreeTable(path, memory) if btree else Store(path, memory)
        kind = "B-tree table (earlier versions)" if btree else "SpanStore (no B-tree; key locator)"
        echo(f"{kind}, DuckDB memory limit {memory // 2**20}MiB, {batches} batches of {BATCH:,} spans")
        rng = np.random.default_rng(7)
        kept = {}
        times: list[float] = []
        medians: list[float] = []
        sent = 0
        failed = None
        try:
            for i in range(batches):
                table = batch(i, rng)
                if i in (0, batches // 2, batches - 1):
                    kept[i] = table
                t0 = time.perf_counter()
                try:
                    target.append(table)
                except Exception as exc:  # noqa: BLE001 - the failure is the finding
                    failed = str(exc).splitlines()[0]
                    echo(f"FAILED after {sent:,} spans: {failed}")
                    break
                times.append(time.perf_counter() - t0)
                sent += table.num_rows
                if sent % every == 0 or i == batches - 1:
                    tags = dict(target.sql("SELECT tag, memory_usage_bytes // 1048576 FROM duckdb_memory()"
                                           " WHERE memory_usage_bytes >= 1048576"))
                    medians.append(statistics.median(times))
                    echo(f"{sent:>10,} spans: RSS {rss_mib():5d} MiB; DuckDB {tags} MiB; append(10k) median "
                         f"{1e3 * medians[-1]:.0f} ms, max {1e3 * max(times):.0f} ms")
                    times = []
            again = None if failed else sum(target.append(t) for t in kept.values())
            rows = None if failed else target.sql("SELECT count(*) FROM spans")[0][0]
        finally:
            try:
                target.close()
            except Exception:  # noqa: BLE001 - a failed DuckDB may refuse to close cleanly
                pass
    ok = failed is None and rows == sent and again == 0
    if failed is None:
        echo(f"check: {rows:,} rows for {sent:,} sent; re-sent batches inserted {again}: {'OK' if ok else 'WRONG'}")
    return {"sent": sent, "failed": failed, "ok": ok, "first_median_ms": 1e3 * medians[0] if medians else None,
            "last_median_ms": 1e3 * medians[-1] if medians else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=3_000_000)
    parser.add_argument("--db-memory", default="128MiB")
    parser.add_argument("--every", type=int, default=500_000)
    parser.add_argument("--btree", action="store_true")
    args = parser.parse_args()
    result = run(args.spans, parse_bytes(args.db_memory), args.every, args.btree,
                 echo=lambda line: print(line, flush=True))
    if args.btree:  # the earlier design is expected to fail; its figures are the finding
        return
    if not result["ok"]:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
