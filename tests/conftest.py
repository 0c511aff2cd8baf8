"""Shared fixtures: a real `meritlens serve` process on a free loopback port, and the CLI."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent
MERITLENS = str(BIN / "meritlens")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class CollectorProcess:
    """A `meritlens serve` subprocess on its own DuckDB file and ports."""

    def __init__(self, db: Path, extra_args: tuple[str, ...] = (), env: dict | None = None):
        self.db = db
        self.http_port = free_port()
        self.grpc_port = free_port()
        self.extra_args = extra_args
        self.env = env
        self.proc: subprocess.Popen | None = None
        self.log = db.with_suffix(".log")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def traces_url(self) -> str:
        return self.url + "/v1/traces"

    def start(self, timeout: float = 30.0) -> "CollectorProcess":
        args = [MERITLENS, "serve", "--db", str(self.db), "--http-port", str(self.http_port),
                "--grpc-port", str(self.grpc_port), *self.extra_args]
        env = {**os.environ, **(self.env or {})}
        self._log_fh = open(self.log, "ab")
        self.proc = subprocess.Popen(args, stdout=self._log_fh, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"collector exited with {self.proc.returncode}: {self.log.read_text()}")
            try:
                with urllib.request.urlopen(self.url + "/healthz", timeout=1) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"collector did not start: {self.log.read_text()}")

    def stop(self, sig: int | None = None) -> int:
        if self.proc is None:
            return 0
        if sig is None:
            self.proc.terminate()
        else:
            self.proc.send_signal(sig)
        try:
            code = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self._log_fh.close()
        self.proc = None
        return code

    def sql(self, query: str) -> list[dict]:
        """Rows of a read-only query, through the `meritlens sql` CLI (JSON output)."""
        return run_sql(query, db=self.db)


def run_cli(*args: str, check: bool = True, env: dict | None = None, cwd=None) -> subprocess.CompletedProcess:
    proc = subprocess.run([MERITLENS, *args], capture_output=True, text=True, env={**os.environ, **(env or {})}, cwd=cwd)
    if check and proc.returncode != 0:
        raise AssertionError(f"meritlens {' '.join(args)} exited {proc.returncode}: {proc.stderr}")
    return proc


def run_sql(query: str, *, db: Path) -> list[dict]:
    return json.loads(run_cli("sql", query, "--db", str(db), "--format", "json").stdout)


@pytest.fixture
def collector(tmp_path):
    """A running collector on a fresh DuckDB file; stopped (SIGTERM) after the test."""
    proc = CollectorProcess(tmp_path / "meritlens.duckdb").start()
    yield proc
    proc.stop()
