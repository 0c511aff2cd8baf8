"""The collector's own threads carry OS names (`top -H`, `ps -L`, /proc/PID/task/*/comm)."""

from __future__ import annotations

import os
import threading

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from meritlens.collector._osthread import name_os_thread, os_thread_name
from meritlens.instrumentation import conventions as c


def _thread_names(pid: int) -> list[str]:
    names = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/comm") as f:
            names.append(f.read().strip())
    return names


def test_os_names_fit_the_kernels_sixteen_bytes():
    assert os_thread_name("meritlens-writer") == "ml-writer"
    assert os_thread_name("meritlens-windows") == "ml-windows"
    assert os_thread_name("a-very-long-thread-name") == "a-very-long-thr"
    assert len(os_thread_name("meritlens-" + "é" * 20).encode()) <= 15  # never half a character


def test_a_thread_names_itself():
    seen = {}

    def run():
        seen["named"] = name_os_thread("meritlens-probe")
        with open(f"/proc/self/task/{threading.get_native_id()}/comm") as f:
            seen["comm"] = f.read().strip()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert seen == {"named": True, "comm": "ml-probe"}


def test_the_collectors_writer_mover_window_and_decode_threads_are_named(collector):
    before = _thread_names(collector.proc.pid)
    assert "ml-writer" in before and "ml-windows" in before and "ml-mover" in before
    assert "ml-decode" not in before  # made for the first request
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=collector.traces_url)))
    provider.get_tracer("tests").start_span("chat m", attributes={c.TARGET_ID: "bot"}).end()
    provider.shutdown()
    assert collector.sql("select count(*) as n from spans") == [{"n": 1}]
    assert "ml-decode" in _thread_names(collector.proc.pid)
