"""Judges: pinned models, replica parsing, templates and the deterministic fake."""

import pytest

from meritlens.analytics import FakeJudge, JudgeError, JudgeSession
from meritlens.analytics._judge import check_pinned, parse_score


@pytest.mark.parametrize("text, score", [
    ('{"score": 0.7, "reason": "ok"}', 0.7),
    ('Here you go:\n```json\n{"score": 1, "reason": "fine"}\n```', 1.0),
    ('{"score": 0}', 0.0),
])
def test_parse_score_accepts_a_json_object_with_a_score(text, score):
    assert parse_score(text) == score


@pytest.mark.parametrize("text, message", [
    ("I would say 0.8", "no JSON object"),
    ('{"reason": "x"}', 'no "score"'),
    ('{"score": "high"}', "not a finite number"),
    ('{"score": true}', "not a finite number"),
    ('{"score": 1.5}', r"outside \[0, 1\]"),
    ('{"score": NaN}', "not a finite number"),
])
def test_parse_score_refuses_anything_else(text, message):
    with pytest.raises(ValueError, match=message):
        parse_score(text)


@pytest.mark.parametrize("model", ["", "  ", "gpt-4o-latest", "claude-3-5-sonnet-latest"])
def test_the_judge_model_must_be_pinned(model):
    with pytest.raises(JudgeError):
        check_pinned(model)
    with pytest.raises(JudgeError):
        JudgeSession(FakeJudge(model=model), target_id="t", scope="all")


def test_replicas_must_be_positive():
    with pytest.raises(JudgeError, match="at least 1"):
        JudgeSession(FakeJudge(), target_id="t", scope="all", replicas=0)


def test_fake_judge_is_deterministic():
    a, b = FakeJudge(), FakeJudge()
    assert a.complete("same prompt").text == b.complete("same prompt").text
    assert 0.0 <= parse_score(a.complete("another").text) <= 1.0


def test_a_failing_judge_call_is_recorded_and_left_out():
    class Flaky(FakeJudge):
        calls = 0

        def complete(self, prompt):
            Flaky.calls += 1
            if Flaky.calls == 2:
                raise JudgeError("HTTP 529 overloaded")
            return super().complete(prompt)

    session = JudgeSession(Flaky(scorer=lambda p: 0.4), target_id="t", scope="all", replicas=3)
    judged = session.score_task("task_quality", "t1", "task_quality.j2",
                                {"metric": "task_quality", "input": None, "output": "x", "instructions": None})
    assert judged.replica_scores == (0.4, None, 0.4)
    assert judged.mean == 0.4
    assert session.calls[1].error == "judge call failed: HTTP 529 overloaded"
    assert all(call.end_unix_nano > call.start_unix_nano for call in session.calls)


@pytest.mark.parametrize("template", ["task_quality.j2", "hallucination_rate.j2", "instruction_following.j2"])
def test_templates_render_and_refuse_missing_variables(template):
    session = JudgeSession(FakeJudge(), target_id="t", scope="all")
    text = session.render(template, {"metric": "m", "input": "IN", "output": "OUT", "instructions": "RULES"})
    assert "IN" in text and "OUT" in text and "RULES" in text and '"score"' in text
    assert "(the input was not recorded)" in session.render(
        template, {"metric": "m", "input": None, "output": "OUT", "instructions": None})
    with pytest.raises(Exception, match="output"):
        session.render(template, {"metric": "m", "input": "IN", "instructions": None})
