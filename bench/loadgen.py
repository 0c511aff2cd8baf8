"""The sender: bench/spangen.py's export requests, sent over OTLP/HTTP protobuf as an exporter sends them.

Runs in its own process. ``--clients`` threads post the requests in order; with ``--rate`` (spans/s)
request k is not sent before the spans of requests 0..k-1 divided by the rate, counted from the start.
A 429 or 503 is retried after its Retry-After (as OpenTelemetry's exporters do), and recorded. The
requests are made while sending (a thread keeps a few ahead) unless ``--pregenerate`` makes them all
first. ``--deadline`` (s, 0 = none): no request is started after it.

Prints ``sending T0`` (time.monotonic(), a clock every process shares) when sending starts, then one
JSON line: spans acknowledged, the tally of the acknowledged requests (bench/spangen.py's `Tally`),
every acknowledgement [time, spans, LLM-call and tool spans], every refusal [time, spans], the end,
the sends' largest delay behind the pace (late_s) and whether every planned request was sent.

usage: python bench/loadgen.py URL --spans N [--batch 1000] [--clients 2] [--rate 0] [--deadline 0]
                               [--seed 0] [--stream 0] [--targets 20] [--start-ns NS] [--pregenerate]
"""

from __future__ import annotations

import argparse
import json
import queue
import threading
import time

import httpx

from _tally import Tally
from spangen import BASE_NS, MEAN_SPANS_PER_TASK, SpanStream

_DONE = None


def send(url: str, requests, clients: int, rate: float = 0.0, deadline_s: float = 0.0,
         on_start=lambda t0: None) -> dict:
    """Post ``requests`` (an iterable of `Request`, consumed in order) from ``clients`` threads."""
    lock = threading.Lock()
    ready: queue.Queue = queue.Queue(maxsize=4 * clients)
    acks, refusals, late, failure = [], [], [0.0], []
    tally = None
    stop = threading.Event()

    def produce():
        due = 0
        for request in requests:
            ready.put((due, request))
            due += request.spans
            if stop.is_set():
                break
        for _ in range(clients):
            ready.put(_DONE)

    def worker():
        nonlocal tally
        with httpx.Client(timeout=120) as client:
            while True:
                item = ready.get()
                if item is _DONE or stop.is_set():
                    return
                spans_before, request = item
                if deadline_s and time.monotonic() - t0 > deadline_s:
                    stop.set()
                    return
                if rate:
                    delay = t0 + spans_before / rate - time.monotonic()
                    if delay > 0:
                        time.sleep(delay)
                    else:
                        with lock:
                            late[0] = max(late[0], -delay)
                while True:
                    try:
                        r = client.post(url, content=request.body, headers={"Content-Type": "application/x-protobuf"})
                    except httpx.TransportError as exc:
                        failure.append(f"{type(exc).__name__}: {exc}")
                        stop.set()
                        return
                    if r.status_code == 200:
                        break
                    if r.status_code in (429, 503):
                        with lock:
                            refusals.append([time.monotonic(), request.spans])
                        time.sleep(float(r.headers.get("Retry-After", 1)))
                        continue
                    failure.append(f"HTTP {r.status_code}: {r.text[:200]}")
                    stop.set()
                    return
                counted = request.tally.total("llm_calls") + request.tally.total("tool_spans")
                with lock:
                    acks.append([time.monotonic(), request.spans, counted])
                    if tally is None:
                        tally = Tally(len(request.tally.names))
                    tally += request.tally

    producer = threading.Thread(target=produce, daemon=True)
    threads = [threading.Thread(target=worker) for _ in range(clients)]
    t0 = time.monotonic()
    on_start(t0)
    producer.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    complete = not stop.is_set()
    stop.set()
    while producer.is_alive():  # unblock a producer waiting on a full queue
        try:
            ready.get_nowait()
        except queue.Empty:
            time.sleep(0.01)
    if failure:
        raise SystemExit(f"sending failed: {failure[0]}")
    return {"spans": sum(a[1] for a in acks), "tally": tally, "acks": acks, "refusals": refusals,
            "end": time.monotonic(), "late_s": late[0], "complete": complete, "t0": t0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("--spans", type=int, required=True)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--rate", type=float, default=0.0)
    parser.add_argument("--deadline", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--stream", type=int, default=0)
    parser.add_argument("--targets", type=int, default=20)
    parser.add_argument("--start-ns", type=int, default=BASE_NS)
    parser.add_argument("--pregenerate", action="store_true")
    args = parser.parse_args()
    # span times advance with the sending pace (or at 1,000 tasks/s of span time when unpaced)
    tasks_per_s = args.rate / MEAN_SPANS_PER_TASK if args.rate else 1000.0
    stream = SpanStream(args.seed, targets=args.targets, stream=args.stream, start_ns=args.start_ns,
                        tasks_per_s=tasks_per_s)
    requests = stream.requests(args.spans, args.batch)
    if args.pregenerate:
        requests = list(requests)
    report = send(args.url, requests, args.clients, args.rate, args.deadline,
                  on_start=lambda t0: print(f"sending {t0}", flush=True))
    report["tally"] = (report["tally"] or Tally(args.targets)).to_json()
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()

