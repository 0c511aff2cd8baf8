"""The example redaction policy on the spans OpenInference, OpenLLMetry and the official openai-v2 instrumentation
record with their message content: the application's RedactingSpanExporter and the collector's SpanRedactor
both mask every secret, leave ids, models and token counts as they are, and store the same rows."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from meritlens.collector.process import _otlp
from meritlens.collector.process._normalize import normalize
from meritlens.collector.process._redact import SpanRedactor
from tests.ecosystem.redact_peer_spans import SECRETS
from tests.redaction_support import example_policy

DRIVER = Path(__file__).with_name("redact_peer_spans.py")


def _rows(body: bytes) -> pa.Table:
    decoded = _otlp.decode_lean(body, _otlp.PROTOBUF)
    batch = normalize(decoded.lean, body=body)
    assert not batch.refused, batch.refused
    return batch.to_arrow()


@pytest.fixture(scope="module")
def policy_path(tmp_path_factory) -> Path:
    return example_policy(tmp_path_factory.mktemp("policy"))


@pytest.mark.parametrize("which, content_keys", [
    ("openinference", ("input.value", "output.value", "llm.input_messages.0.message.content",
                       "llm.output_messages.0.message.content")),
    ("openllmetry", ("gen_ai.input.messages", "gen_ai.output.messages")),
    ("otel-v2", ("gen_ai.input.messages", "gen_ai.output.messages")),
    ("meritlens", ()),  # records no content: its spans pass as they are
])
def test_both_sides_mask_the_content_other_instrumentations_record(tmp_path, policy_path, which, content_keys):
    proc = subprocess.run([sys.executable, str(DRIVER), which, str(policy_path), str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    raw_body, redacted_body = (tmp_path / "raw.pb").read_bytes(), (tmp_path / "redacted.pb").read_bytes()
    raw, sent = _rows(raw_body), _rows(redacted_body)
    redactor = SpanRedactor.from_file(policy_path)
    stored = redactor.redact(raw)

    # The instrumentation recorded the content (so there was something to mask) ...
    raw_attributes = " ".join(filter(None, raw.column("attributes").to_pylist()))
    for key in content_keys:
        assert f'"{key}"' in raw_attributes
    if content_keys:
        assert SECRETS["email"] in raw_attributes and "10.1.2.3" in raw.column("resource")[0].as_py()
    # ... and neither what the application sends nor what the collector stores holds a secret.
    for name, secret in SECRETS.items():
        assert secret.encode() not in redacted_body
        for table in (sent, stored):
            text = " ".join(str(v) for column in table.columns for v in column.to_pylist())
            assert secret not in text and secret.replace(" ", "") not in text
            if content_keys:
                assert f"[redacted:{name}]" in text
    assert "10.1.2.3" not in stored.column("resource")[0].as_py()
    # The application and the collector apply the policy alike: the same rows.
    assert sent.equals(stored), _first_difference(sent, stored)
    # Ids, models, token counts and the other typed columns are untouched.
    untouched = [name for name in raw.column_names if name not in ("attributes", "resource", "events", "links")]
    assert stored.select(untouched).equals(raw.select(untouched))
    counts = redactor.counts()
    if content_keys:
        assert counts[("email", "masked")] >= 1 and counts[("ipv4", "masked")] == raw.num_rows
    else:
        assert stored.select(["attributes", "events"]).equals(raw.select(["attributes", "events"]))


def _first_difference(a: pa.Table, b: pa.Table) -> str:
    for name in a.column_names:
        if not a.column(name).equals(b.column(name)):
            return f"{name}: {a.column(name).to_pylist()} != {b.column(name).to_pylist()}"
    return "schemas differ"
