"""What the span writer and the window thread cost per span, without HTTP (issue 7, target 2).

Builds 1000-span batches the way bench/loadgen.py sends them, normalizes them with the collector's
receive path, then, in one process and one thread:

* default mode: `SpanStore.append` of every batch, with `update_windows()` after every `--window-every`
  batches (10 by default: the window thread's pass at 10k spans/s and 1 s of gathering). Prints the
  wall time per span of each and the process CPU per span (DuckDB's threads included).
* `--insert-only`: only DuckDB's part of a write, an INSERT of each batch through a relation into
  a table of the store's schema, with `--checkpoint-wal-bytes` as DuckDB's checkpoint threshold;
  `--stored-spans` fills the table first (row groups cut by the same automatic checkpoints, as
  the collector's are; `--filled-file` keeps the filled file for the next run, which starts from a
  copy of it), `--row-group-rows` tries smaller row groups with a checkpoint at each full one,
  `--max-vacuum-tasks 0` stops DuckDB's checkpoints from merging row groups. Prints the CPU of the
  INSERTs and of the checkpoints they carried, and the peak anonymous memory of the process.

Correctness: the spans table holds every span written, and (default mode) the windows' input token
sum per target equals the sum of what was written.

usage: python bench/store_write.py [--batches 300] [--batch 1000] [--window-every 10]
                                   [--insert-only] [--checkpoint-wal-bytes 64MiB]
                                   [--stored-spans N [--filled-file PATH]] [--row-group-rows R]
                                   [--db-memory-bytes 512MiB] [--max-vacuum-tasks N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import duckdb
import pyarrow as pa

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import loadgen  # noqa: E402
from ingest import MemorySampler, copy_store, status_kib  # noqa: E402
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


def wal_bytes_of(path: str) -> int:
    return os.path.getsize(path + ".wal") if os.path.exists(path + ".wal") else 0


def insert_only(tables: list[pa.Table], wal_bytes: int, path: str, *, stored_spans: int = 0,
                row_group_rows: int = 0, db_memory: str = "512MiB", filled_file: str = "",
                max_vacuum_tasks: int | None = None) -> None:
    """INSERT every batch through a relation; print CPU per span and the peak anonymous memory.

    ``stored_spans``: fill the table with that many spans (the batches repeated) first.
    ``filled_file``: start from a copy of this file when it exists; otherwise fill as above and
    keep a copy of the filled file there for the next run.
    ``row_group_rows``: attach the file with that row group size and checkpoint each time a row
    group fills (no batch crosses a group's end), instead of at ``wal_bytes`` of WAL.
    ``max_vacuum_tasks``: DuckDB's setting of that name (0: checkpoints merge no row groups)."""
    reuse = bool(filled_file) and os.path.exists(filled_file)
    if reuse:
        copy_store(filled_file, path)
    config = {"checkpoint_threshold": f"{wal_bytes if not row_group_rows else 2**40}B", "threads": 1,
              "memory_limit": db_memory}
    if max_vacuum_tasks is not None:
        config["max_vacuum_tasks"] = max_vacuum_tasks
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
    filled = con.execute(f"SELECT count(*) FROM {SPANS_TABLE}").fetchall()[0][0] if reuse else 0
    if not reuse and stored_spans and row_group_rows:
        while filled < stored_spans:
            for table in tables:
                if filled >= stored_spans:
                    break
                cursor.from_arrow(table).insert_into(SPANS_TABLE)
                filled += table.num_rows
                if filled % 131_072 < table.num_rows:  # the WAL stays small whatever the checkpoint rule
                    cursor.execute("CHECKPOINT")
        cursor.execute("CHECKPOINT")
    elif not reuse and stored_spans:
        # The collector's own layout: row groups cut by the automatic checkpoints, as in the timed
        # part. The fill ends at a statement that checkpointed, so the timed part does not begin
        # with DuckDB merging a short last row group (what a restart's final checkpoint leaves).
        checkpointed = False
        while filled < stored_spans or not checkpointed:
            for table in tables:
                before = wal_bytes_of(path)
                cursor.from_arrow(table).insert_into(SPANS_TABLE)
                filled += table.num_rows
                checkpointed = wal_bytes_of(path) < before
                if filled >= stored_spans and checkpointed:
                    break
    if filled and not reuse and filled_file:
        copy_store(path, filled_file)
    in_group = filled % group
    sampler = MemorySampler(os.getpid()).start()
    checkpoints, checkpoint_cpu, longest = 0, 0.0, 0.0
    statements = []  # CPU of each INSERT, DuckDB's automatic checkpoints included
    cpu, wall = time.process_time(), time.perf_counter()
    for table in tables:
        at = 0
        while at < table.num_rows:
            part = table.slice(at, group - in_group)
            t = time.process_time()
            cursor.from_arrow(part).insert_into(SPANS_TABLE)
            statements.append(time.process_time() - t)
            at += part.num_rows
            in_group += part.num_rows
            if in_group == group:
                in_group, t = 0, time.process_time()
                cursor.execute("CHECKPOINT")
                checkpoints, checkpoint_cpu = checkpoints + 1, checkpoint_cpu + time.process_time() - t
                longest = max(longest, time.process_time() - t)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    sampler.stop()
    spans = sum(t.num_rows for t in tables)
    stored = con.execute(f"SELECT count(*) FROM {SPANS_TABLE}").fetchall()[0][0] - filled
    if not row_group_rows:
        # A commit that crosses the WAL threshold runs the checkpoint: those statements stand out.
        typical = statistics.median(statements)
        carrying = [t for t in statements if t > 10 * typical]
        checkpoints, checkpoint_cpu = len(carrying), sum(t - typical for t in carrying)
        longest = max(carrying, default=typical) - typical
    each = f"{1e3 * checkpoint_cpu / max(1, checkpoints):.0f} ms CPU each, longest {1e3 * longest:,.0f}"
    when = (f"checkpoint at each full {row_group_rows:,}-row group ({checkpoints}, {each})" if row_group_rows
            else f"checkpoint at {wal_bytes / 2**20:g}MiB of WAL ({checkpoints}, {each})")
    print(f"insert only, {filled:,} spans stored before, {when}: {1e6 * cpu / spans:.1f} µs/span CPU"
          f" ({1e6 * (cpu - checkpoint_cpu) / spans:.1f} INSERT, {1e6 * checkpoint_cpu / spans:.1f} checkpoints),"
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
    parser.add_argument("--max-vacuum-tasks", type=int, default=None,
                        help="--insert-only: DuckDB's max_vacuum_tasks (0: no row group merges at checkpoints)")
    parser.add_argument("--filled-file", default="",
                        help="--insert-only: start from a copy of this file if it exists, else fill and keep a copy there")
    args = parser.parse_args()
    wal_bytes = parse_bytes(args.checkpoint_wal_bytes, "--checkpoint-wal-bytes")
    tables = batches(args.batches, args.batch)
    with tempfile.TemporaryDirectory(prefix="meritlens-bench-") as tmp:
        path = os.path.join(tmp, "write.duckdb")
        if args.insert_only:
            insert_only(tables, wal_bytes, path, stored_spans=args.stored_spans,
                        row_group_rows=args.row_group_rows, db_memory=args.db_memory_bytes,
                        filled_file=args.filled_file, max_vacuum_tasks=args.max_vacuum_tasks)
        else:
            store_writes(tables, args.window_every, wal_bytes, path)


if __name__ == "__main__":
    main()
