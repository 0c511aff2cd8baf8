"""The real collector as the benchmarks run it, what they read from it, and the checks of what it holds.

`Collector` starts `meritlens serve --db TMP --no-grpc` on a free loopback port; `Senders` runs
bench/loadgen.py in other processes; `check_stored` compares what a store holds (for a collector:
through /api/sql, as a user reads it) with the generator's tally of what was acknowledged.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time

import httpx

from _tally import Tally

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.path.dirname(sys.executable)
CLK_TCK = os.sysconf("SC_CLK_TCK")
WINDOWED_CALLS_SQL = ("SELECT coalesce(sum(sample_count), 0) FROM windows WHERE scope = 'all'"
                      " AND metric IN ('retry_rate', 'tool_use_performance')")
"""LLM-call and tool spans the windows count: one sample each, in `retry_rate` (every LLM call reports
its retries) and `tool_use_performance` (every tool span)."""
_SIZES = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def mib(size: str) -> float:
    """'512MiB' in MiB."""
    for unit, factor in _SIZES.items():
        if size.endswith(unit):
            return float(size[: -len(unit)]) * factor / (1 << 20)
    raise SystemExit(f"--memory-limit must end in KiB, MiB or GiB, got {size!r}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime


def resident_mib(pid: int) -> tuple[float, float]:
    """(anonymous, file-backed) resident memory of a process, MiB (RssAnon, RssFile)."""
    values = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("RssAnon", "RssFile"):
                values[key] = int(rest.split()[0]) / 1024
    return values["RssAnon"], values["RssFile"]


class Sampler(threading.Thread):
    """Calls ``sample()`` every ``interval`` s, keeping (time.monotonic() when it returned, its result)
    until stopped."""

    def __init__(self, sample, interval: float):
        super().__init__(daemon=True)
        self.sample, self.interval, self.samples, self._halt = sample, interval, [], threading.Event()

    def run(self) -> None:
        while not self._halt.wait(self.interval):
            try:
                value = self.sample()
                self.samples.append((time.monotonic(), value))
            except (OSError, KeyError, httpx.HTTPError):
                if self._halt.is_set():
                    return

    def stop(self) -> None:
        self._halt.set()
        self.join()

    def between(self, start: float, end: float) -> list:
        return [v for t, v in self.samples if start <= t < end]


class Collector:
    def __init__(self, tmp: str, memory_limit: str | None = None, serve_args: tuple[str, ...] = ()):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.db = os.path.join(tmp, "bench.duckdb")
        args = [os.path.join(BIN, "meritlens"), "serve", "--db", self.db, "--http-port", str(self.port), "--no-grpc"]
        if memory_limit:
            args += ["--memory-limit", memory_limit]
        args += serve_args
        self.log_path = os.path.join(tmp, "collector.log")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
        self.client = httpx.Client(timeout=120)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if self.client.get(self.url + "/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.1)
        raise SystemExit(f"the collector did not start:\n{open(self.log_path).read()[-2000:]}")

    def sql(self, query: str) -> list:
        r = self.client.post(self.url + "/api/sql", json={"sql": query})
        r.raise_for_status()
        return r.json()["rows"]

    def scalar(self, query: str) -> int:
        return int(self.sql(query)[0][0])

    def stop(self) -> float:
        """SIGTERM; returns the seconds the collector took to exit."""
        self.client.close()
        t = time.monotonic()
        self.proc.terminate()
        self.proc.wait(300)
        self.log.close()
        return time.monotonic() - t


class Senders:
    """bench/loadgen.py in ``processes`` processes, each sending its own stream (seed, stream j) of
    ``spans / processes`` spans at ``rate / processes`` spans/s (0: as fast as acknowledged)."""

    def __init__(self, url: str, spans: int, *, batch: int, clients: int, rate: float = 0.0, deadline: float = 0.0,
                 processes: int = 1, seed: int = 0, targets: int = 20, pregenerate: bool = False):
        self.procs = []
        for j in range(processes):
            args = [sys.executable, os.path.join(HERE, "loadgen.py"), url + "/v1/traces", "--spans",
                    str(spans // processes), "--batch", str(batch), "--clients", str(clients), "--rate",
                    str(rate / processes), "--deadline", str(deadline), "--seed", str(seed), "--stream", str(j),
                    "--targets", str(targets), "--start-ns", str(time.time_ns())]
            self.procs.append(subprocess.Popen(args + (["--pregenerate"] if pregenerate else []),
                                               stdout=subprocess.PIPE, text=True))
        starts = []
        for proc in self.procs:
            line = proc.stdout.readline().split()
            if not line or line[0] != "sending":
                raise SystemExit(f"a sender did not start: {line}")
            starts.append(float(line[1]))
        self.t0 = min(starts)

    def wait(self) -> dict:
        """The senders' reports merged: spans, tally, acks and refusals (times on time.monotonic())."""
        reports = []
        for proc in self.procs:
            out = proc.stdout.read()
            if proc.wait() != 0:
                raise SystemExit(f"a sender failed (exit {proc.returncode})")
            reports.append(json.loads(out))
        tally = Tally.from_json(reports[0]["tally"])
        for r in reports[1:]:
            tally += Tally.from_json(r["tally"])
        return {"spans": sum(r["spans"] for r in reports), "tally": tally,
                "acks": sorted(a for r in reports for a in r["acks"]),
                "refusals": sorted(a for r in reports for a in r["refusals"]),
                "end": max(r["end"] for r in reports), "late_s": max(r["late_s"] for r in reports),
                "complete": all(r["complete"] for r in reports)}


def _windows_by_target(sql, metric: str, column: str = "sample_count") -> dict[str, float]:
    return dict(sql(f"SELECT target_id, {column} FROM windows WHERE scope = 'all' AND metric = '{metric}'"))


def check_stored(sql, tally: Tally, bench: str) -> None:
    """Exit naming the difference unless the store ``sql`` reads (a function of a query, giving rows)
    holds exactly the spans of ``tally`` and its windows (scope all) count them, per target: spans;
    tasks (`end_to_end_latency`'s samples), LLM calls (`retry_rate`'s) and tool spans
    (`tool_use_performance`'s); the tasks whose calls all reported usage (the samples of
    `input_tokens` and `total_task_cost`), their input and output tokens (exact) and cost (to 1e-9).
    Exact wherever the requests stop: the tally follows a continuing task's samples part by part."""
    problems = []

    def compare(what: str, got: dict, want: dict, tolerance: float = 0.0) -> None:
        bad = {k: (got.get(k), v) for k, v in want.items()
               if got.get(k) is None or abs(got[k] - v) > tolerance * abs(v)}
        bad.update({k: (v, None) for k, v in got.items() if k not in want})
        if bad:
            problems.append(f"{what}: (held, sent) {dict(sorted(bad.items())[:5])}")

    compare("spans", dict(sql("SELECT target_id, count(*) FROM spans GROUP BY target_id")), tally.by_target("spans"))
    for metric, column, field, tolerance in (
            ("end_to_end_latency", "sample_count", "tasks", 0), ("retry_rate", "sample_count", "llm_calls", 0),
            ("tool_use_performance", "sample_count", "tool_spans", 0),
            ("input_tokens", "sample_count", "token_tasks", 0), ("total_task_cost", "sample_count", "token_tasks", 0),
            ("input_tokens", "value", "input_tokens", 0), ("output_tokens", "value", "output_tokens", 0),
            ("total_task_cost", "value", "cost_usd", 1e-9)):
        want = {k: v for k, v in tally.by_target(field).items() if v}
        got = {k: v for k, v in _windows_by_target(sql, metric, column).items() if v}
        compare(f"{metric} {column}", got, want, tolerance)
    if problems:
        raise SystemExit(f"{bench} bench: WRONG RESULT\n  " + "\n  ".join(problems))
