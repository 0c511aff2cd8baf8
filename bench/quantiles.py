"""Quantile accuracy: the distribution summary of a window against numpy's exact quantiles.

Values from bench/spangen.py: the latencies of ``--samples`` LLM calls (log-normal around each model's
median) and, of ``--samples`` tasks, the end-to-end latency, input tokens and cost (sums of
log-normal draws over a task's calls; integers for the tokens). Each set goes through the window
machinery as sample rows (`WindowBook.apply_delta`, in deltas of ``--delta`` rows, as the window
processor applies a batch), the calls' latencies as the samples of one target's `end_to_end_latency`
window, the tasks' values as another target's `end_to_end_latency`, `input_tokens` and
`total_task_cost` windows. Reported for each: p50, p90, p95, p99, min and max of the window row
against numpy's (``np.quantile``, linear interpolation, the windows' definition), with the relative
error; and the count and mean.

Correctness (exit 1 otherwise): the count is exact, and every reported quantile, min and max is
within ``--max-relative-error`` (default 1%) of numpy's.

usage: python bench/quantiles.py [--samples 1000000] [--delta 10000] [--max-relative-error 0.01]
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import sys
import time

import numpy as np
import pyarrow as pa

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from spangen import SpanStream  # noqa: E402

from meritlens.analytics.engine import SAMPLE_ROW_COLUMNS, SAMPLE_VALUES, SCOPE_ALL, WindowBook  # noqa: E402

REPORTED = ("p50", "p90", "p95", "p99", "min", "max")
_EXACT = {"p50": 0.5, "p90": 0.9, "p95": 0.95, "p99": 0.99, "min": 0.0, "max": 1.0}


def sample_rows(target: str, columns: dict[str, np.ndarray], first: int) -> pa.Table:
    """Sample rows (``SAMPLE_ROW_COLUMNS``) of one target's tasks: the given metric columns hold the
    values (NaN: no sample), the others none; row i is a task of its own (distinct keys, times 1 s apart)."""
    n = len(next(iter(columns.values())))
    index = np.arange(first, first + n, dtype=np.int64)
    end_us = 1_780_000_000_000_000 + index * 1_000_000
    data = {"target_id": pa.array([target] * n), "scope": pa.array([SCOPE_ALL] * n),
            "first_end_us": end_us, "last_end_us": end_us, "start_ns": (end_us - 500_000) * 1000,
            "end_ns": end_us * 1000, "success": pa.nulls(n, pa.bool_()), "span_count": np.ones(n, np.int64),
            "key_high": pa.array(index.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)),
            "key_low": pa.array(index.astype(np.uint64) * np.uint64(0xC2B2AE3D27D4EB4F))}
    for name in SAMPLE_VALUES:
        values = columns.get(name)
        data[name] = pa.nulls(n, pa.float64()) if values is None else pa.array(values, from_pandas=True)
    return pa.table({name: data[name] for name in SAMPLE_ROW_COLUMNS})


def window_rows(sets: dict[str, dict[str, np.ndarray]], delta: int) -> tuple[dict, float]:
    """The window row of each (target, metric) of ``sets`` ({target: {metric: values}}), the values put
    in by deltas of ``delta`` rows; and the seconds that took."""
    book = WindowBook()
    t = time.perf_counter()
    for target, columns in sets.items():
        n = len(next(iter(columns.values())))
        for start in range(0, n, delta):
            part = {metric: values[start:start + delta] for metric, values in columns.items()}
            book.apply_delta(None, sample_rows(target, part, start))
    seconds = time.perf_counter() - t
    now = _dt.datetime.now(_dt.timezone.utc)
    rows = {}
    for target, columns in sets.items():
        for window in book.windows((target, SCOPE_ALL), "bench", now):
            if window.metric in columns:
                rows[(target, window.metric)] = window
    return rows, seconds


def run(samples: int, delta: int, max_error: float, seed: int = 0) -> tuple[list[dict], float]:
    stream = SpanStream(seed)
    drawn = stream.task_samples(samples)
    sets = {"llm-calls": {"end_to_end_latency": stream.call_latencies(samples)},
            "tasks": {m: drawn[m] for m in ("end_to_end_latency", "input_tokens", "total_task_cost")}}
    rows, seconds = window_rows(sets, delta)
    results = []
    for (target, metric), window in sorted(rows.items()):
        values = sets[target][metric]
        values = values[~np.isnan(values)]
        exact = dict(zip(REPORTED, np.quantile(values, [_EXACT[q] for q in REPORTED]).tolist()))
        reported = {q: getattr(window, q) for q in REPORTED}
        errors = {q: abs(reported[q] - exact[q]) / abs(exact[q]) if reported[q] is not None else float("inf")
                  for q in REPORTED}
        results.append({"values": f"{target} {metric}", "count": window.sample_count, "expected_count": values.size,
                        "mean": window.mean, "exact_mean": float(values.mean()), "reported": reported,
                        "exact": exact, "errors": errors,
                        "ok": window.sample_count == values.size and max(errors.values()) <= max_error})
    return results, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=1_000_000)
    parser.add_argument("--delta", type=int, default=10_000)
    parser.add_argument("--max-relative-error", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    results, seconds = run(args.samples, args.delta, args.max_relative_error, args.seed)
    print(f"{args.samples:,} samples a set, applied in deltas of {args.delta:,} rows: {seconds:.1f} s for all sets")
    print("| values | count | " + " | ".join(f"{q}: window / numpy (relative error)" for q in REPORTED) + " |")
    print("|---|---|" + "---|" * len(REPORTED))
    for r in results:
        cells = " | ".join(f"{r['reported'][q]:.6g} / {r['exact'][q]:.6g} ({r['errors'][q]:.2e})" for q in REPORTED)
        print(f"| {r['values']} | {r['count']:,} | {cells} |")
    bad = [r["values"] for r in results if not r["ok"]]
    if bad:
        raise SystemExit(f"quantiles bench: WRONG RESULT: beyond {args.max_relative_error:.0%} or a wrong count: {bad}")
    print(f"correctness: every count exact, every reported quantile within {args.max_relative_error:.0%} of numpy's")


if __name__ == "__main__":
    main()
