"""What the span writer and the window thread cost per span, without HTTP (issue 7, target 2).

Builds 1000-span batches the way bench/loadgen.py sends them, normalizes them with the collector's
receive path, then, in one process and one thread:

* default mode: `SpanStore.append` of every batch, with `update_windows()` after every `--window-every`
  batches (10 by default: the window thread's pass at 10k spans/s and 1 s of gathering). Prints the
  wall time per span of each and the process CPU per span (DuckDB's threads included).
* `--insert-only`: only DuckDB's part of a write, an INSERT of each batch through a relation into
  a table of the store's schema, with `--checkpoint-wal-bytes` as DuckDB's checkpoint threshold;
  `--stored-spans` fills the table first, `--row-group-rows` tries smaller row groups with a
  checkpoint at each full one. Prints the peak anonymous memory of the process too.

Correctness: the spans table holds every span written, and (default mode) the windows' input token
sum per target equals the sum of what was written.

usage: python bench/store_write.py [--batches 300] [--batch 1000] [--window-every 10]
                                   [--insert-only] [--checkpoint-wal-bytes 64MiB]
                                   [--stored-spans N] [--row-group-rows R] [--db-memory-bytes 512MiB]
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
from ingest import MemorySampler, status_kib  # noqa: E402
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


def insert_only(tables: list[pa.Table], wal_bytes: int, path: str, *, stored_spans: int = 0,
                row_group_rows: int = 0, db_memory: str = "512MiB") -> None:
    """INSERT every batch through a relation; print CPU per span and the peak anonymous memory.

    ``stored_spans``: fill the table with that many spans (the batches repeated) first.
    ``row_group_rows``: attach the file with that row group size and checkpoint each time a row
    group fills (no batch crosses a group's end), instead of at ``wal_bytes`` of WAL."""
    config = {"checkpoint_threshold": f"{wal_bytes if not row_group_rows else 2**40}B", "threads": 1,
              "memory_limit": db_memory}
    con = duckdb.connect(":memory:", config=config)
    options = f" (ROW_GROUP_SIZE {row_group_rows})" if row_group_rows else ""
    con.execute(f"ATTACH '{path}' AS store{options}")
    con.execute("USE store")
    for statement in STORE_DDL:
        con.execute(statement)
    tables = [stamp_received_at(t, 1_700_000_000_000_000 + i) for i, t in enumerate(tables)]
    cursor = con.cursor()
    cursor.execute("USE store")
    group = row_group_rows or 2**62
    before_fill_kib = status_kib(os.getpid(), "RssAnon")  # the batches, built in this process
    filled = 0
    while filled < stored_spans:
        for table in tables:
            if filled >= stored_spans:
                break
            cursor.from_arrow(table).insert_into(SPANS_TABLE)
            filled += table.num_rows
            if filled % 131_072 < table.num_rows:  # the WAL stays small whatever the checkpoint rule
                cursor.execute("CHECKPOINT")
    if filled:
        cursor.execute("CHECKPOINT")
    in_group = filled % group
    sampler = MemorySampler(os.getpid()).start()
    checkpoints, checkpoint_cpu = 0, 0.0
    cpu, wall = time.process_time(), time.perf_counter()
    for table in tables:
        at = 0
        while at < table.num_rows:
            part = table.slice(at, group - in_group)
            cursor.from_arrow(part).insert_into(SPANS_TABLE)
            at += part.num_rows
            in_group += part.num_rows
            if in_group == group:
                in_group, t = 0, time.process_time()
                cursor.execute("CHECKPOINT")
                checkpoints, checkpoint_cpu = checkpoints + 1, checkpoint_cpu + time.process_time() - t
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    sampler.stop()
    spans = sum(t.num_rows for t in tables)
    stored = con.execute(f"SELECT count(*) FROM {SPANS_TABLE}").fetchall()[0][0] - filled
    when = (f"checkpoint at each full {row_group_rows:,}-row group ({checkpoints}, {1e3 * checkpoint_cpu / max(1, checkpoints):.0f} ms"
            " CPU each)" if row_group_rows else f"checkpoint at {wal_bytes / 2**20:g}MiB of WAL")
    print(f"insert only, {filled:,} spans stored before, {when}: {1e6 * cpu / spans:.1f} µs/span CPU,"
          f" {1e6 * wall / spans:.1f} µs/span wall; peak anonymous memory {sampler.anon_kib >> 10} MiB"
          f" ({before_fill_kib >> 10} MiB before the fill: the batches);"
          f" stored {stored:,} of {spans:,}")
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
    parser.add_argument("--stored-spans", type=int, default=0, help="--insert-only: spans stored before the timed inserts")
    parser.add_argument("--row-group-rows", type=int, default=0,
                        help="--insert-only: row group size, with a checkpoint at each full group")
    parser.add_argument("--db-memory-bytes", default="512MiB", help="--insert-only: DuckDB's memory limit")
    args = parser.parse_args()
    wal_bytes = parse_bytes(args.checkpoint_wal_bytes, "--checkpoint-wal-bytes")
    tables = batches(args.batches, args.batch)
    with tempfile.TemporaryDirectory(prefix="meritlens-bench-") as tmp:
        path = os.path.join(tmp, "write.duckdb")
        if args.insert_only:
            insert_only(tables, wal_bytes, path, stored_spans=args.stored_spans,
                        row_group_rows=args.row_group_rows, db_memory=args.db_memory_bytes)
        else:
            store_writes(tables, args.window_every, wal_bytes, path)


if __name__ == "__main__":
    main()
