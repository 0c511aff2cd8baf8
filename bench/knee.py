"""The knee: the highest paced rate the collector holds for a duration.

Each step is a fresh collector under bench/sustained.py's load at one rate for ``--seconds``; a rate
is held when lag p99 ≤ 5 s, no request is refused after the warm-up, anonymous memory stays flat and
inside ``--memory-limit``, and the pace is held (CPU is not a condition here). The rates are searched
by bisection on a log scale between ``--low`` and ``--high``: first both ends, then the geometric mean
of the highest rate held and the lowest not held, until they are within ``--resolution`` of each
other. A step whose pace was not held only because the sender fell behind shows it as "pace held:
NOT MET" with no other condition failing: add ``--senders``. Every step keeps sustained.py's
correctness checks (exit 1 on a wrong result).

usage: python bench/knee.py [--low 5000] [--high 50000] [--seconds 600] [--resolution 0.1]
                            [--memory-limit 512MiB] [--senders 1] [--clients 2]
"""

from __future__ import annotations

import argparse
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import sustained


def search(low: float, high: float, seconds: float, resolution: float, unjudged: frozenset[str] = frozenset({"cpu"}),
           **options) -> tuple[list[dict], float | None]:
    """The steps run and the highest rate held (None when not even ``low`` was); ``unjudged``: the
    conditions (`sustained.CONDITIONS`) left out."""
    steps = []

    def step(rate: float) -> bool:
        r = sustained.run(rate, seconds, unjudged=unjudged, **options)
        steps.append(r)
        print(sustained.report(r), flush=True)
        return r["held"]

    if not step(low):
        return steps, None
    if step(high):
        return steps, high
    held, failed = low, high
    while failed / held > 1 + resolution:
        rate = round(math.sqrt(held * failed), -2)
        if not held < rate < failed:
            break
        if step(rate):
            held = rate
        else:
            failed = rate
    return steps, held


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--low", type=float, default=5_000)
    parser.add_argument("--high", type=float, default=50_000)
    parser.add_argument("--seconds", type=float, default=600)
    parser.add_argument("--resolution", type=float, default=0.1)
    parser.add_argument("--memory-limit", default="512MiB")
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--senders", type=int, default=1)
    args = parser.parse_args()
    steps, knee = search(args.low, args.high, args.seconds, args.resolution, memory_limit=args.memory_limit,
                         batch=args.batch, clients=args.clients, senders=args.senders)
    print("\n| rate (spans/s) | held | lag p99 (s) | refused after warm-up | flatness | peak MiB | CPU "
          "| conditions not met |")
    print("|---|---|---|---|---|---|---|---|")
    for r in sorted(steps, key=lambda r: r["rate"]):
        failed = "; ".join(name for name, ok in r["conditions"].items() if not ok) or "-"
        print(f"| {r['rate']:,.0f} | {'yes' if r['held'] else 'no'} | {r['lag_p99_s']:.2f} | {r['refused']} | "
              f"{r['flat']:.2f} | {r['peak_mib']:.0f} | {r['cpu_pct']:.0f}% | {failed} |")
    if knee is None:
        print(f"knee: below {args.low:,.0f} spans/s (not held for {args.seconds:.0f} s)")
    elif knee == args.high:
        print(f"knee: at least {knee:,.0f} spans/s (the highest rate tried, held for {args.seconds:.0f} s)")
    else:
        print(f"knee: {knee:,.0f} spans/s held for {args.seconds:.0f} s; the next rate tried was not")
    print("correctness: every step's spans and windows checked")


if __name__ == "__main__":
    main()
