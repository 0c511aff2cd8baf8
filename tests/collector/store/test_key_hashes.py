"""The store's key hashes (collector/store/_keyhash.py): native and DuckDB-backed, each consistent."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from meritlens.collector.store import _keyhash
from meritlens.collector.store._keyhash import KEY_HASH_COLUMNS, key_hashes, string_hashes

IDS = [f"{i:032x}" for i in range(20_000)]


@pytest.fixture(params=["native", "duckdb"])
def hashing(request, monkeypatch):
    if request.param == "native":
        assert _keyhash._spanscan is not None, "the native extension is built by `make`/`pip install`"
    else:
        monkeypatch.setattr(_keyhash, "_spanscan", None)
    return request.param


def test_the_same_string_hashes_the_same_in_any_array_layout(hashing):
    values = ["task-1", None, "", "é✓", "x" * 300, "task-1"]
    plain = string_hashes(pa.array(values))
    assert plain[0] == plain[5] and plain[1] == 0
    assert len(set(plain[[0, 2, 3, 4]].tolist())) == 4
    np.testing.assert_array_equal(string_hashes(pa.array(values, pa.large_string())), plain)
    np.testing.assert_array_equal(string_hashes(pa.array(values).slice(2, 3)), plain[2:5])
    chunked = pa.chunked_array([pa.array(values[:2]), pa.array(values[2:])])
    np.testing.assert_array_equal(string_hashes(chunked), plain)
    np.testing.assert_array_equal(string_hashes(pa.array(values, pa.string_view())), plain)
    assert string_hashes(pa.chunked_array([], pa.string())).size == 0
    np.testing.assert_array_equal(string_hashes(pa.array([None, None], pa.string())), [0, 0])


def test_distinct_ids_get_distinct_well_mixed_hashes(hashing):
    hashes = string_hashes(pa.array(IDS))
    assert np.unique(hashes).size == len(IDS)
    # The filters probe from the low half and step by the high half: both must spread sequential IDs.
    for half in (hashes & np.uint64(0xFFFFFFFF), hashes >> np.uint64(32)):
        counts = np.bincount((half % np.uint64(64)).astype(np.int64), minlength=64)
        assert counts.min() > len(IDS) / 64 * 0.7 and counts.max() < len(IDS) / 64 * 1.3, counts


def test_key_hashes_of_span_rows(hashing):
    table = pa.table({
        "trace_id": ["a" * 32, "a" * 32, "b" * 32, "a" * 32],
        "span_id": ["1" * 16, "2" * 16, "1" * 16, "1" * 16],
        "task_id": ["task", None, "task", "other"],
    })
    keys = key_hashes(table)
    assert keys.column_names == list(KEY_HASH_COLUMNS)
    s, t, k = (keys.column(c).to_numpy() for c in "stk")
    assert keys.column("no_task").to_pylist() == [False, True, False, False]
    assert t[0] == t[1] == t[3] != t[2]
    assert s[0] == s[3] and len({s[0], s[1], s[2]}) == 3
    assert k[0] == k[2] != k[3]
    # a trace key and a task key with the same text are the same key (the locator holds both kinds)
    same = key_hashes(pa.table({"trace_id": ["task"], "span_id": ["1"], "task_id": ["task"]}))
    assert same.column("t")[0] == same.column("k")[0] == keys.column("k")[0]


def test_native_hashing_refuses_buffers_that_do_not_fit():
    native = _keyhash._spanscan
    assert native is not None
    array = pa.array(["abc", "de"])
    validity, offsets, data = array.buffers()
    with pytest.raises(ValueError, match="shorter than offset"):
        native.hash_strings(None, offsets, data, 0, 3, False)
    bad_offsets = np.array([0, 3, 99], dtype=np.int32).tobytes()
    with pytest.raises(ValueError, match="outside the data buffer"):
        native.hash_strings(None, bad_offsets, data, 0, 2, False)
    with pytest.raises(ValueError, match="shorter than offset"):
        native.hash_strings(b"", offsets, data, 0, 2, False)
