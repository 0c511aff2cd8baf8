"""The catalogue: the 23 metrics of the design, consistent facts, and docs generated from it."""

from __future__ import annotations

from pathlib import Path

import pytest

from meritlens.analytics import CATALOGUE, METRIC_IDS, METRICS, Aggregation, MetricGroup, get_metric
from meritlens.analytics._catalogue import MetricKind, SampleUnit, Source
from meritlens.analytics._docs import BEGIN, END, catalogue_block
from meritlens.analytics._definitions import PLUGIN_ONLY_METRICS, SPAN_WINDOW_METRICS, WINDOW_DEFINITIONS
from tests.store_under_test import StoreUnderTest

DOCS = Path(__file__).resolve().parents[2] / "docs" / "evidence.md"

# The design's table of metrics, by group (DESIGN.md, "Metric catalogue").
DESIGN_GROUPS = {
    MetricGroup.QUALITY: [
        "task_quality", "task_success", "consistency", "instruction_following", "tool_use_performance",
        "structured_output_reliability", "hallucination_rate", "reasoning_efficiency", "recovery_ability",
        "context_handling", "retrieval_use_quality", "long_horizon_performance", "preference_fit",
    ],
    MetricGroup.COST: ["input_tokens", "output_tokens", "total_task_cost", "cost_per_successful_task", "agent_steps"],
    MetricGroup.LATENCY: ["time_to_first_useful_output", "end_to_end_latency", "throughput", "retry_rate",
                          "human_intervention_rate"],
}


def test_catalogue_holds_the_23_metrics_of_the_design_in_their_groups():
    assert len(CATALOGUE) == 23
    assert list(METRIC_IDS) == [m for ids in DESIGN_GROUPS.values() for m in ids]
    for group, ids in DESIGN_GROUPS.items():
        assert [m.id for m in CATALOGUE if m.group is group] == ids


@pytest.mark.parametrize("spec", CATALOGUE, ids=lambda m: m.id)
def test_every_metric_has_consistent_facts(spec):
    assert spec.description and spec.unit
    assert spec.default_aggregation in spec.allowed_aggregations
    assert len(set(spec.allowed_aggregations)) == len(spec.allowed_aggregations)
    assert spec.ratio == (spec.kind in (MetricKind.SCORE, MetricKind.PROPORTION))
    if spec.kind is MetricKind.PROPORTION:
        assert spec.unit == "ratio"


def test_known_facts_of_the_design():
    assert METRICS["total_task_cost"].allowed_aggregations == (Aggregation.SUM,)
    assert METRICS["total_task_cost"].unit == "USD" and METRICS["cost_per_successful_task"].source is Source.DERIVED
    assert METRICS["tool_use_performance"].sample_unit is SampleUnit.CALL
    assert METRICS["retry_rate"].sample_unit is SampleUnit.CALL
    assert METRICS["consistency"].reliability and METRICS["consistency"].source is Source.DERIVED
    assert {m.id for m in CATALOGUE if m.source is Source.OUTCOMES} >= {
        "task_quality", "task_success", "human_intervention_rate"}
    for cost_or_latency in ("input_tokens", "output_tokens", "total_task_cost", "end_to_end_latency",
                            "time_to_first_useful_output"):
        assert METRICS[cost_or_latency].source is Source.SPAN_FIELDS


def test_window_definitions_cover_every_metric_with_a_span_or_outcome_source():
    assert len(set(SPAN_WINDOW_METRICS)) == len(WINDOW_DEFINITIONS)
    assert set(SPAN_WINDOW_METRICS) | set(PLUGIN_ONLY_METRICS) == set(METRIC_IDS)
    for spec in CATALOGUE:
        if spec.source is Source.SPAN_FIELDS:
            assert spec.id in SPAN_WINDOW_METRICS, spec.id
    for definition in WINDOW_DEFINITIONS:
        assert definition.aggregation is METRICS[definition.metric].default_aggregation


def test_unknown_id_names_the_closest_valid_one():
    with pytest.raises(KeyError, match="did you mean 'end_to_end_latency'"):
        get_metric("end_to_end_latncy")


def test_docs_catalogue_table_is_generated_from_the_catalogue():
    text = DOCS.read_text(encoding="utf-8")
    start, end = text.index(BEGIN), text.index(END) + len(END)
    assert text[start:end] == catalogue_block(), (
        "docs/evidence.md is out of date: run `.venv/bin/python -m meritlens.analytics._docs docs/evidence.md`"
    )
    for spec in CATALOGUE:
        assert f"| `{spec.id}` |" in text


def test_catalogue_view_matches_the_catalogue(tmp_path):
    store = StoreUnderTest(str(tmp_path / "c.duckdb"))
    store.start()
    try:
        result = store.query("SELECT metric, unit, direction, ratio, reliability, default_aggregation, "
                             "allowed_aggregations, sample_unit, computed_by FROM catalogue ORDER BY position")
    finally:
        store.shutdown()
    assert [row[0] for row in result.rows] == list(METRIC_IDS)
    for row, spec in zip(result.rows, CATALOGUE):
        assert row[1:8] == (spec.unit, spec.direction.value, spec.ratio, spec.reliability,
                            spec.default_aggregation.value, [a.value for a in spec.allowed_aggregations],
                            spec.sample_unit.value)
        assert row[8] == ("span window" if spec.id in SPAN_WINDOW_METRICS else "plugin or evaluator")
