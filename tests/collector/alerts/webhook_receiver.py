"""A real HTTP webhook receiver for the alert tests: an aiohttp server on a free loopback port, in a
thread of its own, that refuses deliveries (503) while told to and records every request."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import threading
import time

from aiohttp import web

from tests.collector.collector_proc import free_port


class WebhookReceiver:
    """``refuse``: how many deliveries to answer 503 first (None: every one, until `accept()`)."""

    def __init__(self, secret: bytes, refuse: int | None = 0):
        self.secret = secret
        self.port = free_port()
        self._refuse = refuse
        self._accepting = refuse == 0
        self.requests: list[dict] = []
        """Every request: event id header, parsed body, whether its signature verified, the status answered."""
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def __enter__(self) -> WebhookReceiver:
        self._thread.start()
        assert self._started.wait(30), "the webhook receiver did not start"
        return self

    def __exit__(self, *exc) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)

    def accept(self) -> None:
        with self._lock:
            self._accepting = True

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application()
        app.router.add_post("/hook", self._handle)
        runner = web.AppRunner(app)
        self._loop.run_until_complete(runner.setup())
        self._loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", self.port).start())
        self._started.set()
        self._loop.run_forever()
        self._loop.run_until_complete(runner.cleanup())

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        expected = "sha256=" + hmac.new(self.secret, body, hashlib.sha256).hexdigest()
        with self._lock:
            refused = self._refuse is None and not self._accepting or (
                self._refuse is not None and sum(r["status"] != 200 for r in self.requests) < self._refuse)
            status = 503 if refused else 200
            signature = request.headers.get("X-Meritlens-Signature", "")
            self.requests.append({"event_id": request.headers.get("X-Meritlens-Event-Id"), "body": json.loads(body),
                                  "raw": body, "signature": signature, "status": status,
                                  "signed": hmac.compare_digest(signature, expected)})
        return web.Response(status=status)

    def accepted(self) -> list[dict]:
        """The bodies answered 200, de-duplicated by event id (what a receiver keeps)."""
        with self._lock:
            kept = {}
            for r in self.requests:
                if r["status"] == 200:
                    kept.setdefault(r["event_id"], r["body"])
            return list(kept.values())

    def wait_for(self, check, timeout: float = 60.0):
        """``check(requests)`` once it holds (truthy), waiting for deliveries."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                result = check(list(self.requests))
            if result:
                return result
            assert time.monotonic() < deadline, f"the webhook never saw what was expected: {self.requests}"
            time.sleep(0.1)
