"""The window processor keeps and reads back only `WINDOW_INPUT_COLUMNS` of the spans; the samples
(and so the windows) must be what the whole rows give. The sample rows carry one value column per
metric and fact, and `group_samples` splits them into each window's samples."""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pytest

from meritlens.analytics._schema import SPAN_COLUMN_NAMES
from meritlens.analytics._sample_columns import group_samples
from meritlens.analytics._distribution import SUM_SCALE
from meritlens.analytics._definitions import SPAN_WINDOW_METRICS
from meritlens.analytics._samples import SAMPLE_ROW_COLUMNS, SAMPLE_VALUES, WINDOW_INPUT_COLUMNS, sample_rows_sql
from meritlens.collector.store._rows import stamp_received_at
from tests.analytics.evidence_helpers import span_rows
from tests.collector.windows.test_incremental_windows import _random_spans


def _with_received_at(table: pa.Table) -> pa.Table:
    return stamp_received_at(table, 1_700_000_000_000_000)


def _samples(table: pa.Table) -> list[tuple]:
    con = duckdb.connect()
    con.register("_rows", table)
    rows = con.sql(sample_rows_sql("_rows")).fetchall()
    return sorted(rows, key=repr)


def test_the_window_input_columns_are_span_columns_without_the_large_json_ones():
    assert set(WINDOW_INPUT_COLUMNS) <= set(SPAN_COLUMN_NAMES)
    assert len(set(WINDOW_INPUT_COLUMNS)) == len(WINDOW_INPUT_COLUMNS)
    assert not {"attributes", "resource", "events", "links"} & set(WINDOW_INPUT_COLUMNS)


@pytest.mark.parametrize("seed", range(8))
def test_samples_from_the_window_input_columns_equal_samples_from_whole_rows(seed):
    whole = _with_received_at(span_rows(_random_spans(seed) + _random_spans(seed + 100)))
    samples = _samples(whole)
    assert samples, "the random spans give samples"
    assert _samples(whole.select(list(WINDOW_INPUT_COLUMNS))) == samples


def test_a_column_left_out_of_the_window_input_is_missed_loudly():
    whole = _with_received_at(span_rows(_random_spans(1)))
    trimmed = [c for c in WINDOW_INPUT_COLUMNS if c != "input_tokens"]
    with pytest.raises(duckdb.BinderException, match="input_tokens"):
        _samples(whole.select(trimmed))


def test_a_sample_row_holds_one_value_column_per_metric_and_fact_beside_its_times_and_keys():
    fixed = SAMPLE_ROW_COLUMNS[:len(SAMPLE_ROW_COLUMNS) - len(SAMPLE_VALUES)]
    assert SAMPLE_ROW_COLUMNS[len(fixed):] == SAMPLE_VALUES
    assert not set(fixed) & set(SAMPLE_VALUES), "a metric named like a fixed column would shadow it"
    assert set(SPAN_WINDOW_METRICS) <= set(SAMPLE_VALUES)
    con = duckdb.connect()
    con.register("_rows", _with_received_at(span_rows(_random_spans(3))))
    assert tuple(con.sql(sample_rows_sql("_rows")).columns) == SAMPLE_ROW_COLUMNS


def _wide(rows: list[dict]) -> pa.Table:
    """Sample rows: each dict gives target, scope, ``t`` (every time, count and key unless given) and some values."""
    base = {"first_end_us": pa.int64(), "last_end_us": pa.int64(), "start_ns": pa.int64(), "end_ns": pa.int64(),
            "success": pa.bool_(), "span_count": pa.int64(), "key_high": pa.uint64(), "key_low": pa.uint64()}
    columns = {"target_id": pa.array([r["target"] for r in rows]), "scope": pa.array([r["scope"] for r in rows])}
    for name, dtype in base.items():
        columns[name] = pa.array([r.get(name, None if dtype == pa.bool_() else r["t"]) for r in rows], dtype)
    for name in SAMPLE_VALUES:
        columns[name] = pa.array([r.get(name) for r in rows], pa.float64())
    return pa.table(columns)


def test_grouped_samples_are_each_metrics_values_per_target_and_scope_in_row_order():
    big = (1 << 64) - 5
    rows = [
        {"target": "b", "scope": "all", "t": 1, "key_high": big, "input_tokens": 10.0, "fact__tasks": 1.0},
        {"target": "a", "scope": "all", "t": 2, "retry_rate": 1.0},
        {"target": "b", "scope": "all", "t": 3, "key_high": 9, "input_tokens": 30.0, "success": True},
        {"target": "c", "scope": "x", "t": 4, "input_tokens": 40.0},
        {"target": "b", "scope": "x", "t": 5, "fact__tasks": 1.0},
        {"target": "b", "scope": "all", "t": 6, "fact__tasks": 1.0},
    ]
    groups = group_samples(_wide(rows))
    assert sorted(groups) == [("a", "all", "retry_rate"), ("b", "all", "fact__tasks"), ("b", "all", "input_tokens"),
                              ("b", "x", "fact__tasks"), ("c", "x", "input_tokens")]
    tokens = groups[("b", "all", "input_tokens")]
    assert tokens.v.tolist() == [10.0, 30.0] and tokens.first_end_us.tolist() == [1, 3]
    assert tokens.successes == 1 and tokens.total == 40 << SUM_SCALE and tokens.squares == 1000 << (2 * SUM_SCALE)
    assert (tokens.first_end_min, tokens.last_end_max) == (1, 3)
    assert tokens.key_high == (big + 9) % (1 << 64) and tokens.key_low == 4
    assert groups[("b", "all", "fact__tasks")].end_ns.tolist() == [1, 6]
    assert groups[("b", "all", "fact__tasks")].key_high == (big + 6) % (1 << 64)
    assert groups[("c", "x", "input_tokens")].v.tolist() == [40.0] and groups[("c", "x", "input_tokens")].key_low == 4
    assert groups[("a", "all", "retry_rate")].spans == 2
    assert group_samples(_wide(rows).slice(0, 0)) == {}
