"""The collector's own threads carry OS names (`top -H`, `ps -L`, /proc/PID/task/*/comm)."""

from __future__ import annotations

import os
import sys
import threading

import pytest

from meritlens.collector._osthread import name_os_thread, os_thread_name
from tests.collector.collector_proc import CollectorProcess, make_request

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="thread names are read from /proc")


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


@linux_only
def test_a_thread_names_itself(tmp_path):
    seen = {}

    def run():
        seen["named"] = name_os_thread("meritlens-probe")
        with open(f"/proc/self/task/{threading.get_native_id()}/comm") as f:
            seen["comm"] = f.read().strip()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert seen == {"named": True, "comm": "ml-probe"}


@linux_only
def test_the_collectors_writer_window_and_decode_threads_are_named(tmp_path):
    with CollectorProcess(tmp_path / "names.duckdb", args=("--no-grpc",)) as collector:
        before = _thread_names(collector.proc.pid)
        assert "ml-writer" in before and "ml-windows" in before
        assert "ml-decode" not in before  # made for the first request
        with collector.client() as client:
            answer = client.post("/v1/traces", content=make_request(0, 10).SerializeToString(),
                                 headers={"Content-Type": "application/x-protobuf"})
        assert answer.status_code == 200, answer.text
        assert "ml-decode" in _thread_names(collector.proc.pid)
