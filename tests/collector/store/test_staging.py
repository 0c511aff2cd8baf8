"""The staging log: acknowledged spans are durable before DuckDB stores them, and are never lost.

The collector answers an export once its rows are forced to `<db>.staged`, and stores staged rows in
DuckDB in one INSERT once the oldest have waited `--stage-seconds`, at once when a query waits for
them, and at shutdown; before that, whole row groups of them once there are some. A start takes up
what a killed collector left staged.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from meritlens.collector.process import _otlp
from meritlens.collector.process._options import NormalizeOptions
from meritlens.collector.receive._ingest import prepare
from meritlens.collector.store._staging import StagingLog, read_staged, staging_path
from meritlens.instrumentation import conventions as c
from tests.collector.collector_proc import make_request
from tests.conftest import CollectorProcess, run_cli
from tests.store_under_test import StoreUnderTest

PROTOBUF = {"Content-Type": "application/x-protobuf"}


def _send_with_the_sdk(collector: CollectorProcess, count: int, target: str = "bot") -> None:
    """``count`` LLM-call spans through the OpenTelemetry SDK's own OTLP/HTTP exporter; each
    ``span.end()`` returns after the collector answered."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=collector.traces_url)))
    tracer = provider.get_tracer("tests")
    try:
        for i in range(count):
            tracer.start_span("chat m", attributes={
                c.TARGET_ID: target, c.GEN_AI_OPERATION_NAME: "chat", c.GEN_AI_USAGE_INPUT_TOKENS: 10 + i,
            }).end()
    finally:
        provider.shutdown()


def _stored(db: Path) -> tuple[int, float | None]:
    """(spans, the input_tokens window of target 'bot') in the file, read by another process's view."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        count = con.execute("SELECT count(*) FROM spans").fetchall()[0][0]
        window = con.execute("SELECT value FROM windows WHERE target_id = 'bot' AND metric = 'input_tokens'"
                             " AND scope = 'all'").fetchall()
    finally:
        con.close()
    return count, window[0][0] if window else None


def test_a_killed_collector_loses_no_acknowledged_span_that_was_only_staged(tmp_path):
    db = tmp_path / "staged.duckdb"
    collector = CollectorProcess(db, args=("--stage-seconds", "60")).start()
    try:
        _send_with_the_sdk(collector, 5)
        log = Path(staging_path(str(db)))
        assert log.stat().st_size > 0  # acknowledged: the rows are in the staging log ...
        collector.kill9()
        assert _stored(db) == (0, None)  # ... and not yet in DuckDB
        assert sum(t.num_rows for t in read_staged(str(log)).tables) == 5
        looked = run_cli("sql", "--db", str(db), "--format", "csv", "select count(*) n from spans", check=False)
        assert looked.returncode == 0, looked.stderr
        assert looked.stdout.split() == ["n", "0"]
        assert f"{log} holds {log.stat().st_size} bytes of spans a collector acknowledged" in looked.stderr
        collector.start()
        # the start stored them; the windows follow them like spans a crashed process committed
        assert collector.sql("select count(*) n, sum(input_tokens) t from spans") == [{"n": 5, "t": 60}]
        rows = collector.sql("select value from windows where target_id = 'bot' and metric = 'input_tokens'"
                             " and scope = 'all'")
        assert rows == [{"value": 60.0}]
        assert "stored 5 spans (0 already stored) that the previous run acknowledged" in collector.log()
        _send_with_the_sdk(collector, 1)  # the next span counts once more, not the recovered ones twice
        assert collector.sql("select value from windows where target_id = 'bot' and metric = 'input_tokens'"
                             " and scope = 'all'") == [{"value": 70.0}]
    finally:
        assert collector.stop() == 0, collector.log()
    assert not log.exists()  # a clean shutdown stores everything and removes the log
    assert _stored(db) == (6, 70.0)


def test_a_query_after_an_acknowledged_export_sees_its_spans_without_waiting_for_the_move(tmp_path):
    collector = CollectorProcess(tmp_path / "q.duckdb", args=("--stage-seconds", "60")).start()
    try:
        _send_with_the_sdk(collector, 3)
        with collector.client() as client:
            assert client.get(f"{collector.url}/healthz").json()["staged_rows"] == 3
            now = client.post(f"{collector.url}/api/sql", json={"sql": "select count(*) n from spans", "wait_s": 0})
            assert now.json()["rows"] == [[0]] and now.json()["windows_behind"] is True  # answered as they are
            assert client.get(f"{collector.url}/healthz").json()["staged_rows"] == 3  # and it moved nothing
            bad = client.post(f"{collector.url}/api/sql", json={"sql": "select 1", "wait_s": "soon"})
            assert bad.status_code == 400 and "wait_s" in bad.json()["error"]
            answer = client.post(f"{collector.url}/api/sql", json={"sql": "select count(*) n from spans"}).json()
        assert answer["rows"] == [[3]]
        assert "windows_behind" not in answer  # the query made the writer store them; it did not time out
        assert collector.sql("select sample_count from windows where target_id = 'bot'"
                             " and metric = 'input_tokens' and scope = 'all'") == [{"sample_count": 3}]
        with collector.client() as client:
            now = client.post(f"{collector.url}/api/sql", json={"sql": "select 1", "wait_s": 0}).json()
        assert "windows_behind" not in now  # nothing acknowledged is left out now
    finally:
        assert collector.stop() == 0, collector.log()


def test_without_staging_every_export_is_in_duckdb_when_answered(tmp_path):
    db = tmp_path / "direct.duckdb"
    collector = CollectorProcess(db, args=("--stage-seconds", "0")).start()
    try:
        _send_with_the_sdk(collector, 4)
        assert not Path(staging_path(str(db))).exists()
        collector.kill9()
        assert _stored(db)[0] == 4
    finally:
        collector.stop()


def test_retried_exports_of_staged_spans_count_once(tmp_path):
    collector = CollectorProcess(tmp_path / "retry.duckdb", args=("--stage-seconds", "60")).start()
    try:
        body = make_request(0, 50).SerializeToString()
        with collector.client() as client:
            for _ in range(3):  # the same export three times while it is staged
                assert client.post(collector.traces_url, content=body, headers=PROTOBUF).status_code == 200
        assert collector.sql("select count(*) n, count(distinct span_id) d from spans") == [{"n": 50, "d": 50}]
        with collector.client() as client:  # once more after it was stored
            assert client.post(collector.traces_url, content=body, headers=PROTOBUF).status_code == 200
        assert collector.sql("select count(*) n from spans") == [{"n": 50}]
    finally:
        assert collector.stop() == 0, collector.log()


def _prepared(batch: int, count: int) -> pa.Table:
    body = make_request(batch, count).SerializeToString()
    return prepare(_otlp.decode_lean(body, _otlp.PROTOBUF), _otlp.SpanLimits(128, 65536), NormalizeOptions())[1]


def test_a_start_stores_whole_records_and_keeps_a_torn_tail_aside(tmp_path, caplog):
    db = str(tmp_path / "torn.duckdb")
    log = StagingLog(staging_path(db))
    log.open()
    log.append(_prepared(0, 20))
    log.append(_prepared(1, 30))
    log.append(_prepared(0, 20))  # a retried export: its spans are stored once
    log.close(remove=False)
    whole = os.path.getsize(staging_path(db))
    with open(staging_path(db), "ab") as fh:  # a crash in the middle of the next write
        fh.write(b"MLS1\x00\x01\x02")
    assert read_staged(staging_path(db)).torn_bytes == 7

    store = StoreUnderTest(db, staging=True)
    with caplog.at_level(logging.INFO, logger="meritlens.collector.store"):
        store.start()
    try:
        assert store.query("select count(*) from spans").rows == [(50,)]
        assert os.path.getsize(staging_path(db)) == 0  # the store's own log starts empty
        kept = [p for p in os.listdir(tmp_path) if ".staged.unrecovered-" in p]
        assert len(kept) == 1 and os.path.getsize(tmp_path / kept[0]) == whole + 7
        assert "ended with 7 bytes that are no whole record" in caplog.text
        assert "stored 50 spans (20 already stored)" in caplog.text
    finally:
        store.shutdown()
    assert not os.path.exists(staging_path(db))


def _started_store(db: str, **options) -> StoreUnderTest:
    """A started store with staging that moves at 100 staged rows or after 60 s (or as ``options``
    say), its windows open."""
    store = StoreUnderTest(db, **{"staging": True, "stage_move_rows": 100, "stage_move_s": 60, **options})
    store.start()
    store.open_windows()
    return store


_GROUPS_OF_2048 = {"stage_move_rows": 2048, "row_group_rows": 2048}
"""Options of a store whose moves before the time is up store whole row groups of 2048 rows."""


@contextlib.contextmanager
def _a_move_held_in_its_insert(store: StoreUnderTest):
    """Run `move_staged` in a thread of its own, held at the start of its first INSERT while the
    with-block runs; then let it finish. Yields the row counts of the INSERTs it makes."""
    inserting, proceed, inserted = threading.Event(), threading.Event(), []
    append = store._append

    def held_append(table, **kwargs):
        inserted.append(table.num_rows)
        if len(inserted) == 1:
            inserting.set()
            assert proceed.wait(10)
        return append(table, **kwargs)

    store._append = held_append
    mover = threading.Thread(target=store.move_staged)
    mover.start()
    try:
        assert inserting.wait(10)
        yield inserted
    finally:
        proceed.set()
        mover.join(10)
        store._append = append
    assert not mover.is_alive()


def test_a_store_moves_staged_rows_in_one_insert_and_on_shutdown(tmp_path):
    db = str(tmp_path / "moves.duckdb")
    store = _started_store(db)
    try:
        store.stage(_prepared(0, 40))
        store.stage(_prepared(1, 40))
        assert store.move_due() > 0  # 80 rows: under both bounds
        store.stage(_prepared(2, 40))
        assert store.move_due() == 0.0  # 120 rows: over the row bound
        assert store.move_staged() == 120
        assert store.move_due() is None
        assert os.path.getsize(staging_path(db)) == 0
        store.stage(_prepared(3, 10))
    finally:
        store.shutdown()  # stores the last 10
    con = duckdb.connect(db, read_only=True)
    try:
        assert con.execute("SELECT count(*), count(DISTINCT received_at) FROM spans").fetchall() == [(130, 2)]
    finally:
        con.close()
    assert not os.path.exists(staging_path(db))


def _persistent_row_groups(store: StoreUnderTest) -> list[tuple[int, int, bool]]:
    """(rows, persistent) of each row group of `spans`, from DuckDB's storage info: persistent
    row groups are written to the file, the others wait in memory for a checkpoint."""
    return store.con.execute(
        "SELECT row_group_id, max(count), bool_and(persistent) FROM pragma_storage_info('spans')"
        " WHERE column_name = 'span_id' GROUP BY ALL ORDER BY 1").fetchall()


def test_a_move_stores_whole_row_groups_written_to_the_file_and_keeps_the_rest_staged(tmp_path):
    """Before the staged rows are due, a move stores only whole row groups of them, in staging
    order: DuckDB writes those to the file compressed at once; the rest would wait uncompressed in
    its memory until a checkpoint. Once due, the rest is stored too, and nothing twice."""
    db = str(tmp_path / "groups.duckdb")
    # one DuckDB thread, as in `meritlens serve`: with more, an INSERT's row groups split between them
    store = _started_store(db, **_GROUPS_OF_2048, db_threads=1)
    try:
        batches = [_prepared(i, 1000) for i in range(3)]
        for batch in batches:
            store.stage(batch)
        assert store.move_due() == 0.0  # 3000 rows: over the row bound
        assert store.move_staged() == 2048
        assert store.staged_rows() == 952 and _logged_rows(db) == 3000  # the log keeps every record
        assert 59 < store.move_due() <= 60  # the rest is under the row bound: it waits
        first = [span_id for b in batches for span_id in b.column("span_id").to_pylist()][:2048]
        stored = store.con.execute("SELECT span_id FROM spans").fetchall()
        assert sorted(r[0] for r in stored) == sorted(first)
        assert _persistent_row_groups(store) == [(0, 2048, True)]  # in the file before any checkpoint

        store._stager._since -= 61  # the rest is due: all of it moves, a row group smaller than a whole one
        assert store.move_staged() == 952
        assert store.staged_rows() == 0 and _logged_rows(db) == 0
        groups = _persistent_row_groups(store)
        assert groups[0] == (0, 2048, True) and groups[1][1:] == (952, False), groups
        store.update_windows()
        assert store.query("select count(*), count(DISTINCT span_id) from spans").rows == [(3000, 3000)]
    finally:
        store.shutdown()
    con = duckdb.connect(db, read_only=True)
    try:
        assert con.execute("SELECT count(*), count(DISTINCT span_id) FROM spans").fetchall() == [(3000, 3000)]
    finally:
        con.close()


def test_a_query_waiting_for_staged_rows_moves_them_all_not_only_whole_row_groups(tmp_path):
    db = str(tmp_path / "reader.duckdb")
    store = _started_store(db, **_GROUPS_OF_2048)
    try:
        store.stage(_prepared(0, 2500))
        store._stager._readers_waiting += 1  # what `query` does while it waits for them
        try:
            assert store.move_staged() == 2500
        finally:
            store._stager._readers_waiting -= 1
        store.update_windows()
        assert store.query("select count(*) from spans").rows == [(2500,)]
    finally:
        store.shutdown()


def test_a_query_during_a_move_of_whole_row_groups_waits_for_the_rows_that_move_left_staged(tmp_path):
    """A query waits for every span acknowledged before it: a move under way that commits only whole
    row groups of them does not end its wait; its wait makes the next move take the rest."""
    db = str(tmp_path / "race.duckdb")
    store = _started_store(db, **_GROUPS_OF_2048)
    answers = []
    try:
        for i in range(3):
            store.stage(_prepared(i, 1000))
        with _a_move_held_in_its_insert(store) as inserted:  # storing the first 2048 of 3000
            reader = threading.Thread(target=lambda: answers.append(store.wait_for_windows(10)))
            reader.start()
        assert inserted == [2048] and store.staged_rows() == 952
        store.update_windows()  # the windows include the 2048 now
        reader.join(1.0)
        assert reader.is_alive() and not answers  # still waiting for the 952 staged before it
        assert store.move_due() == 0.0
        assert store.move_staged() == 952  # a query waits: every staged row moves
        store.update_windows()
        reader.join(10)
        assert answers == [True]
        assert store.query("select count(*) from spans").rows == [(3000,)]
    finally:
        store.shutdown()


@pytest.mark.parametrize("name", ["memory.duckdb", "it's.duckdb"])
def test_files_whose_names_need_care_are_stored_and_queried(tmp_path, name):
    """The store attaches its file to take a row group size; a file named like DuckDB's in-memory
    database is opened directly instead, and a quote in the path is escaped."""
    db = str(tmp_path / name)
    store = _started_store(db, **_GROUPS_OF_2048)
    try:
        store.stage(_prepared(0, 30))
        assert store.move_staged() == 30
        store.update_windows()
        assert store.query("select count(*) from spans").rows == [(30,)]
        assert store.query("select count(*) from windows where target_id is not null").rows[0][0] > 0
    finally:
        store.shutdown()
    con = duckdb.connect(db, read_only=True)
    try:
        assert con.execute("SELECT count(*) FROM spans").fetchall() == [(30,)]
    finally:
        con.close()


def _move_with_a_stage_during_its_insert(store: StoreUnderTest, staged_meanwhile: pa.Table) -> list[int]:
    """Run `move_staged` in a thread of its own and stage ``staged_meanwhile`` while its first
    INSERT is under way; returns the row counts of the INSERTs it made."""
    with _a_move_held_in_its_insert(store) as inserted:
        store.stage(staged_meanwhile)  # not held up by the INSERT under way
        assert store.staged_rows() == sum(inserted) + staged_meanwhile.num_rows
    return inserted


def _logged_rows(db: str) -> int:
    return sum(t.num_rows for t in read_staged(staging_path(db)).tables)


def test_rows_staged_during_a_move_keep_the_log_until_a_later_move_stores_them(tmp_path):
    """The mover's INSERT runs beside the writer's staging: an export staged meanwhile is durable
    at once, and the log is not emptied until DuckDB holds it too."""
    db = str(tmp_path / "during.duckdb")
    store = _started_store(db)
    try:
        store.stage(_prepared(0, 40))
        assert _move_with_a_stage_during_its_insert(store, _prepared(1, 25)) == [40]
        assert _logged_rows(db) == 65  # the stored 40 stay beside the 25 (stored again after a crash: skipped)
        assert store.staged_rows() == 25
        assert 59 < store.move_due() <= 60  # their own wait, not the stored rows' (nothing moves at once)
        assert store.move_staged() == 25
        assert _logged_rows(db) == 0 and store.staged_rows() == 0
        store.update_windows()  # no window thread here
        assert store.query("select count(*) from spans").rows == [(65,)]
    finally:
        store.shutdown()


def test_a_grown_log_is_emptied_by_a_move_that_also_stores_what_was_staged_during_it(tmp_path):
    db = str(tmp_path / "grown.duckdb")
    store = _started_store(db)
    store._stager._keep_log_bytes = 0  # every log is over the size up to which it keeps stored records
    try:
        store.stage(_prepared(0, 40))
        assert _move_with_a_stage_during_its_insert(store, _prepared(1, 25)) == [40, 25]
        assert _logged_rows(db) == 0 and store.staged_rows() == 0
        store.update_windows()
        assert store.query("select count(*) from spans").rows == [(65,)]
    finally:
        store.shutdown()


def test_at_the_bound_staging_waits_for_a_slow_move_instead_of_refusing(tmp_path):
    """A burst can outrun the mover (its INSERT waits for the windows): the writer then waits for
    it, as it did when it moved the rows itself; only a failed move makes it refuse rows."""
    db = str(tmp_path / "bound.duckdb")
    store = _started_store(db, window_lag_rows=100, stage_move_rows=50)
    try:
        store.stage(_prepared(0, 60))
        with _a_move_held_in_its_insert(store):
            store.stage(_prepared(1, 60))  # 120 staged: at the bound, the first 60 being stored
            staged = threading.Thread(target=store.stage, args=(_prepared(2, 10),))
            staged.start()
            staged.join(1.5)
            assert staged.is_alive() and store.staged_rows() == 120  # waiting, not refused
        staged.join(10)
        assert not staged.is_alive() and store.staged_rows() == 70  # the move made room
        assert store.move_staged() == 70
        store.update_windows()
        assert store.query("select count(*) from spans").rows == [(130,)]
    finally:
        store.shutdown()


@pytest.mark.parametrize("value", ["-1", "61"])
def test_stage_seconds_out_of_range_is_refused_by_name(tmp_path, value):
    result = run_cli("serve", "--db", str(tmp_path / "x.duckdb"), "--stage-seconds", value, check=False)
    assert result.returncode == 2
    assert f"stage seconds must be between 0 and 60, got {float(value)}" in result.stderr


def test_a_failed_write_is_cut_back_so_later_records_stay_readable(tmp_path, monkeypatch):
    path = str(tmp_path / "x.staged")
    log = StagingLog(path)
    log.open()
    log.append(_prepared(0, 5))
    real, calls = os.fdatasync, []

    def full_disk_once(fd):
        calls.append(fd)
        if len(calls) == 1:
            raise OSError(28, "No space left on device")
        return real(fd)

    monkeypatch.setattr(os, "fdatasync", full_disk_once)
    with pytest.raises(OSError, match="No space left"):
        log.append(_prepared(1, 7))  # not durable: the caller does not acknowledge it
    log.append(_prepared(2, 3))
    log.close(remove=False)
    found = read_staged(path)
    assert [t.num_rows for t in found.tables] == [5, 3] and found.torn_bytes == 0


def test_records_read_back_as_written_across_chunks_schema_changes_and_short_writes(tmp_path, monkeypatch):
    path = str(tmp_path / "x.staged")
    log = StagingLog(path)
    log.open()
    chunked = pa.concat_tables([_prepared(0, 4), _prepared(1, 6)])  # two record batches
    other = pa.table({"n": pa.array([1, 2, 3], pa.int64())}, metadata={b"k": b"v"})
    real, calls = os.pwritev, []

    def short(fd, buffers, offset):  # the system writes at most 10 bytes a call
        calls.append(len(buffers))
        first = bytes(memoryview(buffers[0]).cast("B"))[:10]
        return real(fd, [first], offset)

    log.append(_prepared(2, 3))
    monkeypatch.setattr(os, "pwritev", short)
    log.append(chunked)
    monkeypatch.setattr(os, "pwritev", real)
    log.append(other)  # another schema, with metadata
    log.append(_prepared(3, 2))  # and back
    log.close(remove=False)

    assert len(calls) > 100  # the chunked record went out 10 bytes at a time
    found = read_staged(path)
    assert found.torn_bytes == 0 and [t.num_rows for t in found.tables] == [3, 10, 3, 2]
    assert found.tables[1].equals(chunked) and found.tables[1].schema.equals(chunked.schema)
    assert found.tables[2].equals(other) and found.tables[2].schema.metadata == {b"k": b"v"}
    assert found.tables[3].schema.equals(_prepared(3, 2).schema)
    with open(path, "rb") as fh:  # a record's payload is a plain Arrow IPC stream
        data = fh.read()
    assert data[:4] == b"MLS1"
    length = int.from_bytes(data[8:16], "little")
    assert pa.ipc.open_stream(data[16:16 + length]).read_all().num_rows == 3


def test_staged_rows_are_bounded_while_storing_them_fails(tmp_path, monkeypatch):
    db = str(tmp_path / "failing.duckdb")
    store = StoreUnderTest(db, staging=True, window_lag_rows=100, stage_move_rows=50)
    store.start()
    try:
        def disk_error(*args, **kwargs):
            raise duckdb.IOException("IO Error: could not write (injected)")

        monkeypatch.setattr(store.store, "_append", disk_error)
        store.stage(_prepared(0, 60))
        with pytest.raises(duckdb.IOException):
            store.move_staged()
        assert store.move_due() > 0.5  # tried again a second later, not in a loop
        store.stage(_prepared(1, 60))
        with pytest.raises(RuntimeError, match="120 staged span rows are waiting to be stored"):
            store.stage(_prepared(2, 10))  # refused: not written, not acknowledged
        assert store.staged_rows() == 120
        monkeypatch.undo()  # the disk is back
        assert store.move_staged() == 120
        store.update_windows()  # no window thread here
        assert store.query("select count(*) from spans").rows == [(120,)]
    finally:
        store.shutdown()


def test_waiting_queries_wake_the_mover_and_take_no_export_slots(tmp_path):
    from meritlens.collector.receive._pipeline import IngestPipeline

    store = StoreUnderTest(str(tmp_path / "wake.duckdb"), staging=True)
    store.start()
    try:
        pipeline = IngestPipeline(store, max_pending_batches=4)  # not started: nothing drains its queue
        assert not pipeline._mover_wake.is_set()
        for _ in range(10):  # ten queries waiting for staged rows
            store.on_move_demand()
        assert pipeline._mover_wake.is_set()
        assert pipeline._queue.qsize() == 0  # every slot is left for exports
    finally:
        store.shutdown()
