"""`POST /api/windows/range`: the windows of a time range, merged from the windows by time of the
running collector (the buckets it holds in memory are fresher than the saved ones)."""

from __future__ import annotations

import asyncio
import datetime as _dt
import json

from aiohttp import web

from meritlens.analytics.engine import WINDOW_COLUMN_NAMES
from meritlens.collector._paths import WINDOWS_RANGE_PATH
from meritlens.collector.store._results import json_default


class RangeWindowsEndpoint:
    """Answers ``{"since_us", "until_us", "target", "scope"}`` (each may be null) with the windows as
    rows (``columns``, ``rows``) and what the buckets cover (``start``, ``end``, ``buckets``)."""

    def __init__(self, processor, db_name: str):
        self._processor = processor
        self._db_name = db_name

    def install(self, app: web.Application) -> None:
        app.router.add_post(WINDOWS_RANGE_PATH, self.handle)

    async def handle(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
            since, until = _int_or_none(body.get("since_us")), _int_or_none(body.get("until_us"))
            target, scope = body.get("target"), body.get("scope")
        except (ValueError, TypeError, AttributeError) as exc:
            return web.json_response({"error": f"a range request is JSON with since_us and until_us: {exc}"},
                                     status=400)
        loop = asyncio.get_running_loop()
        fresh = await loop.run_in_executor(None, self._processor.freshness)
        ranged = await loop.run_in_executor(None, self._processor.range_windows, since, until, target, scope)
        windows = ranged.windows(self._db_name, _dt.datetime.now(_dt.timezone.utc))
        payload = {"columns": list(WINDOW_COLUMN_NAMES),
                   "rows": [[getattr(w, c) for c in WINDOW_COLUMN_NAMES] for w in windows],
                   "start_us": ranged.start_us, "end_us": ranged.end_us, "buckets": ranged.buckets,
                   "windows_behind": not fresh}
        return web.Response(body=json.dumps(payload, default=json_default), content_type="application/json")


def _int_or_none(value) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{value!r} is not a time in µs since the epoch")
    return value
