import pytest

from meritlens.analytics._builtin_metrics import ToolUsePerformance
from meritlens.analytics.testing import make_span, output_attributes
from meritlens.instrumentation import conventions as c


def tool(task, name, *, failed=False, error_type=None, case=None):
    return make_span(task_id=task, case_id=case, operation=c.OP_EXECUTE_TOOL, name=f"execute_tool {name}",
                     kind=1, tool_name=name, status_code=2 if failed else 1, error_type=error_type)


def test_share_of_successful_tool_executions_with_per_tool_breakdown(compute, tmp_path):
    spans = [
        make_span(task_id="t1", case_id="c1"),
        tool("t1", "search"), tool("t1", "search", failed=True, error_type="Timeout"),
        tool("t2", "calc", case="c2"), tool("t2", "calc", error_type="ValueError"),
    ]
    [m] = compute(ToolUsePerformance, spans)
    assert m.value == pytest.approx(0.5)
    assert m.sample_count == 4
    assert m.unit == "ratio"
    assert dict(m.per_key) == {"calc": 0.5, "search": 0.5}
    assert dict(m.per_case) == {"c1": 0.5, "c2": 0.5}
    # The evidence is the tool spans only: the LLM span did not feed the value.
    assert m.evidence == {s.key for s in spans[1:]}
    observations = ToolUsePerformance().read_keyed_observations(tmp_path)
    by_key = {(o.keys["tool"], o.keys["outcome"]): o.value for o in observations}
    assert by_key == {("search", "ok"): 1, ("search", "Timeout"): 1, ("calc", "ok"): 1, ("calc", "ValueError"): 1}


def test_all_tool_calls_failing_is_an_observed_zero(compute):
    [m] = compute(ToolUsePerformance, [tool("t1", "search", failed=True), tool("t2", "search", failed=True)])
    assert m.value == 0.0
    assert m.sample_count == 2


def test_tool_calls_requested_by_the_model_are_not_tool_evidence(compute, caplog):
    # A chat span that *requested* tools (meritlens.tool_calls) is not a harness trace of a tool run.
    spans = [make_span(task_id="t1", tool_calls=3, attributes=output_attributes("ok"))]
    with caplog.at_level("INFO"):
        assert compute(ToolUsePerformance, spans) == []
    assert "no tool spans" in caplog.text
