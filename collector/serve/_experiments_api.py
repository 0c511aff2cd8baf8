"""POST /api/experiments: experiment manifests stored inside the collector (the commands' side is
collector/cli/_experiment_io.py)."""

from __future__ import annotations

import asyncio
import functools

from aiohttp import web

from meritlens.analytics.engine import ExperimentError, validate_manifest
from meritlens.collector._paths import EXPERIMENTS_PATH
from meritlens.collector.store._store import SpanStore


def experiments_handler(store: SpanStore):
    """The handler of POST /api/experiments {"manifest": {...}, "create": false} -> {"manifest":
    {...as stored}}; 400 invalid, 409 conflict (an update rewriting the past, or "create" of an
    existing experiment)."""

    async def experiments(request: web.Request) -> web.Response:
        if request.method != "POST":
            return web.json_response({"error": f'use POST with {{"manifest": {{...}}}} on {EXPERIMENTS_PATH}'},
                                     status=405)
        try:
            payload = await request.json()
            if not isinstance(payload, dict) or not isinstance(payload.get("manifest"), dict):
                raise TypeError
            create = payload.get("create", False)
            if not isinstance(create, bool):
                raise TypeError
        except (ValueError, TypeError):
            return web.json_response({"error": 'body must be a JSON object {"manifest": {...}, "create": false}'},
                                     status=400)
        try:
            manifest = validate_manifest(payload["manifest"])
        except ExperimentError as exc:
            return web.json_response({"error": str(exc), "problems": exc.problems}, status=400)
        try:
            stored = await asyncio.get_running_loop().run_in_executor(
                None, functools.partial(store.write_experiment, manifest, create=create)
            )
        except ExperimentError as exc:
            return web.json_response({"error": str(exc), "problems": exc.problems}, status=409)
        return web.json_response({"manifest": stored.to_json()})

    return experiments
