"""Ingest throughput of the real collector process (issue 7).

Starts `meritlens serve --db TMP --http-port P --no-grpc`, drives it with bench/loadgen.py in a separate
process (OTLP/HTTP protobuf, realistic spans: 15 attributes, 1 event) and reports:

* burst mode: acknowledged spans/s (loadgen's own clock, sending only), collector CPU seconds and peak RSS;
* sustained mode (--rate R --seconds S): paced load, no batch started after 2*S (spans planned but not
  sent by then are reported: the collector fell behind); spans lost (sent but not stored), collector CPU % of one core over the
  sending period, peak RSS (and the sampled peaks of its anonymous and file-backed parts).

Correctness (both modes): rows in `spans` == spans sent, and the sum of the `input_tokens` windows
(scope all) == the sum of input tokens sent, per target. Read through the running collector's /api/sql.

Variants (bench/_serve_variant.py; otherwise the installed `meritlens serve` runs): `--impl obvious`
receives with the pre-issue-7 decode/normalize walk, `--impl both` runs the obvious design and the
production one one after the other on the same load; `--no-refresh` stores spans without refreshing
windows (receive path only; the check then sums `input_tokens` of the stored spans per target).
`--start-from FILE` runs the collector on a copy of FILE instead of an empty store (a store that
already holds millions of spans: `bench/startup.py build FILE --spans N`, then `bench/startup.py
resume FILE` once so its windows are stored). Before the measured load it sends one batch over
every target and waits for the windows (the first batch of a target after a start rebuilds its
window state from its spans); the checks then count what the measured load added.
`--allocators` also reports which allocator held the collector's anonymous memory: DuckDB's jemalloc
and glibc's heap, sampled inside the collector every 50 ms by bench/_allocators/sitecustomize.py, and
DuckDB's own accounting (`duckdb_memory()` by tag); with it, `--malloc-trim S` and `--jemalloc-purge S`
release the two allocators' free pages every S seconds (experiments: the collector does neither).
`--duckdb-setting NAME=VALUE` (experiment, through bench/_serve_variant.py) adds a DuckDB setting to
the collector's store. `--timeline S` also prints the collector's peak RSS (anonymous + file-backed)
in each S seconds of the load; `--release-pages-at T` (experiment) asks the kernel, T seconds into the
load, to reclaim the collector's library pages from outside (`process_madvise(MADV_PAGEOUT)`, what
`meritlens serve` does to itself once at start-up), so the timeline shows how many of them the load
faults back in.

usage: python bench/ingest.py [--requests 60 --batch 1000 --concurrency 4] [--rate 10000 --seconds 60]
                              [--impl production|obvious|both] [--no-refresh] [--start-from FILE] [--threads]
                              [--allocators [--malloc-trim S] [--jemalloc-purge S]]
                              [--duckdb-setting NAME=VALUE ...] [--timeline S] [--release-pages-at T]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

import httpx

from meritlens.collector._ospages import MADV_PAGEOUT, read_only_file_mappings

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.path.dirname(sys.executable)
TARGETS = 4
CLK_TCK = os.sysconf("SC_CLK_TCK")
_SYS_PROCESS_MADVISE = 440  # x86_64 and arm64


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime (fields 14, 15)


def thread_cpu(pid: int) -> dict[int, tuple[str, float]]:
    """CPU seconds and kernel name of each of the process's threads."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                head, rest = f.read().rsplit(")", 1)
        except OSError:  # the thread ended
            continue
        fields = rest.split()
        out[int(tid)] = (head.split("(", 1)[1], (int(fields[11]) + int(fields[12])) / CLK_TCK)
    return out


def python_thread_names(pid: int) -> dict[int, str]:
    """OS thread id -> Python thread name, read with py-spy when it is installed (not a dependency)."""
    spy = os.path.join(BIN, "py-spy")
    if not os.path.exists(spy):
        return {}
    try:
        dump = subprocess.run([spy, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    return {int(tid): name for tid, name in re.findall(r'^Thread (\d+) \(\w+\): "([^"]*)"', dump, re.M)}


def per_thread_report(before: dict, after: dict, names: dict[int, str], wall: float) -> str:
    """Threads' share of one core over ``wall`` seconds, busiest first, by Python name (py-spy) or
    the OS name the collector gives its own threads (`ml-writer`, ...); the rest (the event loop,
    DuckDB's and other native threads) are grouped by their kernel name."""
    shares: dict[str, float] = {}
    for tid, (comm, cpu) in after.items():
        label = names.get(tid) or (comm if comm.startswith("ml-") else f"[native {comm}]")
        shares[label] = shares.get(label, 0.0) + cpu - before.get(tid, (comm, 0.0))[1]
    busy = sorted(((100 * cpu / wall, label) for label, cpu in shares.items() if cpu > 0), reverse=True)
    return "per thread (% of one core): " + ", ".join(f"{label} {pct:.0f}%" for pct, label in busy)


def status_kib(pid: int, key: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise KeyError(key)


class MemorySampler:
    """The highest anonymous and file-backed resident memory of a process, sampled every 0.1 s:
    VmHWM is their peak sum, this says which part it was (file-backed: mapped library code). Keeps
    every sample's time and parts for `timeline`."""

    def __init__(self, pid: int):
        self.pid, self.anon_kib, self.file_kib = pid, 0, 0
        self.samples: list[tuple[float, int, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            try:
                anon, file = status_kib(self.pid, "RssAnon"), status_kib(self.pid, "RssFile")
            except (OSError, KeyError):
                return
            self.anon_kib, self.file_kib = max(self.anon_kib, anon), max(self.file_kib, file)
            self.samples.append((time.perf_counter(), anon, file))

    def start(self) -> "MemorySampler":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def timeline(self, start: float, end: float, step_s: float) -> str:
        """Per ``step_s`` seconds from ``start`` to ``end`` (perf_counter times): the highest sampled
        RSS as anonymous + file-backed MiB."""
        cells = []
        at = start
        while at < end:
            window = [(a + f, a, f) for t, a, f in self.samples if at <= t < min(at + step_s, end)]
            if window:
                _, anon, file = max(window)
                cells.append(f"{at - start:.0f}s {(anon + file) / 1024:.0f} ({anon / 1024:.0f}+{file / 1024:.0f})")
            at += step_s
        return ", ".join(cells)


def release_pages_of(pid: int) -> int:
    """Experiment: ask the kernel to reclaim the resident pages of ``pid``'s read-only file mappings
    from outside (``process_madvise(MADV_PAGEOUT)``, Linux 5.10+), as `meritlens serve` does to
    itself once it listens. Returns the bytes of the mappings it advised."""
    libc = ctypes.CDLL(None, use_errno=True)

    class IoVec(ctypes.Structure):
        _fields_ = [("base", ctypes.c_void_p), ("length", ctypes.c_size_t)]

    mappings = read_only_file_mappings(pid)
    vectors = (IoVec * len(mappings))(*[IoVec(start, length) for start, length in mappings])
    pidfd, advised = os.pidfd_open(pid), 0
    try:
        for first in range(0, len(mappings), 512):  # IOV_MAX
            count = min(512, len(mappings) - first)
            done = libc.syscall(_SYS_PROCESS_MADVISE, pidfd, ctypes.byref(vectors, first * ctypes.sizeof(IoVec)),
                                count, MADV_PAGEOUT, 0)
            if done < 0:
                raise OSError(ctypes.get_errno(), "process_madvise")
            advised += done
    finally:
        os.close(pidfd)
    return advised


def wait_until_serving(base: str, server: subprocess.Popen, log_path: str, timeout_s: float) -> None:
    """Until the collector at ``base`` answers /healthz; SystemExit with its log if it exits or the
    time runs out first."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if server.poll() is not None or time.monotonic() > deadline:
            with open(log_path) as fh:
                raise SystemExit(f"collector did not start: {fh.read()}")
        time.sleep(0.05)


def wait_for_page_release(log_path: str, timeout_s: float = 10.0) -> None:
    """Until the collector has logged what it did with its start-up pages (it does so just after it
    starts listening, released or kept), so that the RSS at rest is measured after it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with open(log_path) as fh:
            if "library pages only start-up used" in fh.read():
                return
        time.sleep(0.05)


def expected_tokens(total: int) -> dict[str, int]:
    """loadgen's span i has input tokens 100 + i % 50 and target bot-{i % TARGETS}."""
    sums = {f"bot-{t}": 0 for t in range(TARGETS)}
    for i in range(total):
        sums[f"bot-{i % TARGETS}"] += 100 + i % 50
    return sums


def sql(base: str, query: str) -> list:
    r = httpx.post(f"{base}/api/sql", json={"sql": query}, timeout=60)
    r.raise_for_status()
    return r.json()["rows"]


def run(total: int, batch: int, concurrency: int, rate: float = 0.0, deadline_s: float = 0.0, *,
        impl: str = "production", refresh: bool = True, threads: bool = False, start_from: str = "",
        allocators: bool = False, experiments: dict | None = None, timeline_s: float = 0.0) -> dict:
    """Send `total` spans (paced at `rate` spans/s when given; no batch started after `deadline_s`),
    into an empty store or a copy of `start_from`."""
    planned = total
    with tempfile.TemporaryDirectory(prefix="meritlens-bench-") as tmp:
        # A copy keeps its file name: the database name is part of the stored windows' digest
        # (evidence URIs hold it), and another name would make the collector recompute them all.
        db = os.path.join(tmp, os.path.basename(start_from) if start_from else "bench.duckdb")
        if start_from:
            copy_store(start_from, db)
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        experiments = experiments or {}
        settings = [f"--duckdb-setting={setting}" for setting in experiments.get("duckdb_settings", ())]
        if impl == "production" and refresh and not settings:
            command = [os.path.join(BIN, "meritlens")]
        else:
            command = [sys.executable, os.path.join(HERE, "_serve_variant.py"), *settings]
            command += ["--obvious"] if impl == "obvious" else []
            command += [] if refresh else ["--no-refresh"]
        env, allocator_file = dict(os.environ), os.path.join(tmp, "allocators.json")
        if allocators:
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.path.join(HERE, "_allocators"), env.get("PYTHONPATH")]))
            env["MERITLENS_BENCH_ALLOCATORS"] = allocator_file
            for key, variable in (("malloc_trim_s", "MERITLENS_BENCH_MALLOC_TRIM_S"),
                                  ("jemalloc_purge_s", "MERITLENS_BENCH_JEMALLOC_PURGE_S")):
                if experiments.get(key):
                    env[variable] = str(experiments[key])
        server = subprocess.Popen(
            [*command, "serve", "--db", db,
             "--http-port", str(port), "--no-grpc"],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, "server.log"), "w"), env=env)
        try:
            started = time.monotonic()
            # A copied store may rebuild its windows at start (minutes for millions of spans).
            wait_until_serving(base, server, os.path.join(tmp, "server.log"), 3600 if start_from else 30)
            start_s = time.monotonic() - started
            wait_for_page_release(os.path.join(tmp, "server.log"))
            rows_before, windows_before = 0, {}
            if start_from:
                warm_up_s = warm_up(base)
                start_s += warm_up_s
                rows_before = sql(base, "select count(*) from spans")[0][0]
                windows_before = stored_token_sums(base, refresh)
            rss_idle = status_kib(server.pid, "VmRSS")
            sampler = MemorySampler(server.pid).start()
            loadgen = subprocess.Popen(
                [sys.executable, os.path.join(HERE, "loadgen.py"), f"{base}/v1/traces", str(total), str(batch),
                 str(concurrency), str(TARGETS), str(rate), str(deadline_s)], stdout=subprocess.PIPE, text=True)
            first = loadgen.stdout.readline().strip()
            cpu0, t0 = cpu_seconds(server.pid), time.perf_counter()
            threads0 = thread_cpu(server.pid) if threads else {}
            if first != "sending":
                raise SystemExit(f"loadgen failed before sending: {first!r}")
            released: list[str] = []
            timer = None
            if experiments.get("release_pages_at_s"):
                def release() -> None:
                    before = status_kib(server.pid, "RssFile")
                    advised = release_pages_of(server.pid)
                    released.append(f"{advised >> 20} MiB of read-only file mappings released from outside at "
                                    f"{experiments['release_pages_at_s']:g}s (file-backed {before >> 10} -> "
                                    f"{status_kib(server.pid, 'RssFile') >> 10} MiB)")
                timer = threading.Timer(experiments["release_pages_at_s"], release)
                timer.daemon = True
                timer.start()
            report = loadgen.stdout.read().strip()
            if timer is not None:
                timer.cancel()  # a load shorter than T: nothing to release
            if loadgen.wait() != 0:
                raise SystemExit(f"loadgen failed: {report}")
            wall = time.perf_counter() - t0
            cpu = cpu_seconds(server.pid) - cpu0
            thread_line = (per_thread_report(threads0, thread_cpu(server.pid), python_thread_names(server.pid), wall)
                           if threads else "")
            rss_peak = status_kib(server.pid, "VmHWM")
            sampler.stop()
            timeline = sampler.timeline(t0, t0 + wall, timeline_s) if timeline_s else ""
            timeline = "; ".join(filter(None, [*released, timeline and f"peak RSS per {timeline_s:g}s of load, "
                                               f"MiB (anonymous+file-backed): {timeline}"]))
            rows = sql(base, "select count(*) from spans")[0][0] - rows_before
            # What this load added, per target; a stored target it did not touch is left out.
            windows = {t: v - windows_before.get(t, 0.0) for t, v in stored_token_sums(base, refresh).items()
                       if v != windows_before.get(t)}
        finally:
            server.terminate()
            server.wait(3600 if start_from else 60)  # a window pass over a large store finishes first
            with open(os.path.join(tmp, "server.log")) as fh:
                log_tail = fh.read()[-4000:]
            allocator_peaks = allocator_report(allocator_file) if allocators else ""
        # loadgen: "N spans in Xs = Y spans/s (503 retries: R)"
        total = int(report.split(" spans")[0])
        send_s = float(report.split(" in ")[1].split("s")[0])
        retries = int(report.rsplit(": ", 1)[1].rstrip(")"))
        expected = expected_tokens(total)
        ok = rows == total and windows == {k: float(v) for k, v in expected.items()}
        return {"log_tail": log_tail, "stored_before": rows_before, "start_s": start_s, "impl": impl, "refresh": refresh, "planned": planned, "sent": total, "stored": rows, "lost": total - rows, "send_s": send_s,
                "spans_per_s": total / send_s, "retries": retries, "cpu_s": cpu, "wall_s": wall,
                "cpu_pct": 100 * cpu / wall, "rss_idle_mib": rss_idle / 1024, "rss_peak_mib": rss_peak / 1024,
                "anon_peak_mib": sampler.anon_kib / 1024, "file_peak_mib": sampler.file_kib / 1024,
                "correct": ok, "windows": windows, "expected": expected, "threads": thread_line,
                "allocators": allocator_peaks, "timeline": timeline}


def allocator_report(path: str) -> str:
    """One line from what bench/_allocators/sitecustomize.py wrote."""
    try:
        with open(path) as fh:
            found = json.load(fh)
    except (OSError, ValueError) as exc:
        return f"allocators: no samples ({exc})"
    at, peaks = found["at_anonymous_peak"], found["peaks"]
    other = at["anonymous"] - at["duckdb_resident"] - at["glibc_held"]
    memory = found.get("duckdb_memory", {})
    tags = ", ".join(f"{tag} {used:.0f} ({memory['peaks'].get(tag, used):.0f})"
                     for tag, used in sorted(memory.get("last", {}).items(), key=lambda item: -item[1]) if used >= 0.5)
    duckdb = "" if found["duckdb_jemalloc"] else " (DuckDB's jemalloc statistics unavailable)"
    return (f"allocators at the sampled anonymous peak of {at['anonymous']:.0f} MiB: DuckDB's jemalloc "
            f"{at['duckdb_resident']:.0f} resident ({at['duckdb_allocated']:.0f} allocated, "
            f"{at.get('duckdb_active', 0):.0f} in active pages, {at.get('duckdb_dirty', 0):.0f} dirty, "
            f"{at.get('duckdb_muzzy', 0):.0f} muzzy, {at.get('duckdb_tcache', 0):.0f} thread-cached, "
            f"{at.get('duckdb_metadata', 0):.0f} metadata), glibc "
            f"{at['glibc_held']:.0f} held ({at['glibc_in_use']:.0f} in use), the rest {other:.0f}; each one's own "
            f"peak: DuckDB {peaks['duckdb_resident']:.0f} ({peaks['duckdb_allocated']:.0f}), glibc "
            f"{peaks['glibc_held']:.0f} ({peaks['glibc_in_use']:.0f}){duckdb}\n  DuckDB's duckdb_memory() at the end "
            f"of the load (its peak): {tags or 'no samples'}")


def copy_store(source: str, target: str) -> None:
    """A DuckDB file and its write-ahead log, when it has one."""
    shutil.copyfile(source, target)
    if os.path.exists(source + ".wal"):
        shutil.copyfile(source + ".wal", target + ".wal")


def warm_up(base: str) -> float:
    """Send one batch over every loadgen target and wait until the windows include it: after
    taking stored windows up, the collector rebuilds a target's state from its spans on that
    target's first batch (minutes on millions of spans), which is start-up, not steady state."""
    t0 = time.monotonic()
    subprocess.run([sys.executable, os.path.join(HERE, "loadgen.py"), f"{base}/v1/traces", str(TARGETS * 250),
                    str(TARGETS * 250), "1", str(TARGETS), "0", "0"], check=True, stdout=subprocess.DEVNULL)
    while httpx.get(f"{base}/healthz", timeout=10).json()["windows_lag"]["rows"]:
        if time.monotonic() - t0 > 3600:
            raise SystemExit("warm-up: the windows did not catch up within an hour")
        time.sleep(1)
    return time.monotonic() - t0


def stored_token_sums(base: str, refresh: bool) -> dict[str, float]:
    """Input tokens per target: the `input_tokens` windows, or (windows not refreshed) the spans' sum."""
    if refresh:
        query = "select target_id, value from windows where metric = 'input_tokens' and scope = 'all'"
    else:
        query = "select target_id, sum(input_tokens) from spans group by target_id"
    return {t: float(v) for t, v in sql(base, query)}


def describe(r: dict, mode: str) -> str:
    unsent = f" ({r['planned'] - r['sent']:,} planned spans not sent by the deadline)" if r["sent"] < r["planned"] else ""
    variant = f"[{r['impl']}{'' if r['refresh'] else ', no window refresh'}] "
    if r["stored_before"]:
        variant += (f"[{r['stored_before']:,} spans stored before; collector started and its windows warmed up"
                    f" in {r['start_s']:.1f}s] ")
    return (f"{variant}{mode}: {r['sent']:,} spans{unsent} in {r['send_s']:.2f}s = {r['spans_per_s']:,.0f} spans/s acknowledged; "
            f"stored {r['stored']:,} (lost {r['lost']}), 503 retries {r['retries']}; collector CPU {r['cpu_s']:.1f}s "
            f"= {r['cpu_pct']:.0f}% of one core ({1e6 * r['cpu_s'] / max(r['sent'], 1):.0f} µs/span); RSS idle {r['rss_idle_mib']:.0f} MiB, peak {r['rss_peak_mib']:.0f} MiB "
            f"(sampled peaks: anonymous {r['anon_peak_mib']:.0f}, file-backed {r['file_peak_mib']:.0f}); "
            f"correctness {'OK' if r['correct'] else 'FAILED'}" + (f"\n  {r['threads']}" if r.get("threads") else "")
            + (f"\n  {r['allocators']}" if r.get("allocators") else "")
            + (f"\n  {r['timeline']}" if r.get("timeline") else ""))


def check(r: dict) -> None:
    if not r["correct"]:
        what = "input_tokens windows" if r["refresh"] else "stored input_tokens per target"
        raise SystemExit(f"ingest bench: WRONG RESULT: stored {r['stored']} of {r['sent']}; "
                         f"{what} {r['windows']} != sent {r['expected']}\ncollector log (end):\n{r['log_tail']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=60)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--rate", type=float, default=0.0, help="sustained mode: spans/s (needs --seconds)")
    parser.add_argument("--seconds", type=float, default=0.0)
    parser.add_argument("--impl", choices=("production", "obvious", "both"), default="production",
                        help="receive path: the collector's, the pre-issue-7 obvious walk, or both in turn")
    parser.add_argument("--no-refresh", action="store_true",
                        help="benchmark shim: store spans without refreshing windows (receive path only)")
    parser.add_argument("--start-from", default="",
                        help="a DuckDB file to copy as the collector's store (e.g. bench/startup.py build, then resume)")
    parser.add_argument("--threads", action="store_true",
                        help="also report each collector thread's CPU over the sending period")
    parser.add_argument("--allocators", action="store_true",
                        help="also report DuckDB's jemalloc and glibc's heap at the collector's memory peak, and "
                             "DuckDB's duckdb_memory() by tag")
    parser.add_argument("--malloc-trim", type=float, default=0.0, metavar="S",
                        help="experiment (needs --allocators): glibc malloc_trim(0) in the collector every S s")
    parser.add_argument("--jemalloc-purge", type=float, default=0.0, metavar="S",
                        help="experiment (needs --allocators): purge DuckDB's jemalloc arenas every S s")
    parser.add_argument("--duckdb-setting", action="append", default=[], metavar="NAME=VALUE",
                        help="experiment: a DuckDB setting of the collector's store (repeatable)")
    parser.add_argument("--timeline", type=float, default=0.0, metavar="S",
                        help="also print the collector's peak RSS (anonymous+file-backed) per S seconds of load")
    parser.add_argument("--release-pages-at", type=float, default=0.0, metavar="T",
                        help="experiment: T seconds into the load, reclaim the collector's library pages from outside")
    args = parser.parse_args()
    if args.rate and not 0 < args.seconds <= 600:
        parser.error("sustained mode needs 0 < --seconds <= 600")
    if (args.malloc_trim or args.jemalloc_purge) and not args.allocators:
        parser.error("--malloc-trim and --jemalloc-purge run inside the collector with --allocators")
    if any("=" not in setting for setting in args.duckdb_setting):
        parser.error("--duckdb-setting takes NAME=VALUE")
    experiments = {"malloc_trim_s": args.malloc_trim, "jemalloc_purge_s": args.jemalloc_purge,
                   "duckdb_settings": args.duckdb_setting, "release_pages_at_s": args.release_pages_at}
    for impl in ("obvious", "production") if args.impl == "both" else (args.impl,):
        if args.rate:
            # Bounded: no batch is started later than 2x the planned duration; what was not sent is reported.
            r = run(int(args.rate * args.seconds), args.batch, args.concurrency, args.rate, 2 * args.seconds,
                    impl=impl, refresh=not args.no_refresh, threads=args.threads, start_from=args.start_from,
                    allocators=args.allocators, experiments=experiments, timeline_s=args.timeline)
            print(describe(r, f"sustained {args.rate:,.0f} spans/s for {args.seconds:g}s"), flush=True)
        else:
            r = run(args.requests * args.batch, args.batch, args.concurrency, impl=impl, refresh=not args.no_refresh,
                    threads=args.threads, start_from=args.start_from, allocators=args.allocators,
                    experiments=experiments, timeline_s=args.timeline)
            print(describe(r, f"burst {args.requests} x {args.batch} spans, {args.concurrency} clients"), flush=True)
        check(r)


if __name__ == "__main__":
    main()
