"""Debian's Prometheus server for tests: on a free loopback port, a temporary storage directory, a
one-second scrape interval, stopped by the test."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import httpx

from tests.collector.collector_proc import free_port

PROMETHEUS = os.environ.get("MERITLENS_TEST_PROMETHEUS", "/usr/bin/prometheus")
PROMTOOL = str(Path(PROMETHEUS).with_name("promtool"))


def require_prometheus() -> str:
    if not os.access(PROMETHEUS, os.X_OK):
        raise AssertionError(f"{PROMETHEUS} is missing: `make test` installs Debian's prometheus package when run "
                             "as root (apt-get install --no-install-recommends prometheus)")
    return PROMETHEUS


class PrometheusProcess:
    """`prometheus` with the given config text (its scrape and evaluation intervals forced to 1 s)."""

    def __init__(self, workdir: Path, config: str):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.config_path = self.workdir / "prometheus.yml"
        self.config_path.write_text("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n" + config)
        self.log_path = self.workdir / "prometheus.log"
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> PrometheusProcess:
        command = [require_prometheus(), f"--config.file={self.config_path}",
                   f"--storage.tsdb.path={self.workdir / 'data'}", f"--web.listen-address=127.0.0.1:{self.port}",
                   "--storage.tsdb.retention.time=1h", "--log.level=warn"]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir)
        deadline = time.monotonic() + 60
        while True:
            assert self.proc.poll() is None, self.log_path.read_text(errors="replace")
            try:
                if httpx.get(self.url + "/-/ready", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "prometheus did not become ready:\n" + self.log_path.read_text()
            time.sleep(0.2)

    def __exit__(self, *exc) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def api(self, path: str, **params) -> dict:
        body = httpx.get(self.url + "/api/v1/" + path, params=params, timeout=10).json()
        assert body["status"] == "success", body
        return body["data"]

    def wait_for(self, query: str, check=bool, timeout: float = 60.0) -> list[dict]:
        """The instant-query result of ``query`` once ``check(result)`` holds (scrapes take a moment)."""
        deadline = time.monotonic() + timeout
        while True:
            result = self.api("query", query=query)["result"]
            if check(result):
                return result
            assert time.monotonic() < deadline, f"{query!r} gave {result!r}:\n{self.log_path.read_text()}"
            time.sleep(0.3)
