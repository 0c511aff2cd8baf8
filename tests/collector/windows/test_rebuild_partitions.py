"""A window rebuild read in partitions equals the rebuild in one statement.

The rebuild (at start-up, and for a target whose state was dropped) reads the stored spans in
partitions that are unions of trace/task components (`meritlens.collector.windows._partitions`). Random
stores with tasks over several traces, chains of tasks and traces that need several rounds of
label propagation, a wrapper in one task whose LLM child is in another task of the same trace,
a task id equal to another trace's id, retried duplicates, several targets and assessments: the
window rows, every column, must be those of the unpartitioned rebuild.
"""

from __future__ import annotations

import logging
import random

import duckdb
import pytest

from meritlens.analytics._schema import SPANS_DDL
from meritlens.analytics._samples import WINDOW_INPUT_COLUMNS
from meritlens.collector.windows import _rebuild as rebuild_module
from meritlens.collector.windows._partitions import partition_spans
from tests.store_under_test import StoreUnderTest
from meritlens.instrumentation import conventions as c
from tests.analytics.evidence_helpers import Ids, S, Span, T0, span_rows

_COLUMNS = ("target_id", "metric", "scope", "aggregation", "value", "unit", "sample_count", "state", "count",
            "mean", "min", "max", "p50", "p90", "p95", "p99", "first_span_time", "last_span_time",
            "evidence_uri", "evidence_media_type", "evidence_digest")
_ONE_STATEMENT = 10**12


def _windows(store: StoreUnderTest) -> list[tuple]:
    return store.query(f"select {', '.join(_COLUMNS)} from windows order by target_id, scope, metric").rows


def _call(rng: random.Random, ids: Ids, trace: str, common: dict, parent: str | None, start: int) -> Span:
    maybe = lambda value, p=0.8: value if rng.random() < p else None  # noqa: E731
    return Span(trace, ids.span(), "chat", start, start + rng.randint(1, 9) * S // 10, {
        **common, c.GEN_AI_OPERATION_NAME: c.OP_CHAT,
        c.GEN_AI_USAGE_INPUT_TOKENS: maybe(rng.randint(1, 900)),
        c.GEN_AI_USAGE_OUTPUT_TOKENS: maybe(rng.randint(1, 300)),
        c.COST_USD: maybe(rng.randint(1, 10**6) / 1e7), c.RETRIES: maybe(rng.randint(0, 2), 0.6),
        c.TOOL_CALLS: maybe(rng.randint(0, 2), 0.5),
    }, parent_span_id=parent, status_code=rng.choice([0, 0, 2]), kind=3)


def _random_store_spans(seed: int) -> list[Span]:
    """Chains of traces linked by tasks (task k spans traces k and k+1), single-trace tasks and
    tasks without an id, cross-task wrappers, orchestration spans."""
    rng = random.Random(seed)
    ids = Ids(seed % 1000 + 1)
    spans: list[Span] = []
    targets = ["bot-a", "bot-b", "bot-c"]

    def common(target, task_id):
        return {c.TARGET_ID: target, c.ASSESSMENT_ID: rng.choice([None, "a1", "a2"]), c.TASK_ID: task_id}

    def root(trace, target, task_id, start):
        return Span(trace, ids.span(), "task", start, start + rng.randint(5, 40) * S // 10, {
            **common(target, task_id), c.OUTCOME_SUCCESS: rng.choice([None, True, False]),
            c.QUALITY_SCORE: rng.choice([None, round(rng.random(), 3)]), c.AGENT_STEP: rng.choice([None, 1, 3]),
        })

    for chain in range(rng.randint(1, 4)):
        length = rng.randint(1, 9)
        traces = [ids.trace() for _ in range(length + 1)]
        # link in a random order so that the smallest trace id sits anywhere in the chain
        for k in rng.sample(range(length), length):
            task_id = f"chain-{seed}-{chain}-{k}"
            target = rng.choice(targets)
            for trace in (traces[k], traces[k + 1]):
                start = T0 + rng.randint(0, 80) * S // 10
                r = root(trace, target, task_id, start)
                spans.append(r)
                for j in range(rng.randint(0, 2)):
                    spans.append(_call(rng, ids, trace, common(target, task_id), r.span_id, start + j * S // 5))
        if rng.random() < 0.5:  # a wrapper of one task whose LLM child belongs to another task in the trace
            trace = rng.choice(traces)
            wrapper = Span(trace, ids.span(), "wrapper", T0, T0 + S, {
                **common("bot-a", f"wrap-{seed}-{chain}"), c.GEN_AI_OPERATION_NAME: c.OP_CHAT})
            spans.append(wrapper)
            spans.append(_call(rng, ids, trace, common("bot-a", f"chain-{seed}-{chain}-0"), wrapper.span_id, T0))
    for single in range(rng.randint(1, 8)):
        trace = ids.trace()
        task_id = rng.choice([None, f"single-{seed}-{single}"])
        target = rng.choice(targets)
        start = T0 + rng.randint(0, 80) * S // 10
        r = root(trace, target, task_id, start)
        spans.append(r)
        spans.append(_call(rng, ids, trace, common(target, task_id), r.span_id, start))
        if rng.random() < 0.3:
            spans.append(Span(trace, ids.span(), "judge", start, start + S, {
                **common(target, task_id), c.ROLE: c.ROLE_ORCHESTRATION, c.GEN_AI_USAGE_INPUT_TOKENS: 5000}))
    if rng.random() < 0.5:  # a task id equal to the id of another trace whose spans carry none
        plain = ids.trace()
        spans.append(_call(rng, ids, plain, common("bot-b", None), None, T0))
        other = ids.trace()
        spans.append(_call(rng, ids, other, common("bot-b", plain), None, T0 + S))
    return spans


def _store(path, spans: list[Span], rows_per_partition: int, rng: random.Random) -> StoreUnderTest:
    store = StoreUnderTest(str(path), rebuild_rows_per_partition=rows_per_partition)
    store.start()
    order = spans[:]
    rng.shuffle(order)
    half = len(order) // 2
    for part in (order[:half], order[half:], rng.sample(order, max(1, len(order) // 4))):  # last: a retry
        if part:
            store.write(span_rows(part), refresh_windows=False)
    return store


@pytest.mark.parametrize("seed", range(6))
def test_a_rebuild_in_partitions_equals_one_in_a_single_statement(tmp_path, monkeypatch, seed):
    spans = _random_store_spans(seed)
    rows_per_partition = max(1, len(spans) // (4, 8, 12)[seed % 3])  # 4 to ~20 partitions
    (tmp_path / "whole").mkdir()
    (tmp_path / "parted").mkdir()  # the same file name: it is part of the evidence URI
    whole = _store(tmp_path / "whole" / "spans.duckdb", spans, _ONE_STATEMENT, random.Random(seed))
    parted = _store(tmp_path / "parted" / "spans.duckdb", spans, rows_per_partition, random.Random(seed + 1))
    try:
        whole.refresh_all_windows()
        assert whole.stats["rebuild_partitions"] == 1
        parted.refresh_all_windows()
        assert parted.stats["rebuild_partitions"] > 1
        expected = _windows(whole)
        assert expected, "the spans define windows"
        assert _windows(parted) == expected
        # a rebuild of some targets (as after a bulk load of theirs), in partitions, reading only their traces
        # (fraction 1) or every span (fraction 0)
        for fraction in (1.0, 0.0):
            monkeypatch.setattr(rebuild_module, "TARGETED_REBUILD_FRACTION", fraction)
            parted.con.execute("DELETE FROM windows")
            parted.refresh_windows({("bot-a", "all"), ("bot-c", "all")})
            assert _windows(parted) == [w for w in expected if w[0] in ("bot-a", "bot-c")]
        assert parted.con.execute("select count(*) from duckdb_tables() where temporary").fetchall() == [(0,)]
    finally:
        whole.shutdown()
        parted.shutdown()


def _components(spans: list[Span]) -> list[set[str]]:
    """Connected traces (through tasks) of the application spans, by union-find."""
    parent: dict[str, str] = {}

    def find(x):
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for s in spans:
        if s.attributes.get(c.ROLE, c.ROLE_APPLICATION) != c.ROLE_APPLICATION or not s.attributes.get(c.TARGET_ID):
            continue
        task_node = "task:" + (s.attributes.get(c.TASK_ID) or s.trace_id)
        parent[find("trace:" + s.trace_id)] = find(task_node)
    groups: dict[str, set[str]] = {}
    for node in list(parent):
        if node.startswith("trace:"):
            groups.setdefault(find(node), set()).add(node[len("trace:"):])
    return list(groups.values())


def _rows_of(store: StoreUnderTest, relation: str) -> list[tuple]:
    return sorted(store.con.execute(f"select trace_id, span_id, target_id from {relation}").fetchall())


def _partition_of_each_trace(store: StoreUnderTest, parts) -> dict[str, set[int]]:
    where = {}
    for p in range(parts.count):
        for (trace,) in store.con.execute(f"select distinct trace_id from {parts.source_of(p)}").fetchall():
            where.setdefault(trace, set()).add(p)
    return where


def test_label_propagation_puts_each_component_in_one_partition(tmp_path):
    ids = Ids(7)
    spans: list[Span] = []
    # one long chain (its smallest trace id in the middle) needs several rounds to settle
    traces = [ids.trace() for _ in range(40)]
    order = traces[20:] + traces[:20]
    for k in range(len(order) - 1):
        for trace in (order[k], order[k + 1]):
            spans.append(Span(trace, ids.span(), "task", T0, T0 + S, {c.TARGET_ID: "bot", c.TASK_ID: f"t{k}"}))
    for _ in range(30):  # and many traces of their own
        trace = ids.trace()
        spans.append(Span(trace, ids.span(), "task", T0, T0 + S, {c.TARGET_ID: "bot"}))
    store = StoreUnderTest(str(tmp_path / "spans.duckdb"))
    store.start()
    try:
        store.write(span_rows(spans), refresh_windows=False)
        components = _components(spans)
        assert max(len(g) for g in components) == 40
        for max_rounds, converged in ((64, True), (1, False)):
            parts = partition_spans(store.con, "spans", rows_per_partition=4, max_rounds=max_rounds)
            try:
                assert parts.count == len(spans) // 4 + (len(spans) % 4 > 0)
                assert parts.converged is converged
                assert parts.labelled_traces == 40
                where = _partition_of_each_trace(store, parts)
                assert set(where) == {s.trace_id for s in spans}
                assert all(len(p) == 1 for p in where.values()), "a trace in two partitions"
                for group in components:
                    assert len({next(iter(where[t])) for t in group}) == 1, "a component split"
                if converged:
                    assert parts.rounds > 2
                    labels = dict(store.con.execute("select trace_id, label from _rebuild_labels").fetchall())
                    assert set(labels.values()) == {min(traces)}
                    assert len(set().union(*where.values())) > 1  # the singles spread over partitions
                # the copy sorted by partition holds each partition's rows exactly once
                scanned = [_rows_of(store, parts.source_of(p)) for p in range(parts.count)]
                parts.order_by_partition(("trace_id", "span_id", "target_id"))
                assert [_rows_of(store, parts.source_of(p)) for p in range(parts.count)] == scanned
                assert sum(len(rows) for rows in scanned) == len(spans)
            finally:
                parts.close()
            assert store.con.execute("select count(*) from duckdb_tables() where temporary").fetchall() == [(0,)]
    finally:
        store.shutdown()


def test_closing_partitions_in_an_aborted_transaction_leaves_the_tables_to_the_rollback(tmp_path):
    ids = Ids(9)
    spans = []
    for k in range(6):  # three two-trace tasks: labels are needed
        trace = ids.trace()
        spans.append(Span(trace, ids.span(), "task", T0, T0 + S, {c.TARGET_ID: "bot", c.TASK_ID: f"t{k // 2}"}))
    store = StoreUnderTest(str(tmp_path / "spans.duckdb"))
    store.start()
    try:
        store.write(span_rows(spans), refresh_windows=False)
        con = store.con
        con.execute("BEGIN")
        parts = partition_spans(con, "spans", rows_per_partition=2)
        assert parts.count == 3 and parts.labelled_traces == 6
        source = parts.source_of(0)
        parts.order_by_partition(("trace_id",))  # too few partitions for a copy: still read from the source
        assert parts.columns is None and parts.source_of(0) == source
        with pytest.raises(duckdb.Error):
            con.execute("SELECT * FROM no_such_table")  # aborts the transaction
        parts.close()  # must not raise over the error being handled
        con.execute("ROLLBACK")
        assert con.execute("select count(*) from duckdb_tables() where temporary").fetchall() == [(0,)]
    finally:
        store.shutdown()


def test_a_copy_that_cannot_spill_falls_back_to_reading_the_source(tmp_path, caplog):
    path = str(tmp_path / "spans.duckdb")
    con = duckdb.connect(path)
    con.execute(SPANS_DDL)
    con.execute(  # 300k single-span traces: more than 16MiB of window columns to sort
        "INSERT INTO spans (trace_id, span_id, start_unix_nano, end_unix_nano, start_time, end_time, duration_s,"
        " target_id, role, received_at) SELECT md5(i::VARCHAR), left(md5((7 * i)::VARCHAR), 16), 0, 1, now(), now(),"
        " 0.0, 'bot', 'application', now() FROM range(300000) t(i)")
    con.close()
    con = duckdb.connect(path, config={"memory_limit": "16MiB", "max_temp_directory_size": "1MiB", "threads": 1})
    try:
        parts = partition_spans(con, "spans", rows_per_partition=10_000)
        assert parts.count == 30
        with caplog.at_level(logging.WARNING, logger="meritlens.collector.partitions"):
            parts.order_by_partition(WINDOW_INPUT_COLUMNS)  # DuckDB cannot hold or spill the sorted copy
        assert parts.columns is None
        assert "read from the stored spans instead" in caplog.text
        counts = [con.execute(f"SELECT count(*) FROM {parts.source_of(p)}").fetchall()[0][0] for p in range(30)]
        assert sum(counts) == 300_000 and min(counts) > 0
        parts.close()
        assert con.execute("select count(*) from duckdb_tables() where temporary").fetchall() == [(0,)]
    finally:
        con.close()
