"""DuckDB's cache of the file's blocks, dropped by reopening the database (`--db-cache-bytes`)."""

from __future__ import annotations

import time

import duckdb
import httpx
import pytest

from meritlens.collector._settings import DEFAULT_DB_CACHE_BYTES, ENV_DB_CACHE_BYTES, ServerSettings, SettingsError
from meritlens.collector._store import SpanStore
from meritlens.instrumentation import conventions as c
from tests.analytics.evidence_helpers import Ids, S, Span, T0, span_rows
from tests.collector.collector_proc import CollectorProcess, make_request

_TOKENS_WINDOWS = "SELECT target_id, value FROM windows WHERE metric = 'input_tokens' AND scope = 'all' ORDER BY 1"


def _spans(ids: Ids, count: int, first: int = 0) -> list[Span]:
    return [Span(ids.trace(), ids.span(), "chat", T0 + i * S, T0 + i * S + S // 2,
                 {c.TARGET_ID: f"bot-{i % 3}", c.GEN_AI_OPERATION_NAME: c.OP_CHAT, c.GEN_AI_USAGE_INPUT_TOKENS: i + 1})
            for i in range(first, first + count)]


def _expected_tokens(count: int) -> list[tuple[str, float]]:
    return [(f"bot-{k}", float(sum(i + 1 for i in range(count) if i % 3 == k))) for k in range(3)]


def _checkpointed_store(path, ids: Ids, spans: int, budget: int) -> SpanStore:
    """A started store holding ``spans`` spans, checkpointed so that their blocks are cached."""
    store = SpanStore(str(path), db_cache_bytes=budget)
    store.start()
    store.write(span_rows(_spans(ids, spans)))
    store._con.execute("CHECKPOINT")
    return store


def test_the_setting_defaults_to_4mib_reads_the_environment_and_refuses_a_negative_size(monkeypatch):
    assert ServerSettings().db_cache_bytes == DEFAULT_DB_CACHE_BYTES == 4 * 1024 * 1024
    monkeypatch.setenv(ENV_DB_CACHE_BYTES, "0")
    assert ServerSettings().db_cache_bytes == 0
    ServerSettings().validate()  # 0: never reopen
    with pytest.raises(SettingsError, match="DuckDB cache bytes must be 0 .* got -1"):
        ServerSettings(db_cache_bytes=-1).validate()


def test_a_reopen_drops_the_cached_blocks_and_the_store_goes_on_as_before(tmp_path):
    ids = Ids(7)
    store = SpanStore(str(tmp_path / "spans.duckdb"), db_cache_bytes=64 * 1024)
    store.start()
    try:
        for start in range(0, 6000, 1000):
            store.write(span_rows(_spans(ids, 1000, start)))
        store._con.execute("CHECKPOINT")  # the blocks written are now cached
        cached = store.cached_block_bytes()
        assert cached > 64 * 1024
        old = (store._con, store._span_cursor, store._reader)
        assert store.drop_block_cache_if_due()
        for handle in old:  # every handle on the old database is closed, so DuckDB has freed it
            with pytest.raises(duckdb.ConnectionException, match="closed"):
                handle.execute("SELECT 1")
        assert store.stats["reopens"] == 1
        assert store.cached_block_bytes() < cached / 4
        assert not store.drop_block_cache_if_due()  # under the budget now

        # the reopened database has the same locked settings, and the window processor its statements
        with pytest.raises(duckdb.Error, match="lock"):
            store._con.execute("SET memory_limit = '1GiB'")
        for start in range(6000, 9000, 1000):
            store.write(span_rows(_spans(ids, 1000, start)))
        assert store.query("SELECT count(*) FROM spans").rows == [(9000,)]
        assert store.query(_TOKENS_WINDOWS).rows == _expected_tokens(9000)
    finally:
        store.shutdown()

    again = SpanStore(str(tmp_path / "spans.duckdb"))
    again.start()
    try:
        again.open_windows()
        assert again.query("SELECT count(*), sum(input_tokens) FROM spans").rows == [(9000, 9000 * 9001 // 2)]
        assert again.query(_TOKENS_WINDOWS).rows == _expected_tokens(9000)
    finally:
        again.shutdown()


def test_no_reopen_under_an_open_query_in_memory_or_with_the_budget_at_zero(tmp_path):
    ids = Ids(8)
    store = _checkpointed_store(tmp_path / "spans.duckdb", ids, 3000, budget=1)
    try:
        assert store.cached_block_bytes() > 0
        with store.query_arrow("SELECT span_id FROM spans", batch_rows=100) as streaming:
            first = streaming.reader.read_next_batch()
            assert not store.drop_block_cache_if_due()
            rest = sum(batch.num_rows for batch in streaming.reader)
        assert first.num_rows + rest == 3000  # the stream was read to its end over the same database
        assert store.drop_block_cache_if_due()
        assert store.stats["reopens"] == 1
    finally:
        store.shutdown()

    for path, budget in ((":memory:", 1), (str(tmp_path / "never.duckdb"), 0)):
        other = _checkpointed_store(path, ids, 2000, budget)
        try:
            assert other.cached_block_bytes() > 0 or path == ":memory:"
            assert not other.drop_block_cache_if_due()
            assert other.stats["reopens"] == 0
        finally:
            other.shutdown()


def _cached_blocks(collector: CollectorProcess) -> int:
    rows = collector.sql("SELECT coalesce(sum(memory_usage_bytes), 0)::BIGINT FROM duckdb_memory()"
                         " WHERE tag = 'BASE_TABLE'")["rows"]
    return rows[0][0]


def test_the_collector_keeps_its_block_cache_under_the_budget_while_it_ingests(tmp_path):
    """A collector that reopens its database after every window pass (budget of 1 byte) stores and
    windows every span it acknowledges while queries run beside it; one with the budget at 0
    keeps every block it wrote."""
    requests, per_request = 120, 1000  # whole row groups of 16,384 spans are written to blocks at once
    expected = {}
    for batch in range(requests):
        request = make_request(batch, per_request)
        for span in request.resource_spans[0].scope_spans[0].spans:
            attributes = {a.key: a.value for a in span.attributes}
            target = attributes["meritlens.target.id"].string_value
            expected[target] = expected.get(target, 0) + attributes["gen_ai.usage.input_tokens"].int_value

    cached = {}
    for name, budget in (("reopening", "1"), ("keeping", "0")):
        with CollectorProcess(tmp_path / f"{name}.duckdb", args=("--no-grpc", "--db-cache-bytes", budget)) as collector:
            with collector.client(timeout=30.0) as client:
                for batch in range(requests):
                    response = client.post("/v1/traces", content=make_request(batch, per_request).SerializeToString(),
                                           headers={"content-type": "application/x-protobuf"})
                    assert response.status_code == 200, response.text
                    if batch % 5 == 0:  # queries between the exports
                        assert collector.sql("SELECT count(*) FROM spans")["rows"][0][0] >= (batch + 1) * per_request
            assert collector.sql("SELECT count(*) FROM spans")["rows"] == [[requests * per_request]]
            windows = collector.sql("SELECT target_id, value FROM windows WHERE metric = 'input_tokens'"
                                    " AND scope = 'all'")["rows"]
            assert {target: value for target, value in windows} == pytest.approx(expected)
            cached[name] = _wait_for_cache(collector, below=512 * 1024 if budget == "1" else None)
            assert collector.stop() == 0
        con = duckdb.connect(str(tmp_path / f"{name}.duckdb"), read_only=True)
        assert con.execute("SELECT count(*) FROM spans").fetchall() == [(requests * per_request,)]
        con.close()
    # the collector that keeps its cache holds every block it wrote; the other one only the file's metadata
    assert cached["keeping"] > 1024 * 1024
    assert cached["reopening"] < 512 * 1024


def _wait_for_cache(collector: CollectorProcess, below: int | None, timeout_s: float = 20.0) -> int:
    """The collector's cached block bytes; with ``below``, once they are under it (the window thread
    reopens the database between its passes, including idle ones every 0.5 s)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            value = _cached_blocks(collector)
        except httpx.HTTPError:
            value = None
        if value is not None and (below is None or value < below or time.monotonic() > deadline):
            return value
        time.sleep(0.2)


def test_a_failed_reopen_fails_inserts_with_its_reason_and_the_next_one_recovers(tmp_path, monkeypatch):
    ids = Ids(9)
    store = _checkpointed_store(tmp_path / "spans.duckdb", ids, 3000, budget=1)
    try:
        connect = store._connect

        def unreadable(config):
            raise duckdb.IOException("disk gone")

        monkeypatch.setattr(store, "_connect", unreadable)
        with pytest.raises(duckdb.IOException, match="disk gone"):
            store.drop_block_cache_if_due()
        with pytest.raises(RuntimeError, match="could not be reopened: disk gone"):
            store.append(span_rows(_spans(ids, 10, 3000)))
        with pytest.raises(RuntimeError, match="could not be reopened: disk gone"):
            store.query("SELECT count(*) FROM spans")

        monkeypatch.setattr(store, "_connect", connect)
        assert store.drop_block_cache_if_due()  # retried: the database opens again
        store.write(span_rows(_spans(ids, 1000, 3000)))
        assert store.query("SELECT count(*) FROM spans").rows == [(4000,)]
        assert store.query(_TOKENS_WINDOWS).rows == _expected_tokens(4000)
    finally:
        store.shutdown()
