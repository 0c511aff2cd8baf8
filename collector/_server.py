"""The collector process: store, pipeline and receivers with one start()/shutdown() lifecycle."""

from __future__ import annotations

import asyncio
import logging
import os
import signal

from aiohttp import web

from meritlens.collector._http import HttpReceiver
from meritlens.collector._normalize import NormalizeOptions, check_target_fallback
from meritlens.collector._pipeline import IngestPipeline
from meritlens.collector._settings import TARGET_FALLBACK_OFF, ServerSettings, address_file
from meritlens.collector._store import SpanStore

log = logging.getLogger("meritlens.collector")


def normalize_options(settings: ServerSettings) -> NormalizeOptions:
    """The normalizer's options from the server settings (raises ValueError on a bad template)."""
    fallback = settings.target_fallback
    if fallback.strip().lower() == TARGET_FALLBACK_OFF:
        return NormalizeOptions(target_fallback=None)
    return NormalizeOptions(target_fallback=check_target_fallback(fallback))


class Collector:
    """A running collector: `await start()`, then `await shutdown()` (drains and commits)."""

    def __init__(self, settings: ServerSettings):
        self.settings = settings
        self.store = SpanStore(settings.db)
        self.pipeline = IngestPipeline(self.store, max_pending_batches=settings.max_pending_batches)
        self._runner: web.AppRunner | None = None
        self.http_port: int | None = None

    async def start(self) -> None:
        self.store.start()
        rebuilt = self.store.refresh_all_windows()
        log.info("opened %s; recomputed windows of %d keys", self.settings.db, rebuilt)
        self.pipeline.start()
        receiver = HttpReceiver(self.store, self.pipeline, max_body_bytes=self.settings.max_body_bytes,
                                normalize_options=normalize_options(self.settings))
        self._runner = web.AppRunner(receiver.app(), auto_decompress=False, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.settings.host, self.settings.http_port)
        await site.start()
        self.http_port = site._server.sockets[0].getsockname()[1]
        log.info("OTLP/HTTP listening on %s", self.url)
        try:
            with open(address_file(self.settings.db), "w", encoding="utf-8") as fh:
                fh.write(self.url + "\n")
        except OSError:
            log.warning("could not write %s; queries by --db need --url", address_file(self.settings.db))

    @property
    def url(self) -> str:
        host = self.settings.host
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        elif ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.http_port}"

    async def shutdown(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        self.pipeline.shutdown()
        self.store.shutdown()
        try:
            os.remove(address_file(self.settings.db))
        except OSError:
            pass


def serve(settings: ServerSettings) -> None:
    """Run a collector until SIGINT or SIGTERM, then drain and exit."""

    async def main() -> None:
        collector = Collector(settings)
        await collector.start()
        print(
            f"meritlens collector: OTLP/HTTP on {collector.url} -> {settings.db}",
            flush=True,
        )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        await collector.shutdown()

    asyncio.run(main())
