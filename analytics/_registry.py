"""The metric registry: the built-ins, plus third-party metrics from the ``meritlens.metrics`` entry points.

Rules for an installed metric (each refusal is logged; the other metrics still load):
- its entry-point name must equal the class's ``name``;
- it must load, and be a `Metric` subclass;
- a built-in keeps its name on a clash;
- of two installed metrics with one name the first found is kept.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib import metadata

from meritlens.analytics._builtin_metrics import BUILTIN_METRIC_CLASSES
from meritlens.analytics._metric import Metric

log = logging.getLogger("meritlens.analytics.registry")

ENTRY_POINT_GROUP = "meritlens.metrics"
BUILTIN_METRICS: dict[str, type[Metric]] = {cls.name: cls for cls in BUILTIN_METRIC_CLASSES}
"""Built-in metrics by name, derived from BUILTIN_METRIC_CLASSES."""


@dataclass(frozen=True)
class RefusedPlugin:
    """An entry point that was not registered, and why."""

    entry_point: str
    value: str
    reason: str


@dataclass
class MetricRegistry:
    """The runnable metrics by name, and the installed ones that were refused."""

    metrics: dict[str, type[Metric]] = field(default_factory=dict)
    plugins: dict[str, str] = field(default_factory=dict)
    """Installed metric name -> its entry-point value (``module:Class``)."""
    refused: list[RefusedPlugin] = field(default_factory=list)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.metrics)

    def is_builtin(self, name: str) -> bool:
        return name in BUILTIN_METRICS and self.metrics.get(name) is BUILTIN_METRICS[name]

    def resolve(self, names: Iterable[str]) -> list[type[Metric]]:
        """The metric classes for ``names``, in order; KeyError names every unknown one."""
        wanted = list(dict.fromkeys(n.strip() for n in names if n.strip()))
        unknown = [n for n in wanted if n not in self.metrics]
        if unknown:
            raise KeyError("; ".join(self._unknown(n) for n in unknown))
        return [self.metrics[n] for n in wanted]

    def _unknown(self, name: str) -> str:
        import difflib

        refused = [r for r in self.refused if r.entry_point == name]
        if refused:
            return f"metric {name!r} is installed but was refused: {refused[0].reason}"
        close = difflib.get_close_matches(name, self.names, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        return f"unknown metric {name!r}{hint} (registered: {', '.join(self.names)})"


def _entry_points() -> list[metadata.EntryPoint]:
    return list(metadata.entry_points(group=ENTRY_POINT_GROUP))


def load_registry(entry_points: Iterable[metadata.EntryPoint] | None = None) -> MetricRegistry:
    """Build the registry from the built-ins and the installed entry points (``entry_points``
    overrides discovery, for callers that already have them)."""
    registry = MetricRegistry(metrics=dict(BUILTIN_METRICS))
    seen_values: set[tuple[str, str]] = set()
    for ep in (_entry_points() if entry_points is None else entry_points):
        if (ep.name, ep.value) in seen_values:
            continue  # the same distribution seen twice on sys.path
        seen_values.add((ep.name, ep.value))
        try:
            registry.metrics[ep.name] = _plugin_metric(ep, registry)
        except _Refused as refused:
            log.log(refused.level, "metric plugin %s = %s skipped: %s", ep.name, ep.value, refused.reason)
            registry.refused.append(RefusedPlugin(ep.name, ep.value, refused.reason))
            continue
        registry.plugins[ep.name] = ep.value
    return registry


class _Refused(Exception):
    """Why an entry point is not registered, and the level of the log line that says so."""

    def __init__(self, reason: str, level: int = logging.WARNING):
        super().__init__(reason)
        self.reason, self.level = reason, level


def _plugin_metric(ep: metadata.EntryPoint, registry: MetricRegistry) -> type[Metric]:
    """The metric class ``ep`` names; raises _Refused when it is not one the registry takes."""
    if ep.name in BUILTIN_METRICS:
        raise _Refused(f"the name {ep.name!r} belongs to a built-in metric, which keeps it")
    if ep.name in registry.plugins:
        raise _Refused(f"another installed metric already has the name {ep.name!r} ({registry.plugins[ep.name]}); "
                       "the first one found is kept")
    try:
        loaded = ep.load()
    except Exception as exc:  # any import failure skips this plugin only
        log.debug("import of metric plugin %s failed", ep.value, exc_info=True)  # the traceback, with --debug
        raise _Refused(f"failed to import: {type(exc).__name__}: {exc}", logging.ERROR) from None
    if not (inspect.isclass(loaded) and issubclass(loaded, Metric)):
        raise _Refused(f"{ep.value} is not a meritlens.analytics.Metric subclass")
    if inspect.isabstract(loaded):
        raise _Refused(f"{ep.value} does not implement compute()")
    declared = getattr(loaded, "name", None)
    if declared != ep.name:
        raise _Refused(f"the class's name is {declared!r}, not the entry-point name {ep.name!r}")
    return loaded
