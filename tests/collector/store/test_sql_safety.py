"""The SQL endpoint and CLI are read-only: attack queries fail, the file and settings stay as they were."""

from __future__ import annotations

import time

import pytest

from tests.cli_runner import run_cli
from tests.collector.collector_proc import CollectorProcess, make_request

PROTOBUF = {"Content-Type": "application/x-protobuf"}


@pytest.fixture(scope="module")
def collector(tmp_path_factory):
    db = tmp_path_factory.mktemp("sql") / "spans.duckdb"
    with CollectorProcess(db, args=("--sql-timeout", "1", "--sql-max-rows", "5")) as running:
        with running.client() as client:
            response = client.post("/v1/traces", content=make_request(1, 12).SerializeToString(), headers=PROTOBUF)
            assert response.status_code == 200
        yield running


def state(collector) -> tuple:
    tables = collector.sql("SELECT table_name FROM duckdb_tables() ORDER BY 1")["rows"]
    counts = collector.sql("SELECT (SELECT count(*) FROM spans), (SELECT count(*) FROM windows)")["rows"]
    setting = collector.sql("SELECT current_setting('enable_external_access')")["rows"]
    databases = collector.sql("SELECT database_name FROM duckdb_databases() WHERE NOT internal ORDER BY 1")["rows"]
    return tables, counts, setting, databases


def refused(collector, sql: str) -> str:
    with collector.client(timeout=30) as client:
        response = client.post("/api/sql", json={"sql": sql})
    assert response.status_code == 400, (sql, response.status_code, response.text)
    return response.json()["error"]


def check_all_refused(collector, queries, *, must_mention=()):
    before = state(collector)
    for sql in queries:
        message = refused(collector, sql)
        assert any(word.lower() in message.lower() for word in must_mention), (sql, message)
    assert state(collector) == before
    assert before[1][0][0] == 12 and before[1][0][1] > 0  # spans, windows
    assert before[2] == [[False]]


def test_writes_are_refused(collector, tmp_path):
    check_all_refused(collector, [
        "INSERT INTO windows SELECT * FROM windows",
        "UPDATE spans SET name = 'x'",
        "DELETE FROM spans",
        "DROP TABLE windows",
        "CREATE TABLE stolen AS SELECT * FROM spans",
        "WITH x AS (SELECT 1) DELETE FROM spans",
        "SELECT 1; DELETE FROM spans",
        "EXPLAIN ANALYZE DELETE FROM spans",
        "EXPLAIN ANALYZE CREATE TABLE stolen AS SELECT 1",
        "CHECKPOINT",
        "CALL force_checkpoint()",
        "VACUUM spans",
    ], must_mention=("refused",))


def test_attach_is_refused(collector, tmp_path):
    target = tmp_path / "evil.duckdb"
    check_all_refused(collector, [
        f"ATTACH '{target}' AS evil",
        f"ATTACH '{target}' AS evil (READ_ONLY)",
        "ATTACH ':memory:' AS scratch",
        "DETACH spans",
        "USE system",
    ], must_mention=("refused",))
    assert not target.exists()


def test_copy_to_and_from_is_refused(collector, tmp_path):
    leak = tmp_path / "leak.csv"
    source = tmp_path / "source.csv"
    source.write_text("trace_id,span_id\nabc,def\n")
    check_all_refused(collector, [
        f"COPY spans TO '{leak}'",
        f"COPY (SELECT * FROM spans) TO '{leak}' (FORMAT parquet)",
        f"COPY spans FROM '{source}'",
        "COPY spans FROM '/etc/passwd'",
        f"EXPORT DATABASE '{tmp_path}'",
    ], must_mention=("refused",))
    assert not leak.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["source.csv"]


def test_file_readers_are_refused(collector, tmp_path):
    secret = tmp_path / "secret.csv"
    secret.write_text("password\nhunter2\n")
    check_all_refused(collector, [
        "SELECT * FROM read_csv('/etc/passwd')",
        f"SELECT * FROM read_csv_auto('{secret}')",
        f"SELECT * FROM '{secret}'",
        "SELECT * FROM read_text('/etc/hostname')",
        "SELECT * FROM read_blob('/etc/hostname')",
        "SELECT * FROM read_json('/etc/hostname')",
        f"SELECT * FROM read_parquet('{tmp_path}/*.parquet')",
        "SELECT * FROM glob('/etc/*')",
        "SELECT * FROM sniff_csv('/etc/passwd')",
    ], must_mention=("disabled", "permission", "does not exist"))


def test_httpfs_and_urls_are_refused(collector):
    check_all_refused(collector, [
        "SELECT * FROM read_parquet('https://example.com/data.parquet')",
        "SELECT * FROM read_csv('http://127.0.0.1:1/x.csv')",
        "SELECT * FROM 's3://bucket/key.parquet'",
        "SELECT * FROM read_json('hf://datasets/x/y.json')",
    ], must_mention=("disabled", "permission", "not found", "does not exist"))


def test_extension_install_and_load_are_refused(collector):
    check_all_refused(collector, [
        "INSTALL httpfs",
        "LOAD httpfs",
        "FORCE INSTALL httpfs",
        "LOAD '/tmp/evil.duckdb_extension'",
    ], must_mention=("refused",))


def test_settings_changes_are_refused(collector):
    check_all_refused(collector, [
        "SET enable_external_access = true",
        "SET GLOBAL enable_external_access = true",
        "SET memory_limit = '1TB'",
        "RESET lock_configuration",
        "PRAGMA enable_profiling",
        "PRAGMA threads = 1",
        "SET lock_configuration = false",
    ], must_mention=("refused",))


def test_reads_still_work_including_explain(collector):
    result = collector.sql("SELECT count(*) FROM spans")
    assert result["rows"] == [[12]] and result["truncated"] is False
    plan = collector.sql("EXPLAIN SELECT * FROM windows")
    assert plan["rows"]


def test_row_limit_cuts_the_result_and_says_so(collector):
    cut = collector.sql("SELECT * FROM range(100)")
    assert cut["rows"] == [[i] for i in range(5)]
    assert cut["truncated"] is True and cut["row_limit"] == 5
    whole = collector.sql("SELECT * FROM range(5)")
    assert whole["truncated"] is False and len(whole["rows"]) == 5
    result = run_cli("sql", "SELECT * FROM range(100)", "--url", collector.url, "--format", "csv", check=False)
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == 6
    assert "only the first 5 rows" in result.stderr


def test_a_query_past_the_timeout_is_interrupted(collector):
    started = time.monotonic()
    message = refused(collector, "SELECT count(*) FROM range(1000000000000) t(i) WHERE hash(i) % 7 = 3")
    elapsed = time.monotonic() - started
    assert "ran longer than 1 s and was stopped" in message
    assert elapsed < 10
    assert collector.sql("SELECT 42")["rows"] == [[42]]


def test_cli_on_the_file_itself_is_read_only_too(tmp_path):
    db = tmp_path / "own.duckdb"
    with CollectorProcess(db) as running:
        with running.client() as client:
            client.post("/v1/traces", content=make_request(2, 3).SerializeToString(), headers=PROTOBUF)
    for sql in ("DELETE FROM spans", "EXPLAIN ANALYZE DELETE FROM spans", "SELECT * FROM read_csv('/etc/passwd')"):
        result = run_cli("sql", sql, "--db", str(db), check=False)
        assert result.returncode != 0, sql
        assert "refused" in result.stderr or "disabled" in result.stderr, result.stderr
    result = run_cli("sql", "SELECT count(*) AS n FROM spans", "--db", str(db), "--format", "csv", check=False)
    assert result.stdout.splitlines() == ["n", "3"]
