"""Synthetic stored spans as Arrow tables in the `spans` row schema, built column-wise (fast enough for 1M+ rows).

Shared by bench/windows.py and bench/queries.py. Every span is an application-role chat call in its own
trace (so each span is one task); `attributes` JSON carries `bench_input_tokens`, a copy of input_tokens,
so a typed-column query and a JSON-extraction query can be compared on the same values.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from meritlens.collector.process._normalize import _ARROW_TYPES, _ROW_COLUMNS

BASE_NS = 1_780_000_000_000_000_000  # a fixed start time (2026) so runs are reproducible


def span_table(start: int, count: int, targets: int) -> pa.Table:
    """`count` spans numbered start..start+count-1; span i belongs to target `bot-{i % targets}`."""
    idx = np.arange(start, start + count, dtype=np.int64)
    start_ns = BASE_NS + idx * 1_000_000
    # latencies with ns jitter: (almost) every task has its own value, as real latencies do
    end_ns = start_ns + 250_000_000 + (idx % 97) * 1_000_000 + (idx * 2_654_435_761) % 1_000_003
    input_tokens = 100 + idx % 50
    output_tokens = 20 + idx % 7
    hexes = np.char.mod("%016x", idx + 1)
    trace_id = pa.array(np.char.add("0000000000000000", hexes).tolist(), pa.string())
    span_id = pa.array(hexes.tolist(), pa.string())
    attributes = pa.array(
        np.char.add(np.char.add(
            '{"gen_ai.response.finish_reasons":"stop","server.address":"api.openai.com",'
            '"http.status_code":200,"bench_input_tokens":', input_tokens.astype(str)), "}").tolist(),
        pa.string())
    target_names = np.array([f"bot-{t}" for t in range(targets)], dtype=object)
    n = count

    def const(value, name):
        return pa.array([value] * n, _ARROW_TYPES[name])

    columns = {
        "trace_id": trace_id, "span_id": span_id, "parent_span_id": pa.nulls(n, pa.string()),
        "name": const("chat gpt-4o-mini", "name"), "kind": const(3, "kind"),
        "start_unix_nano": pa.array(start_ns), "end_unix_nano": pa.array(end_ns),
        "start_time": pa.array(start_ns // 1000).cast(pa.timestamp("us")).cast(pa.timestamp("us", tz="UTC")),
        "end_time": pa.array(end_ns // 1000).cast(pa.timestamp("us")).cast(pa.timestamp("us", tz="UTC")),
        "duration_s": pa.array((end_ns - start_ns) / 1e9), "status_code": const(0, "status_code"),
        "service_name": const("bench", "service_name"), "scope_name": const("bench", "scope_name"),
        "target_id": pa.array(target_names[idx % targets].tolist(), pa.string()),
        "role": const("application", "role"), "operation": const("chat", "operation"),
        "provider": const("openai", "provider"), "request_model": const("gpt-4o-mini", "request_model"),
        "response_model": const("gpt-4o-mini-2024-07-18", "response_model"),
        "input_tokens": pa.array(input_tokens), "output_tokens": pa.array(output_tokens),
        "cache_read_tokens": const(40, "cache_read_tokens"), "cost_usd": const(0.000123, "cost_usd"),
        "retries": const(0, "retries"), "attributes": attributes,
        "resource": const('{"service.name":"bench"}', "resource"),
        "events": const('[{"name":"gen_ai.choice","time_unix_nano":0,"attributes":{"index":0}}]', "events"),
    }
    arrays = [columns[c].cast(_ARROW_TYPES[c]) if c in columns else pa.nulls(n, _ARROW_TYPES[c])
              for c in _ROW_COLUMNS]
    return pa.table(arrays, names=list(_ROW_COLUMNS))


def expected_input_tokens(start: int, count: int, targets: int) -> dict[str, int]:
    """Sum of input_tokens per target for spans start..start+count-1 (independent of the table)."""
    idx = np.arange(start, start + count, dtype=np.int64)
    tokens = 100 + idx % 50
    return {f"bot-{t}": int(tokens[idx % targets == t].sum()) for t in range(targets)}


def check_input_tokens_windows(store, total: int, targets: int, bench: str) -> None:
    """Exit with the difference unless every target's `input_tokens` window (scope all) equals the
    sum of spans 0..total-1 (computed independently of the store)."""
    expected = expected_input_tokens(0, total, targets)
    got = dict(store.query(
        "select target_id, value from windows where metric = 'input_tokens' and scope = 'all'").rows)
    if got != {k: float(v) for k, v in expected.items()}:
        raise SystemExit(f"{bench} bench: input_tokens windows {got} != expected {expected}")


def load(local, total: int, targets: int, chunk: int = 200_000) -> None:
    """Insert `total` history spans into a `LocalStore` without refreshing windows, refresh every
    window once, checkpoint (the timed writes then pay only their own checkpoints, as in a collector
    that has been running)."""
    for s in range(0, total, chunk):
        local.windows.write(span_table(s, min(chunk, total - s), targets), refresh_windows=False)
    local.windows.refresh_all_windows()
    local.windows.con.execute("CHECKPOINT")
