"""Where one second of the sustained load goes, in one process (issue 7).

The sustained benchmark's spans (bench/loadgen.py) are decoded and normalized as the receiver does
them, then written the way the collector's writer and window threads would handle one second of
10k spans/s: `SpanStore.append` of 10 requests of 1000 spans, then one `update_windows` pass. The
mean of each is printed; `--profile` adds cProfile's top functions of the window passes (or of the
appends, with `--profile appends`). DuckDB runs on one thread, as in the collector.

Correctness: `spans` holds every span written, and each target's `input_tokens` window equals the
sum loadgen put in its spans.

usage: python bench/window_pass.py [--passes 20] [--profile passes|appends]
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from ingest import TARGETS, expected_tokens  # noqa: E402
from loadgen import build_bodies  # noqa: E402

from meritlens.collector import _otlp  # noqa: E402
from meritlens.collector._ingest import prepare  # noqa: E402
from meritlens.collector._normalize import NormalizeOptions  # noqa: E402
from meritlens.collector._store import SpanStore  # noqa: E402

REQUEST_SPANS = 1000
REQUESTS_PER_PASS = 10
WARM_UP_REQUESTS = 20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=20)
    parser.add_argument("--profile", choices=["passes", "appends"], default=None)
    args = parser.parse_args()
    total = (WARM_UP_REQUESTS + args.passes * REQUESTS_PER_PASS) * REQUEST_SPANS
    limits = _otlp.SpanLimits(128, 65536)
    tables = [prepare(_otlp.decode_lean(body, _otlp.PROTOBUF), limits, NormalizeOptions())[1]
              for body in build_bodies(total, REQUEST_SPANS, TARGETS)]
    profile = cProfile.Profile() if args.profile else None
    with tempfile.TemporaryDirectory(prefix="meritlens-bench-") as tmp:
        store = SpanStore(os.path.join(tmp, "bench.duckdb"), db_threads=1)
        store.start()
        try:
            store.open_windows()
            requests = iter(tables)
            for _ in range(WARM_UP_REQUESTS):
                store.append(next(requests))
            store.update_windows()
            appends = passes = 0.0
            for _ in range(args.passes):
                t0 = time.perf_counter()
                if args.profile == "appends":
                    profile.enable()
                for _ in range(REQUESTS_PER_PASS):
                    store.append(next(requests))
                if args.profile == "appends":
                    profile.disable()
                t1 = time.perf_counter()
                if args.profile == "passes":
                    profile.enable()
                store.update_windows()
                if args.profile == "passes":
                    profile.disable()
                appends += t1 - t0
                passes += time.perf_counter() - t1
            stored = store.query("select count(*) from spans").rows[0][0]
            windows = dict(store.query("select target_id, value from windows"
                                       " where metric = 'input_tokens' and scope = 'all'").rows)
        finally:
            store.shutdown()
    if stored != total or windows != {k: float(v) for k, v in expected_tokens(total).items()}:
        raise SystemExit(f"window_pass: stored {stored} of {total} spans; input_tokens windows {windows}")
    spans = REQUESTS_PER_PASS * REQUEST_SPANS
    print(f"{args.passes} passes of {spans:,} spans: append {1000 * appends / args.passes:.1f} ms "
          f"({1e6 * appends / (args.passes * spans):.1f} µs/span), window pass {1000 * passes / args.passes:.1f} ms "
          f"({1e6 * passes / (args.passes * spans):.1f} µs/span); correctness checks passed")
    if profile:
        pstats.Stats(profile).sort_stats("cumulative").print_stats(40)


if __name__ == "__main__":
    main()
