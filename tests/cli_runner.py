"""Running the real `meritlens` command line in tests: one helper for every test that needs the CLI
as a user runs it (a subprocess of the venv's console script)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests.collector.collector_proc import MERITLENS

__all__ = ["MERITLENS", "clean_env", "run_cli", "run_sql"]


def clean_env(extra: dict | None = None) -> dict[str, str]:
    """This process's environment without MERITLENS_* settings (a test names each one it means), plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MERITLENS_")}
    env.update(extra or {})
    return env


def run_cli(*args: str, check: bool = True, env: dict | None = None, cwd=None,
            timeout: float = 180) -> subprocess.CompletedProcess:
    """`meritlens ARGS...`; with ``check``, a non-zero exit fails the test showing its stderr."""
    proc = subprocess.run([MERITLENS, *args], capture_output=True, text=True, env=clean_env(env), cwd=cwd,
                          timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"meritlens {' '.join(args)} exited {proc.returncode}: {proc.stderr}")
    return proc


def run_sql(query: str, *, db: Path | None = None, url: str | None = None) -> list[dict]:
    """Rows of a read-only query through `meritlens sql --format json`."""
    where = ["--db", str(db)] if db is not None else ["--url", url]
    return json.loads(run_cli("sql", query, *where, "--format", "json").stdout)
