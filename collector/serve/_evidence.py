"""Readiness checks that are recorded: inside the collector (POST /api/readiness), or by a command
on a file no collector holds (collector/cli/_readiness_io.py).

A check computes the coverage report with the analytics code over the store's read-only query,
then appends it to `coverage_checks`, so that the `coverage` view shows the latest check of each
target.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from meritlens.analytics.engine import (
    SCOPE_ALL,
    CoverageReport,
    ProfileError,
    TaskProfile,
    UnknownSubject,
    check_readiness,
    profile_from_dict,
    require_known,
)
from meritlens.collector._paths import READINESS_PATH
from meritlens.collector.store._sink import SpanQueries


def check_and_record(store: SpanQueries, profile: TaskProfile, *, target: str | None, scope: str) -> CoverageReport:
    """Compute the coverage report over ``store`` and record it; a target or scope that no span and
    no window has is refused (UnknownSubject) and nothing is recorded."""
    require_known(store.query, target or profile.target, scope)
    report = check_readiness(profile, store.query, target=target, scope=scope)
    store.record_coverage(report)
    return report


def readiness_handler(store: SpanQueries):
    """The handler of POST /api/readiness {"profile": {...}, "target": null, "scope": "all"} -> the
    coverage report."""

    async def readiness(request: web.Request) -> web.Response:
        if request.method != "POST":
            return web.json_response({"error": f"use POST with {{\"profile\": ...}} on {READINESS_PATH}"}, status=405)
        try:
            payload = await request.json()
            if not isinstance(payload, dict):
                raise TypeError
        except (ValueError, TypeError):
            return web.json_response(
                {"error": 'body must be a JSON object {"profile": {...}, "target": ..., "scope": ...}'}, status=400
            )
        target, scope = payload.get("target"), payload.get("scope", SCOPE_ALL)
        if not (target is None or isinstance(target, str) and target) or not (isinstance(scope, str) and scope):
            return web.json_response({"error": "target must be a non-empty string or null; scope a non-empty string"},
                                     status=400)
        try:
            profile = profile_from_dict(payload.get("profile"))
        except ProfileError as exc:
            return web.json_response({"error": str(exc), "problems": [str(p) for p in exc.problems]}, status=400)
        try:
            report = await asyncio.get_running_loop().run_in_executor(
                None, lambda: check_and_record(store, profile, target=target, scope=scope)
            )
        except UnknownSubject as exc:
            return web.json_response({"error": str(exc)}, status=404)
        return web.json_response(report.model_dump(mode="json"))

    return readiness
