"""Window versions on a lake: each run's windows replace the previous run's at once, and the job's
command line refuses what it cannot run with one line."""

from __future__ import annotations

import datetime as dt

import duckdb

from meritlens.analytics._schema import SPANS_DDL
from meritlens.collector.lake import Lake, LakeReader, current_windows_file, publish_windows
from meritlens.collector.windows import DuckDBEngine, compute_windows
from tests.analytics.evidence_helpers import span_rows
from tests.collector.lake.lake_helpers import lake_collector, lake_sql, varied_spans
from tests.conftest import run_cli


def _windows_of(seeds: range) -> list:
    con = duckdb.connect()
    con.execute(SPANS_DDL)
    rows = span_rows([s for spans in varied_spans(seeds) for s in spans])
    con.register("_rows", rows)
    con.execute("INSERT INTO spans SELECT *, now() FROM _rows")
    return compute_windows(DuckDBEngine(con), "lake", dt.datetime.now(dt.UTC))


def test_each_version_replaces_the_last_whole(tmp_path):
    lake = Lake(str(tmp_path / "lake"))
    first, second, third = _windows_of(range(1, 4)), _windows_of(range(10, 20)), _windows_of(range(30, 32))
    assert len({len(first), len(second), len(third)}) == 3
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    names = [publish_windows(lake, windows, t0 + dt.timedelta(minutes=i))
             for i, windows in enumerate((first, second))]
    reader = LakeReader(lake)
    assert current_windows_file(lake).endswith(names[1])
    assert reader.query("SELECT count(*), count(DISTINCT computed_at) FROM windows").rows == [(len(second), 1)]
    publish_windows(lake, third, t0 + dt.timedelta(minutes=2))
    kept = sorted(p.name for p in (tmp_path / "lake" / "windows").glob("*.parquet"))
    assert len(kept) == 2 and names[0] not in kept and names[1] in kept  # the previous one stays for readers
    assert reader.query("SELECT count(*) FROM windows").rows == [(len(third),)]
    assert not [p for p in (tmp_path / "lake" / "windows").iterdir() if p.name.startswith(".")]


def test_the_job_on_a_lake_without_spans_publishes_no_windows(tmp_path):
    lake = tmp_path / "lake"
    with lake_collector(tmp_path, lake, "c0"):
        pass
    job = run_cli("lake", "windows", "--lake", str(lake))
    assert job.stdout.startswith("computed 0 windows from 0 segments")
    assert lake_sql(lake, "select count(*) as n from windows") == [{"n": 0}]
    assert "computed 20" in run_cli("lake", "status", "--lake", str(lake)).stdout  # the run's time, not "never"
    bad = run_cli("lake", "windows", "--lake", str(lake), "--conf", "novalue", check=False)
    assert bad.returncode == 2 and "'novalue' is not KEY=VALUE" in bad.stderr


def test_a_runs_state_is_taken_up_only_by_the_same_definitions(tmp_path):
    import json

    from meritlens.analytics._accumulate import WindowBook
    from meritlens.analytics._time_buckets import DAY_US, BucketCutoffs
    from meritlens.collector.lake._incremental import load_run, save_run
    from meritlens.collector.windows._engine import fill_book

    con = duckdb.connect()
    con.execute(SPANS_DDL)
    con.register("_rows", span_rows([s for spans in varied_spans(range(40, 46)) for s in spans]))
    con.execute("INSERT INTO spans SELECT *, now() FROM _rows")
    book = WindowBook()
    cutoffs = BucketCutoffs.at(1_700_000_000_000_000 + 3 * DAY_US)  # the spans' times fall in hours
    keys = fill_book(book, DuckDBEngine(con).samples(), cutoffs=cutoffs)
    assert any(len(k) > 2 for k in keys)  # time buckets as well
    lake = Lake(str(tmp_path / "lake"))
    lake.make_dirs()
    save_run(lake, "windows-x.parquet", book, ["c0-1.parquet", "c1-2.parquet"], cutoffs)
    assert load_run(lake, "windows-x.parquet", book.scale + 1) is None  # another quantile error setting
    saved = load_run(lake, "windows-x.parquet", book.scale)
    assert saved.segments == {"c0-1.parquet", "c1-2.parquet"} and saved.cutoffs == cutoffs
    when = dt.datetime.now(dt.UTC)
    assert [saved.book.windows(k, "lake", when) for k in sorted(keys)] == [book.windows(k, "lake", when)
                                                                            for k in sorted(keys)]
    manifest = tmp_path / "lake" / "state" / "windows-x.json"
    manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "definitions": "another version"}))
    assert load_run(lake, "windows-x.parquet", book.scale) is None
    assert load_run(lake, "windows-y.parquet", book.scale) is None
