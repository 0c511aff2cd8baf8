"""A test whose outside program is missing fails with one line naming it and how to install it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_missing_chromium_fails_in_one_line_naming_the_package(tmp_path):
    (tmp_path / "test_needs_browser.py").write_text(
        "from tests.browser import require_chromium\n\n"
        "def test_needs_browser():\n"
        "    require_chromium()\n")
    env = dict(os.environ, MERITLENS_TEST_CHROMIUM=str(tmp_path / "no-chromium"), PYTHONPATH=str(ROOT))
    ran = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                          "--rootdir", str(tmp_path), str(tmp_path / "test_needs_browser.py")],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert ran.returncode == 1, ran.stdout + ran.stderr
    failure = [line for line in ran.stdout.splitlines() if "missing prerequisite" in line]
    assert failure, ran.stdout
    assert "apt-get install --no-install-recommends chromium" in failure[0] and "no-chromium" in failure[0], ran.stdout
    assert "Traceback" not in ran.stdout and "def require_chromium" not in ran.stdout, ran.stdout


def test_missing_java_fails_the_spark_tests_in_one_line_naming_the_package(tmp_path):
    (tmp_path / "test_needs_java.py").write_text(
        "from tests.collector.lake.spark_cluster import SparkCluster\n\n"
        "def test_needs_java(tmp_path):\n"
        "    SparkCluster(tmp_path).launch()\n")
    env = dict(os.environ, MERITLENS_TEST_JAVA=str(tmp_path / "no-java"), PYTHONPATH=str(ROOT))
    ran = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                          "--rootdir", str(tmp_path), str(tmp_path / "test_needs_java.py")],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert ran.returncode == 1, ran.stdout + ran.stderr
    failure = [line for line in ran.stdout.splitlines() if "missing prerequisite" in line]
    assert failure, ran.stdout
    assert "apt-get install --no-install-recommends openjdk-17-jre-headless" in failure[0], ran.stdout
    assert "no-java" in failure[0], ran.stdout
    assert "Traceback" not in ran.stdout, ran.stdout


def test_make_test_installs_prerequisites_only_when_missing_without_recommends_and_says_so():
    makefile = (ROOT / "Makefile").read_text()
    readme = " ".join((ROOT / "README.md").read_text().split())
    # only what the tests run: Debian's recommended packages (for prometheus: a node exporter,
    # smartmontools, ipmitool, nvme-cli, ...) are left out, and the README says so
    apt = makefile.split("\nAPT_INSTALL := ", 1)[1].split("\n", 1)[0]
    assert apt.split()[-4:] == ["install", "-y", "-qq", "--no-install-recommends"], apt
    for target, program, package in (("browser", "CHROMIUM", "chromium"), ("prometheus", "PROMETHEUS", "prometheus"),
                                     ("java", "JAVA", "openjdk-17-jre-headless")):
        recipe = makefile.split(f"\n{target}:", 1)[1].split("\n\n", 1)[0]
        assert "/dev/null" not in recipe, target  # what it installs is printed
        assert 'id -u' in recipe and f"-x $({program})" in recipe, target  # only when missing, only as root
        assert "echo" in recipe and f"$(APT_INSTALL) {package}" in recipe, target
        assert recipe.count(f"apt-get install --no-install-recommends {package}") == 2, target  # both messages
        assert f"apt-get install --no-install-recommends {package}" in readme, package
    prerequisites = makefile.split("\nprerequisites:", 1)[1].split("\n", 1)[0]
    assert prerequisites.split() == ["browser", "prometheus", "java"]
    test_target = makefile.split("\ntest:", 1)[1].split("\n", 1)[0]
    assert "prerequisites" in test_target


def test_make_run_installs_only_what_running_needs(tmp_path):
    planned = subprocess.run(["make", "-n", "run", f"VENV={tmp_path / 'venv'}"], cwd=ROOT, capture_output=True,
                             text=True, timeout=60)
    assert planned.returncode == 0, planned.stderr
    installs = [line for line in planned.stdout.splitlines() if "pip install" in line and "-e" in line]
    # the collector, and what the README's examples import (openai, anthropic, httpx2)
    assert installs and all("'.[server,examples]'" in line for line in installs), planned.stdout
    planned = subprocess.run(["make", "-n", "test", f"VENV={tmp_path / 'venv'}"], cwd=ROOT, capture_output=True,
                             text=True, timeout=60)
    assert "'.[server,examples,test]'" in planned.stdout, planned.stdout


def test_the_files_a_run_leaves_are_ignored_by_git():
    names = ["meritlens.duckdb", "meritlens.duckdb.wal", "meritlens.duckdb.staged", "meritlens.duckdb.collector",
             "meritlens-runs/support-bot/all/evaluation.json", "examples/assessment/meritlens.duckdb.staged",
             # what README.md and docs/scale-out.md create: a span lake, an export, the plugin example's install
             "lake/spans/c0-1-a.parquet", "out/spans.parquet", "plugins/calls_per_task/__init__.py",
             ".meritlens-lake/c0.staging"]
    checked = subprocess.run(["git", "check-ignore", "--no-index", *names], cwd=ROOT, capture_output=True, text=True)
    assert sorted(checked.stdout.split()) == sorted(names), checked.stdout
