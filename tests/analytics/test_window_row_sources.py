"""The definitions digest covers every module whose code computes a window row: a change to any of
them recomputes the stored windows at the next start."""

from __future__ import annotations

import ast
from pathlib import Path

from meritlens.analytics import _evidence

ANALYTICS = Path(_evidence.__file__).parent
PACKAGE = "meritlens.analytics."


def _analytics_imports(name: str) -> set[str]:
    tree = ast.parse((ANALYTICS / name).read_text())
    modules = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(PACKAGE):
            modules.add(node.module.removeprefix(PACKAGE) + ".py")
        elif isinstance(node, ast.ImportFrom) and node.module == PACKAGE.rstrip("."):
            modules.update(f"{a.name}.py" for a in node.names if (ANALYTICS / f"{a.name}.py").exists())
    return modules


def test_every_module_the_row_computation_imports_is_digested():
    # the processor's rows come from the sample SQL (`_samples`) through the accumulator (of the windows
    # and of the windows by time)
    reached, todo = set(), ["_samples.py", "_accumulate.py", "_time_buckets.py", "_evidence.py"]
    while todo:
        name = todo.pop()
        if name not in reached:
            reached.add(name)
            todo.extend(_analytics_imports(name))
    assert reached <= set(_evidence._ROW_SOURCES), sorted(reached - set(_evidence._ROW_SOURCES))
    assert all((ANALYTICS / name).is_file() for name in _evidence._ROW_SOURCES)


def test_the_digest_follows_the_scale_and_file():
    digest = _evidence.window_definitions_digest("a.duckdb", 7)
    assert digest == _evidence.window_definitions_digest("a.duckdb", 7)
    assert len({digest, _evidence.window_definitions_digest("b.duckdb", 7),
                _evidence.window_definitions_digest("a.duckdb", 8)}) == 3
