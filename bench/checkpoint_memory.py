"""DuckDB's memory and CPU as the spans table fills, by checkpoint size and row group size (issue 7).

Inserts N batches of 10,000 span rows (bench/_history.py's, with random trace and span ids), in
INSERTs of ``--insert-rows`` rows (default: one batch each), into the `spans` table of a temporary DuckDB file attached with ``ROW_GROUP_SIZE`` (0: DuckDB's 122,880), on one
thread with the collector's memory limit and the given ``checkpoint_threshold``. Prints the process
CPU per row, the peak of DuckDB's jemalloc ``stats.allocated`` (sampled every 2 ms through the
``duckdb_je_mallctl`` its module exports), the file's size, its row groups and one GROUP BY's time;
``--each`` also prints, after every insert, its time, the peak during it and `duckdb_memory()`.

Check: the table holds every row inserted, and the per-target counts match.

usage: python bench/checkpoint_memory.py [--wal 64MiB] [--row-group-size 0] [--batches 60] [--insert-rows 10000]
                                         [--each]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time

import duckdb
import numpy as np
import pyarrow as pa

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _allocators.duckdb_jemalloc import duckdb_mallctl, read_size, refresh  # noqa: E402
from store_memory import BATCH, batch  # noqa: E402

from meritlens.analytics._schema import SPAN_COLUMN_NAMES, SPAN_COLUMNS, SPANS_TABLE, create_table_sql  # noqa: E402
from meritlens.collector._settings import DEFAULT_DB_MEMORY_BYTES, parse_bytes  # noqa: E402

MIB = 1 << 20


class AllocatedPeak:
    """The highest `stats.allocated` of DuckDB's jemalloc since the last `take`."""

    def __init__(self):
        self._mallctl = duckdb_mallctl()
        if self._mallctl is None:
            raise SystemExit("checkpoint_memory: this DuckDB build exports no duckdb_je_mallctl")
        self.peak, self._stop = 0, threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def allocated(self) -> int:
        refresh(self._mallctl)
        return read_size(self._mallctl, "stats.allocated") or 0

    def _run(self) -> None:
        while not self._stop.wait(0.002):
            self.peak = max(self.peak, self.allocated())

    def take(self) -> int:
        peak, self.peak = self.peak, 0
        return peak

    def stop(self) -> None:
        self._stop.set()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wal", default="64MiB", help="checkpoint_threshold (the collector's default: 64MiB)")
    parser.add_argument("--row-group-size", type=int, default=0, help="rows per row group (0: DuckDB's default)")
    parser.add_argument("--batches", type=int, default=60)
    parser.add_argument("--insert-rows", type=int, default=BATCH,
                        help="rows per INSERT (the collector's moves: whole row groups of 16384)")
    parser.add_argument("--each", action="store_true", help="print every insert")
    args = parser.parse_args()
    if args.batches < 1 or args.row_group_size < 0 or args.insert_rows < 1:
        parser.error("--batches and --insert-rows must be at least 1 and --row-group-size not negative")
    try:
        parse_bytes(args.wal)
    except ValueError as exc:
        parser.error(f"--wal: {exc}")
    rng = np.random.default_rng(7)
    tables = [batch(i, rng) for i in range(args.batches)]
    whole = pa.concat_tables(tables)
    inserts = [whole.slice(offset, args.insert_rows) for offset in range(0, whole.num_rows, args.insert_rows)]
    peaks = AllocatedPeak()
    us = 1_780_000_000_000_000
    with tempfile.TemporaryDirectory(prefix="meritlens-ckpt-") as tmp:
        path = os.path.join(tmp, "s.duckdb")
        con = duckdb.connect(config={"threads": 1, "memory_limit": f"{DEFAULT_DB_MEMORY_BYTES // MIB}MiB",
                                     "checkpoint_threshold": args.wal, "allocator_background_threads": True})
        option = f" (ROW_GROUP_SIZE {args.row_group_size})" if args.row_group_size else ""
        con.execute(f"ATTACH '{path}' AS s{option}")
        con.execute("USE s")
        con.execute(create_table_sql(SPANS_TABLE, SPAN_COLUMNS, None))
        cpu0, highest, slowest = time.process_time(), 0, 0.0
        for i, table in enumerate(inserts):
            us += 1
            received = pa.array(np.full(table.num_rows, us, dtype=np.int64)).cast(pa.timestamp("us", tz="UTC"))
            con.register("_in", table.append_column("received_at", received).select(list(SPAN_COLUMN_NAMES)))
            t0 = time.perf_counter()
            con.execute("INSERT INTO spans SELECT * FROM _in")
            took = time.perf_counter() - t0
            con.unregister("_in")
            time.sleep(0.005)  # the sampler's last look
            peak = peaks.take()
            highest, slowest = max(highest, peak), max(slowest, took)
            if args.each:
                tags = con.execute("SELECT tag, memory_usage_bytes // 1048576 FROM duckdb_memory()"
                                   " WHERE memory_usage_bytes >= 1048576").fetchall()
                print(f"{i:4d} insert {took * 1000:6.1f} ms, allocated peak {peak // MIB:4d} MiB,"
                      f" now {peaks.allocated() // MIB:4d} MiB; {tags}")
        cpu = time.process_time() - cpu0
        peaks.stop()
        con.execute("CHECKPOINT")
        size = os.path.getsize(path)
        used = con.execute("SELECT used_blocks * block_size FROM pragma_database_size()"
                           " WHERE database_name = 's'").fetchall()[0][0]
        t0 = time.perf_counter()
        counts = dict(con.execute(f"SELECT target_id, count(*) FROM {SPANS_TABLE} GROUP BY ALL").fetchall())
        grouped = time.perf_counter() - t0
        groups = con.execute(f"SELECT count(DISTINCT row_group_id) FROM pragma_storage_info('{SPANS_TABLE}')"
                             ).fetchall()[0][0]
        con.close()
    expected: dict[str, int] = {}
    for table in tables:
        for target, n in zip(*np.unique(table.column("target_id").to_numpy(zero_copy_only=False), return_counts=True)):
            expected[target] = expected.get(target, 0) + int(n)
    rows = args.batches * BATCH
    if counts != expected or sum(counts.values()) != rows:
        raise SystemExit(f"checkpoint_memory: WRONG RESULT: stored {sum(counts.values())} of {rows} rows")
    print(f"WAL {args.wal}, row groups of {args.row_group_size or 'DuckDB default'} rows, INSERTs of"
          f" {args.insert_rows:,} rows: {rows:,} rows,"
          f" CPU {cpu / rows * 1e6:.1f} µs/row, slowest insert {slowest * 1000:.0f} ms, DuckDB's allocated peak"
          f" {highest // MIB} MiB, file {size // MIB} MiB ({used / MIB:.1f} MiB in use), {groups} row groups, GROUP BY target"
          f" {grouped * 1000:.0f} ms; correctness checks passed")


if __name__ == "__main__":
    main()
