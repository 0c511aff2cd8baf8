import json

import pytest

from meritlens.analytics import OptionError
from meritlens.analytics._builtin_metrics import OutputCheckRow, StructuredOutputReliability
from meritlens.analytics.testing import make_span, output_attributes
from meritlens.instrumentation import conventions as c

SCHEMA = {"type": "object", "required": ["answer"], "properties": {"answer": {"type": "string"}}}


def task(key, output, *, case=None, schema=None):
    attributes = output_attributes(output) if output is not None else {}
    if schema is not None:
        attributes[c.OUTPUT_SCHEMA] = json.dumps(schema)
    return make_span(task_id=key, case_id=case, attributes=attributes)


@pytest.fixture
def schema_file(tmp_path):
    path = tmp_path / "schema.json"
    path.write_text(json.dumps(SCHEMA))
    return str(path)


def test_share_of_outputs_that_parse_and_validate(compute, schema_file, tmp_path):
    spans = [
        task("t1", '{"answer": "yes"}', case="c1"),
        task("t2", '  {"answer": "no"}\n', case="c1"),
        task("t3", '{"answer": 42}', case="c2"),           # violates the schema
        task("t4", 'Sure! {"answer": "x"}', case="c2"),    # does not parse
    ]
    [m] = compute(StructuredOutputReliability, spans, {"schema": schema_file})
    assert m.value == pytest.approx(0.5)
    assert m.sample_count == 4
    assert dict(m.per_case) == {"c1": 1.0, "c2": 0.0}
    assert dict(m.per_key) == {"parse_failure": 0.25, "schema_violation": 0.25}
    sidecar = (tmp_path / f"{m.metric_name}.jsonl").read_text()
    rows = [OutputCheckRow.model_validate_json(line) for line in sidecar.splitlines()]
    failures = {r.task: (r.failure, r.detail) for r in rows if not r.valid}
    assert failures["t3"][0] == "schema" and "answer" in failures["t3"][1]
    assert failures["t4"][0] == "parse"


def test_a_task_schema_attribute_wins_over_the_option(compute, schema_file):
    other = {"type": "array"}
    [m] = compute(StructuredOutputReliability, [task("t1", "[1, 2]", schema=other), task("t2", '{"answer": "a"}')],
                  {"schema": schema_file})
    assert m.value == 1.0


def test_tasks_without_output_are_left_out_not_counted_as_failures(compute, schema_file):
    tasks = [task("t1", '{"answer": "a"}'), task("t2", None)]
    [m] = compute(StructuredOutputReliability, tasks, {"schema": schema_file})
    assert m.value == 1.0
    assert m.sample_count == 1


def test_no_schema_anywhere_does_not_apply(compute, caplog):
    with caplog.at_level("INFO"):
        assert compute(StructuredOutputReliability, [task("t1", '{"answer": "a"}')]) == []
    assert "no JSON Schema" in caplog.text


def test_an_invalid_schema_file_is_a_clear_option_error(compute, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"type": 12}')
    with pytest.raises(OptionError, match="not a valid JSON Schema"):
        compute(StructuredOutputReliability, [task("t1", "{}")], {"schema": str(bad)})


def test_a_missing_schema_file_names_the_option(compute, tmp_path):
    with pytest.raises(OptionError, match="schema"):
        compute(StructuredOutputReliability, [task("t1", "{}")], {"schema": str(tmp_path / "missing.json")})
