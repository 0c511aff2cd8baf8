"""Fixtures for the per-metric tests: hand-built spans, no collector."""

from __future__ import annotations

import pytest

from meritlens.analytics import MetricOptions
from meritlens.analytics.testing import scope_evidence


@pytest.fixture
def compute(tmp_path):
    """compute(metric_class, spans, options=None, judge=None) -> list[Measurement]; sidecars go to tmp_path."""

    def run(metric_class, spans, options=None, judge=None):
        return metric_class().compute(
            scope_evidence(spans), run_dir=tmp_path, options=MetricOptions(options or {}), judge=judge
        )

    return run
