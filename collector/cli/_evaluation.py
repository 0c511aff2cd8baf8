"""Where `meritlens evaluate` reads spans and writes windows: the DuckDB file, or the collector holding it.

DuckDB allows one writer per file. When no process holds the file, the evaluation opens it
read-write itself. When a collector holds it, the evaluation goes through that collector:
spans through the read-only ``POST /api/sql``, windows through ``POST /api/windows`` and the
judge's calls as ordinary OTLP spans (role ``orchestration``) through ``POST /v1/traces``.
"""

from __future__ import annotations

import json
import os
import secrets

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status

from meritlens.analytics.engine import SCOPE_ALL, EvaluationError, JudgeCall, QueryPage, Window, window_to_json
from meritlens.collector.process._normalize import normalize
from meritlens.collector.cli._client import CollectorClient, CollectorRefused, QueryError
from meritlens.collector.cli._resolve import Source, open_file_or_explain
from meritlens.collector._paths import SQL_PATH, TRACES_PATH, WINDOWS_PATH
from meritlens.collector.windows._local import LocalStore
from meritlens.instrumentation import conventions as c

EVALUATOR_SERVICE = "meritlens-evaluate"
_SPAN_KIND_CLIENT = 3
_STATUS_ERROR = 2


def _kv(key: str, value) -> KeyValue:
    if isinstance(value, bool):
        return KeyValue(key=key, value=AnyValue(bool_value=value))
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    if isinstance(value, float):
        return KeyValue(key=key, value=AnyValue(double_value=value))
    return KeyValue(key=key, value=AnyValue(string_value=str(value)))


def judge_calls_request(calls: list[JudgeCall]) -> ExportTraceServiceRequest:
    """The judge's calls as OTLP spans with role ``orchestration`` (never the application's evidence)."""
    spans = []
    for call in calls:
        attributes = {
            c.TARGET_ID: call.target_id,
            c.ROLE: c.ROLE_ORCHESTRATION,
            c.TASK_ID: call.task_key,
            c.EVALUATOR: call.metric,
            c.JUDGE_REPLICA: call.replica,
            c.GEN_AI_OPERATION_NAME: c.OP_CHAT,
            c.GEN_AI_PROVIDER_NAME: call.provider,
            c.GEN_AI_REQUEST_MODEL: call.model,
        }
        if call.scope != SCOPE_ALL:
            attributes[c.ASSESSMENT_ID] = call.scope
        if call.input_tokens is not None:
            attributes[c.GEN_AI_USAGE_INPUT_TOKENS] = call.input_tokens
        if call.output_tokens is not None:
            attributes[c.GEN_AI_USAGE_OUTPUT_TOKENS] = call.output_tokens
        if call.error is not None:
            attributes[c.ERROR_TYPE] = "judge_error"
        span = Span(
            trace_id=secrets.token_bytes(16),
            span_id=secrets.token_bytes(8),
            name=f"{c.OP_CHAT} {call.model}",
            kind=_SPAN_KIND_CLIENT,
            start_time_unix_nano=call.start_unix_nano,
            end_time_unix_nano=call.end_unix_nano,
            attributes=[_kv(k, v) for k, v in attributes.items()],
            status=Status(code=_STATUS_ERROR, message=call.error) if call.error else Status(),
        )
        if call.score is not None:
            span.events.add(
                name=c.GEN_AI_EVALUATION_RESULT_EVENT,
                time_unix_nano=call.end_unix_nano,
                attributes=[_kv(c.GEN_AI_EVALUATION_NAME, call.metric), _kv(c.GEN_AI_EVALUATION_SCORE_VALUE, call.score)],
            )
        spans.append(span)
    resource_spans = ResourceSpans(scope_spans=[ScopeSpans(spans=spans)])
    resource_spans.resource.attributes.append(_kv(c.SERVICE_NAME, EVALUATOR_SERVICE))
    resource_spans.scope_spans[0].scope.name = "meritlens.analytics.judge"
    return ExportTraceServiceRequest(resource_spans=[resource_spans])


class FileEvaluationStore:
    """The DuckDB file, opened read-write by this process (no collector holds it)."""

    def __init__(self, db: str):
        self._local = LocalStore.open(db)
        self._store = self._local.store
        self.db_name = self._store.db_name

    def query(self, sql: str) -> QueryPage:
        result = self._store.query(sql)
        return QueryPage(result.columns, result.rows, bool(getattr(result, "truncated", False)))

    def write_windows(self, windows: list[Window]) -> None:
        self._store.write_windows(windows)

    def record_judge_calls(self, calls: list[JudgeCall]) -> None:
        batch = normalize(judge_calls_request(calls))
        if batch.refused:
            raise EvaluationError(f"judge spans refused: {'; '.join(batch.refused[:3])}")
        self._local.windows.write(batch.to_arrow())

    def close(self) -> None:
        self._local.close()


class CollectorEvaluationStore:
    """A running collector, reached over HTTP (with a bearer token when one is set)."""

    def __init__(self, url: str, *, db_name: str, token: str | None = None, ca_file: str | None = None,
                 timeout: float = 120.0):
        self.url = url.rstrip("/")
        self.db_name = db_name
        try:
            self._client = CollectorClient(self.url, token=token, ca_file=ca_file, timeout=timeout)
        except QueryError as exc:
            raise EvaluationError(str(exc)) from None

    def _post(self, path: str, body: bytes, content_type: str) -> bytes:
        try:
            return self._client.post(path, body, content_type)
        except CollectorRefused as exc:
            raise EvaluationError(f"the collector at {self.url} refused {path}: {exc}") from None
        except QueryError as exc:
            raise EvaluationError(str(exc)) from None

    def query(self, sql: str) -> QueryPage:
        body = json.loads(self._post(SQL_PATH, json.dumps({"sql": sql}).encode(), "application/json"))
        return QueryPage(body["columns"], [tuple(r) for r in body["rows"]], bool(body.get("truncated", False)))

    def write_windows(self, windows: list[Window]) -> None:
        payload = {"windows": [window_to_json(w) for w in windows]}
        self._post(WINDOWS_PATH, json.dumps(payload).encode(), "application/json")

    def record_judge_calls(self, calls: list[JudgeCall]) -> None:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

        reply = self._post(TRACES_PATH, judge_calls_request(calls).SerializeToString(), "application/x-protobuf")
        response = ExportTraceServiceResponse.FromString(reply)
        if response.partial_success.rejected_spans:
            raise EvaluationError(
                f"the collector refused {response.partial_success.rejected_spans} judge spans: "
                f"{response.partial_success.error_message}"
            )

    def close(self) -> None:
        self._client.close()


def open_evaluation_store(source: Source):
    """The store `evaluate` uses where ``source`` points (collector/cli/_resolve.py): the file,
    opened read-write, or the collector."""
    db_name = os.path.basename(source.db)
    if not source.is_file:
        return CollectorEvaluationStore(source.url, db_name=db_name, token=source.token, ca_file=source.ca_file)
    return open_file_or_explain(source.db, lambda: FileEvaluationStore(source.db), EvaluationError)
