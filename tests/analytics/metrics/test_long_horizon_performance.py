import pytest

from meritlens.analytics import OptionError
from meritlens.analytics._builtin_metrics import LongHorizonPerformance
from meritlens.analytics.testing import make_span


def task(key, steps, success, case=None):
    spans = [make_span(task_id=key, case_id=case, agent_step=i) for i in range(1, steps + 1)]
    if success is not None:
        spans.append(make_span(task_id=key, outcome_success=success))
    return spans


def test_success_rate_of_tasks_above_the_threshold(compute, tmp_path):
    spans = task("t1", 4, True, "c1") + task("t2", 5, False, "c1") + task("t3", 6, True, "c2") + task("t4", 2, False)
    [m] = compute(LongHorizonPerformance, spans, {"step_threshold": "3"})
    assert m.value == pytest.approx(2 / 3)
    assert m.sample_count == 3
    assert dict(m.per_case) == pytest.approx({"c1": 0.5, "c2": 1.0})
    observations = {o.keys["steps"]: o.value for o in LongHorizonPerformance().read_keyed_observations(tmp_path)}
    assert observations == {"2": 0.0, "4": 1.0, "5": 0.0, "6": 1.0}


def test_threshold_is_exclusive_and_defaults_to_ten(compute, caplog):
    with caplog.at_level("INFO"):
        assert compute(LongHorizonPerformance, task("t1", 10, True)) == []
    assert "more than 10 steps" in caplog.text
    [m] = compute(LongHorizonPerformance, task("t1", 11, False))
    assert m.value == 0.0


def test_no_step_data_does_not_apply(compute, caplog):
    with caplog.at_level("INFO"):
        assert compute(LongHorizonPerformance, [make_span(task_id="t1", outcome_success=True)]) == []
    assert "agent steps" in caplog.text


def test_long_tasks_without_outcomes_do_not_apply(compute):
    assert compute(LongHorizonPerformance, task("t1", 4, None), {"step_threshold": "1"}) == []


def test_a_bad_threshold_is_named(compute):
    with pytest.raises(OptionError, match="step_threshold"):
        compute(LongHorizonPerformance, task("t1", 4, True), {"step_threshold": "many"})
