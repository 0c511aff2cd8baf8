"""What a collector loads: one that only receives spans does not import the analytics models
(pydantic) that profiles, readiness checks and experiments need; the first such request does.
Its Arrow buffers live on jemalloc unless the environment chooses another pool."""

from __future__ import annotations

import re

import httpx
import pyarrow as pa
import pytest

from tests.collector.collector_proc import CollectorProcess, make_request


def _mapped(proc: CollectorProcess, library: str) -> bool:
    with open(f"/proc/{proc.proc.pid}/maps") as fh:
        return any(library in line for line in fh)


def test_receiving_spans_loads_no_pydantic_and_the_first_readiness_request_does(tmp_path):
    with CollectorProcess(tmp_path / "lean.duckdb", args=("--no-grpc",)) as collector:
        r = httpx.post(collector.url + "/v1/traces", content=make_request(1, 10).SerializeToString(),
                       headers={"Content-Type": "application/x-protobuf"})
        assert r.status_code == 200
        assert collector.sql("SELECT count(*) FROM spans")["rows"] == [[10]]
        assert not _mapped(collector, "pydantic_core")

        r = httpx.post(collector.url + "/api/readiness", json={"profile": {"name": "p"}}, timeout=30)
        assert r.status_code == 400 and "problems" in r.json()  # validated by the profile model
        assert _mapped(collector, "pydantic_core")
        r = httpx.post(collector.url + "/api/experiments", json={"manifest": {}}, timeout=30)
        assert r.status_code == 400 and "problems" in r.json()


@pytest.mark.parametrize("chosen", [None, "system"])
def test_arrow_buffers_use_jemalloc_unless_the_environment_chooses(tmp_path, chosen):
    env = {"ARROW_DEFAULT_MEMORY_POOL": chosen} if chosen else {}
    with CollectorProcess(tmp_path / "pool.duckdb", args=("--no-grpc",), env=env) as collector:
        r = httpx.post(collector.url + "/v1/traces", content=make_request(1, 10).SerializeToString(),
                       headers={"Content-Type": "application/x-protobuf"})
        assert r.status_code == 200
        log = collector.log()
    try:
        pa.jemalloc_memory_pool()
        expected = chosen or "jemalloc"
    except NotImplementedError:  # a pyarrow built without jemalloc keeps its default
        expected = chosen or pa.default_memory_pool().backend_name
    # the line ends with the pool: Arrow's own allocations (IPC messages, exported schemas) use it too
    assert re.search(rf"Arrow memory pool: {expected}$", log, re.MULTILINE), log


def test_a_collector_in_a_process_that_imported_pyarrow_first_names_arrows_own_pool(monkeypatch):
    from meritlens.collector._server import _arrow_cpp_default_pool, arrow_memory_pool

    monkeypatch.delenv("ARROW_DEFAULT_MEMORY_POOL", raising=False)
    before = pa.default_memory_pool()
    try:
        answer = arrow_memory_pool()
        now = pa.default_memory_pool().backend_name
    finally:
        pa.set_memory_pool(before)
    own = _arrow_cpp_default_pool()
    assert answer.startswith(now)
    assert answer == now if own == now else answer == f"{now} (Arrow's own allocations: {own})"
