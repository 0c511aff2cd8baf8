"""Imports follow the packages' public faces: no package of the product imports another package's
private modules (nor do the benchmarks, except the collector's parts they time), and the collector
reaches analytics through `meritlens.analytics.engine`, whose names all resolve, without loading
numpy at start."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("instrumentation", "collector", "analytics")


def _imported_modules(path: Path) -> list[tuple[int, str]]:
    modules = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            modules += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules.append((node.lineno, node.module))
            modules += [(node.lineno, f"{node.module}.{a.name}") for a in node.names if a.name.startswith("_")]
    return modules


def test_no_package_imports_another_packages_private_modules():
    crossings = []
    for folder, own in (*((p, p) for p in PACKAGES), ("bench", "collector")):
        for path in (ROOT / folder).rglob("*.py"):
            for line, module in _imported_modules(path):
                parts = module.split(".")
                if parts[0] != "meritlens" or len(parts) < 3 or parts[1] == own:
                    continue
                if any(part.startswith("_") for part in parts[2:]):
                    crossings.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    assert crossings == []


def test_the_engine_names_resolve_and_start_up_loads_no_numpy():
    import meritlens.analytics.engine as engine

    assert all(getattr(engine, name) is not None for name in engine.__all__)
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, meritlens.collector.cli._main, meritlens.collector._settings; "
                               "print(sorted(m for m in ('numpy', 'pydantic') if m in sys.modules))"],
        capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "[]"
