"""Storing experiments: on a free DuckDB file (the CLI opens it) and through a running collector's
POST /api/experiments, with the same validation and the same refusals."""

from __future__ import annotations

import datetime as dt
import json
import urllib.request

import pytest

from tests.collector.collector_proc import CollectorProcess as TokenCollector
from tests.conftest import free_port
from tests.decide.decide_support import (
    ARMS,
    TARGET,
    arm_tasks,
    arm_window,
    meritlens,
    post_json,
    running_collector,
    send_with_sdk,
)
from meritlens.analytics._manifest import Arm, ExperimentManifest

CASES = [f"ticket-{i:03d}" for i in range(30)]


def test_a_new_store_has_the_experiment_tables(tmp_path):
    db = tmp_path / "fresh.duckdb"
    with running_collector(db):
        result = meritlens("sql", "SELECT count(*) AS n FROM experiments, experiment_arms", "--db", str(db),
                           "--format", "json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == [{"n": 0}]


def test_the_experiment_lifecycle_on_a_file_no_collector_holds(tmp_path):
    db = tmp_path / "runs.duckdb"
    base, cheap = ARMS[0], ARMS[1]
    with running_collector(db) as url:  # the application's spans arrive while a collector runs...
        order = list(ExperimentManifest.new("x", target_id=TARGET, application_revision="r", cases=CASES,
                                            shuffle_seed=3, repetitions=2).case_order)
        send_with_sdk(url, arm_tasks(base, 0, order) + arm_tasks(cheap, 1, order))
    # ...and the experiment is recorded afterwards, on the file itself.
    args = ("--db", str(db))
    created = meritlens("experiment", "create", "offline", *args, "--target", TARGET, "--revision", "r",
                        *[f"--case={c}" for c in CASES], "--seed", "3", "--repetitions", "2")
    assert created.returncode == 0, created.stderr
    assert "30 cases x 2 repetitions, shuffle seed 3" in created.stdout
    again = meritlens("experiment", "create", "offline", *args, "--target", TARGET, "--revision", "r",
                      "--case", "a", "--seed", "3")
    assert again.returncode == 2 and "already exists" in again.stderr

    for index, arm in enumerate((base, cheap)):
        start, end = arm_window(index)
        added = meritlens("experiment", "arm", "offline", arm.name, *args, "--assessment", arm.assessment_id,
                          "--request-model", arm.request_model, "--started-at", start.isoformat())
        assert added.returncode == 0, added.stderr
        done = meritlens("experiment", "finish", "offline", arm.name, *args, "--at", end.isoformat())
        assert done.returncode == 0, done.stderr
        assert f"reported {arm.response_model}" in done.stdout

    moved = meritlens("experiment", "arm", "offline", "base", *args, "--assessment", "elsewhere")
    assert moved.returncode == 2
    assert "assessment_id is fixed once the arm started (stored 'exp-base', got 'elsewhere')" in moved.stderr
    restarted = meritlens("experiment", "start", "offline", "base", *args)
    assert restarted.returncode == 2 and "already started" in restarted.stderr
    naive = meritlens("experiment", "arm", "offline", "late", *args, "--assessment", "L", "--started-at",
                      "2025-01-01T00:00:00")
    assert naive.returncode == 2 and "has no time zone" in naive.stderr

    shown = json.loads(meritlens("experiment", "show", "offline", *args, "--format", "json").stdout)
    assert [a["name"] for a in shown["arms"]] == ["base", "cheap"] and shown["baseline"] is None
    assert all(not c["refused"] for c in shown["checks"])
    listed = json.loads(meritlens("experiment", "list", *args, "--format", "json").stdout)
    assert listed[0]["experiment_id"] == "offline" and listed[0]["arms"] == ["base", "cheap"]

    compared = meritlens("compare", "--experiment", "offline", *args, "--format", "json")
    assert compared.returncode == 0, compared.stderr
    document = json.loads(compared.stdout)
    assert document["baseline"] == "base"  # the first arm, when the manifest names none
    assert document["rules"] == "catalogue defaults (no profile)"
    by_metric = {m["metric"]: m for m in document["metrics"]}
    assert by_metric["total_task_cost"]["challengers"][0]["verdict"] == "better"
    assert by_metric["task_quality"]["challengers"][0]["verdict"] == "equivalent"
    assert by_metric["throughput"]["challengers"][0]["state"] == "not_comparable"
    assert by_metric["time_to_first_useful_output"]["challengers"][0]["state"] == "not_configured"
    assert by_metric["time_to_first_useful_output"]["baseline"]["value"] is None


def test_an_unfinished_arm_is_refused_and_finishing_needs_spans(tmp_path):
    db = tmp_path / "open.duckdb"
    args = ("--db", str(db))
    with running_collector(db):  # the commands find it through the address it wrote beside the file
        assert meritlens("experiment", "create", "open", *args, "--target", TARGET, "--revision", "r",
                         "--case", "a", "--case", "b", "--seed", "1").returncode == 0
        for name in ("one", "two"):
            assert meritlens("experiment", "arm", "open", name, *args, "--assessment", f"open-{name}").returncode == 0
        started = meritlens("experiment", "start", "open", "one", *args)
        assert started.returncode == 0 and "run its cases with meritlens.assessment.id = 'open-one'" in started.stdout
        empty = meritlens("experiment", "finish", "open", "one", *args)
        assert empty.returncode == 2 and "no application spans of target" in empty.stderr
        compared = meritlens("compare", "--experiment", "open", *args, "--format", "json")
    assert compared.returncode == 1
    problems = {c["arm"]: c["problems"] for c in json.loads(compared.stdout)["arms"]}
    assert "has not finished" in problems["one"][0]
    assert "never started" in problems["two"][0]


def test_nothing_is_written_when_neither_the_file_nor_a_collector_is_there(tmp_path):
    dead = f"http://127.0.0.1:{free_port()}"
    created = meritlens("experiment", "create", "lost", "--db", str(tmp_path / "none.duckdb"), "--url", dead,
                        "--target", TARGET, "--revision", "r", "--case", "a", "--seed", "1")
    assert created.returncode == 2 and f"no collector reachable at {dead}" in created.stderr
    shown = meritlens("experiment", "show", "lost", "--db", str(tmp_path / "none.duckdb"), "--url", dead)
    assert shown.returncode == 2 and "no collector reachable" in shown.stderr
    assert list(tmp_path.iterdir()) == []


def _manifest(experiment_id: str = "posted") -> ExperimentManifest:
    start, end = arm_window(0)
    return ExperimentManifest.new(
        experiment_id, target_id=TARGET, application_revision="r9", cases=["a", "b", "c"], shuffle_seed=5,
        repetitions=1, arms=[Arm(name="base", assessment_id="p-base", started_at=start, finished_at=end)],
    )


def test_the_collector_endpoint_validates_like_the_file(tmp_path):
    db = tmp_path / "served.duckdb"
    with running_collector(db) as url:
        endpoint = url + "/api/experiments"
        with pytest.raises(urllib.error.HTTPError) as wrong_method:
            urllib.request.urlopen(endpoint, timeout=10)
        assert wrong_method.value.code == 405

        request = urllib.request.Request(endpoint, data=b"not json", headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as not_json:
            urllib.request.urlopen(request, timeout=10)
        assert not_json.value.code == 400 and "manifest" in json.loads(not_json.value.read())["error"]

        tampered = _manifest().model_dump(mode="json")
        tampered["case_order"] = list(reversed(tampered["case_order"]))
        status, body = post_json(endpoint, {"manifest": tampered})
        assert status == 400
        assert any("case_order is not the order seed 5 produces" in p for p in body["problems"])
        status, body = post_json(endpoint, {"manifest": {**_manifest().model_dump(mode="json"), "repetitions": 0,
                                                         "shuffle_seed": "5"}})
        assert status == 400
        assert any(p.startswith("repetitions:") for p in body["problems"])
        assert any(p.startswith("shuffle_seed:") for p in body["problems"])

        status, body = post_json(endpoint, {"manifest": _manifest().model_dump(mode="json"), "create": True})
        assert status == 200 and body["manifest"]["manifest_digest"] == _manifest().digest
        created_at = body["manifest"]["created_at"]
        status, body = post_json(endpoint, {"manifest": _manifest().model_dump(mode="json"), "create": True})
        assert status == 409 and "already exists" in body["error"]

        rewritten = _manifest().model_dump(mode="json")
        rewritten["application_revision"] = "r10"
        rewritten["arms"] = []
        status, body = post_json(endpoint, {"manifest": rewritten})
        assert status == 409
        assert any("application_revision is fixed at creation" in p for p in body["problems"])
        assert any("arm 'base' cannot be removed" in p for p in body["problems"])

        grown = _manifest().with_arm(Arm(name="cheap", assessment_id="p-cheap"), baseline=True)
        status, body = post_json(endpoint, {"manifest": grown.model_dump(mode="json")})
        assert status == 200 and body["manifest"]["created_at"] == created_at
        assert body["manifest"]["baseline"] == "cheap"

        stored = meritlens("experiment", "show", "posted", "--db", str(db), "--format", "json")
        assert stored.returncode == 0, stored.stderr
        shown = json.loads(stored.stdout)
        assert shown["manifest_digest"] == grown.digest and [a["name"] for a in shown["arms"]] == ["base", "cheap"]
        rows = meritlens("sql", "SELECT arm, position, assessment_id FROM experiment_arms ORDER BY position",
                         "--db", str(db), "--format", "json")
        assert json.loads(rows.stdout) == [
            {"arm": "base", "position": 0, "assessment_id": "p-base"},
            {"arm": "cheap", "position": 1, "assessment_id": "p-cheap"},
        ]
    # after the collector stops, the file holds the same manifest
    after = meritlens("experiment", "show", "posted", "--db", str(db), "--format", "json")
    assert json.loads(after.stdout)["manifest_digest"] == grown.digest
    assert dt.datetime.fromisoformat(json.loads(after.stdout)["updated_at"]) > dt.datetime.fromisoformat(created_at)


def test_experiment_commands_send_the_collectors_token(tmp_path):
    db = tmp_path / "guarded.duckdb"
    token_file = tmp_path / "token"
    token_file.write_text("s3cret-token\n")
    with TokenCollector(db, args=("--token-file", str(token_file)), token="s3cret-token"):
        create = ("experiment", "create", "guarded", "--db", str(db), "--target", TARGET, "--revision", "r",
                  "--case", "a", "--case", "b", "--seed", "2")
        refused = meritlens(*create)
        assert refused.returncode == 2 and "bearer token" in refused.stderr, refused.stderr
        accepted = meritlens(*create, "--token-file", str(token_file))
        assert accepted.returncode == 0, accepted.stderr
        shown = meritlens("experiment", "show", "guarded", "--db", str(db), "--token", "s3cret-token",
                          "--format", "json")
        assert shown.returncode == 0 and json.loads(shown.stdout)["experiment_id"] == "guarded"
