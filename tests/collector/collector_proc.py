"""Running the real `meritlens serve` process in tests, and building OTLP requests to send it."""

from __future__ import annotations

import math
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import httpx
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

MERITLENS = str(Path(sys.executable).with_name("meritlens"))
BASE_TIME_NS = 1_767_000_000_000_000_000


_HANDED_OUT: set[int] = set()


def free_ports(count: int) -> list[int]:
    """`count` distinct loopback ports, none handed out before by this test process.

    All sockets stay bound until every port is chosen, so the kernel cannot return one port twice.
    """
    sockets, ports = [], []
    try:
        while len(ports) < count:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
            if port not in _HANDED_OUT:
                _HANDED_OUT.add(port)
                ports.append(port)
    finally:
        for sock in sockets:
            sock.close()
    return ports


def free_port() -> int:
    return free_ports(1)[0]


def _port_taken(log: str) -> bool:
    text = log.lower()
    return "already in use" in text or "cannot listen" in text


class CollectorProcess:
    """`meritlens serve` on free loopback ports (kept across restarts), logging to a file."""

    def __init__(self, db: Path, *, args: tuple[str, ...] = (), token: str | None = None,
                 ca_file: str | None = None, env: dict | None = None, http_port: int | None = None,
                 grpc_port: int | None = None):
        self.db = Path(db)
        chosen = free_ports(2)
        self.http_port = http_port or chosen[0]
        self.grpc_port = grpc_port or chosen[1]
        # Ports we chose may be taken by another process between choosing and binding; then the
        # first start moves to fresh ones. Ports the test fixed are never changed.
        self._ports_chosen_here = http_port is None and grpc_port is None
        self.args = tuple(args)
        self.token = token
        self.ca_file = ca_file
        self.env = env
        self.log_path = self.db.with_suffix(".log")
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    @property
    def scheme(self) -> str:
        return "https" if "--tls-cert" in self.args else "http"

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.http_port}"

    @property
    def grpc_target(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def client(self, **kwargs) -> httpx.Client:
        verify = ssl.create_default_context(cafile=self.ca_file) if self.ca_file else True
        return httpx.Client(base_url=self.url, headers=self.headers(), verify=verify, **kwargs)

    def start(self, timeout: float = 30.0) -> CollectorProcess:
        command = [
            MERITLENS, "serve", "--db", str(self.db),
            "--http-port", str(self.http_port), "--grpc-port", str(self.grpc_port), *self.args,
        ]
        env = dict(os.environ)
        env.pop("MERITLENS_TOKEN", None)
        env.pop("MERITLENS_TOKEN_FILE", None)
        env.update(self.env or {})
        log = open(self.log_path, "ab")
        log.write(f"--- start {self.starts}: {' '.join(command)}\n".encode())
        log.flush()
        self.proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        log.close()
        self.starts += 1
        try:
            self.wait_ready(timeout)
        except RuntimeError as error:
            if not (self._ports_chosen_here and self.starts == 1 and _port_taken(str(error))):
                raise
            self.proc = None
            self.http_port, self.grpc_port = free_ports(2)
            self.starts = 0
            return self.start(timeout)
        return self

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with self.client(timeout=2.0) as client:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"collector exited with {self.proc.returncode}:\n{self.log()}")
                try:
                    if client.get("/healthz").status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                time.sleep(0.05)
        raise RuntimeError(f"collector did not become ready in {timeout}s:\n{self.log()}")

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def wait_for_log(self, pattern: str | re.Pattern, timeout: float = 30.0) -> re.Match:
        """The first match of ``pattern`` (a regex, or plain text) in the collector's log, waiting
        for it: some lines come just after the collector starts listening."""
        regex = pattern if isinstance(pattern, re.Pattern) else re.compile(re.escape(pattern))
        deadline = time.monotonic() + timeout
        while not (match := regex.search(self.log())):
            assert time.monotonic() < deadline, self.log()
            time.sleep(0.05)
        return match

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM, then wait; returns the exit code."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError(f"collector did not stop within {timeout}s after SIGTERM:\n{self.log()}") from None
        self.proc = None
        return code

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        self.proc = None

    def _status_bytes(self, field: str) -> int:
        with open(f"/proc/{self.proc.pid}/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
        raise RuntimeError(f"{field} not found")

    def peak_rss_bytes(self) -> int:
        """The process's peak resident memory (VmHWM)."""
        return self._status_bytes("VmHWM")

    def rss_bytes(self) -> int:
        return self._status_bytes("VmRSS")

    def anonymous_bytes(self) -> int:
        """The process's anonymous resident memory (RssAnon): what `--memory-limit` bounds."""
        return self._status_bytes("RssAnon")

    def sql(self, query: str) -> dict:
        with self.client(timeout=30.0) as client:
            response = client.post("/api/sql", json={"sql": query})
        response.raise_for_status()
        return response.json()

    def __enter__(self) -> CollectorProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        if self.proc is not None:
            try:
                self.stop()
            finally:
                self.kill9()


def run_serve_refused(db: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """`meritlens serve` on ``db`` with the environment variables ``env`` added, run to its exit: for
    settings it must refuse before it opens anything."""
    return subprocess.run([MERITLENS, "serve", "--db", str(db), "--no-grpc", "--http-port", "0"],
                          capture_output=True, text=True, env=dict(os.environ, **env), timeout=60)


def span_ids(batch: int, index: int) -> tuple[bytes, bytes]:
    """Deterministic, valid (trace_id, span_id) of span ``index`` of batch ``batch``."""
    trace_id = (batch + 1).to_bytes(8, "big") + (index // 4 + 1).to_bytes(8, "big")
    span_id = (batch + 1).to_bytes(4, "big") + (index + 1).to_bytes(4, "big")
    return trace_id, span_id


def make_request(batch: int, count: int, *, targets: int = 3, tokens: bool = True) -> ExportTraceServiceRequest:
    """A request of ``count`` small application spans spread over ``targets`` targets."""
    request = ExportTraceServiceRequest()
    rs = request.resource_spans.add()
    kv = rs.resource.attributes.add()
    kv.key, kv.value.string_value = "service.name", "test-app"
    ss = rs.scope_spans.add()
    ss.scope.name = "tests"
    for i in range(count):
        span = ss.spans.add()
        span.trace_id, span.span_id = span_ids(batch, i)
        span.name = "chat m"
        span.kind = 3
        span.start_time_unix_nano = BASE_TIME_NS + (batch * 100_000 + i) * 1000
        span.end_time_unix_nano = span.start_time_unix_nano + 250_000_000 + i
        attr = span.attributes.add()
        attr.key, attr.value.string_value = "meritlens.target.id", f"target-{(batch + i) % targets}"
        if tokens:
            attr = span.attributes.add()
            attr.key, attr.value.int_value = "gen_ai.usage.input_tokens", 10 + i % 7
            attr = span.attributes.add()
            attr.key, attr.value.int_value = "gen_ai.usage.output_tokens", 3 + i % 5
    return request


def assert_same_windows(actual: list[tuple], expected: list[tuple]) -> None:
    """Window rows equal; floating-point values up to summation order (DuckDB aggregates in parallel)."""
    assert len(actual) == len(expected), (len(actual), len(expected))
    for got, want in zip(actual, expected, strict=True):
        assert len(got) == len(want)
        for a, b in zip(got, want, strict=True):
            if isinstance(a, float) and isinstance(b, float):
                assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12), (got, want)
            else:
                assert a == b, (got, want)
