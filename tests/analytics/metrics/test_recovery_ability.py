import pytest

from meritlens.analytics._builtin_metrics import RecoveryAbility
from meritlens.analytics.testing import make_span


def test_share_of_troubled_tasks_that_still_succeeded(compute):
    spans = [
        make_span(task_id="t1", case_id="c1", retries=2), make_span(task_id="t1", outcome_success=True),
        make_span(task_id="t2", case_id="c1", status_code=2), make_span(task_id="t2", outcome_success=False),
        make_span(task_id="t3", case_id="c2", error_type="RateLimitError", outcome_success=True),
        make_span(task_id="t4", outcome_success=False),          # no trouble: not in the denominator
        make_span(task_id="t5", retries=1),                      # trouble, no outcome: left out
    ]
    [m] = compute(RecoveryAbility, spans)
    assert m.value == pytest.approx(2 / 3)
    assert m.sample_count == 3
    assert dict(m.per_case) == pytest.approx({"c1": 0.5, "c2": 1.0})
    assert spans[5].key not in m.evidence and spans[6].key not in m.evidence


def test_the_latest_recorded_outcome_of_a_task_wins(compute):
    spans = [
        make_span(task_id="t1", retries=1, outcome_success=False, end_unix_nano=2_000_000_000_000_000_000),
        make_span(task_id="t1", outcome_success=True, end_unix_nano=2_000_000_000_500_000_000),
    ]
    [m] = compute(RecoveryAbility, spans)
    assert m.value == 1.0


@pytest.mark.parametrize("spans, reason", [
    ([make_span(task_id="t1", outcome_success=True)], "no task hit an error"),
    ([make_span(task_id="t1", retries=1)], "none recorded meritlens.outcome.success"),
])
def test_does_not_apply_without_trouble_or_outcomes(compute, caplog, spans, reason):
    with caplog.at_level("INFO"):
        assert compute(RecoveryAbility, spans) == []
    assert reason in caplog.text
