"""Both `pip install .` (a built wheel) and `pip install -e .` import every module."""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {"instrumentation": "meritlens.instrumentation", "collector": "meritlens.collector",
            "analytics": "meritlens.analytics"}


def _all_modules() -> list[str]:
    modules = []
    for folder, package in PACKAGES.items():
        modules.append(package)
        for path in sorted([*(ROOT / folder).glob("*.py"), *(ROOT / folder).glob("*.c")]):  # .c: extensions
            if path.stem != "__init__":
                modules.append(f"{package}.{path.stem}")
    return modules


def test_every_module_imports_from_this_checkout():
    for name in _all_modules():
        module = importlib.import_module(name)
        assert Path(module.__file__).resolve().is_relative_to(ROOT), name


@pytest.mark.slow
def test_the_built_wheel_imports_every_module_in_a_fresh_venv(tmp_path):
    dist = tmp_path / "dist"
    source = tmp_path / "source"  # build from a copy so the checkout gets no build/ or egg-info
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".venv", ".git", "__pycache__", "*.duckdb*", "build"))
    built = subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist),
                            str(source)], capture_output=True, text=True)
    assert built.returncode == 0, built.stdout + built.stderr
    wheels = list(dist.glob("meritlens-*.whl"))
    assert len(wheels) == 1
    with zipfile.ZipFile(wheels[0]) as wheel:  # the dashboard's page ships inside the package
        page = {f"meritlens/collector/serve/static/{n}" for n in ("index.html", "app.js", "dashboard.css")}
        assert page <= set(wheel.namelist())
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", str(wheels[0])],
                   check=True, capture_output=True)
    # Dependencies come from the test venv (no download); meritlens itself only from the wheel.
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    (Path(site) / "_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    script = (
        "import importlib, sys\n"
        f"names = {_all_modules()!r}\n"
        "for n in names:\n"
        "    m = importlib.import_module(n)\n"
        f"    assert m.__file__.startswith({site!r}), (n, m.__file__)\n"
        "print(len(names))\n"
    )
    out = subprocess.run([str(python), "-c", script], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) == len(_all_modules())
    console = env_dir / "bin" / "meritlens"
    help_out = subprocess.run([str(console), "--help"], capture_output=True, text=True)
    assert help_out.returncode == 0 and "serve" in help_out.stdout
