"""The key locator: a fixed-size stand-in for a B-tree over the stored keys, and the store without one."""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from meritlens.collector.store._keyfilter import GrowingKeyFilter, KeyFilter, KeyLocator
from meritlens.instrumentation import conventions as c
from tests.analytics.evidence_helpers import T0, Ids, S, Span, span_rows
from tests.store_under_test import StoreUnderTest

INPUT_TOKENS_WINDOW = "select value from windows where metric = 'input_tokens' and scope = 'all'"


def _commits(seed: int, count: int, keys: int):
    rng = np.random.default_rng(seed)
    return [(rng.integers(0, 2**63, keys, dtype=np.int64).astype(np.uint64), 1_000 + 10 * i) for i in range(count)]


@pytest.mark.parametrize("size", [64 * 1024, 1024 * 1024])
def test_every_added_key_is_found_in_a_range_holding_its_commit_and_memory_stays_fixed(size):
    locator = KeyLocator(size, block_bytes=4096)
    commits = _commits(1, 400, 300)
    for hashes, us in commits:
        locator.add(hashes, us)
        assert locator.nbytes <= size
    assert locator.blocks > 1
    for hashes, us in commits[::7]:
        for h in hashes[:5]:
            ranges = locator.ranges(np.array([h], dtype=np.uint64))
            assert any(a <= us <= b for a, b in ranges), (us, ranges)
            assert all(a <= b for a, b in ranges) and ranges == sorted(ranges)


@pytest.mark.parametrize("size", [1024, 64 * 1024])
def test_a_filter_sets_every_bit_of_keys_that_share_words(size):
    """Keys whose probes fall in the same word in one `add` (certain in a small filter) all keep
    their bits: the filter equals one built by setting each bit on its own."""
    rng = np.random.default_rng(size)
    hashes = rng.integers(0, 2**63, 40_000, dtype=np.int64).astype(np.uint64)
    f = KeyFilter(size)
    f.add(hashes[:20_000])
    f.add(hashes[20_000:])
    reference = KeyFilter(size)
    for h in hashes[:3000]:
        reference.add(np.array([h], dtype=np.uint64))
    assert f.may_contain(hashes).all()
    expected = np.zeros(size // 8, dtype=np.uint64)
    for position in f.positions(hashes).ravel().tolist():
        expected[position >> 6] |= np.uint64(1 << (position & 63))
    assert np.array_equal(f._words, expected)
    # one key at a time (no shared words within an add) gives the same words for the same keys
    partial = KeyFilter(size)
    partial.add(hashes[:3000])
    assert np.array_equal(partial._words, reference._words)


def test_native_probes_set_and_test_the_same_bits_as_the_numpy_probes(monkeypatch):
    from meritlens.collector.store import _keyfilter
    assert _keyfilter._native is not None, "the native extension is built by `make`/`pip install`"
    rng = np.random.default_rng(5)
    hashes = rng.integers(0, 2**63, 50_000, dtype=np.int64).astype(np.uint64) * np.uint64(3)
    others = rng.integers(0, 2**63, 50_000, dtype=np.int64).astype(np.uint64)
    commits = _commits(3, 60, 500)

    def build():
        f = KeyFilter(64 * 1024)
        counts = [f.add(hashes[:30_000]), f.add(hashes[30_000:][::2])]  # a strided view is probed as well
        growing = GrowingKeyFilter(1024 * 1024, first_bytes=16 * 1024)
        growing.add(hashes)
        locator = KeyLocator(256 * 1024, block_bytes=4096)
        for h, us in commits:
            locator.add(h, us)
        answers = f.may_contain(np.concatenate([hashes, others]))
        probes = zip(commits[::5], range(1_000, 1_600, 50), strict=True)
        ranges = [locator.ranges(h[:3], until_us) for (h, _), until_us in probes]
        grown = [layer._words.copy() for layer in growing._layers]
        return f._words.copy(), answers, ranges, locator.may_contain(others), counts, grown, growing.may_contain(others)

    native = build()
    monkeypatch.setattr(_keyfilter, "_native", None)
    reference = build()
    assert np.array_equal(native[0], reference[0])
    assert np.array_equal(native[1], reference[1]) and native[1][:30_000].all()
    assert native[2] == reference[2] and any(native[2])
    assert np.array_equal(native[3], reference[3])
    assert native[4] == reference[4] and native[4][0] > 0
    assert len(native[5]) == len(reference[5]) > 1
    assert all(np.array_equal(a, b) for a, b in zip(native[5], reference[5], strict=True))
    assert np.array_equal(native[6], reference[6])


def _popcount(words: np.ndarray) -> int:
    return int(np.unpackbits(words.view(np.uint8)).sum())


@pytest.mark.parametrize("native", [True, False])
def test_add_counts_the_bits_it_sets(native, monkeypatch):
    from meritlens.collector.store import _keyfilter
    if not native:
        monkeypatch.setattr(_keyfilter, "_native", None)
    rng = np.random.default_rng(8)
    hashes = rng.integers(0, 2**63, 5_000, dtype=np.int64).astype(np.uint64)
    f = KeyFilter(4096)  # small: keys share bits and words
    before = 0
    for part in (hashes[:100], hashes[100:3000], hashes[:50], hashes[3000:]):
        fresh = f.add(np.concatenate([part, part[:7]]))  # keys repeated within one add
        after = _popcount(f._words)
        assert fresh == after - before
        before = after
    assert f.add(hashes) == 0


def test_a_growing_filter_follows_its_keys_up_to_its_bound_and_never_forgets_one():
    bound = 4 * 1024 * 1024
    f = GrowingKeyFilter(bound, first_bytes=64 * 1024)
    rng = np.random.default_rng(9)
    keys = rng.integers(0, 2**63, 1_500_000, dtype=np.int64).astype(np.uint64)
    others = rng.integers(0, 2**63, 500_000, dtype=np.int64).astype(np.uint64)
    sizes = []
    for start in range(0, keys.size, 10_000):
        f.add(keys[start:start + 10_000])
        f.add(keys[max(0, start - 5_000):start])  # keys added again, as a trace key is once per span
        sizes.append(f.nbytes)
        assert f.nbytes <= f.max_nbytes <= bound
    assert sizes[0] == 64 * 1024 and sizes == sorted(sizes) and f.layers == 9  # 64K, 64K … 512K, 512K, 2M: 3,968 KiB
    assert sizes[len(sizes) // 20] < bound // 8  # 75,000 keys: a few hundred KiB
    assert f.may_contain(keys).all()
    # 1.5M keys overfill the last filter (~1M keys at the fill for the chain): still few wrong "maybe"s
    assert f._set_bits > f.FILL * f._layers[-1].bits
    assert f.may_contain(others).mean() < 0.01
    f.clear()
    assert f.nbytes == 64 * 1024 and not f.may_contain(keys[:1000]).any()


def test_a_growing_filter_answers_few_wrong_maybes_while_it_grows():
    f = GrowingKeyFilter(32 * 1024 * 1024)
    rng = np.random.default_rng(10)
    keys = rng.integers(0, 2**63, 400_000, dtype=np.int64).astype(np.uint64)
    for start in range(0, keys.size, 1000):
        f.add(keys[start:start + 1000])
    others = rng.integers(0, 2**63, 1_000_000, dtype=np.int64).astype(np.uint64)
    assert f.nbytes <= 3 * 1024 * 1024 < f.max_nbytes  # 400k keys: 2.5 MiB, not 32
    assert f.may_contain(keys).all()
    assert f.may_contain(others).sum() < 50  # each full layer: ~2 in a million
    # fewer bits a key, for a filter whose wrong "maybe"s cost little: a third of the memory
    loose = GrowingKeyFilter(32 * 1024 * 1024, probes=KeyLocator._OVERALL_PROBES, fill=KeyLocator._OVERALL_FILL)
    for start in range(0, keys.size, 1000):
        loose.add(keys[start:start + 1000])
    assert loose.nbytes <= f.nbytes // 2 and loose.may_contain(keys).all()
    assert 0.001 < loose.may_contain(others).mean() < 0.01  # ~0.4% a full layer


def test_a_growing_filter_holds_at_most_about_one_and_a_half_times_the_bits_its_keys_need():
    """A new filter's pages are all resident at once, so a chain of filters doubling one by one
    would hold up to twice what its keys need; one whose sizes double every second filter, ~1.5."""
    first = 16 * 1024
    f = GrowingKeyFilter(64 * 1024 * 1024, first_bytes=first)
    bits_a_key = -f._probes / np.log(1 - f._fill)  # a filter filled to ``fill`` holds bits / bits_a_key keys
    keys = np.random.default_rng(12).integers(0, 2**63, 1_200_000, dtype=np.int64).astype(np.uint64)
    ratios = []
    for start in range(0, keys.size, 2_000):
        f.add(keys[start:start + 2_000])
        if f.nbytes > 4 * first:  # past the first filters, the chain's growth tells
            ratios.append(f.nbytes / ((start + 2_000) * bits_a_key / 8))
    assert f.layers >= 9
    assert max(ratios) <= 1.7 and min(ratios) >= 0.95


def test_a_growing_filter_past_its_bound_puts_the_further_keys_in_its_largest_filter():
    """The last filter, which takes every key once the others are full, is at least half the
    bound: past the bound wrong "maybe"s grow as in a fixed filter of that size, not of the
    growing part's last one (a chain of pairs up to 1M here: 7.6% at 2M keys)."""
    for bound, first in ((32 * 1024 * 1024, 256 * 1024), (4 * 1024 * 1024, 64 * 1024), (1024 * 1024, 16 * 1024)):
        sizes = GrowingKeyFilter(bound, first_bytes=first)._sizes
        assert 2 * sizes[-1] >= sum(sizes) and sum(sizes) <= bound and sizes == sorted(sizes)
    rng = np.random.default_rng(13)
    keys = rng.integers(0, 2**63, 2_000_000, dtype=np.int64).astype(np.uint64)
    others = rng.integers(0, 2**63, 500_000, dtype=np.int64).astype(np.uint64)
    f = GrowingKeyFilter(4 * 1024 * 1024, first_bytes=64 * 1024)
    for start in range(0, keys.size, 20_000):
        f.add(keys[start:start + 20_000])
    assert f.layers == len(f._sizes) and f.may_contain(keys).all()
    assert f.may_contain(others).mean() < 0.01  # ~0.5%


def test_a_growing_filter_no_larger_than_its_first_layer_stays_one_filter():
    f = GrowingKeyFilter(1000, first_bytes=256 * 1024)
    keys = np.arange(1, 5001, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    f.add(keys)
    assert f.layers == 1 and f.nbytes == f.max_nbytes == 512 and f.may_contain(keys).all()


def test_native_probes_refuse_buffers_they_cannot_use():
    from meritlens.collector.store._keyfilter import _native

    hashes = np.arange(4, dtype=np.uint64)
    with pytest.raises(ValueError, match="power of two"):
        _native.bloom_add(np.zeros(3, dtype=np.uint64), hashes, 7)
    with pytest.raises(ValueError, match="uint64"):
        _native.bloom_test(np.zeros(4, dtype=np.uint64), b"abc", 7)
    with pytest.raises((BufferError, TypeError)):
        _native.bloom_add(bytes(32), hashes, 7)  # read-only words


def test_unknown_keys_find_few_ranges_and_until_bounds_them():
    locator = KeyLocator(4 * 1024 * 1024, block_bytes=64 * 1024)
    commits = _commits(2, 100, 1000)
    for hashes, us in commits:
        locator.add(hashes, us)
    unknown = np.random.default_rng(99).integers(0, 2**63, 1000, dtype=np.int64).astype(np.uint64)
    assert locator.may_contain(unknown).sum() < 20
    assert sum(len(locator.ranges(unknown[i:i + 1])) for i in range(1000)) < 20
    late_hashes, late_us = commits[-1]
    assert locator.ranges(late_hashes[:1]) != []
    assert all(a <= late_us - 500 for a, _ in locator.ranges(late_hashes[:1], until_us=late_us - 500))


def test_a_commit_larger_than_a_block_spreads_over_blocks_of_the_same_time():
    locator = KeyLocator(1024 * 1024, block_bytes=4096, block_keys=100)
    hashes = np.arange(1, 1001, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    locator.add(hashes, 5_000)
    assert locator.blocks >= 10
    assert locator.ranges(hashes[-1:]) == [(5_000, 5_000)]


def _one_call(ids: Ids, tokens: int) -> list[Span]:
    return [Span(ids.trace(), ids.span(), "chat", T0, T0 + S, {
        c.TARGET_ID: "bot", c.GEN_AI_OPERATION_NAME: c.OP_CHAT, c.GEN_AI_USAGE_INPUT_TOKENS: tokens})]


def test_the_spans_table_has_no_btree_index_and_stays_idempotent_after_a_restart(tmp_path):
    db = str(tmp_path / "s.duckdb")
    ids = Ids(3)
    first = _one_call(ids, 5)
    store = StoreUnderTest(db)
    store.start()
    try:
        store.write(span_rows(first))
        assert store.query("select count(*) from duckdb_indexes() where table_name = 'spans'").rows == [(0,)]
        assert store.query("select count(*) from duckdb_constraints() where table_name = 'spans'"
                           " and constraint_type = 'PRIMARY KEY'").rows == [(0,)]
    finally:
        store.shutdown()
    store = StoreUnderTest(db)
    store.start()  # the locator is filled from the stored spans
    try:
        store.open_windows()  # as `meritlens serve` does at start
        assert store.write(span_rows(first + _one_call(ids, 7))).inserted == 1
        assert store.query(INPUT_TOKENS_WINDOW).rows == [(12.0,)]
    finally:
        store.shutdown()


def test_a_file_of_an_earlier_version_loses_its_primary_key_and_indexes_and_keeps_its_spans(tmp_path):
    from meritlens.analytics._schema import SPAN_COLUMNS, SPANS_TABLE, create_table_sql

    db = str(tmp_path / "old.duckdb")
    ids = Ids(4)
    calls = _one_call(ids, 2) + _one_call(ids, 3)
    rows = span_rows(calls)
    con = duckdb.connect(db)
    con.execute(create_table_sql(SPANS_TABLE, SPAN_COLUMNS, ("trace_id", "span_id")))  # as earlier versions made it
    con.execute("CREATE INDEX spans_trace_id ON spans (trace_id)")
    con.execute("CREATE INDEX spans_task_id ON spans (task_id)")
    con.register("r", rows.append_column("received_at", pa.array(
        [1_700_000_000_000_000] * rows.num_rows, pa.timestamp("us", tz="UTC"))))
    con.execute("INSERT INTO spans BY NAME SELECT * FROM r")
    con.close()

    store = StoreUnderTest(db)
    store.start()
    try:
        assert store.query("select count(*) from duckdb_indexes() where table_name = 'spans'").rows == [(0,)]
        assert store.query("select count(*) from duckdb_constraints() where table_name = 'spans'"
                           " and constraint_type = 'PRIMARY KEY'").rows == [(0,)]
        assert store.query("select input_tokens from spans order by input_tokens").rows == [(2,), (3,)]
        assert store.refresh_all_windows() >= 1
        assert store.write(span_rows(calls[:1] + _one_call(ids, 10))).inserted == 1  # the stored one is known
        assert store.query(INPUT_TOKENS_WINDOW).rows == [(15.0,)]
        assert store.query("select count(*) from tasks").rows == [(3,)]  # the views read the new table
    finally:
        store.shutdown()


def test_span_keys_the_overall_filter_wrongly_lets_through_take_the_plain_insert(tmp_path):
    """The locator's overall filter answers ~1% wrong "maybe"s: the blocks rule those keys out
    (the batch is not in them yet), so new spans are not checked against stored ones, and a
    retried span still is."""
    store = StoreUnderTest(str(tmp_path / "s.duckdb"))
    store.start()
    try:
        ids = Ids(4)
        first = _one_call(ids, 1)
        assert store.write(span_rows(first)).inserted == 1
        store._locator._all.may_contain = lambda hashes: np.ones(hashes.size, dtype=bool)  # every key a wrong "maybe"
        for tokens in (2, 3):
            assert store.write(span_rows(_one_call(ids, tokens))).inserted == 1
        assert store.stats["duplicate_checks"] == 0
        result = store.write(span_rows(first + _one_call(ids, 4)))
        assert (result.inserted, result.duplicates) == (1, 1) and store.stats["duplicate_checks"] == 1
        assert store.query("select sum(input_tokens) from spans").rows == [(10,)]
    finally:
        store.shutdown()
