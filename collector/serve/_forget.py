"""`POST /api/forget`: `meritlens forget` through the running collector, which holds the DuckDB file, the staging
log and the window state (collector/windows/_forget.py)."""

from __future__ import annotations

import asyncio

from aiohttp import web

from meritlens.collector._paths import FORGET_PATH
from meritlens.collector.serve._health import Health
from meritlens.collector.windows._forget import ForgetError, condition, forget


class ForgetEndpoint:
    """Answers ``{"where": condition, "yes": bool}`` with the report (`ForgetReport.to_json`); one forget
    request runs at a time."""

    def __init__(self, processor, health: Health):
        self._processor = processor
        self._health = health
        self._one = asyncio.Lock()

    def install(self, app: web.Application) -> None:
        app.router.add_post(FORGET_PATH, self.handle)

    async def handle(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
            where, act = body["where"], body.get("yes", False)
            if not isinstance(where, str) or not isinstance(act, bool):
                raise TypeError("where is a string and yes a boolean")
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            return web.json_response({"error": f'a forget request is JSON {{"where": "...", "yes": false}}: {exc}'},
                                     status=400)
        async with self._one:
            try:
                where = condition((), where)  # one expression, whoever sent it
                report = await asyncio.get_running_loop().run_in_executor(
                    None, lambda: forget(self._processor, where, act=act))
            except ForgetError as exc:
                return web.json_response({"error": str(exc)}, status=400)
        if report.done:
            self._health.forgot(report.spans)
        return web.json_response(report.to_json())
