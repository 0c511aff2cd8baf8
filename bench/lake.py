"""The span lake against the single node: window computation by Spark vs DuckDB on the same spans,
and the ingest of three collectors writing one lake.

compute: N spans of bench/spangen.py's stream (20 targets, agent tasks; requests of --segment-rows
spans, normalized as the collector normalizes them) written as lake segments, one a request, and
into a DuckDB file; the windows computed by the single node's engine (`DuckDBEngine` +
`compute_windows`, stored in the file's `windows` table) and by the Spark job
(`compute_lake_windows`) on ``--master`` (default `local[2]`) or, with ``--cluster``, on a standalone
cluster of a master and two workers (1 core, 1 GiB each) started on loopback for the run; the
driver's start is timed apart. Correctness: the two sets of window rows are equal (every column but
computed_at), and the file's spans and windows are what was sent (per target: spans; tasks, LLM
calls and tool spans counted; tokens and cost summed; bench/_collector.py `check_stored`).

ingest: three `meritlens serve --lake` processes on loopback, each sent its own stream of a third of
--ingest-spans by --concurrency clients (requests made before the clock starts). Reported:
acknowledged spans/s, and queryable spans/s (until `spans` on the lake counts them all, i.e. every
segment is published). Correctness: per target, the lake holds exactly the spans sent.

usage: python bench/lake.py [compute|ingest|both] [--spans 2000000] [--segment-rows 16384]
                            [--master local[2] | --cluster] [--ingest-spans 300000 --batch 1000 --concurrency 2]
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.dirname(HERE))  # the repository: the tests' Spark cluster

import duckdb  # noqa: E402

from _collector import check_stored  # noqa: E402
from loadgen import send  # noqa: E402
from _tally import Tally  # noqa: E402
from spangen import SpanStream, rows  # noqa: E402

from meritlens.analytics.engine import SPANS_DDL, WINDOWS_DDL, WINDOW_COLUMN_NAMES, Window  # noqa: E402
from meritlens.collector.lake import Lake, LakeReader, SegmentWriter  # noqa: E402
from meritlens.collector.lake._job import compute_lake_windows, spark_session  # noqa: E402
from meritlens.collector.windows import DuckDBEngine, compute_windows  # noqa: E402

BIN = os.path.dirname(sys.executable)
_COMPARED = tuple(c for c in WINDOW_COLUMN_NAMES if c != "computed_at")


def _rows(windows) -> list[tuple]:
    return sorted(tuple(getattr(w, c) for c in _COMPARED) for w in windows)


def compute(spans: int, segment_rows: int, master: str | None, targets: int = 20, seed: int = 0) -> dict:
    """``master`` None: a standalone cluster of two workers on loopback."""
    with tempfile.TemporaryDirectory(prefix="meritlens-lake-") as tmp:
        cluster = None
        if master is None:
            from tests.collector.lake.spark_cluster import SparkCluster

            cluster = SparkCluster(Path(tmp), workers=2).launch()  # comes up while the spans are written
            master = cluster.master_url
        try:
            lake = Lake(os.path.join(tmp, "lake"))
            writer = SegmentWriter(lake, "bench", stage_move_rows=segment_rows)
            writer.start()
            tally = Tally(targets)
            for request in SpanStream(seed, targets=targets).requests(spans, segment_rows):
                writer.stage(rows(request))
                writer.move_staged()
                tally += request.tally
            writer.shutdown()
            con = duckdb.connect(os.path.join(tmp, "single.duckdb"))
            con.execute(SPANS_DDL)
            with LakeReader(lake).query_arrow("SELECT * FROM spans") as result:
                con.register("_lake", result.reader.read_all())
            con.execute("INSERT INTO spans SELECT * FROM _lake")
            con.unregister("_lake")
            now = _dt.datetime.now(_dt.timezone.utc)
            t0 = time.perf_counter()
            single = compute_windows(DuckDBEngine(con), lake.name, now)
            duck_s = time.perf_counter() - t0
            con.execute(WINDOWS_DDL)
            con.executemany(f"INSERT INTO windows VALUES ({', '.join('?' * len(WINDOW_COLUMN_NAMES))})",
                            [[getattr(w, c) for c in WINDOW_COLUMN_NAMES] for w in single])
            check_stored(lambda sql: con.sql(sql).fetchall(), tally, "lake")
            con.close()
            if cluster is not None:
                cluster.wait_ready()
            t0 = time.perf_counter()
            spark = spark_session(master)
            start_s = time.perf_counter() - t0
            try:
                t0 = time.perf_counter()
                result = compute_lake_windows(spark, lake, computed_at=now)
                spark_s = time.perf_counter() - t0
            finally:
                spark.stop()
        finally:
            if cluster is not None:
                cluster.stop()
        on_lake = LakeReader(lake).query("SELECT * FROM windows")
        lake_windows = [Window.from_row(r, on_lake.columns) for r in on_lake.rows]
        if _rows(lake_windows) != _rows(single):
            raise SystemExit("lake bench: WRONG RESULT: the Spark windows differ from the single node's")
        return {"spans": int(tally.total("spans")), "segments": result.segments, "windows": result.windows,
                "duckdb_s": duck_s, "spark_start_s": start_s, "spark_s": spark_s, "master": master}


def ingest(total: int, batch: int, concurrency: int, targets: int = 20, seed: int = 0) -> dict:
    tmp = tempfile.mkdtemp(prefix="meritlens-lake-ingest-")
    lake = os.path.join(tmp, "lake")
    procs, urls = [], []
    try:
        for i in range(3):
            log = open(os.path.join(tmp, f"c{i}.log"), "wb")
            proc = subprocess.Popen([os.path.join(BIN, "meritlens"), "serve", "--lake", lake, "--collector-id", f"c{i}",
                                     "--http-port", "0", "--no-grpc"], stdout=log, stderr=subprocess.STDOUT)
            procs.append(proc)
        for i in range(3):
            deadline = time.monotonic() + 60
            while True:
                text = open(os.path.join(tmp, f"c{i}.log")).read()
                banner = re.search(r"OTLP/HTTP\s+(http://\S+/v1/traces)", text)  # the start-up banner's line
                if banner:
                    urls.append(banner.group(1))
                    break
                if procs[i].poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"collector c{i} did not start:\n{text}")
                time.sleep(0.1)
        streams = [list(SpanStream(seed, targets=targets, stream=i).requests(total // 3, batch)) for i in range(3)]
        reports: list = [None] * 3

        def one(i: int) -> None:
            reports[i] = send(urls[i], streams[i], concurrency)

        t0 = time.perf_counter()
        threads = [threading.Thread(target=one, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        acked_s = time.perf_counter() - t0
        tally = Tally(targets)
        for r in reports:
            tally += r["tally"]
        sent = int(tally.total("spans"))
        while (stored := LakeReader(lake).query("SELECT count(*) FROM spans").rows[0][0]) < sent:
            if time.perf_counter() - t0 > acked_s + 60:
                raise SystemExit(f"lake bench: WRONG RESULT: only {stored} of {sent} spans became queryable")
            time.sleep(0.05)
        queryable_s = time.perf_counter() - t0
        held = dict(LakeReader(lake).query("SELECT target_id, count(*) FROM spans GROUP BY target_id").rows)
        if held != tally.by_target("spans"):
            raise SystemExit(f"lake bench: WRONG RESULT: spans per target {held} != sent {tally.by_target('spans')}")
        return {"spans": sent, "acked_per_s": sent / acked_s, "queryable_per_s": sent / queryable_s}
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(60)
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", nargs="?", choices=["compute", "ingest", "both"], default="both")
    parser.add_argument("--spans", type=int, default=2_000_000)
    parser.add_argument("--segment-rows", type=int, default=16_384)
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--master", default="local[2]")
    where.add_argument("--cluster", action="store_true", help="a standalone cluster of two workers on loopback")
    parser.add_argument("--ingest-spans", type=int, default=300_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=2)
    args = parser.parse_args()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if args.what in ("compute", "both"):
        r = compute(args.spans, args.segment_rows, None if args.cluster else args.master)
        where = "a standalone cluster of 2 workers" if args.cluster else r["master"]
        print(f"compute {r['spans']:,} spans ({r['segments']} segments, {r['windows']} windows, equal rows): "
              f"DuckDB {r['duckdb_s']:.1f}s; Spark on {where} {r['spark_s']:.1f}s"
              f" (+ {r['spark_start_s']:.1f}s driver start)")
    if args.what in ("ingest", "both"):
        r = ingest(args.ingest_spans, args.batch, args.concurrency)
        print(f"ingest {r['spans']:,} spans into 3 collectors on one lake: {r['acked_per_s']:,.0f} acknowledged"
              " spans/s,"
              f" {r['queryable_per_s']:,.0f} queryable spans/s")
    print("correctness: equal window rows; spans and windows equal what was sent")


if __name__ == "__main__":
    main()
