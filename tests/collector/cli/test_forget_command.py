"""`meritlens forget` with the real collector process: a dry run removes nothing; --yes through the running collector
(spans still in its staging log included), then on the file once it stopped; the windows, windows by time and
their evidence digests then equal those of a collector that never received the forgotten spans, and a value the
redaction policy hashed is found by its hash."""

from __future__ import annotations

import httpx

from tests.analytics.evidence_helpers import export_body
from tests.collector.windows.test_incremental_windows import _random_spans
from tests.conftest import CollectorProcess, run_cli
from tests.redaction_support import example_policy
from tests.store_under_test import WINDOW_ROW_COLUMNS

_BY_TIME = ("target_id", "metric", "scope", "bucket_start", "bucket_seconds", "value", "sample_count", "state",
            "evidence_digest")


def _send(collector, spans) -> None:
    for i in range(0, len(spans), 7):
        response = httpx.post(collector.url + "/v1/traces", content=export_body(spans[i:i + 7]),
                              headers={"Content-Type": "application/x-protobuf"})
        assert response.status_code == 200, response.text


def _windows(collector) -> tuple[list, list]:
    return (collector.sql(f"SELECT {', '.join(WINDOW_ROW_COLUMNS)} FROM windows ORDER BY ALL"),
            collector.sql(f"SELECT {', '.join(_BY_TIME)} FROM windows_by_time ORDER BY ALL"))


def test_forgotten_spans_leave_the_windows_of_a_collector_that_never_received_them(tmp_path):
    policy = example_policy(tmp_path)
    spans = [s for seed in range(3) for s in _random_spans(seed)]
    user_spans = {s.span_id for s in spans[::5]}  # the spans of one user, whose id the policy hashes
    for s in spans:
        if s.span_id in user_spans:
            s.attributes["user.id"] = "u-17"
    trace = spans[-1].trace_id
    gone_first = user_spans
    gone_later = {s.span_id for s in spans if s.trace_id == trace} - user_spans
    args = ("--no-grpc", "--redact", str(policy), "--stage-seconds", "60")  # acknowledged spans stay staged
    for name in ("forgetting", "never"):  # one file name: it is part of the windows' evidence URIs
        (tmp_path / name).mkdir()
    forgetting = CollectorProcess(tmp_path / "forgetting" / "m.duckdb", args=args)
    with forgetting:
        _send(forgetting, spans)
        where = ["--where", "attributes->>'user.id' = hmac('u-17')", "--redact", str(policy)]
        dry = run_cli("forget", "--db", str(forgetting.db), *where)
        assert dry.returncode == 0, dry.stderr
        assert f"would remove {len(gone_first)} spans" in dry.stdout and "--yes" in dry.stdout
        assert "hmac:" in dry.stdout and "u-17" not in dry.stdout  # the condition as it ran: the hash
        assert forgetting.sql("SELECT count(*) AS n FROM spans")[0]["n"] == len(spans)
        done = run_cli("forget", "--db", str(forgetting.db), *where, "--yes")
        assert done.returncode == 0, done.stderr
        assert f"removed {len(gone_first)} spans" in done.stdout
        assert forgetting.sql("SELECT count(*) AS n FROM spans")[0]["n"] == len(spans) - len(gone_first)
        metrics = httpx.get(forgetting.url + "/metrics").text
        assert f"meritlens_spans_forgotten_total {float(len(gone_first))}" in metrics
    # with no collector holding the file, forget opens the file itself
    done = run_cli("forget", "--db", str(forgetting.db), "--trace-id", trace, "--yes")
    assert done.returncode == 0, done.stderr
    assert f"removed {len(gone_later)} span" in done.stdout

    never = CollectorProcess(tmp_path / "never" / "m.duckdb", args=args)
    with never:
        _send(never, [s for s in spans if s.span_id not in gone_first | gone_later])
        expected = _windows(never)
    with forgetting:  # restarted: it takes up the state saved after forgetting
        assert _windows(forgetting) == expected
        assert forgetting.sql("SELECT count(*) AS n FROM spans WHERE attributes->>'user.id' IS NOT NULL")[0]["n"] == 0


def test_forget_refuses_what_names_no_spans_in_one_line(tmp_path, collector):
    for args, message in (((), "name the spans to forget"), (("--trace-id", "abc"), "is not a trace id"),
                          (("--where", "(true) UNION ALL (SELECT 1, 2, 3)"), "not one SQL condition"),
                          (("--where", "user_id = hmac('u')"), "needs the redaction policy")):
        result = run_cli("forget", "--db", str(collector.db), *args, check=False)
        assert result.returncode == 2 and message in result.stderr, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
