"""The processor updates windows from deltas; the result must equal a computation from scratch.

Spans of random tasks (tasks spanning several traces, LLM calls under wrapper spans whose child
arrives in a later batch, tool spans, errors, assessments, missing fields) are written in random
batches, in random order, with retried duplicates. Every window row must then be identical, column
for column, to the rows a full rebuild from the stored spans gives, and to a store that received
everything in one batch. Exact sums and the key filter are checked against plain reference
computations here; the distributions in test_distribution.py.
"""

from __future__ import annotations

import contextlib
import math
import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from meritlens.analytics._distribution import SUM_SCALE, exact_sum
from meritlens.collector.store._keyfilter import KeyFilter
from meritlens.instrumentation import conventions as c
from tests.analytics.evidence_helpers import T0, Ids, S, Span, span_rows, store_spans
from tests.store_under_test import StoreUnderTest


def _random_spans(seed: int, mixed_targets: bool = False) -> list[Span]:
    """Spans of random tasks; with ``mixed_targets`` a third of the calls carry another target than
    their task's root (an agent whose steps use two targets)."""
    rng = random.Random(seed)
    ids = Ids(seed)
    spans: list[Span] = []

    def maybe(value, p=0.8):
        return value if rng.random() < p else None

    for t in range(rng.randint(1, 6)):
        target = rng.choice(["bot-a", "bot-b"])
        assessment = rng.choice([None, "a1", "a2"])
        task_id = f"task-{seed}-{t}" if rng.random() < 0.4 else None
        start = T0 + rng.randint(0, 50) * S // 10
        for _ in range(rng.randint(1, 2) if task_id else 1):
            trace = ids.trace()
            common = {c.TARGET_ID: target, c.ASSESSMENT_ID: assessment, c.TASK_ID: task_id}
            root = Span(trace, ids.span(), "task", start, start + rng.randint(5, 40) * S // 10, {
                **common, c.OUTCOME_SUCCESS: maybe(rng.random() < 0.6, 0.7),
                c.QUALITY_SCORE: maybe(round(rng.random(), 3), 0.5), c.AGENT_STEP: maybe(rng.randint(1, 5), 0.5),
                c.HUMAN_INTERVENTION: maybe(rng.random() < 0.2, 0.5),
            })
            spans.append(root)
            for k in range(rng.randint(0, 3)):
                call_start = start + k * S // 5
                call = {
                    **common, c.GEN_AI_OPERATION_NAME: c.OP_CHAT,
                    c.GEN_AI_USAGE_INPUT_TOKENS: maybe(rng.randint(1, 900)),
                    c.GEN_AI_USAGE_OUTPUT_TOKENS: maybe(rng.randint(1, 300)),
                    c.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS: maybe(rng.randint(0, 50), 0.4),
                    c.COST_USD: maybe(rng.randint(1, 10**6) / 1e7), c.RETRIES: maybe(rng.randint(0, 2), 0.6),
                    c.TOOL_CALLS: maybe(rng.randint(0, 2), 0.5),
                    c.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK: maybe(rng.randint(1, 900) / 1000, 0.4),
                }
                if rng.random() < 0.3:  # a wrapper (e.g. @observe) around the real call
                    wrapper = Span(trace, ids.span(), "wrapper", call_start, call_start + S, {
                        **common, c.GEN_AI_OPERATION_NAME: c.OP_CHAT}, parent_span_id=root.span_id)
                    spans.append(wrapper)
                    parent = wrapper.span_id
                else:
                    parent = root.span_id
                if mixed_targets and rng.random() < 0.3:
                    call[c.TARGET_ID] = rng.choice(["bot-a", "bot-b", "bot-c"])
                spans.append(Span(trace, ids.span(), "chat", call_start, call_start + rng.randint(1, 9) * S // 10,
                                  call, parent_span_id=parent, status_code=rng.choice([0, 0, 0, 2]), kind=3))
            if rng.random() < 0.5:
                spans.append(Span(trace, ids.span(), "execute_tool search", start, start + S // 3, {
                    **common, c.GEN_AI_OPERATION_NAME: c.OP_EXECUTE_TOOL, c.GEN_AI_TOOL_NAME: "search"},
                    parent_span_id=root.span_id, status_code=rng.choice([0, 2])))
            if rng.random() < 0.2:
                spans.append(Span(trace, ids.span(), "judge", start, start + S, {
                    **common, c.ROLE: c.ROLE_ORCHESTRATION, c.GEN_AI_USAGE_INPUT_TOKENS: 5000}))
    return spans


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10**6), batches=st.integers(1, 6), resend=st.booleans(), coalesce=st.booleans(),
       mixed_targets=st.booleans(), tight_memory=st.booleans())
def test_incremental_windows_equal_a_rebuild_from_scratch(tmp_path_factory, seed, batches, resend, coalesce,
                                                          mixed_targets, tight_memory):
    """``coalesce``: spans are committed batch by batch and the windows follow in passes that
    take several committed batches at once, as the collector's window thread does.
    ``mixed_targets``: tasks whose spans carry several targets; ``tight_memory``: a window memory
    budget of 1 byte, so every key's state is saved and let go after each pass."""
    spans = _random_spans(seed, mixed_targets)
    rng = random.Random(seed + 1)
    order = spans[:]
    rng.shuffle(order)
    cuts = sorted(rng.sample(range(1, len(order)), min(batches - 1, len(order) - 1))) if len(order) > 1 else []
    parts = [order[i:j] for i, j in zip([0, *cuts], [*cuts, len(order)], strict=True)]
    if resend and parts:
        parts.append(rng.sample(order, max(1, len(order) // 3)))  # a client's retry of spans already stored
    tmp = tmp_path_factory.mktemp("incremental")
    (tmp / "incremental").mkdir()
    (tmp / "at_once").mkdir()
    memory = {"window_memory_bytes": 1} if tight_memory else {}
    incremental = StoreUnderTest(str(tmp / "incremental" / "spans.duckdb"), **memory)
    incremental.start()
    at_once = StoreUnderTest(str(tmp / "at_once" / "spans.duckdb"))
    at_once.start()
    try:
        for part in parts:
            if coalesce:
                incremental.append(span_rows(part))
                if rng.random() < 0.4:
                    incremental.update_windows()
            else:
                store_spans(incremental, part)
        incremental.update_windows()
        store_spans(at_once, spans)
        got = incremental.window_rows()
        assert got, "the spans define windows"
        assert got == at_once.window_rows()
        incremental.refresh_all_windows()
        assert incremental.window_rows() == got
    finally:
        incremental.shutdown()
        at_once.shutdown()


def test_a_new_batch_of_new_tasks_reads_nothing_back(tmp_path):
    store = StoreUnderTest(str(tmp_path / "s.duckdb"))
    store.start()
    try:
        ids = Ids(7)
        for i in range(3):
            trace = ids.trace()
            store_spans(store, [Span(trace, ids.span(), "chat", T0 + i * S, T0 + i * S + S, {
                c.TARGET_ID: "bot", c.GEN_AI_OPERATION_NAME: c.OP_CHAT, c.GEN_AI_USAGE_INPUT_TOKENS: 10})])
        assert store.stats["closure_lookups"] == 0 and store.stats["closure_ranges"] == 0
        assert store.stats["duplicate_checks"] == 0  # new spans are not checked against stored ones
        # a child of a stored span is looked up (its parent stops being counted as the call)
        parent = store.query("select trace_id, span_id from spans limit 1").rows[0]
        store_spans(store, [Span(parent[0], ids.span(), "chat", T0, T0 + S // 2, {
            c.TARGET_ID: "bot", c.GEN_AI_OPERATION_NAME: c.OP_CHAT, c.GEN_AI_USAGE_INPUT_TOKENS: 4},
            parent_span_id=parent[1])])
        assert store.stats["closure_lookups"] >= 1 and store.stats["closure_ranges"] >= 1
        tokens = store.query("select value, sample_count from windows where metric = 'input_tokens'").rows
        assert tokens == [(24.0, 3)]
    finally:
        store.shutdown()


@given(st.lists(st.floats(allow_nan=False, allow_infinity=False, min_value=-1e300, max_value=1e300), max_size=60))
def test_exact_sum_is_the_correctly_rounded_sum(values):
    total = exact_sum(np.array(values, dtype=float))
    assert total / (1 << SUM_SCALE) == math.fsum(values)


def test_key_filter_never_forgets_a_key_and_keeps_its_size():
    keys = np.random.default_rng(1).integers(0, 2**63, 200_000, dtype=np.int64).astype(np.uint64)
    small = KeyFilter(64 * 1024)
    small.add(keys)
    assert small.may_contain(keys).all()
    assert small.nbytes == 64 * 1024
    others = np.random.default_rng(2).integers(0, 2**63, 200_000, dtype=np.int64).astype(np.uint64)
    big = KeyFilter(4 * 1024 * 1024)
    big.add(keys)
    assert big.may_contain(others).mean() < 0.01 < small.may_contain(others).mean()


@contextlib.contextmanager
def _budget_and_reference(tmp_path, window_memory_bytes: int):
    """A started store with ``window_memory_bytes`` of window state, and a reference store with the
    default budget (same file name: it is part of the evidence URIs); both shut down after."""
    stores = []
    try:
        for name, settings in (("budget", {"window_memory_bytes": window_memory_bytes}), ("ref", {})):
            (tmp_path / name).mkdir()
            stores.append(StoreUnderTest(str(tmp_path / name / "s.duckdb"), **settings))
            stores[-1].start()
        yield tuple(stores)
    finally:
        for store in stores:
            store.shutdown()


def test_state_over_the_memory_budget_is_saved_and_taken_back_never_rebuilt(tmp_path):
    spans = _random_spans(11) + _random_spans(12) + _random_spans(13)
    with _budget_and_reference(tmp_path, 1) as (small, reference):
        for i in range(0, len(spans), 4):
            store_spans(small, spans[i:i + 4])
        store_spans(reference, spans)
        assert small.stats["state_keys_evicted"] > 0 and small.stats["state_keys_loaded"] > 0
        assert small.stats["rebuilds"] == 0 and small.stats["recomputed_windows"] == 0  # no span was reread
        assert small.book.keys == []  # every key saved and let go after each pass
        assert small.window_rows() == reference.window_rows()


def _two_target_task(ids: Ids) -> tuple[list[Span], list[Span]]:
    """A task of target bot-b whose LLM call later gets a child call of target bot-a (an agent
    whose planner and executor are two targets): (bot-b's spans, bot-a's later span). The child
    turns bot-b's call into a wrapper, so bot-b's samples change in a batch of bot-a's spans."""
    trace = ids.trace()
    common = {c.TASK_ID: "task-two-targets", c.ASSESSMENT_ID: "a1"}
    root = Span(trace, ids.span(), "task", T0, T0 + 4 * S, {**common, c.TARGET_ID: "bot-b", c.OUTCOME_SUCCESS: True})
    call = Span(trace, ids.span(), "plan", T0 + S, T0 + 3 * S, {
        **common, c.TARGET_ID: "bot-b", c.GEN_AI_OPERATION_NAME: c.OP_CHAT, c.GEN_AI_USAGE_INPUT_TOKENS: 700},
        parent_span_id=root.span_id)
    child = Span(trace, ids.span(), "execute", T0 + S, T0 + 2 * S, {
        **common, c.TARGET_ID: "bot-a", c.GEN_AI_OPERATION_NAME: c.OP_CHAT, c.GEN_AI_USAGE_INPUT_TOKENS: 90},
        parent_span_id=call.span_id)
    return [root, call], [child]


@pytest.mark.parametrize("window_memory_bytes", [1, 1 << 30])
def test_a_batch_of_one_target_that_changes_another_targets_samples_keeps_both_exact(tmp_path, window_memory_bytes):
    """With a budget of 1 byte, bot-b's state is out of memory (saved) when bot-a's span changes
    bot-b's samples: bot-b's saved state must be taken back, not replaced by one holding only the delta."""
    ids = Ids(7)
    b_spans, a_spans = _two_target_task(ids)
    c_spans = _one_call(ids, 55, target="bot-c")
    with _budget_and_reference(tmp_path, window_memory_bytes) as (store, reference):
        for part in (b_spans, c_spans, a_spans):
            store_spans(store, part)
        if window_memory_bytes == 1:
            assert store.stats["state_keys_evicted"] and store.stats["state_keys_loaded"]
        store_spans(reference, b_spans + c_spans + a_spans)
        got = store.window_rows()
        tokens = {(r[0], r[2]): r[4] for r in got if r[1] == "input_tokens"}
        assert tokens[("bot-b", "all")] is None  # bot-b's only call became a wrapper: no call of its own
        assert tokens[("bot-a", "all")] == 90
        assert got == reference.window_rows()
        later = _one_call(ids, 10, target="bot-b")  # bot-b's next batch: its state must be whole
        store_spans(store, later)
        store_spans(reference, later)
        assert store.window_rows() == reference.window_rows()


@pytest.mark.parametrize("seed", range(4))
def test_calls_of_other_targets_arriving_last_keep_every_targets_windows_exact(tmp_path, seed):
    """Random tasks with mixed targets; the calls whose target differs from their trace's root
    arrive last, in their own batch, while a 1-byte budget keeps no key's state in memory between passes."""
    spans = _random_spans(seed, mixed_targets=True) + _random_spans(seed + 100, mixed_targets=True)
    root_target = {s.trace_id: s.attributes.get(c.TARGET_ID) for s in spans if s.parent_span_id is None}
    cross = [s for s in spans if s.parent_span_id and s.attributes.get(c.TARGET_ID) != root_target[s.trace_id]]
    rest = [s for s in spans if not any(s is x for x in cross)]
    assert cross and rest
    with _budget_and_reference(tmp_path, 1) as (tight, reference):
        for part in (rest[:len(rest) // 2], rest[len(rest) // 2:], cross):
            store_spans(tight, part)
        store_spans(reference, spans)
        assert tight.window_rows() == reference.window_rows()


def test_a_batch_keeps_the_first_copy_of_each_span():
    import pyarrow as pa

    from meritlens.collector.store._rows import first_of_each_span

    table = pa.table({"trace_id": ["t1", "t2", "t1", "t3", "t2"], "span_id": ["a", "b", "a", "c", "b"],
                      "n": [0, 1, 2, 3, 4]})
    assert first_of_each_span(table).column("n").to_pylist() == [0, 1, 3]
    import numpy as np

    # the span hashes only shortcut the check: equal hashes (a collision) still compare the keys
    same_hash = np.zeros(table.num_rows, dtype=np.uint64)
    assert first_of_each_span(table, same_hash).column("n").to_pylist() == [0, 1, 3]
    distinct = pa.table({"trace_id": ["t1", "t2"], "span_id": ["a", "a"], "n": [0, 1]})
    assert first_of_each_span(distinct, np.array([7, 7], dtype=np.uint64)).column("n").to_pylist() == [0, 1]
    assert first_of_each_span(distinct, np.array([7, 8], dtype=np.uint64)) is distinct


def _one_call(ids: Ids, tokens: int, target: str = "bot") -> list[Span]:
    return [Span(ids.trace(), ids.span(), "chat", T0, T0 + S, {
        c.TARGET_ID: target, c.GEN_AI_OPERATION_NAME: c.OP_CHAT, c.GEN_AI_USAGE_INPUT_TOKENS: tokens})]


def test_a_retried_batch_stores_only_its_new_spans_and_keeps_the_first_copies(tmp_path):
    ids = Ids(7)
    first, second, third = _one_call(ids, 1), _one_call(ids, 2), _one_call(ids, 4)
    store = StoreUnderTest(str(tmp_path / "s.duckdb"))
    store.start()
    try:
        assert store.write(span_rows(first)).inserted == 1
        assert store.stats["duplicate_checks"] == 0  # new spans take the plain insert
        retried = [Span(**{**vars(first[0]), "attributes": {**first[0].attributes,
                                                            c.GEN_AI_USAGE_INPUT_TOKENS: 99}})]
        result = store.write(span_rows(retried + second))
        assert (result.received, result.inserted, result.duplicates) == (2, 1, 1)
        assert store.stats["duplicate_checks"] == 1
        assert store.write(span_rows(third)).inserted == 1
        assert store.query("select input_tokens from spans order by input_tokens").rows == [(1,), (2,), (4,)]
        assert store.query("select value from windows where metric = 'input_tokens' and scope = 'all'").rows == [(7.0,)]
    finally:
        store.shutdown()


def test_windows_follow_in_their_own_thread_and_queries_see_every_committed_span(tmp_path):
    from tests.store_under_test import WindowThread

    store = StoreUnderTest(str(tmp_path / "s.duckdb"))
    store.start()
    updater = WindowThread(store)
    updater.start()
    try:
        ids = Ids(11)
        total = 0
        for i in range(30):
            store.append(span_rows(_one_call(ids, i + 1)))
            total += i + 1
            # the query waits for the window thread to include every span committed before it
            assert store.query("select value, sample_count from windows where metric = 'input_tokens'").rows == [
                (float(total), i + 1)]
        assert store.stats["rebuilds"] == 0
    finally:
        updater.shutdown()
        store.shutdown()


def test_appends_wait_while_too_many_rows_wait_for_the_windows(tmp_path):
    import threading

    store = StoreUnderTest(str(tmp_path / "s.duckdb"), window_lag_rows=1)
    store.start()
    try:
        ids = Ids(12)
        store.append(span_rows(_one_call(ids, 5)))
        store.append(span_rows(_one_call(ids, 6)))  # 2 rows wait now: over the budget of 1
        done = threading.Event()
        third = threading.Thread(target=lambda: (store.append(span_rows(_one_call(ids, 7))), done.set()))
        third.start()
        assert not done.wait(0.5), "the append went on while the windows were over their lag budget"
        assert store.update_windows() == 2
        assert done.wait(10), "the append did not resume once the windows caught up"
        third.join()
        store.update_windows()
        assert store.query("select value from windows where metric = 'input_tokens'").rows == [(18.0,)]
    finally:
        store.shutdown()


def test_spans_committed_before_shutdown_reach_the_windows_and_survive_a_restart(tmp_path):
    path = str(tmp_path / "s.duckdb")
    store = StoreUnderTest(path)
    store.start()
    ids = Ids(13)
    store.append(span_rows(_one_call(ids, 9)))
    store.append(span_rows(_one_call(ids, 4)))
    store.shutdown()  # no window thread ran: shutdown brings the windows up to date first
    reopened = StoreUnderTest(path, read_only=True)
    reopened.start()
    try:
        assert reopened.query("select value, sample_count from windows where metric = 'input_tokens'").rows == [
            (13.0, 2)]
    finally:
        reopened.shutdown()


def test_a_query_answers_after_its_wait_when_the_windows_do_not_follow(tmp_path, caplog):
    store = StoreUnderTest(str(tmp_path / "s.duckdb"), query_wait_s=0.2)
    store.start()
    try:
        ids = Ids(14)
        store.write(span_rows(_one_call(ids, 3)))
        store.append(span_rows(_one_call(ids, 8)))  # committed; no window thread runs
        assert store.window_lag() == (1, 1)
        with caplog.at_level("WARNING", logger="meritlens.collector.store"):
            result = store.query("select value from windows where metric = 'input_tokens'")
        assert result.rows == [(3.0,)], "the windows as they were, not a made-up value"
        assert result.windows_behind, "the answer says its window rows may be stale"
        assert store.query("select count(*) from spans").rows == [(2,)]
        assert "behind the stored spans" in caplog.text
        store.update_windows()
        result = store.query("select value from windows where metric = 'input_tokens'")
        assert result.rows == [(11.0,)] and not result.windows_behind and store.window_lag() == (0, 0)
    finally:
        store.shutdown()
