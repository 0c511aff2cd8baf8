import json

import pytest

from meritlens.analytics import FakeJudge, JudgeSession
from meritlens.analytics._builtin_metrics import TaskQuality, TaskScoreRow
from meritlens.analytics.testing import make_span, output_attributes
from meritlens.instrumentation import conventions as c


def session(judge, replicas=3):
    return JudgeSession(judge, target_id="test-app/answer", scope="all", replicas=replicas)


def test_recorded_quality_scores_from_the_typed_column_and_evaluation_events(compute, tmp_path):
    spans = [
        make_span(task_id="t1", case_id="c1", quality_score=0.8),
        make_span(task_id="t1", events=[{"name": c.GEN_AI_EVALUATION_RESULT_EVENT, "time_unix_nano": 1, "attributes": {
            c.GEN_AI_EVALUATION_NAME: "task_quality", c.GEN_AI_EVALUATION_SCORE_VALUE: 0.6}}]),
        make_span(task_id="t2", case_id="c2", attributes={
            c.GEN_AI_EVALUATION_NAME: "task_quality", c.GEN_AI_EVALUATION_SCORE_VALUE: 0.0}),
        make_span(task_id="t3", attributes={
            c.GEN_AI_EVALUATION_NAME: "relevance", c.GEN_AI_EVALUATION_SCORE_VALUE: 0.9}),
    ]
    judge = FakeJudge()
    [m] = compute(TaskQuality, spans, judge=session(judge))
    # t1 = mean(0.8, 0.6) = 0.7; t2 = 0.0 (an observed zero); t3 has no task_quality score.
    assert m.value == pytest.approx(0.35)
    assert m.sample_count == 2
    assert dict(m.per_case) == pytest.approx({"c1": 0.7, "c2": 0.0})
    assert judge.prompts == []  # recorded scores present: the judge is not asked
    sidecar = (tmp_path / "task_quality.jsonl").read_text()
    rows = [TaskScoreRow.model_validate_json(line) for line in sidecar.splitlines()]
    assert {r.source for r in rows} == {"recorded"} and len(rows) == 3


def test_out_of_range_and_non_numeric_scores_are_left_out_not_clamped(compute, caplog):
    spans = [
        make_span(task_id="t1", quality_score=7.0),
        make_span(task_id="t2", quality_score=0.5),
        make_span(task_id="t3", attributes={
            c.GEN_AI_EVALUATION_NAME: "task_quality", c.GEN_AI_EVALUATION_SCORE_VALUE: "high"}),
    ]
    [m] = compute(TaskQuality, spans)
    assert m.value == 0.5 and m.sample_count == 1
    assert "outside [0, 1]" in caplog.text and "not a finite number" in caplog.text


def test_judge_path_averages_replicas_and_records_the_pinned_model(compute, tmp_path):
    replies = iter([0.2, 0.4, 0.9, "not json at all", 1.0, 0.5])
    judge = FakeJudge(model="fake-judge-model-2025-06-01", scorer=lambda prompt: next(replies))
    spans = [
        make_span(task_id="t1", case_id="c1", attributes=output_attributes("4", input_text="What is 2+2?")),
        make_span(task_id="t2", case_id="c1", attributes=output_attributes("5", input_text="What is 2+3?")),
    ]
    s = session(judge)
    [m] = compute(TaskQuality, spans, judge=s)
    # t1: mean(0.2, 0.4, 0.9) = 0.5; t2: one malformed reply left out -> mean(1.0, 0.5) = 0.75
    assert m.value == pytest.approx(0.625)
    assert "fake-judge-model-2025-06-01" in m.summary
    assert len(judge.prompts) == 6
    assert "What is 2+2?" in judge.prompts[0] and "\n4\n" in judge.prompts[0]
    assert [call.score for call in s.calls] == [0.2, 0.4, 0.9, None, 1.0, 0.5]
    assert s.calls[3].error.startswith("malformed judge reply")
    assert {call.model for call in s.calls} == {"fake-judge-model-2025-06-01"}
    rows = [json.loads(line) for line in (tmp_path / "task_quality.jsonl").read_text().splitlines()]
    assert len(rows) == 6 and all(r["judge_model"] == "fake-judge-model-2025-06-01" for r in rows)


def test_a_judge_that_never_gives_a_usable_score_fails_the_metric(compute):
    judge = FakeJudge(scorer=lambda prompt: '{"score": 3}')
    with pytest.raises(RuntimeError, match="no usable score"):
        compute(TaskQuality, [make_span(task_id="t1", attributes=output_attributes("x"))], judge=session(judge))


def test_without_scores_or_judge_it_does_not_apply(compute, caplog):
    with caplog.at_level("INFO"):
        assert compute(TaskQuality, [make_span(task_id="t1", attributes=output_attributes("x"))]) == []
    assert "no judge configured" in caplog.text


def test_with_a_judge_but_no_output_to_judge_it_does_not_apply(compute):
    judge = FakeJudge()
    assert compute(TaskQuality, [make_span(task_id="t1")], judge=session(judge)) == []
    assert judge.prompts == []
