"""`meritlens serve` with benchmark-only changes, to separate the receive path's cost from the rest.

usage: python bench/_serve_variant.py [--obvious] [--no-refresh] serve --db ... (the usual serve options)

* --obvious: requests are checked and normalized by the pre-issue-7 walk (bench/_obvious_normalize.py)
  instead of `meritlens.collector._ingest.prepare`: the obvious-design baseline, same server otherwise;
* --no-refresh: `SpanStore.write` commits spans without refreshing windows, so a run measures receiving
  and storing spans only. Not a product setting: `windows` stays stale, and bench/ingest.py checks the
  stored spans instead of the windows in this mode;
* --duckdb-setting=NAME=VALUE (repeatable): a DuckDB setting added to those the store opens its
  database with (an experiment; settings the store sets itself are overridden).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def _use_obvious_walk() -> None:
    import _obvious_normalize as obvious

    from meritlens.collector import _ingest, _otlp

    def prepare(decoded: _otlp.DecodedRequest, limits: _otlp.SpanLimits, options):
        if decoded.request is None:  # the receivers parse protobuf only as its lean view; the walk needs it whole
            decoded = _otlp.decode(decoded.body, _otlp.PROTOBUF)
        obvious.check_spans(decoded.request, limits, decoded.refusals)
        batch = obvious.normalize(decoded.request, decoded.refusals, options)
        return batch, (batch.to_arrow() if batch.size else None)

    _ingest.prepare = prepare


def _skip_window_refresh() -> None:
    from meritlens.collector._store import SpanStore

    write = SpanStore.write

    def write_without_refresh(self, table, *, refresh_windows: bool = True):
        return write(self, table, refresh_windows=False)

    SpanStore.write = write_without_refresh


def _add_duckdb_settings(settings: list[str]) -> None:
    from meritlens.collector._settings import choose_arrow_memory_pool

    choose_arrow_memory_pool()  # as `meritlens serve` does, before the store's modules import pyarrow
    from meritlens.collector import _store

    _store._CONFIG.update(setting.split("=", 1) for setting in settings)


if __name__ == "__main__":
    args = sys.argv[1:]
    settings = [a.split("=", 1)[1] for a in args if a.startswith("--duckdb-setting=")]
    args = [a for a in args if not a.startswith("--duckdb-setting=")]
    if settings:
        _add_duckdb_settings(settings)
    if "--obvious" in args:
        args.remove("--obvious")
        _use_obvious_walk()
    if "--no-refresh" in args:
        args.remove("--no-refresh")
        _skip_window_refresh()
    from meritlens.collector._cli import main

    sys.argv = ["meritlens", *args]
    main()
