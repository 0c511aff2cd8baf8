import json

import pytest

from meritlens.analytics import FakeJudge, JudgeSession
from meritlens.analytics._builtin_metrics import InstructionFollowing
from meritlens.analytics.testing import make_span, output_attributes
from meritlens.instrumentation import conventions as c


def test_recorded_instruction_following_scores(compute):
    spans = [make_span(task_id="t1", events=[{"name": "gen_ai.evaluation.result", "time_unix_nano": 5, "attributes": {
                 c.GEN_AI_EVALUATION_NAME: "instruction_following", c.GEN_AI_EVALUATION_SCORE_VALUE: 1}}]),
             make_span(task_id="t2", attributes={c.GEN_AI_EVALUATION_NAME: "instruction_following",
                                                 c.GEN_AI_EVALUATION_SCORE_VALUE: 0.5})]
    [m] = compute(InstructionFollowing, spans)
    assert m.value == pytest.approx(0.75)
    assert m.unit == "score"


def test_judge_sees_the_system_instructions(compute):
    judge = FakeJudge(scorer=lambda prompt: 0.25)
    attributes = output_attributes("Bonjour", input_text="Say hello")
    attributes[c.GEN_AI_SYSTEM_INSTRUCTIONS] = json.dumps([{"type": "text", "content": "Always answer in English."}])
    [m] = compute(InstructionFollowing, [make_span(task_id="t1", attributes=attributes)],
                  judge=JudgeSession(judge, target_id="a", scope="all", replicas=1))
    assert m.value == 0.25
    assert "Always answer in English." in judge.prompts[0]
    assert "Say hello" in judge.prompts[0]


def test_does_not_apply_without_scores_or_judge(compute, caplog):
    with caplog.at_level("INFO"):
        assert compute(InstructionFollowing, [make_span(task_id="t1", attributes=output_attributes("x"))]) == []
    assert "instruction_following does not apply" in caplog.text
