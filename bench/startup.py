"""Cost of the collector's start-up rebuild of every window (`SpanStore.refresh_all_windows`), issue 7.

Two steps, so that each measurement runs in a process of its own:

  python bench/startup.py build DB [--spans 3000000] [--targets 8]
      a DuckDB file with that many history spans (bench/_history.py), stored without windows. One
      span in five belongs to a task that spans three consecutive traces (so the rebuild's label
      propagation has multi-trace components to join).
  python bench/startup.py rebuild DB --db-memory-bytes 128MiB
      opens a copy-free SpanStore on DB with that DuckDB memory limit, times `refresh_all_windows()`
      and prints wall time, the process's peak RSS (VmHWM) and the partitions used; then checks every
      target's `input_tokens` window against the independently computed sum. Exits non-zero on failure.
  python bench/startup.py resume DB --db-memory-bytes 128MiB [--batch 10000] [--discard-state]
      what the collector does at start (`SpanStore.open_windows()`: take the stored windows up when
      their watermark allows, else the rebuild above), timed; then one batch of new spans over every
      target is appended and `update_windows()` timed (after a take-up without saved window state it
      rebuilds each target's state from its spans, as after an eviction); then the same check, and
      the shutdown (which saves the window state) timed. Adds two batches to DB. ``--discard-state``
      deletes the saved state first: a start after a crash with nothing saved (every crash before periodic saves).
  python bench/startup.py crash DB --after-save 300000 [--batch 10000]
      a collector's life that ends in a crash after a periodic save of the window state: the windows
      are opened, the state saved (`_save_window_state`, as the window thread does every 1/8 of the
      stored spans), then that many spans are appended and windowed in batches, one more batch is
      appended but never windowed, and the file is closed without the shutdown. A `resume` after it
      measures the restart: its first window pass replays the spans since the save.
  python bench/startup.py queries DB --db-memory-bytes 256MiB [--db-threads 1]
      times analytical queries over every stored span through `SpanStore.query` (the /api/sql
      path) with that memory limit, median of 3: percentiles and sums by target, a GROUP BY over
      every trace, JSON extraction, a top-1000. Checks the per-trace rollup's count against
      count(DISTINCT trace_id) and the sum by target against the stored total.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import pyarrow as pa  # noqa: E402
import numpy as np  # noqa: E402

from _history import check_input_tokens_windows, span_table  # noqa: E402

from meritlens.analytics._schema import WINDOW_STATE_TABLE  # noqa: E402
from meritlens.collector._settings import DEFAULT_DB_MEMORY_BYTES, parse_bytes  # noqa: E402
from meritlens.collector._store import SpanStore  # noqa: E402

_TASK_TRACES = 3
_TASK_EVERY = 5


def with_tasks(table: pa.Table, start: int) -> pa.Table:
    """Spans i with (i // 3) % 5 == 0 get task id ``task-{i // 3}``: a task over three traces."""
    idx = np.arange(start, start + table.num_rows, dtype=np.int64)
    group = idx // _TASK_TRACES
    ids = np.char.add("task-", group.astype(str)).astype(object)
    ids[group % _TASK_EVERY != 0] = None
    column = table.schema.get_field_index("task_id")
    return table.set_column(column, "task_id", pa.array(ids.tolist(), pa.string()))


def build(path: str, spans: int, targets: int, chunk: int = 200_000) -> None:
    if os.path.exists(path):
        raise SystemExit(f"{path} exists; remove it first")
    store = SpanStore(path)
    store.start()
    try:
        t0 = time.perf_counter()
        for s in range(0, spans, chunk):
            store.write(with_tasks(span_table(s, min(chunk, spans - s), targets), s), refresh_windows=False)
        store._con.execute("CHECKPOINT")
        print(f"stored {spans:,} spans in {time.perf_counter() - t0:.1f}s")
    finally:
        store.shutdown()


def _vm_hwm_mib() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def rebuild(path: str, db_memory_bytes: int, targets: int) -> None:
    store = SpanStore(path, db_memory_bytes=db_memory_bytes)
    store.start()
    try:
        stored = store.query("select count(*) from spans").rows[0][0]
        rss_before = _vm_hwm_mib()
        t0 = time.perf_counter()
        keys = store.refresh_all_windows()
        wall = time.perf_counter() - t0
        state_mib = sum(store._book.nbytes(k) for k in store._book.keys) / 2**20
        check_input_tokens_windows(store, stored, targets, "startup")
        print(f"stored {stored:,} spans, db_memory_bytes {db_memory_bytes // 2**20} MiB: refresh_all_windows "
              f"{wall:.1f}s, {keys} keys, partitions {store.stats.get('rebuild_partitions')}, "
              f"label rounds {store.stats.get('label_rounds')}; peak RSS {_vm_hwm_mib():.0f} MiB "
              f"(before the rebuild {rss_before:.0f} MiB; window state after it {state_mib:.0f} MiB, "
              f"{len(store._evicted)} targets evicted); load average {os.getloadavg()[0]:.2f}; "
              "input_tokens windows correct")
    finally:
        store.shutdown()


def resume(path: str, db_memory_bytes: int, targets: int, batch: int, discard_state: bool) -> None:
    store = SpanStore(path, db_memory_bytes=db_memory_bytes)
    store.start()
    try:
        stored = store.query("select count(*) from spans").rows[0][0]
        if discard_state:
            store._con.execute(f"DELETE FROM {WINDOW_STATE_TABLE}")
        t0 = time.perf_counter()
        keys, resumed = store.open_windows()
        opened = time.perf_counter() - t0
        hwm_open = _vm_hwm_mib()
        store.append(with_tasks(span_table(stored, batch, targets), stored))
        t1 = time.perf_counter()
        store.update_windows()
        first = time.perf_counter() - t1
        store.append(with_tasks(span_table(stored + batch, batch, targets), stored + batch))
        t2 = time.perf_counter()
        store.update_windows()
        second = time.perf_counter() - t2
        check_input_tokens_windows(store, stored + 2 * batch, targets, "startup")
    except BaseException:
        store.shutdown()
        raise
    t3 = time.perf_counter()
    store.shutdown()
    closed = time.perf_counter() - t3
    print(f"stored {stored:,} spans, db_memory_bytes {db_memory_bytes // 2**20} MiB: open_windows {opened:.1f}s "
          f"({'taken up' if resumed else 'recomputed'}, {keys} keys, saved state of "
          f"{store.stats['state_keys_taken_up']} keys taken up; peak RSS {hwm_open:.0f} MiB); "
          f"first batch of {batch:,} over all targets: update_windows {first:.1f}s "
          f"({store.stats['rebuilds']} rebuilds, {store.stats['state_replayed_spans']:,} spans replayed); second batch {second:.2f}s; shutdown {closed:.1f}s "
          f"(state of {store.stats['state_keys_saved']} keys saved); peak RSS {_vm_hwm_mib():.0f} MiB; "
          f"load average {os.getloadavg()[0]:.2f}; input_tokens windows correct")


ANALYTICAL_QUERIES = {
    "percentiles by target": "SELECT target_id, quantile_cont(duration_s, [0.5, 0.95, 0.99]) FROM spans GROUP BY 1",
    "sums by target and model": "SELECT target_id, request_model, sum(input_tokens) AS s, avg(cost_usd) FROM spans GROUP BY ALL",
    "GROUP BY every trace": "SELECT count(*) FROM (SELECT trace_id, sum(input_tokens), max(end_unix_nano) - min(start_unix_nano)"
                            " FROM spans GROUP BY trace_id)",
    "JSON extraction": "SELECT count(*) FROM spans WHERE attributes->>'$.bench_input_tokens' IS NOT NULL",
    "top 1000 by cost": "SELECT trace_id, span_id, cost_usd FROM spans ORDER BY cost_usd DESC LIMIT 1000",
}


def crash(path: str, db_memory_bytes: int, targets: int, batch: int, after_save: int) -> None:
    store = SpanStore(path, db_memory_bytes=db_memory_bytes)
    store.start()
    stored = store.query("select count(*) from spans").rows[0][0]
    t0 = time.perf_counter()
    store.open_windows()
    store.update_windows()
    opened = time.perf_counter() - t0
    t1 = time.perf_counter()
    if not store._save_window_state():
        raise SystemExit("the window state was not saved")
    saved = time.perf_counter() - t1
    written = 0
    while written < after_save:
        store.append(with_tasks(span_table(stored + written, batch, targets), stored + written))
        store.update_windows()
        written += batch
    store.append(with_tasks(span_table(stored + written, batch, targets), stored + written))  # never windowed
    store.close_queue()  # what a killed process leaves: no window pass, no save, no checkpoint
    store._span_cursor.close()
    store._reader.close()
    store._con.close()
    print(f"stored {stored:,} spans: windows opened in {opened:.1f}s, state of {store.stats['state_keys_saved']} keys "
          f"saved in {saved:.1f}s; then {written:,} spans windowed and {batch:,} not, and a crash")


def queries(path: str, db_memory_bytes: int, db_threads: int) -> None:
    store = SpanStore(path, read_only=True, db_memory_bytes=db_memory_bytes, db_threads=db_threads)
    store.start()
    try:
        results, medians = {}, {}
        for name, sql in ANALYTICAL_QUERIES.items():
            times = []
            for _ in range(3):
                t = time.perf_counter()
                results[name] = store.query(sql).rows
                times.append(time.perf_counter() - t)
            medians[name] = statistics.median(times)
        traces = store.query("SELECT count(DISTINCT trace_id), sum(input_tokens) FROM spans").rows[0]
        by_target = sum(row[2] for row in results["sums by target and model"])
        if results["GROUP BY every trace"][0][0] != traces[0] or by_target != traces[1]:
            raise SystemExit(f"queries: per-trace rows {results['GROUP BY every trace']} / sum {by_target}"
                             f" against {traces}")
        print(f"db_memory_bytes {db_memory_bytes // 2**20} MiB, {db_threads} DuckDB thread(s): "
              + "; ".join(f"{name} {1e3 * m:.0f} ms" for name, m in medians.items())
              + f"; peak RSS {_vm_hwm_mib():.0f} MiB; results checked")
    finally:
        store.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=("build", "rebuild", "resume", "crash", "queries"))
    parser.add_argument("db")
    parser.add_argument("--spans", type=int, default=3_000_000)
    parser.add_argument("--targets", type=int, default=8)
    parser.add_argument("--db-memory-bytes", default=f"{DEFAULT_DB_MEMORY_BYTES >> 20}MiB", help="default: the collector's")
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--db-threads", type=int, default=1, help="queries: DuckDB's threads (serve's default: 1)")
    parser.add_argument("--after-save", type=int, default=300_000, help="crash: spans windowed after the save")
    parser.add_argument("--discard-state", action="store_true",
                        help="resume: delete the saved window state first (a crash before any save)")
    args = parser.parse_args()
    if args.step == "build":
        build(args.db, args.spans, args.targets)
    elif args.step == "queries":
        queries(args.db, parse_bytes(args.db_memory_bytes), args.db_threads)
    elif args.step == "rebuild":
        rebuild(args.db, parse_bytes(args.db_memory_bytes), args.targets)
    elif args.step == "crash":
        crash(args.db, parse_bytes(args.db_memory_bytes), args.targets, args.batch, args.after_save)
    else:
        resume(args.db, parse_bytes(args.db_memory_bytes), args.targets, args.batch, args.discard_state)


if __name__ == "__main__":
    main()
