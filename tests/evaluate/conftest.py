"""Fixtures for the `meritlens evaluate` tests (helpers live in evaluate_support.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.evaluate.evaluate_support import PLUGIN_SOURCE, RunningCollector
from tests.plugin_site import make_distribution


@pytest.fixture
def collector_factory():
    started: list[RunningCollector] = []

    def start(db: Path, extra_env: dict | None = None) -> RunningCollector:
        collector = RunningCollector(db, extra_env)
        started.append(collector)
        return collector

    yield start
    for collector in started:
        collector.stop()


@pytest.fixture
def plugin_site(tmp_path) -> Path:
    """Throwaway installed distributions declaring `span_count` and a broken metric; put it on PYTHONPATH."""
    site = tmp_path / "plugin_site"
    make_distribution(site, "span_count_metric", "span_count_metric", PLUGIN_SOURCE,
                      {"span_count": "span_count_metric:SpanCountMetric"})
    # A second distribution whose metric cannot be imported: it is skipped, the others run.
    make_distribution(site, "broken_metric", "broken_metric", "import a_module_that_is_not_installed\n",
                      {"broken_metric": "broken_metric:Broken"})
    return site
