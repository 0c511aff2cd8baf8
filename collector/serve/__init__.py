"""Serving: the collector process, the API routes beside OTLP, its health counters and the dashboard."""
