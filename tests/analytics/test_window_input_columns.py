"""The window processor keeps and reads back only `WINDOW_INPUT_COLUMNS` of the spans; the samples
(and so the windows) must be what the whole rows give."""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pytest

from meritlens.analytics._schema import SPAN_COLUMN_NAMES
from meritlens.analytics._windows import WINDOW_INPUT_COLUMNS, sample_rows_sql
from meritlens.collector._store import stamp_received_at
from tests.analytics.evidence_helpers import span_rows
from tests.analytics.test_incremental_windows import _random_spans


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
