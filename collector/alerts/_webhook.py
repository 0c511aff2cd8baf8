"""Delivering alert events to a webhook, at least once.

Every event is a row of ``alert_deliveries`` written in the same transaction as the transition it
announces, so an event is never lost to a crash and never made twice. A thread of its own POSTs the
rows not yet acknowledged (a 2xx answer), the events of one (rule, target) in order; a failure or any
other answer is tried again after the configured wait, doubled at each further failure up to
``max_retry_s``. The body is stored, so every attempt sends the same bytes, signed with HMAC-SHA256
(``X-Meritlens-Signature: sha256=<hex>``) under the key read from the secret file; a receiver drops
the repeats of an event by its ``event_id``.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import threading
from collections.abc import Callable

import httpx

from meritlens.collector.alerts import _tables
from meritlens.collector.alerts._config import AlertConfig
from meritlens.collector.store._database import transaction

log = logging.getLogger("meritlens.collector.alerts")
logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per delivery attempt is logged here, with its outcome

SIGNATURE_HEADER = "X-Meritlens-Signature"
EVENT_ID_HEADER = "X-Meritlens-Event-Id"
_IDLE_WAIT_S = 5.0


def signature(key: bytes, body: bytes) -> str:
    """The value of ``X-Meritlens-Signature`` for ``body``."""
    return "sha256=" + hmac.new(key, body, hashlib.sha256).hexdigest()


class WebhookSender:
    """POSTs the undelivered events of ``alert_deliveries`` to ``config.webhook_url`` (`start`/`shutdown`)."""

    def __init__(self, connection, write_lock, config: AlertConfig, clock: Callable[[], int]):
        self._con = connection
        self._write_lock = write_lock
        self._config = config
        self._key = config.secret()
        self._clock = clock
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.stats = {"attempts": 0, "delivered": 0, "failed": 0}

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="meritlens-alert-webhook", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def shutdown(self) -> None:
        """Stop between two deliveries; what is not acknowledged stays for the next start."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._con.close()

    def _run(self) -> None:
        with httpx.Client(timeout=self._config.timeout_s, follow_redirects=False) as client:
            while not self._stop.is_set():
                try:
                    wait_s = self.deliver_due(client)
                except Exception:  # noqa: BLE001 - the rows stay; the next round tries again
                    log.exception("delivering alert events failed")
                    wait_s = self._config.retry_s
                self._wake.wait(min(_IDLE_WAIT_S, wait_s))
                self._wake.clear()

    def deliver_due(self, client: httpx.Client) -> float:
        """Send every undelivered event that is due, each (rule, target)'s in order (one that is not due or
        fails holds the ones after it back). Returns the seconds until the next one is due."""
        waits, held = [_IDLE_WAIT_S], set()
        for event_id, key, body, attempts, next_us in _tables.pending(self._con):
            if self._stop.is_set():
                break
            now = self._clock()
            if key in held or next_us > now:
                held.add(key)
                waits.append(max(0.0, (next_us - now) / 1e6))
                continue
            error = self._post(client, event_id, body)
            attempts += 1
            now = self._clock()
            with self._write_lock, transaction(self._con):
                if error is None:
                    _tables.delivered(self._con, event_id, attempts, now)
                    log.info("alert event %s delivered (attempt %d)", event_id, attempts)
                else:
                    wait_s = min(self._config.retry_s * 2 ** (attempts - 1), self._config.max_retry_s)
                    _tables.failed(self._con, event_id, attempts, now + int(wait_s * 1e6), error)
                    held.add(key)
                    waits.append(wait_s)
                    log.warning("alert event %s not delivered (attempt %d, next in %.3g s): %s", event_id, attempts,
                                wait_s, error)
        return min(waits)

    def _post(self, client: httpx.Client, event_id: str, body: bytes) -> str | None:
        """None when the webhook acknowledged the event (2xx), else what went wrong."""
        self.stats["attempts"] += 1
        headers = {"Content-Type": "application/json", SIGNATURE_HEADER: signature(self._key, body),
                   EVENT_ID_HEADER: event_id, "User-Agent": "meritlens-alerts"}
        try:
            response = client.post(self._config.webhook_url, content=body, headers=headers)
        except httpx.HTTPError as exc:
            self.stats["failed"] += 1
            return f"{type(exc).__name__}: {exc}"
        if 200 <= response.status_code < 300:
            self.stats["delivered"] += 1
            return None
        self.stats["failed"] += 1
        return f"HTTP {response.status_code}"


__all__ = ["EVENT_ID_HEADER", "SIGNATURE_HEADER", "WebhookSender", "signature"]
