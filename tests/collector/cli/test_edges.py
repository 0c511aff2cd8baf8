"""Clear answers at the edges: a mistyped --db, a file or port already taken, where the collector
listens, and requests it refuses."""

from __future__ import annotations

import socket

import pytest

from meritlens.collector.receive._refusals import RefusalLog
from tests.cli_runner import run_cli
from tests.collector.collector_proc import CollectorProcess, free_port, make_request

PROFILE = """\
target = "target-0"
[metrics.input_tokens]
direction = "lower"
rationale = "a test profile"
strategy = "representative_task_set"
cases = 2
repetitions = 1
aggregation = "mean"
min_samples = 1
"""


@pytest.fixture(scope="module")
def running(tmp_path_factory):
    """A collector holding a database with spans; the CLI is pointed at it by $MERITLENS_URL, as a
    user who ran `meritlens serve` elsewhere would have it."""
    root = tmp_path_factory.mktemp("edges")
    with CollectorProcess(root / "held.duckdb") as proc:
        with proc.client(timeout=30) as client:
            sent = client.post("/v1/traces", content=make_request(0, 6).SerializeToString(),
                               headers={"Content-Type": "application/x-protobuf"})
            assert sent.status_code == 200
        yield proc


def _coverage_rows(proc) -> int:
    return proc.sql("select count(*) from coverage")["rows"][0][0]


@pytest.mark.parametrize("args", [
    ["sql", "select count(*) from spans"],
    ["windows"],
    ["readiness", "--profile", "{profile}"],
    ["profile", "check", "{profile}"],
    ["export", "--parquet", "{tmp}/out"],
    ["evaluate", "--target", "target-0", "--metrics", "consistency"],
    ["experiment", "list"],
    ["compare", "--experiment", "e1"],
])
def test_a_db_that_does_not_exist_is_an_error_never_another_database(running, tmp_path, args):
    profile = tmp_path / "profile.toml"
    profile.write_text(PROFILE)
    missing = tmp_path / "nope" / "x.duckdb"
    coverage_before = _coverage_rows(running)
    args = [a.format(profile=profile, tmp=tmp_path) for a in args]
    result = run_cli(*args, "--db", str(missing), check=False, cwd=tmp_path, env={"MERITLENS_URL": running.url})
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stdout == ""
    assert result.stderr.strip().splitlines() == [f"Error: no database at {missing}: check --db (or $MERITLENS_DB), "
                                                  "or give --url to use a running collector"]
    assert not missing.exists()
    assert _coverage_rows(running) == coverage_before  # nothing written into the collector's database


def test_without_db_the_commands_go_through_the_running_collector_as_documented(running, tmp_path):
    result = run_cli("sql", "select count(*) as n from spans", "--format", "csv", cwd=tmp_path,
                     env={"MERITLENS_URL": running.url})
    assert result.stdout.splitlines() == ["n", "6"]


def test_the_db_env_variable_counts_as_given(running, tmp_path):
    missing = tmp_path / "typo.duckdb"
    result = run_cli("sql", "select 1", check=False, cwd=tmp_path,
                     env={"MERITLENS_URL": running.url, "MERITLENS_DB": str(missing)})
    assert result.returncode == 2 and str(missing) in result.stderr


def test_import_creates_a_missing_file_but_not_a_missing_directory(tmp_path):
    result = run_cli("import", "--db", str(tmp_path / "no-dir" / "x.duckdb"), str(__file__), check=False)
    assert result.returncode == 2
    assert result.stderr.strip() == f"Error: cannot create {tmp_path / 'no-dir' / 'x.duckdb'}: the directory " \
                                    f"{tmp_path / 'no-dir'} does not exist"


def test_a_second_serve_on_a_held_file_names_the_file_and_its_holder(running):
    result = run_cli("serve", "--db", str(running.db), "--http-port", "0", "--grpc-port", "0", check=False, timeout=60)
    assert result.returncode == 2
    lines = (result.stdout + result.stderr).strip().splitlines()
    assert len(lines) == 1, lines
    assert f"{running.db} is in use by process {running.proc.pid} (meritlens serve" in lines[0]
    assert "stopped" not in lines[0]


def test_a_file_the_collector_cannot_open_is_one_line_and_nothing_says_stopped(tmp_path):
    """The cause in one line; no "stopped; every acknowledged span is committed" from a collector that
    never started."""
    missing_dir = tmp_path / "nowhere" / "x.duckdb"
    not_duckdb = tmp_path / "notes.duckdb"
    not_duckdb.write_text("these are notes, not a database\n" * 100)
    for db, cause in ((missing_dir, f"the directory {tmp_path / 'nowhere'} does not exist"),
                      (not_duckdb, "notes.duckdb")):
        result = run_cli("serve", "--db", str(db), "--http-port", "0", "--grpc-port", "0", check=False, timeout=60)
        lines = (result.stdout + result.stderr).strip().splitlines()
        assert result.returncode == 2 and len(lines) == 1, lines
        assert lines[0].startswith("Error: ") and cause in lines[0], lines
    assert not missing_dir.parent.exists()


@pytest.mark.parametrize("flag", ["--http-port", "--grpc-port"])
def test_a_taken_port_names_the_port_and_the_flag(tmp_path, flag):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        ports = {"--http-port": str(free_port()), "--grpc-port": str(free_port()), flag: str(port)}
        result = run_cli("serve", "--db", str(tmp_path / "x.duckdb"), *[a for f, p in ports.items() for a in (f, p)],
                         check=False, timeout=60)
    assert result.returncode == 2
    lines = (result.stdout + result.stderr).strip().splitlines()
    assert lines == [f"Error: port {port} on 127.0.0.1 is already in use: choose another with {flag} "
                     f"(or ${'MERITLENS_HTTP_PORT' if flag == '--http-port' else 'MERITLENS_GRPC_PORT'}), "
                     "or stop what listens there"]
    assert not (tmp_path / "x.duckdb").exists()


def test_the_banner_says_where_each_receiver_and_the_dashboard_listen(running):
    running.wait_for_log("dashboard")
    log = running.log()
    assert f"OTLP/HTTP  http://127.0.0.1:{running.http_port}/v1/traces" in log
    assert f"OTLP/gRPC  127.0.0.1:{running.grpc_port}" in log
    assert f"dashboard  http://127.0.0.1:{running.http_port}/" in log


@pytest.mark.parametrize("body", [b"[]", b'"spans"', b"5", b"null", b"true"])
def test_an_otlp_json_body_that_is_not_an_object_is_a_400(running, body):
    with running.client(timeout=30) as client:
        answer = client.post("/v1/traces", content=body, headers={"Content-Type": "application/json"})
    assert answer.status_code == 400
    assert "must be an object" in answer.json()["message"]


def test_refused_requests_are_logged_in_one_line_rate_limited(collector):
    running = collector  # a collector of its own: the log is rate-limited per kind of refusal
    with running.client(timeout=30) as client:
        for _ in range(5):
            answer = client.post("/v1/traces", content=b"not json", headers={"Content-Type": "application/json"})
            assert answer.status_code == 400
        assert client.post("/v1/traces", content=b"x", headers={"Content-Type": "text/plain"}).status_code == 415
    running.wait_for_log("with 415")
    lines = [line for line in running.log().splitlines() if "refused POST /v1/traces" in line and "with 400" in line
             and "not valid JSON" in line]
    assert len(lines) == 1, lines
    assert "from 127.0.0.1" in lines[0]
    assert any("unsupported media type 'text/plain'" in line for line in running.log().splitlines()
               if "with 415" in line)


def test_the_refusal_log_counts_what_it_held_back(caplog):
    now = [100.0]
    refusals = RefusalLog(period_s=10, clock=lambda: now[0])
    with caplog.at_level("WARNING", logger="meritlens.collector.refused"):
        for _ in range(4):
            refusals.note(400, "POST /v1/traces", "bad body")
        now[0] += 11
        refusals.note(400, "POST /v1/traces", "bad body")
        refusals.note(401, "POST /api/sql", "missing token")
    messages = [r.getMessage() for r in caplog.records]
    assert messages == ["refused POST /v1/traces with 400: bad body",
                        "refused POST /v1/traces with 400: bad body (and 3 more like it in the last 10s)",
                        "refused POST /api/sql with 401: missing token"]
