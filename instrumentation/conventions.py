"""Span attribute names: the one home of meritlens' public span contract.

Every other module imports these constants; no attribute name is retyped elsewhere.
OpenTelemetry GenAI semantic-convention names are used wherever one exists; our own
names live under ``meritlens.``.
"""

from __future__ import annotations

from typing import Final

TRACER_NAME: Final = "meritlens.instrumentation"
"""The instrumentation scope of the spans meritlens records (instrumentations skip their own spans by it)."""

# --- meritlens' own attributes (span or resource) -----------------------------------------------
TARGET_ID: Final = "meritlens.target.id"
"""The exact application LLM target being measured. May also be set on the resource."""
TASK_ID: Final = "meritlens.task.id"
CASE_ID: Final = "meritlens.case.id"
RUN_ID: Final = "meritlens.run.id"
ASSESSMENT_ID: Final = "meritlens.assessment.id"
ROLE: Final = "meritlens.role"
COST_USD: Final = "meritlens.cost.usd"
RETRIES: Final = "meritlens.retries"
TOOL_CALLS: Final = "meritlens.tool_calls"
AGENT_STEP: Final = "meritlens.agent.step"
OUTCOME_SUCCESS: Final = "meritlens.outcome.success"
QUALITY_SCORE: Final = "meritlens.quality.score"
HUMAN_INTERVENTION: Final = "meritlens.outcome.human_intervention"
EVALUATOR: Final = "meritlens.evaluator"
TOOL_CALL_NAMES: Final = "meritlens.tool_call.names"
TOOL_CALL_IDS: Final = "meritlens.tool_call.ids"
SPAN_TYPE: Final = "meritlens.span.type"
"""Marks meritlens' own non-call spans: a task's root span or a standalone outcome span."""

# Values of SPAN_TYPE.
SPAN_TYPE_TASK: Final = "task"
"""The root span of a task; outcomes recorded inside the task are attributes of this span."""
SPAN_TYPE_OUTCOME: Final = "outcome"
"""A small span carrying an outcome recorded outside any task."""

# Values of ROLE.
ROLE_APPLICATION: Final = "application"
"""The measured target's own calls: the only source of cost, token and latency evidence."""
ROLE_ORCHESTRATION: Final = "orchestration"
"""A harness's or evaluator's own LLM calls: stored, never counted as the application's evidence."""
ROLES: Final = (ROLE_APPLICATION, ROLE_ORCHESTRATION)
ROLE_DUPLICATE: Final = "duplicate"
"""Set on another instrumentation's span of a call a meritlens span also records (its parent or child), so the
call counts once. Not one of ROLES: the collector stores such a span with no role (the mark stays in its
attributes), and only spans of role application are counted."""

# --- OpenTelemetry GenAI semantic conventions ------------------------------------------------------
GEN_AI_OPERATION_NAME: Final = "gen_ai.operation.name"
GEN_AI_PROVIDER_NAME: Final = "gen_ai.provider.name"
GEN_AI_REQUEST_MODEL: Final = "gen_ai.request.model"
GEN_AI_RESPONSE_MODEL: Final = "gen_ai.response.model"
GEN_AI_RESPONSE_ID: Final = "gen_ai.response.id"
GEN_AI_USAGE_INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
"""Input tokens, cached tokens included (the GenAI rule)."""
GEN_AI_USAGE_OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
"""Output tokens, reasoning tokens included."""
GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: Final = "gen_ai.usage.cache_read.input_tokens"
GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS: Final = "gen_ai.usage.cache_creation.input_tokens"
GEN_AI_USAGE_REASONING_OUTPUT_TOKENS: Final = "gen_ai.usage.reasoning.output_tokens"
GEN_AI_RESPONSE_FINISH_REASONS: Final = "gen_ai.response.finish_reasons"
GEN_AI_REQUEST_STREAM: Final = "gen_ai.request.stream"
GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK: Final = "gen_ai.response.time_to_first_chunk"
"""Seconds from the request to the first streamed chunk."""
GEN_AI_TOOL_NAME: Final = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID: Final = "gen_ai.tool.call.id"
GEN_AI_CONVERSATION_ID: Final = "gen_ai.conversation.id"
GEN_AI_EVALUATION_NAME: Final = "gen_ai.evaluation.name"
GEN_AI_EVALUATION_SCORE_VALUE: Final = "gen_ai.evaluation.score.value"
GEN_AI_REQUEST_MAX_TOKENS: Final = "gen_ai.request.max_tokens"
GEN_AI_OPERATION_DETAILS_EVENT: Final = "gen_ai.client.inference.operation.details"
"""Span event carrying a call's messages (GEN_AI_INPUT_MESSAGES, GEN_AI_OUTPUT_MESSAGES)."""
ERROR_TYPE: Final = "error.type"
SERVICE_NAME: Final = "service.name"
SERVER_ADDRESS: Final = "server.address"
EXCEPTION_EVENT: Final = "exception"
EXCEPTION_TYPE: Final = "exception.type"
EXCEPTION_MESSAGE: Final = "exception.message"

# Operation names (values of GEN_AI_OPERATION_NAME).
OP_CHAT: Final = "chat"
OP_TEXT_COMPLETION: Final = "text_completion"
OP_EMBEDDINGS: Final = "embeddings"
OP_EXECUTE_TOOL: Final = "execute_tool"
OP_INVOKE_AGENT: Final = "invoke_agent"

# --- names other instrumentations emit, which the collector also understands ------------------------
GEN_AI_SYSTEM_DEPRECATED: Final = "gen_ai.system"
GEN_AI_USAGE_PROMPT_TOKENS_DEPRECATED: Final = "gen_ai.usage.prompt_tokens"
GEN_AI_USAGE_COMPLETION_TOKENS_DEPRECATED: Final = "gen_ai.usage.completion_tokens"
OPENINFERENCE_SPAN_KIND: Final = "openinference.span.kind"
OPENINFERENCE_MODEL_NAME: Final = "llm.model_name"
OPENINFERENCE_PROVIDER: Final = "llm.provider"
OPENINFERENCE_TOKENS_PROMPT: Final = "llm.token_count.prompt"
OPENINFERENCE_TOKENS_COMPLETION: Final = "llm.token_count.completion"
OPENINFERENCE_TOKENS_TOTAL: Final = "llm.token_count.total"
OPENINFERENCE_TOKENS_CACHE_READ: Final = "llm.token_count.prompt_details.cache_read"
OPENINFERENCE_TOKENS_CACHE_WRITE: Final = "llm.token_count.prompt_details.cache_write"
OPENINFERENCE_TOKENS_REASONING: Final = "llm.token_count.completion_details.reasoning"
OPENINFERENCE_SYSTEM: Final = "llm.system"
OPENINFERENCE_TOOL_NAME: Final = "tool.name"
OPENINFERENCE_FIRST_TOKEN_EVENT: Final = "First Token Stream Event"
OPENLLMETRY_USAGE_TOTAL_TOKENS: Final = "llm.usage.total_tokens"
OPENLLMETRY_USAGE_PROMPT_TOKENS: Final = "llm.usage.prompt_tokens"
OPENLLMETRY_USAGE_COMPLETION_TOKENS: Final = "llm.usage.completion_tokens"
OPENLLMETRY_USAGE_REASONING: Final = "gen_ai.usage.reasoning_tokens"
OPENLLMETRY_CHUNK_EVENT: Final = "gen_ai.content.completion.chunk"
OPENLLMETRY_USAGE_CACHE_READ: Final = "gen_ai.usage.cache_read_input_tokens"
OPENLLMETRY_USAGE_CACHE_CREATION: Final = "gen_ai.usage.cache_creation_input_tokens"
OPENLLMETRY_REQUEST_TYPE: Final = "llm.request.type"
COST_PRICED_BY: Final = "meritlens.cost.priced_by"
"""Set to "collector" on a span whose cost the collector computed from its tokens."""

# --- content and evaluation (read by the metric plugins in meritlens.analytics) -----------------------
GEN_AI_INPUT_MESSAGES: Final = "gen_ai.input.messages"
"""The chat history sent to the model: a JSON array of {role, parts: [{type, content}]} (attribute or event)."""
GEN_AI_OUTPUT_MESSAGES: Final = "gen_ai.output.messages"
"""The model's answer: a JSON array of {role, parts: [{type, content}], finish_reason} (attribute or event)."""
GEN_AI_SYSTEM_INSTRUCTIONS: Final = "gen_ai.system_instructions"
"""The system prompt: a JSON array of parts, or plain text."""
GEN_AI_EVALUATION_RESULT_EVENT: Final = "gen_ai.evaluation.result"
"""Span event carrying GEN_AI_EVALUATION_NAME and GEN_AI_EVALUATION_SCORE_VALUE."""
GEN_AI_EVALUATION_SCORE_LABEL: Final = "gen_ai.evaluation.score.label"
GEN_AI_EVALUATION_EXPLANATION: Final = "gen_ai.evaluation.explanation"
OUTPUT_SCHEMA: Final = "meritlens.output.schema"
"""JSON Schema (as JSON text) the task's output must satisfy; read by structured_output_reliability."""
JUDGE_REPLICA: Final = "meritlens.judge.replica"
"""On a judge's orchestration span: which replica of the judgement (0-based) this call was."""
OPENINFERENCE_INPUT_VALUE: Final = "input.value"
OPENINFERENCE_OUTPUT_VALUE: Final = "output.value"
OPENLLMETRY_PROMPT_CONTENT: Final = "gen_ai.prompt.0.content"
OPENLLMETRY_COMPLETION_CONTENT: Final = "gen_ai.completion.0.content"

__all__ = [name for name in dir() if name.isupper()]
