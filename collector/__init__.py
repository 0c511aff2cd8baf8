"""meritlens.collector: OTLP receivers, the span store, the window processor and the server."""

__all__: list[str] = []
