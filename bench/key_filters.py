"""Memory and wrong "maybe"s of the store's key filters (issue 7, targets 2 and 5).

Two measurements, each in this process:

* ``--store N``: N spans of `bench/_history.py` (one trace per span) written through `SpanStore.write`
  in 16,384-row batches, as the collector's mover does; prints, every ~590k spans, the window
  processor's filter, the locator's filter of span keys and the locator's blocks (MiB).
* ``--keys N``: N random keys fed to `GrowingKeyFilter` at its defaults (the window processor's filter,
  32 MiB bound) in 500k-key batches; prints its memory and the share of 2M other keys it wrongly
  says "maybe" to, at 6M, 8M, 10M, 12M and 16M keys (past ~8M its last filter takes every key).

Check: every key added is still found (a filter never forgets), and the store holds every span.

usage: python bench/key_filters.py --store 1800000 --keys 16000000
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _history import span_table  # noqa: E402

from meritlens.collector._keyfilter import GrowingKeyFilter  # noqa: E402
from meritlens.collector._store import SpanStore  # noqa: E402

MIB = 2**20
BATCH = 16_384


def store_filters(total: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = SpanStore(os.path.join(tmp, "s.duckdb"))
        store.start()
        try:
            print("| stored spans | window filter | locator's span-key filter | locator's blocks | total |")
            print("|---|---|---|---|---|")
            written = 0
            while written < total:
                count = min(BATCH, total - written)
                store.write(span_table(written, count, 4))
                written += count
                if written % (BATCH * 36) < BATCH or written == total:
                    window, span_keys = store._keys.nbytes, store._locator._all.nbytes
                    blocks = store._locator.nbytes - span_keys
                    print(f"| {written:,} | {window / MIB:.2f} MiB ({store._keys.layers} filters) | "
                          f"{span_keys / MIB:.2f} MiB | {blocks / MIB:.2f} MiB ({store._locator.blocks}) | "
                          f"{(window + span_keys + blocks) / MIB:.2f} MiB |", flush=True)
            stored = store.query("select count(*) from spans").rows[0][0]
            if stored != total:
                raise SystemExit(f"key filters bench: {stored} spans stored, {total} written")
        finally:
            store.shutdown()


def tail(total: int) -> None:
    rng = np.random.default_rng(3)
    others = rng.integers(0, 2**63, 2_000_000, dtype=np.int64).astype(np.uint64)
    f = GrowingKeyFilter(32 * MIB)
    first_batch = None
    added = 0
    print("| keys | memory | wrong \"maybe\"s |")
    print("|---|---|---|")
    for checkpoint in [n for n in (6_000_000, 8_000_000, 10_000_000, 12_000_000, 16_000_000) if n <= total] or [total]:
        while added < checkpoint:
            batch = rng.integers(0, 2**63, min(500_000, checkpoint - added), dtype=np.int64).astype(np.uint64)
            first_batch = batch if first_batch is None else first_batch
            f.add(batch)
            added += batch.size
        print(f"| {added:,} | {f.nbytes / MIB:.2f} MiB | {f.may_contain(others).mean() * 100:.4f}% |", flush=True)
    if first_batch is not None and not f.may_contain(first_batch).all():
        raise SystemExit("key filters bench: a key added first is no longer found")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", type=int, default=0, help="spans to write through a SpanStore")
    parser.add_argument("--keys", type=int, default=0, help="random keys to feed the window processor's filter")
    args = parser.parse_args()
    if not (args.store or args.keys):
        parser.error("give --store N, --keys N or both")
    if args.store:
        store_filters(args.store)
    if args.keys:
        tail(args.keys)
    print("key filters: correctness checks passed")


if __name__ == "__main__":
    main()
