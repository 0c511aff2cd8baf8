"""Sidecars: written by a metric, read back as keyed observations; a malformed row costs that row."""

import json
import logging

import pytest

from meritlens.analytics import KeyedObservation, read_sidecar, sidecar_path, write_sidecar
from meritlens.analytics._builtin_metrics import ToolOutcomeRow, ToolUsePerformance


def test_round_trip_with_malformed_rows(tmp_path, caplog):
    rows = [ToolOutcomeRow(tool="search", outcome="ok", calls=3),
            ToolOutcomeRow(tool="calc", outcome="Timeout", calls=1)]
    path = write_sidecar(tmp_path, "tool_use_performance", rows)
    assert path == tmp_path / "tool_use_performance.jsonl"
    with path.open("a") as fh:
        fh.write("{not json\n")
        fh.write(json.dumps({"tool": "x", "outcome": "ok"}) + "\n")                  # a field renamed away
        fh.write(json.dumps({"tool": "y", "outcome": "ok", "calls": "many"}) + "\n")  # wrong type
        fh.write("\n")
        fh.write(json.dumps({"tool": "z", "outcome": "ok", "calls": 2}) + "\n")
    with caplog.at_level(logging.WARNING):
        observations = ToolUsePerformance().read_keyed_observations(tmp_path)
    assert observations == [
        KeyedObservation(keys={"tool": "search", "outcome": "ok"}, value=3),
        KeyedObservation(keys={"tool": "calc", "outcome": "Timeout"}, value=1),
        KeyedObservation(keys={"tool": "z", "outcome": "ok"}, value=2),
    ]
    skipped = [r.getMessage() for r in caplog.records if "skipping malformed row" in r.getMessage()]
    assert len(skipped) == 3
    assert ":3 " in skipped[0] and "not JSON" in skipped[0]
    assert ":4 " in skipped[1] and "calls" in skipped[1]
    assert ":5 " in skipped[2] and "calls" in skipped[2]


def test_no_sidecar_is_none_and_no_observations(tmp_path):
    assert read_sidecar(tmp_path, "tool_use_performance", ToolOutcomeRow) is None
    assert ToolUsePerformance().read_keyed_observations(tmp_path) == []


def test_rewriting_replaces_the_earlier_sidecar(tmp_path):
    write_sidecar(tmp_path, "m", [ToolOutcomeRow(tool="a", outcome="ok", calls=1)])
    write_sidecar(tmp_path, "m", [ToolOutcomeRow(tool="b", outcome="ok", calls=2)])
    assert [r.tool for r in read_sidecar(tmp_path, "m", ToolOutcomeRow)] == ["b"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.jsonl"]


@pytest.mark.parametrize("name", ["", "../escape", "a/b", ".hidden"])
def test_a_name_that_cannot_be_a_file_name_is_refused(tmp_path, name):
    with pytest.raises(ValueError, match="cannot name a sidecar"):
        sidecar_path(tmp_path, name)


def test_keyed_observation_refuses_non_finite_values():
    with pytest.raises(ValueError):
        KeyedObservation(keys={"k": "v"}, value=float("nan"))
