"""meritlens.collector: OTLP receivers, the span store, the window processor and the server."""

__all__: list[str] = ["finish_arm", "reader", "save_experiment", "start_arm"]

# Experiments from Python, imported on first use so that the CLI starts without the web server.
_LAZY = {
    "save_experiment": ("meritlens.collector.cli._experiment_io", "save_experiment"),
    "reader": ("meritlens.collector.cli._experiment_io", "reader"),
    "start_arm": ("meritlens.collector.cli._experiment_io", "start"),
    "finish_arm": ("meritlens.collector.cli._experiment_io", "finish"),
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        module, attribute = _LAZY[name]
        return getattr(importlib.import_module(module), attribute)
    raise AttributeError(f"module 'meritlens.collector' has no attribute {name!r}")
