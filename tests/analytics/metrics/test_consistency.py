import pytest

from meritlens.analytics._builtin_metrics import Consistency, comparable_output, pairwise_agreement
from meritlens.analytics.testing import make_span, output_attributes


def run(task, case, output):
    return make_span(task_id=task, case_id=case, attributes=output_attributes(output))


def test_mean_pairwise_agreement_over_repeated_cases(compute):
    spans = [
        run("r1", "c1", "Paris"), run("r2", "c1", " Paris "), run("r3", "c1", "Lyon"),   # 1 of 3 pairs agree
        run("r4", "c2", '{"a": 1, "b": 2}'), run("r5", "c2", '{"b":2,"a":1}'),          # JSON compared canonically
        run("r6", "c3", "only once"),                                                    # not repeated: left out
    ]
    [m] = compute(Consistency, spans)
    assert dict(m.per_case) == pytest.approx({"c1": 1 / 3, "c2": 1.0})
    assert m.value == pytest.approx((1 / 3 + 1.0) / 2)
    assert m.sample_count == 5
    assert spans[5].key not in m.evidence


def test_complete_disagreement_is_an_observed_zero(compute):
    [m] = compute(Consistency, [run("r1", "c1", "a"), run("r2", "c1", "b")])
    assert m.value == 0.0


def test_needs_a_case_with_two_runs(compute, caplog):
    spans = [run("r1", "c1", "a"), run("r2", "c2", "a"), make_span(task_id="r3", case_id="c1")]
    with caplog.at_level("INFO"):
        assert compute(Consistency, spans) == []
    assert "repeated_same_input" in caplog.text


def test_helpers():
    assert comparable_output("a  b\n") == comparable_output(" a b")
    assert comparable_output('{"x": [1, 2]}') == comparable_output('{ "x":[1,2] }')
    assert pairwise_agreement(["a", "a", "a"]) == 1.0
    assert pairwise_agreement(["a", "a", "b", "b"]) == pytest.approx(2 / 6)
