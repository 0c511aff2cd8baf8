"""Shared helpers of the evidence tests: OTLP/JSON spans, a real collector process, the CLI."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from meritlens.instrumentation import conventions as c

MERITLENS = str(Path(sys.executable).with_name("meritlens"))
T0 = 1_700_000_000_000_000_000  # ns


def attribute(key: str, value) -> dict:
    if isinstance(value, bool):
        v = {"boolValue": value}
    elif isinstance(value, int):
        v = {"intValue": str(value)}
    elif isinstance(value, float):
        v = {"doubleValue": value}
    else:
        v = {"stringValue": str(value)}
    return {"key": key, "value": v}


@dataclass
class Span:
    trace_id: str
    span_id: str
    name: str
    start_ns: int
    end_ns: int
    attributes: dict = field(default_factory=dict)
    parent_span_id: str | None = None
    status_code: int = 0
    kind: int = 1

    def to_otlp(self) -> dict:
        out = {
            "traceId": self.trace_id,
            "spanId": self.span_id,
            "name": self.name,
            "kind": self.kind,
            "startTimeUnixNano": str(self.start_ns),
            "endTimeUnixNano": str(self.end_ns),
            "attributes": [attribute(k, v) for k, v in self.attributes.items() if v is not None],
            "status": {"code": self.status_code},
        }
        if self.parent_span_id:
            out["parentSpanId"] = self.parent_span_id
        return out


def export_body(spans: list[Span], service: str = "support-bot") -> bytes:
    """An OTLP/JSON ExportTraceServiceRequest holding ``spans``."""
    return json.dumps({
        "resourceSpans": [{
            "resource": {"attributes": [attribute(c.SERVICE_NAME, service)]},
            "scopeSpans": [{"scope": {"name": "tests"}, "spans": [s.to_otlp() for s in spans]}],
        }]
    }).encode()


class Ids:
    """Deterministic, distinct trace and span ids."""

    def __init__(self, seed: int = 1):
        self.n = seed * 1_000_000

    def trace(self) -> str:
        self.n += 1
        return f"{self.n:032x}"

    def span(self) -> str:
        self.n += 1
        return f"{self.n:016x}"


# --- a real collector ---------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def running_collector(db: Path):
    """Start `meritlens serve` on free loopback ports; yield its URL; stop it with SIGTERM."""
    port = free_port()
    process = subprocess.Popen(
        [MERITLENS, "serve", "--db", str(db), "--http-port", str(port), "--grpc-port", str(free_port())],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(url + "/healthz", timeout=1) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                out, err = process.communicate(timeout=5) if process.poll() is not None else ("", "")
                raise RuntimeError(f"collector did not start (exit {process.poll()}): {err}")
            time.sleep(0.05)
        yield url
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def post_spans(url: str, spans: list[Span]) -> dict:
    request = urllib.request.Request(
        url + "/v1/traces", data=export_body(spans), headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 200
        return json.loads(response.read() or b"{}")


def meritlens(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run the real `meritlens` command line."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MERITLENS_")}
    return subprocess.run([MERITLENS, *args], capture_output=True, text=True, timeout=120, cwd=cwd, env=env)


# --- writing straight into a store (for the property test) ---------------------------------------
def store_spans(store, spans: list[Span]) -> None:
    """Decode and normalize ``spans`` exactly as the receiver does, then write them to ``store``."""
    from meritlens.collector._normalize import normalize
    from meritlens.collector._otlp import JSON, decode

    batch = normalize(decode(export_body(spans), JSON).request)
    assert not batch.refused, batch.refused
    store.write(batch.to_arrow())
