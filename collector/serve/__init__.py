"""Serving: the collector process, its write pipeline, API handlers and the dashboard."""
