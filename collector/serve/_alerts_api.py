"""`GET /api/alerts` (every rule's state) and `POST /api/alerts/silence` over the collector's alert
component (collector/alerts); a collector without alert rules answers with none."""

from __future__ import annotations

import asyncio

from aiohttp import web

from meritlens.collector._paths import ALERTS_PATH, ALERTS_SILENCE_PATH

NO_RULES = "no alert rules: start `meritlens serve --profile` with a profile that has [[alerts]] (docs/alerts.md)"


class AlertsEndpoint:
    """The routes of one `AlertWatcher` (None: no rules are evaluated)."""

    def __init__(self, watcher, lake: bool = False):
        self._watcher = watcher
        self._lake = lake

    def install(self, app: web.Application) -> None:
        app.router.add_get(ALERTS_PATH, self.states)
        app.router.add_post(ALERTS_SILENCE_PATH, self.silence)

    def _note(self) -> str | None:
        if self._watcher is not None:
            return None
        return ("alert rules are evaluated by a single-node collector (serve --db), not with --lake" if self._lake
                else NO_RULES)

    async def states(self, request: web.Request) -> web.Response:
        alerts = [] if self._watcher is None else self._watcher.states()
        return web.json_response({"alerts": alerts, "note": self._note()})

    async def silence(self, request: web.Request) -> web.Response:
        if self._watcher is None:
            return web.json_response({"error": self._note()}, status=404)
        try:
            body = await request.json()
            rule, target, until_us = body["rule"], body.get("target"), body["until_us"]
            if not isinstance(rule, str) or (target is not None and not isinstance(target, str)) \
                    or isinstance(until_us, bool) or not isinstance(until_us, int):
                raise ValueError("rule and target are strings, until_us an integer (µs since the epoch)")
        except (ValueError, KeyError, TypeError) as exc:
            return web.json_response({"error": f"a silence is JSON with rule, target and until_us: {exc}"}, status=400)
        loop = asyncio.get_running_loop()
        try:
            silenced = await loop.run_in_executor(None, self._watcher.silence, rule, target, until_us)
        except ValueError as exc:
            return web.json_response({"error": str(exc)}, status=404)
        return web.json_response({"silenced": silenced})
