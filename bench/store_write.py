"""What the span writer and the window thread cost per span, without HTTP (issue 7, target 2).

Builds 1000-span batches the way bench/loadgen.py sends them, normalizes them with the collector's
receive path, then, in one process and one thread:

* default mode: `SpanStore.append` of every batch, with `update_windows()` after every `--window-every`
  batches (10 by default: the window thread's pass at 10k spans/s and 1 s of gathering). Prints the
  wall time per span of each and the process CPU per span (DuckDB's threads included).
* `--insert-only`: only DuckDB's part of a write, an INSERT of each batch through a relation into
  a table of the store's schema, with `--checkpoint-wal-bytes` as DuckDB's checkpoint threshold.

Correctness: the spans table holds every span written, and (default mode) the windows' input token
sum per target equals the sum of what was written.

usage: python bench/store_write.py [--batches 300] [--batch 1000] [--window-every 10]
                                   [--insert-only] [--checkpoint-wal-bytes 64MiB]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import duckdb
import pyarrow as pa

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import loadgen  # noqa: E402
import normalize as receive  # noqa: E402

from meritlens.analytics._views import STORE_DDL  # noqa: E402
from meritlens.collector._settings import DEFAULT_CHECKPOINT_WAL_BYTES, parse_bytes  # noqa: E402
from meritlens.collector._store import SPANS_TABLE, SpanStore, stamp_received_at  # noqa: E402


def batches(count: int, size: int) -> list[pa.Table]:
    tables = []
    for body in loadgen.build_bodies(count * size, size, 4):
        refused, table = receive.run_production(body)
        assert not refused and table.num_rows == size
        tables.append(table)
    return tables


def insert_only(tables: list[pa.Table], wal_bytes: int, path: str) -> None:
    con = duckdb.connect(path, config={"checkpoint_threshold": f"{wal_bytes}B"})
    for statement in STORE_DDL:
        con.execute(statement)
    tables = [stamp_received_at(t, 1_700_000_000_000_000 + i) for i, t in enumerate(tables)]
    cursor = con.cursor()
    cpu, wall = time.process_time(), time.perf_counter()
    for table in tables:
        cursor.from_arrow(table).insert_into(SPANS_TABLE)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    spans = sum(t.num_rows for t in tables)
    stored = con.execute(f"SELECT count(*) FROM {SPANS_TABLE}").fetchall()[0][0]
    print(f"insert only, checkpoint at {wal_bytes / 2**20:g}MiB of WAL: {1e6 * cpu / spans:.1f} µs/span CPU,"
          f" {1e6 * wall / spans:.1f} µs/span wall; stored {stored:,} of {spans:,}")
    if stored != spans:
        raise SystemExit("FAILED: rows lost")


def store_writes(tables: list[pa.Table], every: int, wal_bytes: int, path: str) -> None:
    store = SpanStore(path, db_memory_bytes=512 * 2**20, checkpoint_wal_bytes=wal_bytes)
    store.start()
    store.open_windows()
    append_s = windows_s = 0.0
    cpu = time.process_time()
    for i, table in enumerate(tables):
        t = time.perf_counter()
        store.append(table, wait=False)
        append_s += time.perf_counter() - t
        if (i + 1) % every == 0:
            t = time.perf_counter()
            store.update_windows()
            windows_s += time.perf_counter() - t
    cpu = time.process_time() - cpu
    store.update_windows()
    spans = sum(t.num_rows for t in tables)
    expected = pa.concat_tables(tables).group_by("target_id").aggregate([("input_tokens", "sum")])
    expected = dict(zip(expected.column("target_id").to_pylist(), expected.column("input_tokens_sum").to_pylist()))
    got = dict(store.query("SELECT target_id, value FROM windows WHERE metric = 'input_tokens'"
                           " AND scope = 'all'").rows)
    stored = store.query(f"SELECT count(*) FROM {SPANS_TABLE}").rows[0][0]
    store.shutdown()
    print(f"append {1e6 * append_s / spans:.1f} µs/span wall, update_windows every {every} batches"
          f" {1e6 * windows_s / spans:.1f} µs/span wall, process CPU {1e6 * cpu / spans:.1f} µs/span;"
          f" stored {stored:,} of {spans:,}")
    if stored != spans or any(abs(got.get(k, -1) - v) > 1e-6 * max(1, v) for k, v in expected.items()):
        raise SystemExit(f"FAILED: stored {stored}, windows {got} against {expected}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--window-every", type=int, default=10)
    parser.add_argument("--insert-only", action="store_true")
    parser.add_argument("--checkpoint-wal-bytes", default=str(DEFAULT_CHECKPOINT_WAL_BYTES))
    args = parser.parse_args()
    wal_bytes = parse_bytes(args.checkpoint_wal_bytes, "--checkpoint-wal-bytes")
    tables = batches(args.batches, args.batch)
    with tempfile.TemporaryDirectory(prefix="meritlens-bench-") as tmp:
        path = os.path.join(tmp, "write.duckdb")
        if args.insert_only:
            insert_only(tables, wal_bytes, path)
        else:
            store_writes(tables, args.window_every, wal_bytes, path)


if __name__ == "__main__":
    main()
