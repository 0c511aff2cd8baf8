"""Long fuzz run against the real collector: mutated OTLP protobuf, JSON and gzip bodies.

    .venv/bin/python -m tests.fuzz.fuzz_receiver --bodies 100000 --seed 1

Starts `meritlens serve` on a temporary file, sends the bodies from several threads and checks each
answer like the pytest fuzz test does (no 5xx, a parseable response or google.rpc.Status), then checks
the server is still healthy. Not collected by pytest (no test_ prefix); results go to bench/README.md.
"""

from __future__ import annotations

import argparse
import collections
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

from tests.collector.collector_proc import CollectorProcess
from tests.collector.otlp_mutations import case, check_response


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bodies", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--threads", type=int, default=4)
    args = parser.parse_args()

    directory = Path(tempfile.mkdtemp(prefix="meritlens-fuzz-"))
    collector = CollectorProcess(
        directory / "fuzz.duckdb",
        args=("--max-body-bytes", "1MiB", "--max-attributes", "16", "--max-attribute-bytes", "4KiB"),
    )
    collector.start()
    outcomes: collections.Counter[str] = collections.Counter()
    failures: list[str] = []
    lock = threading.Lock()
    per_thread = args.bodies // args.threads

    def worker(index: int) -> None:
        rng = random.Random(args.seed * 1_000_003 + index)
        with collector.client(timeout=30) as client:
            for _ in range(per_thread):
                state = rng.getstate()
                body, headers = case(rng)
                try:
                    response = client.post("/v1/traces", content=body, headers=headers)
                    label = check_response(response.status_code, response.headers, response.content)
                except Exception as exc:  # every failure is reported with its body
                    label = "FAIL"
                    with lock:
                        failures.append(f"{type(exc).__name__}: {exc} | headers={headers} body={body[:200]!r}")
                        if len(failures) == 1:
                            (directory / "first_failure.bin").write_bytes(body)
                            (directory / "first_failure.state").write_text(repr(state))
                with lock:
                    outcomes[label] += 1

    started = time.monotonic()
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(args.threads)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - started
    alive = collector.proc.poll() is None
    healthy = False
    if alive:
        with collector.client(timeout=10) as client:
            healthy = client.get("/healthz").status_code == 200
    stored = collector.sql("SELECT count(*) FROM spans")["rows"][0][0] if healthy else None
    exit_code = collector.stop()
    total = sum(outcomes.values())
    print(f"bodies: {total} in {elapsed:.0f}s ({total / elapsed:.0f}/s), seed {args.seed}, threads {args.threads}")
    print("answers:", ", ".join(f"{k}: {v}" for k, v in sorted(outcomes.items())))
    print(f"server alive: {alive}, healthy: {healthy}, exit code after SIGTERM: {exit_code}, spans stored: {stored}")
    for failure in failures[:10]:
        print("FAILURE", failure)
    if failures:
        print(f"first failing body: {directory / 'first_failure.bin'}")
    return 0 if not failures and healthy and exit_code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
