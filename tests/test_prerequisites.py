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
    assert failure and "apt-get install chromium" in failure[0] and "no-chromium" in failure[0], ran.stdout
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
    assert failure and "apt-get install openjdk-17-jre-headless" in failure[0] and "no-java" in failure[0], ran.stdout
    assert "Traceback" not in ran.stdout, ran.stdout


def test_make_test_installs_prerequisites_only_when_missing_and_says_so():
    makefile = (ROOT / "Makefile").read_text()
    for target, program, package in (("browser", "CHROMIUM", "chromium"), ("prometheus", "PROMETHEUS", "prometheus"),
                                     ("java", "JAVA", "openjdk-17-jre-headless")):
        recipe = makefile.split(f"\n{target}:", 1)[1].split("\n\n", 1)[0]
        assert "/dev/null" not in recipe, target  # what it installs is printed
        assert 'id -u' in recipe and f"-x $({program})" in recipe, target  # only when missing, only as root
        assert "echo" in recipe and f"apt-get install -y -qq {package}" in recipe, target
    prerequisites = makefile.split("\nprerequisites:", 1)[1].split("\n", 1)[0]
    assert prerequisites.split() == ["browser", "prometheus", "java"]
    test_target = makefile.split("\ntest:", 1)[1].split("\n", 1)[0]
    assert "prerequisites" in test_target


def test_make_run_installs_only_what_running_needs(tmp_path):
    planned = subprocess.run(["make", "-n", "run", f"VENV={tmp_path / 'venv'}"], cwd=ROOT, capture_output=True,
                             text=True, timeout=60)
    assert planned.returncode == 0, planned.stderr
    installs = [line for line in planned.stdout.splitlines() if "pip install" in line and "-e" in line]
    assert installs and all("'.[server]'" in line for line in installs), planned.stdout
    planned = subprocess.run(["make", "-n", "test", f"VENV={tmp_path / 'venv'}"], cwd=ROOT, capture_output=True,
                             text=True, timeout=60)
    assert "'.[server,test]'" in planned.stdout, planned.stdout


def test_the_files_a_run_leaves_are_ignored_by_git():
    names = ["meritlens.duckdb", "meritlens.duckdb.wal", "meritlens.duckdb.staged", "meritlens.duckdb.collector",
             "meritlens-runs/support-bot/all/evaluation.json", "examples/assessment/meritlens.duckdb.staged"]
    checked = subprocess.run(["git", "check-ignore", "--no-index", *names], cwd=ROOT, capture_output=True, text=True)
    assert sorted(checked.stdout.split()) == sorted(names), checked.stdout
