"""The rules the collector watches: every (rule, target) of the loaded profiles once; `serve` refuses two
profiles that give one target two rules of one name, in one line, before it opens anything."""

from __future__ import annotations

import pytest

from meritlens.analytics.engine import profile_from_dict
from meritlens.collector.alerts._watch import watched_rules
from tests.cli_runner import run_cli

PROFILE = """target = "{target}"
[metrics.end_to_end_latency]
direction = "lower"
strategy = "load_test"
cases = 1
repetitions = 100
aggregation = "percentile"
min_samples = 30
constraint = 2.0
rationale = "every request"

[[alerts]]
name = "p95-ceiling"
kind = "constraint"
metric = "end_to_end_latency"
"""


def _profile(target: str):
    import tomllib

    return profile_from_dict(tomllib.loads(PROFILE.format(target=target)))


def test_a_rule_name_is_unique_per_target_across_profiles():
    with pytest.raises(ValueError, match="alert rule 'p95-ceiling' for bot is in profiles a and b: rename one"):
        watched_rules([("a", _profile("bot")), ("b", _profile("bot"))])
    keys = [r.key for r in watched_rules([("a", _profile("bot")), ("b", _profile("other-bot"))])]
    assert keys == [("p95-ceiling", "bot"), ("p95-ceiling", "other-bot")]


def test_serve_refuses_two_rules_of_one_name_for_one_target(tmp_path):
    for name in ("a", "b"):
        (tmp_path / f"{name}.toml").write_text(PROFILE.format(target="bot"))
    refused = run_cli("serve", "--db", str(tmp_path / "m.duckdb"), "--no-grpc", "--http-port", "0",
                      "--profile", str(tmp_path), check=False)
    assert refused.returncode == 2 and "alert rule 'p95-ceiling' for bot is in profiles a and b" in refused.stderr
    assert refused.stderr.strip().count("\n") == 0 and not (tmp_path / "m.duckdb").exists()
