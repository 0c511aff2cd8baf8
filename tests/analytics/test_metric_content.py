"""Reading the input and output text that spans carry, across instrumentations."""

import json

from meritlens.analytics._content import input_text, messages_text, output_text, system_instructions
from meritlens.instrumentation import conventions as c


def test_genai_messages_as_attribute_or_event():
    messages = json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": "hi"},
                                                           {"type": "tool_call", "name": "f"}]}])
    assert output_text({c.GEN_AI_OUTPUT_MESSAGES: messages}, []) == "hi"
    event = {"name": "gen_ai.client.inference.operation.details", "attributes": {c.GEN_AI_OUTPUT_MESSAGES: messages}}
    assert output_text({}, [event]) == "hi"


def test_openinference_and_openllmetry_content():
    assert output_text({c.OPENINFERENCE_OUTPUT_VALUE: "a"}, []) == "a"
    assert output_text({c.OPENLLMETRY_COMPLETION_CONTENT: "b"}, []) == "b"
    assert input_text({c.OPENINFERENCE_INPUT_VALUE: "q"}, []) == "q"


def test_a_json_answer_recorded_as_plain_text_is_kept_as_it_is():
    assert messages_text('{"answer": 1}') == '{"answer": 1}'
    assert messages_text("[1, 2]") == "[1, 2]"
    assert messages_text("plain") == "plain"


def test_input_prefers_user_messages_and_system_instructions_come_from_system_role():
    messages = json.dumps([{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}])
    assert input_text({c.GEN_AI_INPUT_MESSAGES: messages}, []) == "hello"
    assert system_instructions({c.GEN_AI_INPUT_MESSAGES: messages}, []) == "be brief"


def test_no_content_is_none_not_empty():
    assert output_text({}, []) is None
    assert input_text({}, []) is None
    assert system_instructions({}, []) is None
