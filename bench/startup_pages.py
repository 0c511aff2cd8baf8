"""What handing back the start-up's library pages costs and saves (issue 7).

Starts `meritlens serve` on an empty store with its library pages released (the default) and kept
(`MERITLENS_RELEASE_STARTUP_PAGES=0`), alternating, and for each prints: its RSS at rest
(anonymous / file-backed), the latency of its first export (1000 loadgen spans) and of the same SQL
query three times (a grouped percentile, sum and distinct count over the stored spans). What the
released collector runs for the first time is faulted back in, so its first calls are the ones
that can be slower.

Correctness: every export is answered 200, and each query returns one row per loadgen target whose
input-token sum is what loadgen put in its spans.

usage: python bench/startup_pages.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

import httpx

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from ingest import TARGETS, expected_tokens, free_port, status_kib, wait_for_page_release, wait_until_serving  # noqa: E402,E501
from loadgen import build_bodies  # noqa: E402

MERITLENS = os.path.join(os.path.dirname(sys.executable), "meritlens")
SPANS = 1000
QUERY = ("SELECT target_id, quantile_cont(duration_s, [0.5, 0.95]), sum(input_tokens), count(DISTINCT trace_id)"
         " FROM spans GROUP BY 1 ORDER BY 1")


def one(mode: str, body: bytes, expected: dict[str, int]) -> str:
    with tempfile.TemporaryDirectory(prefix="meritlens-pages-") as tmp:
        port = free_port()
        env = dict(os.environ, MERITLENS_RELEASE_STARTUP_PAGES="1" if mode == "released" else "0")
        log = open(os.path.join(tmp, "server.log"), "w")
        server = subprocess.Popen([MERITLENS, "serve", "--db", os.path.join(tmp, "p.duckdb"),
                                   "--http-port", str(port), "--no-grpc"],
                                  stdout=subprocess.DEVNULL, stderr=log, env=env)
        base = f"http://127.0.0.1:{port}"
        try:
            wait_until_serving(base, server, os.path.join(tmp, "server.log"), 60)
            wait_for_page_release(os.path.join(tmp, "server.log"))
            anon, file_backed = (status_kib(server.pid, key) / 1024 for key in ("RssAnon", "RssFile"))
            t0 = time.perf_counter()
            r = httpx.post(base + "/v1/traces", content=body, headers={"Content-Type": "application/x-protobuf"},
                           timeout=60)
            export_ms = (time.perf_counter() - t0) * 1e3
            if r.status_code != 200:
                raise SystemExit(f"export answered {r.status_code}: {r.text}")
            query_ms = []
            for _ in range(3):
                t0 = time.perf_counter()
                r = httpx.post(base + "/api/sql", json={"sql": QUERY}, timeout=60)
                query_ms.append((time.perf_counter() - t0) * 1e3)
                rows = r.json()["rows"] if r.status_code == 200 else None
                got = {row[0]: row[2] for row in rows or []}
                if got != expected:
                    raise SystemExit(f"query returned {rows!r} ({r.status_code}), expected input tokens {expected}")
        finally:
            server.terminate()
            server.wait(60)
    return (f"{mode:8s} at rest {anon + file_backed:4.0f} MiB (anonymous {anon:.0f}, file-backed {file_backed:.0f});"
            f" first export {export_ms:5.1f} ms; query 1st / 2nd / 3rd {' / '.join(f'{ms:.1f}' for ms in query_ms)} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    body = build_bodies(SPANS, SPANS, TARGETS)[0]
    expected = {target: int(tokens) for target, tokens in expected_tokens(SPANS).items()}
    for _ in range(args.rounds):
        for mode in ("kept", "released"):
            print(one(mode, body, expected), flush=True)
    print("correctness checks passed")


if __name__ == "__main__":
    main()
