"""Where one second of the sustained load goes, in one process (issue 7).

The sustained benchmark's spans (bench/loadgen.py) are decoded and normalized as the receiver does
them, then written the way the collector's writer and window threads would handle one second of
10k spans/s: `SpanStore.append` of 10 requests of 1000 spans, then one `update_windows` pass. The
mean of each is printed, as wall time and as this process's CPU time, with the median of how far
DuckDB's jemalloc `stats.allocated` rose above its start during a pass (sampled every 2 ms); `--profile` adds cProfile's top
functions of the window passes (or of the appends, with `--profile appends`). DuckDB runs on one
thread, as in the collector. `--requests-per-pass` changes the spans of a pass (1000 each): a pass's
cost is a fixed part plus a part per span, and two sizes separate them.

Correctness: `spans` holds every span written, and each target's `input_tokens` window equals the
sum loadgen put in its spans.

usage: python bench/window_pass.py [--passes 20] [--requests-per-pass 10] [--profile passes|appends]
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import tempfile
import time

import pyarrow as pa

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from checkpoint_memory import MIB, AllocatedPeak  # noqa: E402
from ingest import TARGETS, expected_tokens  # noqa: E402
from loadgen import build_bodies  # noqa: E402

from meritlens.collector import _otlp  # noqa: E402
from meritlens.collector._ingest import prepare  # noqa: E402
from meritlens.collector._normalize import NormalizeOptions  # noqa: E402
from meritlens.collector._store import SpanStore  # noqa: E402

REQUEST_SPANS = 1000
WARM_UP_REQUESTS = 20


def loadgen_tables(spans: int) -> list[pa.Table]:
    """bench/loadgen.py's requests of 1000 spans, checked and normalized as the receiver does them."""
    limits = _otlp.SpanLimits(128, 65536)
    return [prepare(_otlp.decode_lean(body, _otlp.PROTOBUF), limits, NormalizeOptions())[1]
            for body in build_bodies(spans, REQUEST_SPANS, TARGETS)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=20)
    parser.add_argument("--requests-per-pass", type=int, default=10)
    parser.add_argument("--profile", choices=["passes", "appends"], default=None)
    args = parser.parse_args()
    if args.passes < 1 or args.requests_per_pass < 1:
        parser.error("--passes and --requests-per-pass must be at least 1")
    per_pass = args.requests_per_pass
    total = (WARM_UP_REQUESTS + args.passes * per_pass) * REQUEST_SPANS
    tables = loadgen_tables(total)
    profile = cProfile.Profile() if args.profile else None
    peaks, rises = AllocatedPeak(), []
    with tempfile.TemporaryDirectory(prefix="meritlens-bench-") as tmp:
        store = SpanStore(os.path.join(tmp, "bench.duckdb"), db_threads=1)
        store.start()
        try:
            store.open_windows()
            requests = iter(tables)
            for _ in range(WARM_UP_REQUESTS):
                store.append(next(requests))
            store.update_windows()
            appends = passes = appends_cpu = passes_cpu = 0.0
            for _ in range(args.passes):
                t0, c0 = time.perf_counter(), time.process_time()
                if args.profile == "appends":
                    profile.enable()
                for _ in range(per_pass):
                    store.append(next(requests))
                if args.profile == "appends":
                    profile.disable()
                appends += time.perf_counter() - t0
                appends_cpu += time.process_time() - c0
                time.sleep(0.005)  # the sampler's last look before the pass
                peaks.take()
                start = peaks.allocated()
                if args.profile == "passes":
                    profile.enable()
                t1, c1 = time.perf_counter(), time.process_time()
                store.update_windows()
                passes += time.perf_counter() - t1
                passes_cpu += time.process_time() - c1
                if args.profile == "passes":
                    profile.disable()
                time.sleep(0.005)
                rises.append(peaks.take() - start)
            stored = store.query("select count(*) from spans").rows[0][0]
            windows = dict(store.query("select target_id, value from windows"
                                       " where metric = 'input_tokens' and scope = 'all'").rows)
        finally:
            store.shutdown()
    if stored != total or windows != {k: float(v) for k, v in expected_tokens(total).items()}:
        raise SystemExit(f"window_pass: stored {stored} of {total} spans; input_tokens windows {windows}")
    spans = per_pass * REQUEST_SPANS

    def mean(seconds: float) -> str:
        return f"{1000 * seconds / args.passes:.1f} ms ({1e6 * seconds / (args.passes * spans):.1f} µs/span)"

    print(f"{args.passes} passes of {spans:,} spans: append {mean(appends)}, window pass {mean(passes)}; "
          f"CPU: append {mean(appends_cpu)}, window pass {mean(passes_cpu)}; DuckDB's allocated memory during a"
          f" pass: +{sorted(rises)[len(rises) // 2] / MIB:.1f} MiB (median); correctness checks passed")
    if profile:
        pstats.Stats(profile).sort_stats("cumulative").print_stats(40)


if __name__ == "__main__":
    main()
