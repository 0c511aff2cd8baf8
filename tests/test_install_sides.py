"""`pip install meritlens` is the application side: pure Python at need, no compiler, no collector
dependencies, and a `meritlens` command that says what to install instead of a traceback."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _build(tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess, list[Path]]:
    """A wheel built from a copy of the checkout (the checkout gets no build/ or egg-info)."""
    source, dist = tmp_path / "source", tmp_path / "dist"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".venv", ".git", "__pycache__", "*.duckdb*", "build",
                                                                "*.so", "meritlens-runs"))
    # PYTHONDONTWRITEBYTECODE makes setuptools warn that it skips byte-compiling: the machine's, not ours.
    environ = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    built = subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist),
                            str(source)], capture_output=True, text=True, env={**environ, **env}, timeout=300)
    return built, sorted(dist.glob("meritlens-*.whl"))


@pytest.mark.slow
def test_a_build_prints_no_warning(tmp_path):
    built, wheels = _build(tmp_path)
    assert built.returncode == 0, built.stdout + built.stderr
    output = (built.stdout + built.stderr).replace(str(tmp_path), "<tmp>")
    warnings = [line for line in output.splitlines() if "warn" in line.lower() or "deprecat" in line.lower()]
    assert warnings == [], "\n".join(warnings)
    with zipfile.ZipFile(wheels[0]) as wheel:
        names = set(wheel.namelist())
    assert "meritlens/collector/serve/static/index.html" in names
    assert "meritlens/analytics/templates/task_quality.j2" in names


@pytest.mark.slow
def test_without_a_compiler_the_application_side_installs_and_the_cli_names_the_server_extra(tmp_path):
    # CC=/bin/false: a host with no C compiler. The span scanner is optional; the build goes on without it.
    built, wheels = _build(tmp_path, CC="/bin/false")
    assert built.returncode == 0, built.stdout + built.stderr
    with zipfile.ZipFile(wheels[0]) as wheel:
        assert not [n for n in wheel.namelist() if n.endswith(".so")]
    env_dir = tmp_path / "app-venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    # The application side's own dependencies, as `pip install meritlens` resolves them (no extras).
    installed = subprocess.run([str(python), "-m", "pip", "install", "--quiet", str(wheels[0])],
                               capture_output=True, text=True, timeout=600)
    assert installed.returncode == 0, installed.stderr
    probe = ("import importlib.util as u\n"
             "from meritlens.instrumentation import configure, observe, instrument\n"
             "print(','.join(m for m in ('click', 'duckdb', 'aiohttp', 'pyarrow') if u.find_spec(m)))\n")
    imported = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, cwd=tmp_path)
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.strip() == "", f"the application side pulled in {imported.stdout.strip()}"
    for args in (["--help"], ["sql", "select 1"], ["serve"]):
        ran = subprocess.run([str(env_dir / "bin" / "meritlens"), *args], capture_output=True, text=True, cwd=tmp_path)
        assert ran.returncode == 2, (args, ran.stdout, ran.stderr)
        assert "Traceback" not in ran.stderr
        lines = ran.stderr.strip().splitlines()
        assert len(lines) == 1 and "pip install 'meritlens[server]'" in lines[0], ran.stderr
