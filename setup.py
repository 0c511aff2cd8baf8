"""The optional native part of meritlens; everything else is declared in pyproject.toml."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        # The receive path's per-span scanner (collector/process/_spanscan.c). Optional: where no C compiler
        # is present (an application host) the install goes on without it and the collector uses the
        # Python walk in _normalize, the reference it is tested against.
        Extension("meritlens.collector.process._spanscan", ["collector/process/_spanscan.c"],
                  extra_compile_args=["-O2", "-Wall"], optional=True),
    ],
)
