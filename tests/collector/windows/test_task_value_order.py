"""A task's double totals (`cost_usd`, `quality_score` of the `tasks` view and of the window samples)
add their values in value order: the same bits whatever order the spans were stored in, and the
bits of adding the sorted values one by one."""

from __future__ import annotations

import functools
import operator
import random

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from meritlens.analytics._schema import SPANS_TABLE
from meritlens.analytics._samples import sample_rows_sql
from meritlens.analytics._tasks import tasks_view_sql
from meritlens.collector.store._rows import stamp_received_at
from tests.analytics.evidence_helpers import CallSpec, Ids, TaskSpec, span_rows

# sums of these depend on the order they are added in
COSTS = [1e16, 0.1, 1.0, 3.3, 0.2, 1e-3, 1.0, 0.3, 2.5, 1.0]
QUALITIES = [0.79, 0.09, 0.03, 0.84, 0.43, 0.76, 0.05]


def _in_order(values: list[float]) -> float:
    return functools.reduce(operator.add, sorted(values))


def _task_rows() -> pa.Table:
    task = TaskSpec("planner", 0.0, [CallSpec(cost=cost) for cost in COSTS], task_id="t-1")
    rows = span_rows(task.spans(Ids(seed=41)))
    # quality scores on the calls too, so that the task's score is a mean of several
    calls = pc.starts_with(rows.column("name"), "chat").to_pylist()
    scores = iter(QUALITIES)
    quality = [next(scores, None) if is_call else None for is_call in calls]
    rows = rows.set_column(rows.schema.get_field_index("quality_score"), "quality_score",
                           pa.array(quality, pa.float64()))
    return stamp_received_at(rows, 1_700_000_000_000_000)


def _task_totals(rows: pa.Table) -> tuple[tuple, tuple]:
    con = duckdb.connect()
    con.register("_rows", rows)
    con.execute(f"CREATE TABLE {SPANS_TABLE} AS SELECT * FROM _rows")
    con.execute(tasks_view_sql("tasks"))
    view = con.sql("SELECT cost_usd, quality_score FROM tasks").fetchall()
    samples = con.sql(f"SELECT total_task_cost, task_quality FROM ({sample_rows_sql(SPANS_TABLE)})"
                      " WHERE total_task_cost IS NOT NULL").fetchall()
    return view, samples


def test_the_orders_chosen_make_a_difference():
    # else the test below could not fail
    assert sum(COSTS) != _in_order(COSTS)
    assert sum(reversed(sorted(COSTS))) != _in_order(COSTS)
    assert sum(QUALITIES) != _in_order(QUALITIES)


def test_task_totals_add_values_in_value_order_whatever_the_storage_order():
    rows = _task_rows()
    expected_cost = _in_order(COSTS)
    expected_quality = _in_order(QUALITIES) / len(QUALITIES)
    rng = random.Random(5)
    seen = set()
    for _ in range(6):
        order = list(range(rows.num_rows))
        rng.shuffle(order)
        view, samples = _task_totals(rows.take(order))
        assert view == [(expected_cost, expected_quality)]
        assert samples == [(expected_cost, expected_quality)]
        seen.add(tuple(order))
    assert len(seen) > 1
