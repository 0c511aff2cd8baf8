"""Retention: the bytes a span takes in DuckDB and in the archive, and a DuckDB file that stops growing.

1. Bytes per span: ``--size-spans`` of bench/spangen.py's spans sent to a collector that keeps them all;
   its DuckDB file (after the shutdown's checkpoint) over the spans, and the same spans written as the
   archive writes a segment (Parquet, zstd; `SpanArchive.write`) over the spans.
2. Steady load: a collector with ``--retain HORIZON`` (default 5m) receives ``--rate`` spans/s (default
   2,000) for ``--seconds`` (default 1800) from bench/loadgen.py. Every minute: the DuckDB file's size
   (with its WAL), the spans still in DuckDB (`spans_hot`), the archive's bytes, the load average and
   the collector's anonymous memory. Flat: the largest
   size after minute 10 over the size at minute 10. At the end, through /api/sql as a user reads it,
   `spans` (DuckDB and the archive) must hold exactly the acknowledged spans and the windows must count
   exactly their tasks, calls, tokens and cost (the generator's tally: what a collector that kept
   every span counts, bench/_collector.py `check_stored`); exit 1 otherwise.

usage: python bench/retention.py [--rate 2000] [--seconds 1800] [--retain 5m] [--size-spans 300000]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _collector import Collector, Senders, check_stored, resident_mib  # noqa: E402
from meritlens.collector.store._archive import SEGMENT_BATCH_ROWS, SpanArchive  # noqa: E402
from meritlens.collector.store._sqlguard import open_read_only  # noqa: E402

MIB = 1 << 20


def file_bytes(db: str) -> int:
    """The DuckDB file and its write-ahead log."""
    return sum(os.path.getsize(p) for p in (db, db + ".wal") if os.path.exists(p))


def tree_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def bytes_per_span(spans: int) -> dict:
    """DuckDB and archive bytes a span takes, from ``spans`` spans sent as fast as acknowledged."""
    with tempfile.TemporaryDirectory(prefix="meritlens-bench-") as tmp:
        collector = Collector(tmp)
        try:
            sent = Senders(collector.url, spans, batch=1000, clients=2).wait()
        finally:
            collector.stop()
        con = open_read_only(collector.db)
        try:
            stored = con.execute("SELECT count(*) FROM spans").fetchall()[0][0]
            archive = SpanArchive(os.path.join(tmp, "archive"))
            archive.make_dirs()
            archive.write(0, 1, con.sql("SELECT * FROM spans").to_arrow_reader(SEGMENT_BATCH_ROWS))
        finally:
            con.close()
        if stored != sent["spans"]:
            raise SystemExit(f"retention bench: WRONG RESULT: {stored} spans stored of {sent['spans']} sent")
        return {"spans": stored, "duckdb": file_bytes(collector.db) / stored,
                "archive": tree_bytes(os.path.join(tmp, "archive")) / stored}


def steady(rate: float, seconds: float, retain: str) -> dict:
    """The DuckDB file's size every minute under a paced load with retention on."""
    with tempfile.TemporaryDirectory(prefix="meritlens-bench-") as tmp:
        collector = Collector(tmp, serve_args=("--retain", retain))
        archive = collector.db + ".archive"
        minutes = []
        try:
            load = Senders(collector.url, int(rate * seconds), batch=1000, clients=2, rate=rate, deadline=2 * seconds)
            t0 = load.t0
            while load.procs[0].poll() is None:
                time.sleep(1)
                if time.monotonic() - t0 >= 60 * (len(minutes) + 1):
                    hot = collector.scalar("SELECT count(*) FROM spans_hot")
                    minutes.append((file_bytes(collector.db), hot, tree_bytes(archive), os.getloadavg()[0],
                                    resident_mib(collector.proc.pid)[0]))
                    print(f"minute {len(minutes)}: DuckDB {minutes[-1][0] / MIB:.1f} MiB, {hot:,} spans in DuckDB,"
                          f" archive {minutes[-1][2] / MIB:.1f} MiB, load {minutes[-1][3]:.1f}", flush=True)
            sent = load.wait()
            check_stored(collector.sql, sent["tally"], "retention")
            moved = collector.scalar("SELECT spans_moved FROM span_archive")
        finally:
            collector.stop()
    settled = [m[0] for m in minutes[9:]]
    return {"sent": sent["spans"], "achieved": sent["spans"] / (sent["end"] - t0), "minutes": minutes,
            "moved": moved, "flat": max(settled) / settled[0] if settled else float("nan"),
            "refused": len(sent["refusals"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=2000)
    parser.add_argument("--seconds", type=float, default=1800)
    parser.add_argument("--retain", default="5m")
    parser.add_argument("--size-spans", type=int, default=300_000)
    args = parser.parse_args()
    size = bytes_per_span(args.size_spans)
    print(f"{size['spans']:,} spans: {size['duckdb']:.0f} bytes a span in DuckDB, {size['archive']:.0f} in the"
          f" archive (Parquet, zstd)", flush=True)
    r = steady(args.rate, args.seconds, args.retain)
    sizes = ", ".join(f"{m[0] / MIB:.0f}" for m in r["minutes"])
    print(f"{r['sent']:,} spans at {r['achieved']:,.0f} spans/s with --retain {args.retain}; {r['moved']:,} moved to"
          f" the archive; {r['refused']} requests refused (503)\n  DuckDB file per minute, MiB: {sizes}"
          f"\n  largest after minute 10 / minute 10: {r['flat']:.2f}"
          f"\n  collector anonymous memory per minute, MiB: {', '.join(f'{m[4]:.0f}' for m in r['minutes'])}"
          f"\n  load average per minute: {', '.join(f'{m[3]:.1f}' for m in r['minutes'])}")
    print("correctness: spans (DuckDB and the archive) hold exactly the acknowledged spans and the windows count them")


if __name__ == "__main__":
    main()
