"""The span lake against the single node: window computation by Spark vs DuckDB on the same spans,
and the ingest of three collectors writing one lake.

compute: N synthetic spans (bench/_history.py) written as lake segments of --segment-rows each and
into an in-memory DuckDB `spans` table; the windows are computed by the single node's engine
(`DuckDBEngine` + `compute_windows`) and by the Spark job (`compute_lake_windows` on --master, the
driver's start timed apart). Correctness: the two sets of window rows are equal (every column but
computed_at).

ingest: three `meritlens serve --lake` processes on loopback; bench/loadgen.py's bodies are sent to
them round-robin by --concurrency clients each. Reported: acknowledged spans/s (sending only), and
queryable spans/s (until `spans` on the lake counts them all, i.e. every segment is published).
Correctness: the lake holds exactly the spans sent.

usage: python bench/lake.py [compute|ingest|both] [--spans 200000] [--segment-rows 16384]
                            [--master local[*]] [--ingest-spans 300000 --batch 1000 --concurrency 2]
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import duckdb  # noqa: E402

from _history import span_table  # noqa: E402
from loadgen import build_bodies, run as send  # noqa: E402

from meritlens.analytics._schema import SPANS_DDL  # noqa: E402
from meritlens.collector.lake import Lake, LakeReader, SegmentWriter  # noqa: E402
from meritlens.collector.lake._job import compute_lake_windows, spark_session  # noqa: E402
from meritlens.collector.windows import DuckDBEngine, compute_windows  # noqa: E402

BIN = os.path.dirname(sys.executable)
_KEY = ("target_id", "scope", "metric")


def _rows(windows) -> list[tuple]:
    return sorted((w.target_id, w.scope, w.metric, w.aggregation, w.value, w.sample_count, w.state, w.count, w.mean,
                   w.p50, w.p95, w.p99, w.first_span_time, w.last_span_time, w.evidence_digest) for w in windows)


def compute(spans: int, segment_rows: int, master: str, targets: int = 8) -> dict:
    with tempfile.TemporaryDirectory(prefix="meritlens-lake-") as tmp:
        lake = Lake(os.path.join(tmp, "lake"))
        writer = SegmentWriter(lake, "bench", stage_move_rows=segment_rows)
        writer.start()
        for start in range(0, spans, segment_rows):
            writer.stage(span_table(start, min(segment_rows, spans - start), targets))
            writer.move_staged()
        writer.shutdown()
        con = duckdb.connect()
        con.execute(SPANS_DDL)
        with LakeReader(lake).query_arrow("SELECT * FROM spans") as result:
            con.register("_lake", result.reader.read_all())
        con.execute("INSERT INTO spans SELECT * FROM _lake")
        now = _dt.datetime.now(_dt.timezone.utc)
        t0 = time.perf_counter()
        single = compute_windows(DuckDBEngine(con), lake.name, now)
        duck_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        spark = spark_session(master)
        start_s = time.perf_counter() - t0
        try:
            t0 = time.perf_counter()
            result = compute_lake_windows(spark, lake, computed_at=now)
            spark_s = time.perf_counter() - t0
        finally:
            spark.stop()
        on_lake = LakeReader(lake).query("SELECT * FROM windows")
        from meritlens.analytics._windows import Window

        lake_windows = [Window.from_row(r, on_lake.columns) for r in on_lake.rows]
        if _rows(lake_windows) != _rows(single):
            raise SystemExit("the Spark windows differ from the single node's")
        return {"spans": spans, "segments": result.segments, "windows": result.windows, "duckdb_s": duck_s,
                "spark_start_s": start_s, "spark_s": spark_s}


def ingest(total: int, batch: int, concurrency: int, targets: int = 4) -> dict:
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
        bodies = build_bodies(total, batch, targets)
        t0 = time.perf_counter()
        threads = [threading.Thread(target=send, args=(urls[i], bodies[i::3], concurrency)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        acked_s = time.perf_counter() - t0
        while (stored := LakeReader(lake).query("SELECT count(*) FROM spans").rows[0][0]) < total:
            if time.perf_counter() - t0 > acked_s + 60:
                raise SystemExit(f"only {stored} of {total} spans became queryable")
            time.sleep(0.05)
        queryable_s = time.perf_counter() - t0
        if stored != total:
            raise SystemExit(f"the lake holds {stored} spans, {total} were sent")
        return {"spans": total, "acked_per_s": total / acked_s, "queryable_per_s": total / queryable_s}
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(60)
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", nargs="?", choices=["compute", "ingest", "both"], default="both")
    parser.add_argument("--spans", type=int, default=200_000)
    parser.add_argument("--segment-rows", type=int, default=16_384)
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--ingest-spans", type=int, default=300_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=2)
    args = parser.parse_args()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    if args.what in ("compute", "both"):
        r = compute(args.spans, args.segment_rows, args.master)
        print(f"compute {r['spans']:,} spans ({r['segments']} segments, {r['windows']} windows, equal rows): "
              f"DuckDB {r['duckdb_s']:.1f}s; Spark {args.master} {r['spark_s']:.1f}s"
              f" (+ {r['spark_start_s']:.1f}s driver start)")
    if args.what in ("ingest", "both"):
        r = ingest(args.ingest_spans, args.batch, args.concurrency)
        print(f"ingest {r['spans']:,} spans into 3 collectors on one lake: {r['acked_per_s']:,.0f} acknowledged spans/s,"
              f" {r['queryable_per_s']:,.0f} queryable spans/s")


if __name__ == "__main__":
    main()
