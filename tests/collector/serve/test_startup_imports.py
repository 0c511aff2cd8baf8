"""What a collector loads: one that only receives spans does not import the analytics models
(pydantic) that profiles, readiness checks and experiments need; the first such request does."""

from __future__ import annotations

import httpx

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
