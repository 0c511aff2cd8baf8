import pytest

from meritlens.analytics import FakeJudge, JudgeSession
from meritlens.analytics._builtin_metrics import HallucinationRate
from meritlens.analytics.testing import make_span, output_attributes
from meritlens.instrumentation import conventions as c


def evaluated(task, name, score):
    return make_span(task_id=task, attributes={c.GEN_AI_EVALUATION_NAME: name, c.GEN_AI_EVALUATION_SCORE_VALUE: score})


def test_share_of_tasks_with_recorded_hallucinations(compute):
    spans = [evaluated("t1", "hallucination", 1), evaluated("t2", "hallucination_rate", 0.0),
             evaluated("t3", "hallucination", 0), evaluated("t4", "hallucination", 0),
             make_span(task_id="t5", quality_score=0.1)]  # a quality score is not a hallucination verdict
    [m] = compute(HallucinationRate, spans)
    assert m.value == pytest.approx(0.25)
    assert m.sample_count == 4
    assert m.unit == "ratio"


def test_no_hallucination_observed_is_a_real_zero(compute):
    [m] = compute(HallucinationRate, [evaluated("t1", "hallucination", 0), evaluated("t2", "hallucination", 0)])
    assert m.value == 0.0


def test_judge_prompt_asks_about_unsupported_claims(compute):
    judge = FakeJudge(scorer=lambda prompt: 1.0 if "moon is made of cheese" in prompt else 0.0)
    spans = [make_span(task_id="t1", attributes=output_attributes("The moon is made of cheese.", input_text="Moon?")),
             make_span(task_id="t2", attributes=output_attributes("The moon orbits Earth.", input_text="Moon?"))]
    [m] = compute(HallucinationRate, spans, judge=JudgeSession(judge, target_id="a", scope="all", replicas=2))
    assert m.value == pytest.approx(0.5)
    assert "unsupported claim" in judge.prompts[0]


def test_does_not_apply_without_verdicts_or_judge(compute, caplog):
    with caplog.at_level("INFO"):
        assert compute(HallucinationRate, [make_span(task_id="t1", quality_score=0.9)]) == []
    assert "hallucination_rate does not apply" in caplog.text
