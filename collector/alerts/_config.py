"""The alert component's configuration: one dataclass, validated where the server settings are."""

from __future__ import annotations

import re
from dataclasses import dataclass

DEFAULT_ALERT_INTERVAL_S = 30.0
"""How often the alert rules are evaluated without a window update (a no-data rule, a new range)."""
DEFAULT_ALERT_RETRY_S = 1.0
"""The first wait before a failed webhook delivery is retried; each further failure doubles it."""
MAX_ALERT_RETRY_S = 600.0
"""The longest wait between two deliveries of an event."""
DEFAULT_ALERT_TIMEOUT_S = 10.0
"""How long one webhook delivery may take before it counts as failed."""


@dataclass(frozen=True)
class AlertConfig:
    """The alert rules' evaluation and webhook delivery (collector/alerts): the URL events are POSTed
    to (None: none), the file whose contents sign them, how often rules are evaluated without a window
    update, and the first and the longest wait between attempts of a delivery."""

    webhook_url: str | None = None
    secret_file: str | None = None
    interval_s: float = DEFAULT_ALERT_INTERVAL_S
    retry_s: float = DEFAULT_ALERT_RETRY_S
    max_retry_s: float = MAX_ALERT_RETRY_S
    timeout_s: float = DEFAULT_ALERT_TIMEOUT_S

    def validate(self) -> None:
        """Raise ValueError naming the first value that cannot work (a `SettingsError` to `serve`)."""
        url = self.webhook_url
        if url is not None and not re.match(r"^https?://[^/\s]+", url):
            raise ValueError(f"the alert webhook URL must be an http:// or https:// URL, got {url!r}")
        if url is not None and self.secret_file is None:
            raise ValueError("an alert webhook needs --alert-webhook-secret-file: its deliveries are signed")
        if self.secret_file is not None:
            self.secret()
        if not 0.1 <= self.interval_s <= 3600:
            raise ValueError(f"the alert interval must be between 0.1 and 3600 seconds, got {self.interval_s}")
        if not 0.01 <= self.retry_s <= self.max_retry_s:
            raise ValueError(f"the first alert retry wait must be between 0.01 and {self.max_retry_s:g} seconds,"
                                f" got {self.retry_s}")

    def secret(self) -> bytes:
        """The signing key: the secret file's contents without the line end."""
        try:
            with open(self.secret_file, "rb") as fh:
                key = fh.read().rstrip(b"\r\n")
        except OSError as exc:
            raise ValueError(f"cannot read the alert webhook secret file {self.secret_file}:"
                                f" {exc.strerror or exc}") from None
        if not key:
            raise ValueError(f"the alert webhook secret file {self.secret_file} is empty")
        return key
