"""The write-ahead log size at which DuckDB checkpoints the store (`--checkpoint-wal-bytes`)."""

from __future__ import annotations

import duckdb

from meritlens.collector._settings import DEFAULT_CHECKPOINT_WAL_BYTES, SETTINGS, ServerSettings
from tests.store_under_test import StoreUnderTest
from meritlens.instrumentation import conventions as c
from tests.analytics.evidence_helpers import Ids, S, Span, T0, span_rows


def _threshold(store: StoreUnderTest) -> str:
    return store.con.execute("SELECT current_setting('checkpoint_threshold')").fetchall()[0][0]


def test_the_store_checkpoints_at_the_configured_wal_size(tmp_path):
    assert ServerSettings().checkpoint_wal_bytes == DEFAULT_CHECKPOINT_WAL_BYTES == 64 * 1024 * 1024
    store = StoreUnderTest(str(tmp_path / "default.duckdb"))
    store.start()
    try:
        assert _threshold(store) == "64.0 MiB"
    finally:
        store.shutdown()

    small = StoreUnderTest(str(tmp_path / "small.duckdb"), checkpoint_wal_bytes=1024 * 1024)
    small.start()
    try:
        ids = Ids(3)
        spans = [Span(ids.trace(), ids.span(), "chat", T0 + i * S, T0 + i * S + S // 2,
                      {c.TARGET_ID: "bot", c.GEN_AI_OPERATION_NAME: c.OP_CHAT, c.GEN_AI_USAGE_INPUT_TOKENS: i + 1})
                 for i in range(8000)]
        assert _threshold(small) == "1.0 MiB"
        for start in range(0, len(spans), 500):
            small.write(span_rows(spans[start:start + 500]))
        wal = tmp_path / "small.duckdb.wal"
        # 8000 spans write ~2.9MB of log (measured with the default threshold): past 1MiB the file was checkpointed
        assert not wal.exists() or wal.stat().st_size < 1024 * 1024 + 512 * 1024
    finally:
        small.shutdown()
    con = duckdb.connect(str(tmp_path / "small.duckdb"), read_only=True)
    assert con.execute("SELECT count(*), sum(input_tokens) FROM spans").fetchall() == [(8000, 8000 * 8001 // 2)]


def test_the_environment_sets_the_checkpoint_wal_size(monkeypatch):
    monkeypatch.setenv(SETTINGS["checkpoint_wal_bytes"].env, "8MiB")
    assert ServerSettings.from_env().checkpoint_wal_bytes == 8 * 1024 * 1024
