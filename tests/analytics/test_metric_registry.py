"""Entry-point metrics: real discovery through importlib.metadata from throwaway distributions put
on a temporary sys.path entry (the shared test venv is not touched)."""

from __future__ import annotations

import logging
import sys
import textwrap

import pytest

from meritlens.analytics import BUILTIN_METRICS, load_registry
from meritlens.analytics._builtin_metrics import TaskQuality
from tests.plugin_site import make_distribution

PLUGIN_MODULE = '''
from meritlens.analytics import Metric


class GoodMetric(Metric):
    """Counts the scope's spans."""

    name = "span_count"
    unit = "spans"
    aggregation = "single_value"

    def compute(self, evidence, *, run_dir, options, judge):
        return [self.measurement(value=len(evidence.spans), summary=f"{len(evidence.spans)} spans",
                                 tasks_or_spans=evidence.spans, sample_count=len(evidence.spans))]


class MismatchedName(GoodMetric):
    name = "something_else"


class ImpostorQuality(GoodMetric):
    name = "task_quality"


class NotAMetric:
    name = "not_a_metric"


class FirstDuplicate(GoodMetric):
    name = "duplicate"
'''


@pytest.fixture
def plugin_sites(tmp_path, monkeypatch):
    first, second = tmp_path / "site_a", tmp_path / "site_b"
    make_distribution(first, "good_metrics", "good_metrics", PLUGIN_MODULE, {
        "span_count": "good_metrics:GoodMetric",
        "something": "good_metrics:MismatchedName",
        "task_quality": "good_metrics:ImpostorQuality",
        "not_a_metric": "good_metrics:NotAMetric",
        "duplicate": "good_metrics:FirstDuplicate",
    })
    make_distribution(first, "broken_metrics", "broken_metrics",
                      "raise ImportError('needs a library that is not installed')\n",
                      {"broken": "broken_metrics:Whatever"})
    make_distribution(second, "other_metrics", "other_metrics", textwrap.dedent('''
        from good_metrics import GoodMetric

        class SecondDuplicate(GoodMetric):
            name = "duplicate"
    '''), {"duplicate": "other_metrics:SecondDuplicate"})
    monkeypatch.syspath_prepend(str(second))
    monkeypatch.syspath_prepend(str(first))  # first on sys.path is found first
    yield first, second
    for module in ("good_metrics", "broken_metrics", "other_metrics"):
        sys.modules.pop(module, None)


def test_entry_point_rules(plugin_sites, caplog):
    with caplog.at_level(logging.INFO, logger="meritlens.analytics.registry"):
        registry = load_registry()
    refused = {r.entry_point: r.reason for r in registry.refused}

    # A good plugin is runnable under its name.
    assert registry.metrics["span_count"].__name__ == "GoodMetric"
    assert registry.plugins["span_count"] == "good_metrics:GoodMetric"
    # A plugin that fails to import is skipped with the error.
    assert "broken" not in registry.metrics
    assert "needs a library that is not installed" in refused["broken"]
    # An entry name that differs from the class's name is refused.
    assert "something" not in registry.metrics and "something_else" not in registry.metrics
    assert "'something_else'" in refused["something"]
    # A built-in keeps its name.
    assert registry.metrics["task_quality"] is TaskQuality
    assert "built-in" in refused["task_quality"]
    # Not a Metric subclass.
    assert "not_a_metric" not in registry.metrics
    assert "not a meritlens.analytics.Metric" in refused["not_a_metric"]
    # Two plugins with one name: the first found is kept, with a warning.
    assert registry.metrics["duplicate"].__name__ == "FirstDuplicate"
    assert "first one found is kept" in refused["duplicate"]
    # Every refusal is logged; the built-ins are all still there.
    assert set(BUILTIN_METRICS) <= set(registry.metrics)
    logged = caplog.text
    for name in ("broken", "something", "task_quality", "not_a_metric", "duplicate"):
        assert f"metric plugin {name} = " in logged


def test_unknown_and_refused_names_are_explained(plugin_sites):
    registry = load_registry()
    with pytest.raises(KeyError, match="did you mean 'task_quality'"):
        registry.resolve(["task_qualty"])
    with pytest.raises(KeyError, match="installed but was refused: failed to import"):
        registry.resolve(["broken"])
    resolved = registry.resolve(["span_count", "consistency", "span_count"])
    assert [cls.name for cls in resolved] == ["span_count", "consistency"]


def test_without_plugins_only_builtins():
    registry = load_registry(entry_points=[])
    assert registry.metrics == BUILTIN_METRICS
    assert registry.refused == []
