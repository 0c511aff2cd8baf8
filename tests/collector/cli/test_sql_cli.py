"""`meritlens sql`: read-only, through the file or the running collector, three output formats."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys

import httpx
import pytest

from meritlens.analytics import SPAN_WINDOW_METRICS
from meritlens.instrumentation import conventions as c
from tests.conftest import run_cli
from tests.otlp_builders import make_request, make_span


def _send(collector, n: int = 2) -> None:
    spans = [make_span({c.TARGET_ID: "bot", c.GEN_AI_USAGE_INPUT_TOKENS: 5}) for _ in range(n)]
    r = httpx.post(collector.traces_url, content=make_request(spans).SerializeToString(),
                   headers={"Content-Type": "application/x-protobuf"})
    assert r.status_code == 200


def test_query_goes_through_the_collector_while_it_holds_the_file(collector):
    _send(collector)
    # --db only: the file is locked by the collector, so the CLI finds the collector's URL beside it.
    out = run_cli("sql", "select count(*) as n from spans", "--db", str(collector.db), "--format", "json")
    assert json.loads(out.stdout) == [{"n": 2}]
    # --url explicitly
    out = run_cli("sql", "select count(*) as n from spans", "--url", collector.url, "--format", "json")
    assert json.loads(out.stdout) == [{"n": 2}]


_LOADED_AFTER_A_QUERY = """
import contextlib, io, json, sys
from meritlens.collector.cli._main import main
sys.argv = ["meritlens", "sql", "select count(*) as n from spans", "--db", sys.argv[1], "--format", "json"]
out = io.StringIO()
with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
    main()
heavy = ("pyarrow", "numpy", "aiohttp", "opentelemetry.sdk", "meritlens.collector.store._store")
print(json.dumps({"rows": json.loads(out.getvalue()),
                  "loaded": sorted(m for m in sys.modules if m.startswith(heavy))}))
"""


@pytest.mark.parametrize("where", ["through-the-collector", "on-the-file"])
def test_a_query_loads_neither_the_store_nor_the_server(collector, where):
    # The CLI's start-up is most of a query's time: Arrow, numpy, aiohttp, the OTel SDK and the
    # store's modules cost it ~2 s of imports, none of them needed to run one read.
    _send(collector)
    if where == "on-the-file":
        collector.stop()
    out = subprocess.run([sys.executable, "-c", _LOADED_AFTER_A_QUERY, str(collector.db)],
                         capture_output=True, text=True, check=True)
    result = json.loads(out.stdout)
    assert result == {"rows": [{"n": 2}], "loaded": []}


def test_query_opens_the_file_read_only_when_no_collector_holds_it(collector):
    _send(collector, 3)
    collector.stop()
    out = run_cli("sql", "select target_id, metric, value from windows where metric = 'input_tokens'",
                  "--db", str(collector.db), "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(out.stdout)))
    assert rows == [{"target_id": "bot", "metric": "input_tokens", "value": "15.0"}]
    table = run_cli("sql", "select metric, sample_count from windows order by metric", "--db", str(collector.db))
    assert "input_tokens" in table.stdout and f"{len(SPAN_WINDOW_METRICS)} rows" in table.stdout


def test_writes_and_file_access_are_refused_with_a_clear_message(collector):
    _send(collector)
    for query, needle in (
        ("insert into windows select * from windows", "only read statements"),
        ("drop table spans", "only read statements"),
        ("select 1; select 2", "one statement at a time"),
        ("select * from read_csv('/etc/passwd')", "disabled"),
        ("copy spans to '/tmp/out.csv'", "only read statements"),
        ("attach '/tmp/other.duckdb' as o", "only read statements"),
    ):
        for where in (("--db", str(collector.db)), ("--url", collector.url)):
            proc = run_cli("sql", query, *where, check=False)
            assert proc.returncode == 2, (query, proc.stdout)
            assert needle in proc.stderr, (query, proc.stderr)
            assert "Traceback" not in proc.stderr
    assert collector.sql("select count(*) n from spans") == [{"n": 2}]


def test_no_database_and_no_collector_is_a_one_line_error(tmp_path):
    # No --db: ./meritlens.duckdb, else the running collector ($MERITLENS_URL); here neither is there.
    proc = run_cli("sql", "select 1", check=False, cwd=tmp_path, env={"MERITLENS_URL": "http://127.0.0.1:9"})
    assert proc.returncode == 2
    assert "no collector reachable at http://127.0.0.1:9" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_help_lists_the_commands():
    out = run_cli("--help").stdout
    assert "serve" in out and "sql" in out
    assert "--http-port" in run_cli("serve", "--help").stdout
