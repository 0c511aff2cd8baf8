"""Sustained load: a paced rate for a duration, and whether the collector holds it.

Starts the real collector (`meritlens serve --db TMP --no-grpc --memory-limit M`) and sends
bench/spangen.py's agent tasks from bench/loadgen.py (made while sending) at ``--rate`` spans/s for
``--seconds``. Measured, all from outside the collector as a user sees it:

* lag: for each whole second t of the load, the time from t until the windows include every span
  acknowledged by t. "Include" is read through /api/sql every 0.25 s as the windows' count of
  LLM-call and tool spans (scope all: `retry_rate`'s samples, one per LLM call, plus
  `tool_use_performance`'s, one per tool span; ~85% of the spans, every request holds them) reaching
  the count the acknowledged requests held (the generator's tally), the time of a poll being when its
  answer came. The polls do not wait (`"wait_s": 0`): a waiting query makes the collector store and
  window what is staged at once, which a monitor polling 4 times a second would force on every pass.
  Reported: p99 and max over the seconds; a
  second whose spans were never counted has an infinite lag.
* refusals: requests answered 503/429 after ``--warmup`` seconds (default: a fifth of the load, at
  most 60 s).
* anonymous memory (RssAnon of /proc/PID/status, sampled every 0.5 s): the peak per minute; flatness
  is the peak of the last 10 minutes over the peak of minutes 5–15 when the load lasts 25 minutes or
  more, else the peak of the second half over that of the first half's last two thirds
  (seconds S/6..S/2); the peak against ``--memory-limit``.
* the collector's CPU over the load, as a share of one core; the seconds SIGTERM takes at the end.

Conditions: lag p99 ≤ 5 s, no refusal after the warm-up, flatness ≤ 1.1, peak inside the limit, the
pace held (every planned request sent before twice the duration, ≥ 98% of the rate achieved), and
CPU ≤ 30% of a core (bench/knee.py leaves CPU out). Correctness (exit 1 otherwise): per target,
`spans` holds exactly the acknowledged spans and the windows count exactly their tasks, LLM calls and
tool spans, and sum their tokens and cost (bench/_collector.py `check_stored`).

usage: python bench/sustained.py [--rate 10000] [--seconds 1800] [--memory-limit 512MiB] [--batch 1000]
                                 [--clients 2] [--senders 1] [--warmup S]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time

import httpx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _collector import WINDOWED_CALLS_SQL, Collector, Sampler, Senders, check_stored, cpu_seconds, mib, resident_mib

LAG_LIMIT_S = 5.0
FLAT_LIMIT = 1.1
CPU_LIMIT_PCT = 30.0
CONDITIONS = {"lag": f"lag p99 ≤ {LAG_LIMIT_S:g} s", "refusals": "no refusal after the warm-up",
              "flatness": f"anonymous memory flat (≤ {FLAT_LIMIT}x)", "memory": "inside --memory-limit",
              "pace": "pace held", "cpu": f"CPU ≤ {CPU_LIMIT_PCT:g}% of a core"}


def lags(acks: list, polls: list, t0: float, end: float) -> list[float]:
    """For each whole second t after t0 until ``end``: seconds from t0+t until a poll (time, windowed
    count) counted every LLM-call and tool span of the acknowledgements [time, spans, counted] up to it."""
    out, acked, a = [], 0, 0
    p = 0
    for second in range(1, int(end - t0) + 1):
        t = t0 + second
        while a < len(acks) and acks[a][0] <= t:
            acked += acks[a][2]
            a += 1
        while p < len(polls) and polls[p][0] < t:
            p += 1
        q = p
        while q < len(polls) and polls[q][1] < acked:
            q += 1
        out.append(polls[q][0] - t if q < len(polls) else math.inf)
    return out


def flatness_windows(t0: float, end: float) -> tuple[tuple[float, float], tuple[float, float]]:
    """(reference, last) intervals whose anonymous-memory peaks are compared."""
    length = end - t0
    if length >= 1500:
        return (t0 + 300, t0 + 900), (end - 600, end)
    return (t0 + length / 6, t0 + length / 2), (t0 + length / 2, end)


def run(rate: float, seconds: float, *, memory_limit: str = "512MiB", batch: int = 1000, clients: int = 2,
        senders: int = 1, warmup: float | None = None, seed: int = 0, targets: int = 20,
        unjudged: frozenset[str] = frozenset()) -> dict:
    """One paced load on a fresh collector; ``unjudged``: keys of `CONDITIONS` left out of "held"."""
    warmup = min(60.0, seconds / 5) if warmup is None else warmup
    with tempfile.TemporaryDirectory(prefix="meritlens-bench-") as tmp:
        collector = Collector(tmp, memory_limit)
        reader = httpx.Client(timeout=60)

        def windowed() -> int:
            r = reader.post(collector.url + "/api/sql", json={"sql": WINDOWED_CALLS_SQL, "wait_s": 0})
            r.raise_for_status()
            return int(r.json()["rows"][0][0])

        memory = Sampler(lambda: resident_mib(collector.proc.pid)[0], 0.5)
        polls = Sampler(windowed, 0.25)
        try:
            memory.start()
            polls.start()
            load = Senders(collector.url, int(rate * seconds), batch=batch, clients=clients, rate=rate,
                           deadline=2 * seconds, processes=senders, seed=seed, targets=targets)
            t0, cpu0 = load.t0, cpu_seconds(collector.proc.pid)
            sent = load.wait()
            end, cpu1 = sent["end"], cpu_seconds(collector.proc.pid)
            tally = sent["tally"]
            counted = int(tally.total("llm_calls") + tally.total("tool_spans"))
            while not polls.samples or polls.samples[-1][1] < counted:
                if time.monotonic() - end > 120:
                    break
                time.sleep(0.25)
            drained = time.monotonic()
            memory.stop()
            polls.stop()
            check_stored(collector.sql, tally, "sustained")
        finally:
            reader.close()
            stop_s = collector.stop()
    seconds_lag = sorted(lags(sent["acks"], polls.samples, t0, end))
    p99 = seconds_lag[max(0, math.ceil(0.99 * len(seconds_lag)) - 1)] if seconds_lag else math.nan
    refused = sum(1 for t, _ in sent["refusals"] if t > t0 + warmup)
    (r0, r1), (l0, l1) = flatness_windows(t0, end)
    reference, last = max(memory.between(r0, r1), default=math.nan), max(memory.between(l0, l1), default=math.nan)
    per_minute = [max(memory.between(t0 + 60 * m, min(t0 + 60 * (m + 1), end)), default=math.nan)
                  for m in range(math.ceil((end - t0) / 60))]
    peak = max(memory.between(t0, drained), default=math.nan)
    achieved = sent["spans"] / (end - t0)
    r = {"rate": rate, "seconds": seconds, "sent": sent["spans"], "achieved": achieved, "late_s": sent["late_s"],
         "lag_p99_s": p99, "lag_max_s": seconds_lag[-1] if seconds_lag else math.nan, "refused": refused,
         "refused_total": len(sent["refusals"]), "warmup_s": warmup, "per_minute_mib": per_minute,
         "reference_mib": reference, "last_mib": last, "flat": last / reference, "peak_mib": peak,
         "limit_mib": mib(memory_limit), "cpu_pct": 100 * (cpu1 - cpu0) / (end - t0), "stop_s": stop_s,
         "queryable_after_s": drained - end}
    met = {"lag": r["lag_p99_s"] <= LAG_LIMIT_S, "refusals": refused == 0, "flatness": r["flat"] <= FLAT_LIMIT,
           "memory": peak <= r["limit_mib"], "pace": sent["complete"] and achieved >= 0.98 * rate,
           "cpu": r["cpu_pct"] <= CPU_LIMIT_PCT}
    r["conditions"] = {CONDITIONS[key]: ok for key, ok in met.items() if key not in unjudged}
    r["held"] = all(r["conditions"].values())
    return r


def report(r: dict) -> str:
    met = ", ".join(f"{name}: {'met' if ok else 'NOT MET'}" for name, ok in r["conditions"].items())
    return (f"{r['rate']:,.0f} spans/s for {r['seconds']:.0f} s: sent {r['sent']:,} ({r['achieved']:,.0f} spans/s"
            f" achieved, sends at most {r['late_s']:.2f} s behind the pace)\n"
            f"  lag until windowed: p99 {r['lag_p99_s']:.2f} s, max {r['lag_max_s']:.2f} s; everything windowed "
            f"{r['queryable_after_s']:.1f} s after the last acknowledgement\n"
            f"  refused after the {r['warmup_s']:.0f} s warm-up: {r['refused']} requests"
            f" ({r['refused_total']} in all)\n"
            f"  anonymous memory peak per minute, MiB: {', '.join(f'{v:.0f}' for v in r['per_minute_mib'])}\n"
            f"  flatness {r['flat']:.2f} ({r['last_mib']:.0f} / {r['reference_mib']:.0f} MiB); peak {r['peak_mib']:.0f}"
            f" MiB of a {r['limit_mib']:.0f} MiB limit\n"
            f"  collector CPU {r['cpu_pct']:.0f}% of one core; SIGTERM to exit {r['stop_s']:.1f} s\n"
            f"  {met}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=10_000)
    parser.add_argument("--seconds", type=float, default=1800)
    parser.add_argument("--memory-limit", default="512MiB")
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--senders", type=int, default=1, help="sender processes, each its own stream")
    parser.add_argument("--warmup", type=float, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--targets", type=int, default=20)
    args = parser.parse_args()
    r = run(args.rate, args.seconds, memory_limit=args.memory_limit, batch=args.batch, clients=args.clients,
            senders=args.senders, warmup=args.warmup, seed=args.seed, targets=args.targets)
    print(report(r))
    print("correctness: per target, spans holds exactly the acknowledged spans and the windows count them")


if __name__ == "__main__":
    main()
