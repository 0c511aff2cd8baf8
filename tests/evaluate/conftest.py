"""Fixtures for the `meritlens evaluate` tests (helpers live in evaluate_support.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from evaluate_support import PLUGIN_SOURCE, RunningCollector


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
    site.mkdir()
    (site / "span_count_metric.py").write_text(PLUGIN_SOURCE)
    info = site / "span_count_metric-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: span-count-metric\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[meritlens.metrics]\nspan_count = span_count_metric:SpanCountMetric\n")
    # A second distribution whose metric cannot be imported: it is skipped, the others run.
    (site / "broken_metric.py").write_text("import a_module_that_is_not_installed\n")
    broken = site / "broken_metric-0.1.dist-info"
    broken.mkdir()
    (broken / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-metric\nVersion: 0.1\n")
    (broken / "entry_points.txt").write_text("[meritlens.metrics]\nbroken_metric = broken_metric:Broken\n")
    return site
