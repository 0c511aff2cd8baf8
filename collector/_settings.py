"""Configuration keys and defaults of the collector: the one home of `MERITLENS_*` server settings."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

ENV_DB = "MERITLENS_DB"
ENV_HOST = "MERITLENS_HOST"
ENV_HTTP_PORT = "MERITLENS_HTTP_PORT"
ENV_GRPC_PORT = "MERITLENS_GRPC_PORT"
ENV_MAX_BODY_BYTES = "MERITLENS_MAX_BODY_BYTES"
ENV_MAX_PENDING_BATCHES = "MERITLENS_MAX_PENDING_BATCHES"
ENV_URL = "MERITLENS_URL"
ENV_TARGET_FALLBACK = "MERITLENS_TARGET_FALLBACK"

DEFAULT_DB = "meritlens.duckdb"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_HTTP_PORT = 4318
DEFAULT_GRPC_PORT = 4317
DEFAULT_MAX_BODY_BYTES = 20 * 1024 * 1024
DEFAULT_MAX_PENDING_BATCHES = 64
DEFAULT_URL = f"http://{DEFAULT_HOST}:{DEFAULT_HTTP_PORT}"
DEFAULT_TARGET_FALLBACK = "{service.name}/{model}"
TARGET_FALLBACK_OFF = "none"

TRACES_PATH = "/v1/traces"
SQL_PATH = "/api/sql"
READINESS_PATH = "/api/readiness"
EXPERIMENTS_PATH = "/api/experiments"
"""POST an experiment manifest {"manifest": {...}} to create or update it."""
HEALTH_PATH = "/healthz"


def address_file(db: str) -> str:
    """Where a running collector writes its URL, so that commands given only --db can find it."""
    return db + ".collector"


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not an integer") from None


@dataclass
class ServerSettings:
    """Everything `meritlens serve` can be told; each field also reads a `MERITLENS_*` variable."""

    db: str = field(default_factory=lambda: os.environ.get(ENV_DB) or DEFAULT_DB)
    host: str = field(default_factory=lambda: os.environ.get(ENV_HOST) or DEFAULT_HOST)
    http_port: int = field(default_factory=lambda: _env_int(ENV_HTTP_PORT, DEFAULT_HTTP_PORT))
    grpc_port: int = field(default_factory=lambda: _env_int(ENV_GRPC_PORT, DEFAULT_GRPC_PORT))
    max_body_bytes: int = field(default_factory=lambda: _env_int(ENV_MAX_BODY_BYTES, DEFAULT_MAX_BODY_BYTES))
    target_fallback: str = field(
        default_factory=lambda: os.environ.get(ENV_TARGET_FALLBACK) or DEFAULT_TARGET_FALLBACK
    )
    """Template naming the target of LLM-call spans that carry none; "none" turns it off."""
    max_pending_batches: int = field(
        default_factory=lambda: _env_int(ENV_MAX_PENDING_BATCHES, DEFAULT_MAX_PENDING_BATCHES)
    )
