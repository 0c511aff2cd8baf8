"""Collectors on a lake: Parquet segments published atomically, acknowledged only when durable,
several collectors on one lake, and every span read once."""

from __future__ import annotations

import threading

import pyarrow.parquet as pq

from tests.collector.lake.lake_helpers import lake_collector, lake_sql, post, span_keys, varied_spans
from tests.conftest import run_cli


def test_a_killed_collector_loses_no_acknowledged_span(tmp_path):
    """Exports wait in the staging log (a long publish interval); SIGKILL; the restart publishes them."""
    lake = tmp_path / "lake"
    exports = varied_spans(range(100, 130))
    with lake_collector(tmp_path, lake, "c1", "--stage-seconds", "60") as collector:
        for spans in exports:
            assert post(collector.url, spans).status_code == 200
        assert not list((lake / "spans").glob("*.parquet"))  # still only in the staging log
        collector.kill9()
        collector.start()
        segments = sorted((lake / "spans").glob("*.parquet"))
        assert segments and all(p.name.startswith("c1-") for p in segments)
        assert not [p for p in (lake / "spans").iterdir() if not p.name.endswith(".parquet")]
        stored = {(r["trace_id"], r["span_id"]) for r in lake_sql(lake, "select trace_id, span_id from spans")}
        assert stored == set().union(*(span_keys(s) for s in exports))
        # the segments hold the spans' columns, readable by any Parquet reader
        assert "received_at" in pq.read_schema(segments[0]).names


def test_three_collectors_share_a_lake_and_repeats_count_once(tmp_path):
    lake = tmp_path / "lake"
    exports = varied_spans(range(200, 260))
    collectors = [lake_collector(tmp_path, lake, f"c{i}", "--stage-seconds", "0.2") for i in range(3)]
    for c in collectors:
        c.start()
    try:
        def send(k: int) -> None:
            for n, spans in enumerate(exports):
                if n % 3 == k:  # each export to one collector, and again (a retry) to the next one
                    assert post(collectors[k].url, spans).status_code == 200
                    assert post(collectors[(k + 1) % 3].url, spans).status_code == 200

        threads = [threading.Thread(target=send, args=(k,)) for k in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        # a bad export is answered as by a single node, and stores nothing
        bad = post(collectors[0].url, [])
        assert bad.status_code == 200
        garbage = __import__("httpx").post(collectors[1].url + "/v1/traces", content=b"\x0a\xff\xff",
                                           headers={"Content-Type": "application/x-protobuf"})
        assert garbage.status_code == 400
        # a second collector under a name in use is refused with a one-line reason
        taken = run_cli("serve", "--lake", str(lake), "--collector-id", "c0", "--http-port", "0", "--no-grpc",
                        check=False)
        # one line naming the cause, and no "stopped" from a collector that never started
        assert taken.returncode == 2 and taken.stdout == "", taken.stdout
        assert taken.stderr.strip().splitlines() == [taken.stderr.strip()] and "stopped" not in taken.stderr
        assert "collector id 'c0' is in use" in taken.stderr
        bad_id = run_cli("serve", "--lake", str(lake), "--collector-id", "../x", "--http-port", "0", "--no-grpc",
                         check=False)
        assert bad_id.returncode == 2 and "collector id '../x'" in bad_id.stderr
    finally:
        for c in collectors:
            c.stop()
    expected = set().union(*(span_keys(s) for s in exports))
    names = {p.name.split("-")[0] for p in (lake / "spans").glob("*.parquet")}
    assert names == {"c0", "c1", "c2"}
    rows = lake_sql(lake, "select count(*) as n, count(distinct (trace_id, span_id)) as d from spans")
    assert rows == [{"n": len(expected), "d": len(expected)}]
    copies = lake_sql(lake, "select count(*) as n from spans where trace_id is not null")  # the view, not the files
    assert copies[0]["n"] == len(expected)
    # the collector's own SQL endpoint and dashboard read the lake too, behind its token as on one node
    (tmp_path / "token").write_text("s3cret\n")
    with lake_collector(tmp_path, lake, "c0", "--token-file", str(tmp_path / "token"), token="s3cret") as reader:
        body = reader.client().post("/api/sql", json={"sql": "select count(*) from spans"}).json()
        assert body["rows"] == [[len(expected)]]
        targets = reader.client().get("/api/dashboard/targets").json()
        assert {t["target_id"] for t in targets["targets"]} == {"bot-a", "bot-b", "bot-c"}
        assert targets["db"] == "lake"
        anonymous = __import__("httpx").post(reader.url + "/v1/traces", content=b"",
                                             headers={"Content-Type": "application/x-protobuf"})
        assert anonymous.status_code == 401
    # before any windows run: no windows, never zeros
    assert lake_sql(lake, "select count(*) as n from windows") == [{"n": 0}]
    status = run_cli("lake", "status", "--lake", str(lake)).stdout
    assert f"{len(expected)} distinct spans" in status and "never" in status


def test_reading_a_missing_lake_is_a_one_line_error(tmp_path):
    missing = run_cli("sql", "select 1", "--lake", str(tmp_path / "nowhere"), check=False)
    assert missing.returncode == 2
    assert missing.stderr.strip().splitlines() == [
        f"Error: no span lake at {tmp_path / 'nowhere'} (no spans/ directory): start"
        f" `meritlens serve --lake {tmp_path / 'nowhere'}` first"]
    (tmp_path / "lake" / "spans").mkdir(parents=True)
    refused = run_cli("sql", "select * from read_csv('/etc/passwd')", "--lake", str(tmp_path / "lake"), check=False)
    assert refused.returncode == 2 and "file system operations are disabled" in refused.stderr
    job = run_cli("lake", "windows", "--lake", str(tmp_path / "nowhere"), check=False)
    assert job.returncode == 2 and "no span lake at" in job.stderr
