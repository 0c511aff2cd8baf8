"""`meritlens serve --redact`: the real collector process, sent spans by the OpenTelemetry SDK's OTLP exporter,
stores them with the policy applied (attributes, event attributes, message JSON, names), leaves identifiers as
they are, counts by rule in /metrics and on the dashboard, logs no secret, and refuses an invalid policy;
`meritlens import` into a file applies the same policy."""

from __future__ import annotations

import json

import httpx
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind

from meritlens.instrumentation.redaction import load_policy
from tests.browser import dump_dom, parse_dom, squash
from tests.collector.collector_proc import run_serve_refused
from tests.conftest import CollectorProcess, run_cli, run_sql
from tests.otlp_builders import make_request, make_span
from tests.redaction_support import example_policy, write_policy

# One value for each built-in pattern of the example policy, and for its user pattern.
SECRETS = {
    "email": "jane.doe@example.com",
    "phone": "+1 (555) 123-4567",
    "payment_card": "4111 1111 1111 1111",
    "ipv4": "10.1.2.3",
    "ipv6": "2001:db8::8a2e:370:7334",
    "openai_key": "sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8t",
    "anthropic_key": "sk-ant-api03-Zy9xWv8uTs7rQp6oNm5l",
    "aws_access_key": "AKIAIOSFODNN7EXAMPLE",
    "github_token": "ghp_" + "a1B2c3D4e5F6g7H8i9J0" * 2,
    "google_api_key": "AIza" + "SyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJl",
    "bearer_token": "Bearer abcdefghijklmnop1234",
    "customer_number": "CUST-1234567",
}
PROMPT = "Contact me: " + "; ".join(f"{name} {value}" for name, value in SECRETS.items())
# Identifiers that a pattern would match were they content: they are stored as sent.
TARGET = "support-bot/10.9.8.7"
TASK = "task-jane.doe@example.com"
RESPONSE_ID = "resp-192.168.0.1"
MODEL = "gpt-4o-2024-08-06"
USER = "u-42@example.com"


def _send(url: str) -> str:
    provider = TracerProvider(resource=Resource.create({"service.name": "redact-app", "host.ip": "10.1.2.3"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=url + "/v1/traces")))
    tracer = provider.get_tracer("tests")
    messages = json.dumps([{"role": "user", "parts": [{"type": "text", "content": PROMPT}]}])
    with tracer.start_as_current_span(f"chat {MODEL}", kind=SpanKind.CLIENT, attributes={
        "meritlens.target.id": TARGET, "meritlens.task.id": TASK, "gen_ai.operation.name": "chat",
        "gen_ai.request.model": MODEL, "gen_ai.response.model": MODEL, "gen_ai.response.id": RESPONSE_ID,
        "gen_ai.usage.input_tokens": 120, "gen_ai.usage.output_tokens": 30,
        "gen_ai.input.messages": messages, "user.id": USER, "db.password": "hunter2-secret",
        "http.request.header.authorization": ["Bearer zzzzzzzzzzzzzzzzzzzzzz"], "note": PROMPT,
    }) as span:
        span.add_event("gen_ai.user.message", {"content": PROMPT, "turn": 1})
        trace_id = format(span.get_span_context().trace_id, "032x")
    provider.shutdown()
    return trace_id


def test_the_collector_stores_spans_with_the_policy_applied(tmp_path):
    policy_path = example_policy(tmp_path)
    with CollectorProcess(tmp_path / "m.duckdb", args=("--no-grpc", "--redact", str(policy_path))) as collector:
        trace_id = _send(collector.url)
        [row] = collector.sql("SELECT trace_id, target_id, task_id, request_model, response_model, input_tokens, "
                              "attributes, events, resource, name FROM spans")
        with collector.client() as client:
            # A malformed body quoting a secret: refused, and its reason kept out of the log.
            bad = client.post("/v1/traces", content=f'{{"resourceSpans": [{SECRETS["email"]}'.encode(),
                              headers={"Content-Type": "application/json"})
            assert bad.status_code == 400
            metrics = client.get("/metrics").text
            overview = client.get("/api/dashboard/overview").json()
        dom = parse_dom(dump_dom(collector.url + "/?refresh=0", tmp_path / "chromium"))
        collector.wait_for_log("refused POST /v1/traces")
    log = collector.log()

    # Identifiers, models and counts are stored as sent, even where they look like content.
    assert (row["trace_id"], row["target_id"], row["task_id"]) == (trace_id, TARGET, TASK)
    assert (row["request_model"], row["response_model"], row["input_tokens"]) == (MODEL, MODEL, 120)
    attributes, events, resource = (json.loads(row[k]) for k in ("attributes", "events", "resource"))
    assert attributes["gen_ai.response.id"] == RESPONSE_ID
    # Each pattern masked, in a plain attribute, in the message JSON (which stays JSON) and in an event.
    masked = "Contact me: " + "; ".join(f"{name} [redacted:{name}]" for name in SECRETS)
    assert attributes["note"] == masked
    [message] = json.loads(attributes["gen_ai.input.messages"])
    assert message["parts"][0]["content"] == masked
    assert events[0]["attributes"] == {"content": masked, "turn": 1}
    assert resource["host.ip"] == "[redacted:ipv4]" and resource["service.name"] == "redact-app"
    # Dropped by key glob, hashed by key: the hash is the policy's, so the value can be looked up.
    assert "db.password" not in attributes and "http.request.header.authorization" not in attributes
    assert attributes["user.id"] == load_policy(policy_path).hash_text(USER)
    stored = json.dumps([row[k] for k in ("attributes", "events", "resource", "name")])
    for secret in (*SECRETS.values(), USER, "hunter2-secret", "zzzzzzzzzzzzzzzz"):
        assert secret not in stored
        assert secret not in log, secret

    # Counts by rule: /metrics, the overview document and the page.
    assert 'meritlens_redactions_total{action="masked",rule="email"} 3.0' in metrics
    assert 'meritlens_redactions_total{action="masked",rule="ipv4"} 4.0' in metrics  # 3 in the span, 1 resource
    assert 'meritlens_redactions_total{action="dropped",rule="key:*.password"} 1.0' in metrics
    assert 'meritlens_redactions_total{action="hashed",rule="key:user.id"} 1.0' in metrics
    assert 'meritlens_redactions_total{action="hashed",rule="key:enduser.id"} 0.0' in metrics  # from the start
    rules = {(r["rule"], r["action"]): r["count"] for r in overview["redaction"]["rules"]}
    assert rules[("customer_number", "masked")] == 3 and rules[("key:user.id", "hashed")] == 1
    table = dom.find("table", id="redaction-table")
    assert squash(table.find("tr", data_rule="jwt").find("td", data_col="count").text) == "3"


def test_no_policy_stores_spans_as_sent_and_shows_no_redaction(collector):
    _send(collector.url)
    [row] = collector.sql("SELECT attributes FROM spans")
    assert json.loads(row["attributes"])["note"] == PROMPT
    assert httpx.get(collector.url + "/api/dashboard/overview").json()["redaction"] is None
    assert "meritlens_redactions" not in httpx.get(collector.url + "/metrics").text


def test_an_invalid_policy_refuses_to_start_in_one_line_naming_the_rule(tmp_path):
    policy_path = write_policy(tmp_path, "[mask.patterns]\nticket = 'T-(?<=x)[0-9]+'\n")
    db = tmp_path / "m.duckdb"
    proc = run_serve_refused(db, {"MERITLENS_REDACT": str(policy_path)})
    assert proc.returncode != 0
    [line] = proc.stderr.strip().splitlines()
    assert "mask.patterns.ticket" in line and "lookbehind" in line and str(policy_path) in line
    assert not db.exists()


def test_import_into_a_file_applies_the_collectors_policy(tmp_path):
    policy_path = example_policy(tmp_path)
    request = tmp_path / "spans.pb"
    request.write_bytes(make_request([make_span({"meritlens.target.id": "bot", "note": PROMPT, "user.id": USER})])
                        .SerializeToString())
    db = tmp_path / "m.duckdb"
    run_cli("import", str(request), "--db", str(db), env={"MERITLENS_REDACT": str(policy_path)})
    [row] = run_sql("SELECT attributes FROM spans", db=db)
    attributes = json.loads(row["attributes"])
    assert attributes["note"] == "Contact me: " + "; ".join(f"{name} [redacted:{name}]" for name in SECRETS)
    assert attributes["user.id"] == load_policy(policy_path).hash_text(USER)
