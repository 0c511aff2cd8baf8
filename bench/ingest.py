"""What a user of the collector feels under load: spans queryable per second, CPU and memory.

Starts the real collector (`meritlens serve --db TMP --no-grpc` on a free loopback port) and sends
OTLP/HTTP protobuf from bench/loadgen.py in another process (realistic LLM spans: ~15 attributes and
one event, one span a trace, over 4 targets).

* Throughput (default): ``--spans`` spans sent by ``--clients`` client threads as fast as they are
  acknowledged. The clock starts when sending starts and stops when every span is queryable: `spans`
  holds them all AND the `input_tokens` windows (scope all) count them all, read through /api/sql.
  Reports spans/s queryable, spans/s acknowledged (the sender's own clock), the collector's CPU.
* Sustained (``--rate R --seconds S``): a paced load. Reports the collector's share of one core over
  the load, its anonymous memory (what competes with the user's application) and file-backed pages
  (mapped library code) per minute, and the ratio of the anonymous peak of the second half of the
  load to that of the first half (flat memory: about 1).

Correctness (both): `spans` holds exactly the spans sent and the windows count exactly them.

usage: python bench/ingest.py [--spans 1000000] [--batch 1000] [--clients 2] [--memory-limit 512MiB]
       python bench/ingest.py --rate 10000 --seconds 600
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

import httpx

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.path.dirname(sys.executable)
TARGETS = 4
CLK_TCK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime


def resident_mib(pid: int) -> tuple[float, float]:
    """(anonymous, file-backed) resident memory of a process, MiB."""
    values = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("RssAnon", "RssFile"):
                values[key] = int(rest.split()[0]) / 1024
    return values["RssAnon"], values["RssFile"]


class MemorySampler(threading.Thread):
    """(time, anonymous MiB, file-backed MiB) of a process every 0.5 s."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self.samples, self._halt = pid, [], threading.Event()

    def run(self) -> None:
        while not self._halt.wait(0.5):
            try:
                self.samples.append((time.perf_counter(), *resident_mib(self.pid)))
            except (OSError, KeyError):
                return

    def stop(self) -> None:
        self._halt.set()
        self.join()

    def peak(self, start: float, end: float) -> tuple[float, float]:
        inside = [(a, f) for t, a, f in self.samples if start <= t < end]
        return (max(a for a, _ in inside), max(f for _, f in inside)) if inside else (0.0, 0.0)


class Collector:
    def __init__(self, tmp: str, memory_limit: str | None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        args = [os.path.join(BIN, "meritlens"), "serve", "--db", os.path.join(tmp, "bench.duckdb"),
                "--http-port", str(self.port), "--no-grpc"]
        if memory_limit:
            args += ["--memory-limit", memory_limit]
        self.log = open(os.path.join(tmp, "collector.log"), "w")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.url + "/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.1)
        raise SystemExit("the collector did not start")

    def sql(self, query: str) -> list:
        r = httpx.post(self.url + "/api/sql", json={"sql": query}, timeout=120)
        r.raise_for_status()
        return r.json()["rows"]

    def queryable(self) -> tuple[int, int]:
        """(rows in `spans`, samples the input_tokens windows of scope all count)."""
        spans = self.sql("select count(*) from spans")[0][0]
        windowed = self.sql("select coalesce(sum(sample_count), 0) from windows"
                            " where metric = 'input_tokens' and scope = 'all'")[0][0]
        return int(spans), int(windowed)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(120)
        self.log.close()


def run(spans: int, batch: int, clients: int, rate: float = 0.0, seconds: float = 0.0,
        memory_limit: str | None = None) -> dict:
    with tempfile.TemporaryDirectory(prefix="meritlens-bench-") as tmp:
        collector = Collector(tmp, memory_limit)
        try:
            sender = subprocess.Popen(
                [sys.executable, os.path.join(HERE, "loadgen.py"), collector.url + "/v1/traces", str(spans),
                 str(batch), str(clients), str(TARGETS), str(rate), str(2 * seconds if seconds else 0)],
                stdout=subprocess.PIPE, text=True)
            assert sender.stdout.readline().strip() == "sending"
            t0, cpu0 = time.perf_counter(), cpu_seconds(collector.proc.pid)
            memory = MemorySampler(collector.proc.pid)
            memory.start()
            report = sender.stdout.read().strip()
            sender.wait()
            acked_at, cpu_acked = time.perf_counter(), cpu_seconds(collector.proc.pid)
            sent = int(report.split()[0])
            while collector.queryable() != (sent, sent):
                if time.perf_counter() - acked_at > 300:
                    raise SystemExit(f"WRONG RESULT: {collector.queryable()} queryable of {sent} sent")
                time.sleep(0.05)
            done, cpu1 = time.perf_counter(), cpu_seconds(collector.proc.pid)
            memory.stop()
        finally:
            collector.stop()
    result = {"sent": sent, "sender": report, "queryable_s": done - t0, "acked_s": acked_at - t0,
              "spans_per_s": sent / (done - t0), "cpu_s": cpu1 - cpu0,
              "cpu_pct": 100 * (cpu_acked - cpu0) / (acked_at - t0)}
    half = t0 + (acked_at - t0) / 2
    (a1, f1), (a2, f2) = memory.peak(t0, half), memory.peak(half, acked_at)
    result.update(anon_first=a1, anon_second=a2, file_peak=max(f1, f2), flat=a2 / a1 if a1 else float("nan"))
    minutes = []
    for m in range(int((acked_at - t0) // 60) + 1):
        anon, file = memory.peak(t0 + 60 * m, min(t0 + 60 * (m + 1), acked_at))
        if anon:
            minutes.append(f"{anon:.0f}+{file:.0f}")
    result["per_minute"] = ", ".join(minutes)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--rate", type=float, default=0.0, help="spans/s; with --seconds, a sustained load")
    parser.add_argument("--seconds", type=float, default=0.0)
    parser.add_argument("--memory-limit", default=None, help="the collector's --memory-limit")
    args = parser.parse_args()
    spans = int(args.rate * args.seconds) if args.rate else args.spans
    r = run(spans, args.batch, args.clients, args.rate, args.seconds, args.memory_limit)
    print(f"sent {r['sent']:,} spans; sender: {r['sender']}")
    print(f"queryable in spans and windows after {r['queryable_s']:.1f} s: {r['spans_per_s']:,.0f} spans/s "
          f"(acknowledged after {r['acked_s']:.1f} s); collector CPU {r['cpu_pct']:.0f}% of one core while sending")
    print(f"anonymous memory peak: first half {r['anon_first']:.0f} MiB, second half {r['anon_second']:.0f} MiB "
          f"(ratio {r['flat']:.2f}); file-backed peak {r['file_peak']:.0f} MiB; per minute anon+file MiB: "
          f"{r['per_minute']}")
    print("correctness: every span sent is in spans and counted in the windows")


if __name__ == "__main__":
    main()
