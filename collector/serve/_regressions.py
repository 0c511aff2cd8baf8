"""Regressions from the running collector's windows by time (the buckets it holds in memory are
fresher than the saved ones):

- ``POST /api/regressions``: a report (`RegressionQuestion` as JSON), what `meritlens regressions` asks;
- ``POST /api/regressions/plans``: a profile's sample plans (`PlanQuestion`), `meritlens profile check --detect`;
- `Regressions.current`: the report the dashboard and `/metrics` show: every target, the recent day
  against the week before, with the plans of the profiles `serve --profile` loaded (the first loaded
  for a target); made again when the windows have moved on (at most once a minute) or an hour begins.
"""

from __future__ import annotations

import asyncio
import json
import threading

from aiohttp import web

from meritlens.analytics.engine import HOUR_US, SCOPE_ALL
from meritlens.collector.store._results import json_default
from meritlens.collector.windows._questions import PlanQuestion, RegressionQuestion, now_us

REMAKE_AFTER_US = 60_000_000
"""The current report is made again at most this often as the windows move on (merging a week of
hour buckets of every target holds the window processor's lock for a while); at once when an hour begins."""


class Regressions:
    """The routes and the current report over one window processor."""

    def __init__(self, processor, profiles=()):
        self._processor = processor
        self._plans: dict[str, dict] = {}
        for _, profile in profiles:
            self._plans.setdefault(profile.target, dict(profile.metrics))
        self._lock = threading.Lock()
        self._current: tuple[tuple, dict] | None = None

    def install(self, app: web.Application) -> None:
        app.router.add_post(RegressionQuestion.path, self._route(RegressionQuestion, self.report))
        app.router.add_post(PlanQuestion.path, self._route(PlanQuestion, self.plans))

    def report(self, question: RegressionQuestion) -> dict:
        ranges = question.ranges()
        return self._processor.read_buckets(ranges.since_us, ranges.until_us,
                                            lambda book: question.answer(book, ranges), question.subject, SCOPE_ALL)

    def plans(self, question: PlanQuestion) -> dict:
        since, until = question.span()
        return self._processor.read_buckets(since, until, lambda book: question.answer(book, since, until),
                                            question.subject, SCOPE_ALL)

    def current(self) -> dict:
        """The dashboard's report (see the module)."""
        with self._lock:
            now = now_us()
            if self._current is not None:
                (windowed, hour, made), report = self._current
                moved = windowed != self._processor.windowed_us and now - made >= REMAKE_AFTER_US
                if hour == now // HOUR_US and not moved:
                    return report
            from meritlens.analytics.engine import ReportRanges, regression_report

            self._processor.freshness()
            ranges = ReportRanges.ending(now)
            windowed = self._processor.windowed_us
            report = self._processor.read_buckets(
                ranges.since_us, ranges.until_us, lambda book: regression_report(book, ranges, plans=self._plans),
                None, SCOPE_ALL)
            self._current = ((windowed, now // HOUR_US, now), report)
            return report

    def _route(self, kind, answer):
        async def handle(request: web.Request) -> web.Response:
            try:
                question = kind.from_json(await request.json())
            except ValueError as exc:  # a JSON error, a wrong field or an invalid profile
                return web.json_response({"error": " ".join(str(exc).split())}, status=400)
            loop = asyncio.get_running_loop()
            fresh = await loop.run_in_executor(None, self._processor.freshness)
            body = await loop.run_in_executor(None, answer, question)
            body["windows_behind"] = not fresh
            return web.Response(body=json.dumps(body, default=json_default), content_type="application/json")
        return handle


def install_without_buckets(app: web.Application) -> None:
    """The routes of a collector that keeps no windows by time (one writing to a lake): each says where they are."""
    async def handle(request: web.Request) -> web.Response:
        return web.json_response({"error": "this collector writes to a lake and keeps no windows by time: "
                                           "read the lake's with --lake PATH (after `meritlens lake windows`)"},
                                 status=404)

    for path in (RegressionQuestion.path, PlanQuestion.path):
        app.router.add_post(path, handle)
