"""A real Spark standalone cluster on loopback for tests: a master and two workers started from
pyspark's own launcher (bin/spark-class), each a JVM of its own process group, stopped at the end."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pyspark

from tests.collector.collector_proc import free_ports
from tests.prerequisites import require_program

SPARK_HOME = Path(pyspark.__file__).parent
LOOPBACK_ENV = {"SPARK_LOCAL_IP": "127.0.0.1", "SPARK_HOME": str(SPARK_HOME)}
"""Spark binds to the host's interface address unless told otherwise: everything stays on loopback."""
JAVA = os.environ.get("MERITLENS_TEST_JAVA", "/usr/bin/java")


def require_java() -> str:
    return require_program(JAVA, what="a Java 17 runtime for the Spark lake tests",
                           install="apt-get install --no-install-recommends openjdk-17-jre-headless")


class SparkCluster:
    def __init__(self, work: Path, workers: int = 2):
        self.work = work
        self.workers = workers
        self.port, self.ui_port = free_ports(2)
        self.procs: list[subprocess.Popen] = []

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _launch(self, name: str, *args: str) -> None:
        log = open(self.work / f"{name}.log", "ab")
        env = {**os.environ, **LOOPBACK_ENV, "SPARK_LOG_DIR": str(self.work), "SPARK_WORKER_DIR": str(self.work)}
        self.procs.append(subprocess.Popen([str(SPARK_HOME / "bin" / "spark-class"), *args], stdout=log,
                                           stderr=subprocess.STDOUT, env=env, start_new_session=True))
        log.close()

    def start(self, timeout: float = 120.0) -> SparkCluster:
        return self.launch().wait_ready(timeout)

    def launch(self) -> SparkCluster:
        """Start the daemons without waiting for them (`wait_ready`)."""
        require_java()
        self._launch("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                     "--port", str(self.port), "--webui-port", str(self.ui_port))
        for i in range(self.workers):
            port, ui = free_ports(2)
            self._launch(f"worker{i}", "org.apache.spark.deploy.worker.Worker", self.master_url, "--host", "127.0.0.1",
                         "--port", str(port), "--webui-port", str(ui), "--cores", "1", "--memory", "1g",
                         "--work-dir", str(self.work / f"worker{i}"))
        return self

    def wait_ready(self, timeout: float = 120.0) -> SparkCluster:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for proc in self.procs:
                assert proc.poll() is None, f"a Spark daemon exited with {proc.returncode}:\n{self.logs()}"
            if self.alive_workers() == self.workers:
                return self
            time.sleep(0.5)
        raise RuntimeError(f"the Spark cluster did not come up in {timeout}s:\n{self.logs()}")

    def alive_workers(self) -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=2) as response:
                return int(json.loads(response.read()).get("aliveworkers", 0))
        except OSError:
            return 0

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace")[-3000:] for p in sorted(self.work.glob("*.log")))

    def stop(self) -> None:
        """SIGTERM every daemon's process group (a worker's executors with it), then SIGKILL what is left."""
        for proc in reversed(self.procs):
            _signal_group(proc, signal.SIGTERM)
        for proc in reversed(self.procs):
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                pass
            _signal_group(proc, signal.SIGKILL)
            proc.wait()
        self.procs = []


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass
