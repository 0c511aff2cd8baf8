"""The collector's C extension (`collector/process/_spanscan.c`, built by `pip install`), or None.

Its users (the span scanner in `_normalize`, the key hashes in `_keyhash`, the Bloom probes in
`_keyfilter`) each keep a Python or DuckDB path for a source tree where it could not be built.
"""

try:
    from meritlens.collector.process import _spanscan as native
except ImportError:  # pragma: no cover - a source tree that was never built
    native = None
