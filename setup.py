"""The native part of meritlens; everything else is declared in pyproject.toml."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        # The receive path's per-span scanner (collector/process/_spanscan.c); _normalize holds the reference walk.
        Extension("meritlens.collector.process._spanscan", ["collector/process/_spanscan.c"], extra_compile_args=["-O2", "-Wall"]),
    ],
)
