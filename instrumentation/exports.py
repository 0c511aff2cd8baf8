"""A module's public names imported from the modules that define them on first use (PEP 562), so
that a process that needs a few of them (the collector reads attribute names and the window model)
does not load the rest. The `__init__` of `meritlens.instrumentation` and `meritlens.analytics`, and
`meritlens.analytics.engine`, declare their names with it; it lives in the lowest package so that
each of them can import it."""

from __future__ import annotations

import importlib
import sys
from typing import Callable


def lazy_exports(package: str, exports: dict[str, tuple[str, ...]], *, submodules: tuple[str, ...] = (),
                 base: str | None = None) -> tuple[list[str], Callable[[str], object], Callable[[], list[str]]]:
    """``(__all__, __getattr__, __dir__)`` for the module ``package``: each name in
    ``exports[module]`` is taken from ``base.module`` (``base`` defaults to ``package``) when first
    asked for (then kept in ``package``), and each name in ``submodules`` is that module itself."""
    base = base or package
    module_of = {name: module for module, names in exports.items() for name in names}
    names = sorted([*module_of, *submodules])
    namespace = vars(sys.modules[package])

    def __getattr__(name: str) -> object:
        if name in submodules:
            value = importlib.import_module(f"{base}.{name}")
        elif name in module_of:
            value = getattr(importlib.import_module(f"{base}.{module_of[name]}"), name)
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(names))

    return names, __getattr__, __dir__
