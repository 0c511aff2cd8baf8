"""Configuration keys and defaults of the collector: the one home of `MERITLENS_*` server settings."""

from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import dataclass, field

from meritlens.analytics.engine import DEFAULT_RELATIVE_ERROR, scale_for

ENV_LAKE = "MERITLENS_LAKE"
ENV_COLLECTOR_ID = "MERITLENS_COLLECTOR_ID"
ENV_DB = "MERITLENS_DB"
ENV_HOST = "MERITLENS_HOST"
ENV_HTTP_PORT = "MERITLENS_HTTP_PORT"
ENV_GRPC_PORT = "MERITLENS_GRPC_PORT"
ENV_MAX_BODY_BYTES = "MERITLENS_MAX_BODY_BYTES"
ENV_MAX_PENDING_BATCHES = "MERITLENS_MAX_PENDING_BATCHES"
ENV_MEMORY_LIMIT = "MERITLENS_MEMORY_LIMIT"
ENV_CHECKPOINT_WAL_BYTES = "MERITLENS_CHECKPOINT_WAL_BYTES"
ENV_DB_THREADS = "MERITLENS_DB_THREADS"
ENV_STAGE_SECONDS = "MERITLENS_STAGE_SECONDS"
ENV_MAX_SPANS_PER_REQUEST = "MERITLENS_MAX_SPANS_PER_REQUEST"
ENV_MAX_ATTRIBUTES = "MERITLENS_MAX_ATTRIBUTES"
ENV_MAX_ATTRIBUTE_BYTES = "MERITLENS_MAX_ATTRIBUTE_BYTES"
ENV_GRPC_MAX_CONCURRENT_RPCS = "MERITLENS_GRPC_MAX_CONCURRENT_RPCS"
ENV_TOKEN = "MERITLENS_TOKEN"
ENV_TOKEN_FILE = "MERITLENS_TOKEN_FILE"
ENV_TLS_CERT = "MERITLENS_TLS_CERT"
ENV_TLS_KEY = "MERITLENS_TLS_KEY"
ENV_TLS_CA = "MERITLENS_TLS_CA"
ENV_SQL_TIMEOUT = "MERITLENS_SQL_TIMEOUT"
ENV_SQL_MAX_ROWS = "MERITLENS_SQL_MAX_ROWS"
ENV_SHUTDOWN_TIMEOUT = "MERITLENS_SHUTDOWN_TIMEOUT"
ENV_QUANTILE_ERROR = "MERITLENS_QUANTILE_ERROR"
ENV_URL = "MERITLENS_URL"
ENV_TARGET_FALLBACK = "MERITLENS_TARGET_FALLBACK"

DEFAULT_DB = "meritlens.duckdb"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_HTTP_PORT = 4318
DEFAULT_GRPC_PORT = 4317
DEFAULT_MAX_BODY_BYTES = 20 * 1024 * 1024
DEFAULT_MAX_PENDING_BATCHES = 64
DEFAULT_MAX_SPANS_PER_REQUEST = 50_000
DEFAULT_MEMORY_LIMIT = 512 * 1024 * 1024
"""The anonymous memory the whole collector process may take (`MemoryBudget`, `MemoryLimiterConfig`)."""
PROCESS_MEMORY_BYTES = 80 * 1024 * 1024
"""The process's own anonymous memory beside its bounded parts: the interpreter, the imported libraries,
the threads and the event loop. A started idle collector holds 62 MiB (60 without gRPC), 67 after its
first export; the rest is room for the allocator's slack."""
MEMORY_SPIKE_DIVISOR = 8
"""The limiter's spike headroom is this part of the limit: exports are refused above the rest (the soft
limit). The anonymous memory rose by at most 50-75 MiB within 100 ms under 4-8 clients sending
1,000-10,000-span requests as fast as answered, in-flight requests included."""
ENV_MEMORY_SPIKE = "MERITLENS_MEMORY_SPIKE"
"""A larger spike headroom than `MEMORY_SPIKE_DIVISOR`'s: exports are refused sooner; the parts keep their shares."""
MEMORY_IN_FLIGHT_DIVISOR = 4
"""Requests being processed may hold this part of the limit (a quarter: 128MiB at the default)."""
DEFAULT_MEMORY_CHECK_INTERVAL_S = 0.1
"""How often the memory limiter reads the process's anonymous memory."""
SPAN_MEMORY_ESTIMATE_BYTES = 2048
"""Bytes charged to the in-flight share for each decoded span, on top of the body: decoded
protobuf, normalized columns and the Arrow batch together stay below this for small spans."""
DECODED_BYTES_PER_BODY_BYTE = 4
"""Bytes charged for each body byte instead, when more: a span's large attributes are copied by the
decoding, the normalized columns and the Arrow batch (measured 3.4-3.7x the body beside it)."""


def request_memory_bytes(body_bytes: int, spans: int) -> int:
    """What a request is charged in the in-flight share while it is processed."""
    return body_bytes + max(spans * SPAN_MEMORY_ESTIMATE_BYTES, DECODED_BYTES_PER_BODY_BYTE * body_bytes)


@dataclass(frozen=True)
class MemoryBudget:
    """`--memory-limit` split so that the whole process fits in it (docs/collector.md, "Memory"): the
    limiter's spike headroom (`MEMORY_SPIKE_DIVISOR`), the process itself (`PROCESS_MEMORY_BYTES`),
    the requests in flight (`MEMORY_IN_FLIGHT_DIVISOR`), and of the rest, each part counted at its cap
    from the start: 9/16 for DuckDB (its memory limit), 3/16 for the window state, 3/16 for the store's
    key locator and 1/16 for the window processor's filter of seen keys."""

    limit: int
    spike: int
    process: int
    in_flight: int
    duckdb: int
    window_state: int
    span_index: int
    key_filter: int

    @classmethod
    def of(cls, limit: int) -> "MemoryBudget":
        spike, in_flight = limit // MEMORY_SPIKE_DIVISOR, limit // MEMORY_IN_FLIGHT_DIVISOR
        rest = max(0, limit - spike - in_flight - PROCESS_MEMORY_BYTES)
        return cls(limit=limit, spike=spike, process=PROCESS_MEMORY_BYTES, in_flight=in_flight,
                   duckdb=rest * 9 // 16, window_state=rest * 3 // 16, span_index=rest * 3 // 16, key_filter=rest // 16)

    @classmethod
    def minimum(cls, request_bytes: int, duckdb_bytes: int) -> int:
        """The smallest limit, in whole MiB, whose in-flight share holds a request of ``request_bytes``
        and whose DuckDB share is at least ``duckdb_bytes``."""
        mib = 1024 * 1024
        fixed = PROCESS_MEMORY_BYTES + duckdb_bytes * 16 // 9
        kept = 1 - 1 / MEMORY_SPIKE_DIVISOR - 1 / MEMORY_IN_FLIGHT_DIVISOR
        limit = max(request_bytes * MEMORY_IN_FLIGHT_DIVISOR, int(fixed / kept)) // mib * mib
        while (budget := cls.of(limit)).in_flight < request_bytes or budget.duckdb < duckdb_bytes:
            limit += mib
        return limit

    @property
    def soft_limit(self) -> int:
        return self.limit - self.spike

    def limiter(self, spike: int | None = None,
                check_interval_s: float = DEFAULT_MEMORY_CHECK_INTERVAL_S) -> "MemoryLimiterConfig":
        """The limiter's settings: this budget's spike headroom, or a larger one."""
        return MemoryLimiterConfig(self.limit, spike or self.spike, check_interval_s)


@dataclass(frozen=True)
class MemoryLimiterConfig:
    """The memory limiter's settings (`collector/receive/_memory.py`): while the process's anonymous
    memory is above ``limit - spike`` (the soft limit), read every ``check_interval_s``, exports are refused."""

    limit: int
    spike: int
    check_interval_s: float = DEFAULT_MEMORY_CHECK_INTERVAL_S

    @property
    def soft_limit(self) -> int:
        return self.limit - self.spike

    def validate(self) -> None:
        """Raise SettingsError naming the first value that cannot work."""
        if self.limit <= 0:
            raise SettingsError(f"the memory limiter's limit must be positive, got {self.limit}")
        if not 0 < self.spike < self.limit:
            raise SettingsError(f"the memory limiter's spike headroom must be positive and below its limit"
                                f" ({self.limit}), got {self.spike}")
        if not 0.001 <= self.check_interval_s <= 10:
            raise SettingsError(f"the memory limiter's check interval must be between 0.001 and 10 seconds,"
                                f" got {self.check_interval_s}")


_DEFAULT_BUDGET = MemoryBudget.of(DEFAULT_MEMORY_LIMIT)
DEFAULT_WINDOW_MEMORY_BYTES = _DEFAULT_BUDGET.window_state
"""Window processor state kept in memory; beyond it, least recently written targets are rebuilt on demand."""
DEFAULT_WINDOW_LAG_ROWS = 50_000
"""Committed span rows that may wait for the window processor; appends wait beyond it (bounds memory)."""
DEFAULT_WINDOW_GATHER_S = 1.0
"""How long the window thread lets committed batches gather before a pass (a waiting query ends it early)."""
ROW_GROUP_ROWS = 16_384
"""Rows per row group of the DuckDB file the collector writes (DuckDB's own default: 122,880). An INSERT
of at least a row group's rows is written to the file compressed at once (DuckDB's optimistic write);
smaller ones wait in DuckDB's memory, uncompressed, until the next checkpoint: with 122,880-row groups
a whole write-ahead log's rows did (~68 MiB at 64MiB). Staged moves of whole row groups
(`DEFAULT_STAGE_MOVE_ROWS`) keep DuckDB's memory and the insert CPU down, for a file ~1.2x as large."""
DEFAULT_STAGE_MOVE_ROWS = ROW_GROUP_ROWS
"""Staged span rows (acknowledged, durable in the staging log) that make the writer store them in
DuckDB at once; such a move stores whole row groups and leaves the rest staged (`ROW_GROUP_ROWS`)."""
DEFAULT_STAGE_MOVE_S = 2.0
"""How long acknowledged rows wait in the staging log before the writer stores them in DuckDB in one
INSERT (a query waiting for them ends it early); DuckDB's per-statement cost is shared by their requests.
Long enough for 10k spans/s to fill a row group (`ROW_GROUP_ROWS`) first."""
DEFAULT_QUERY_WAIT_S = 10.0
"""How long a query waits for the windows to include the spans committed before it."""
REBUILD_POOL_BYTES_PER_ROW = 2048
"""DuckDB pool memory a window rebuild plans per scoped row (an application span counts once, and
once more when it has an assessment): it reads DuckDB's memory limit / this many rows per statement.
The per-task aggregation does not spill; measured on one-span tasks, 150k rows fit in 128MiB and 187k
did not (~0.7-0.9 KiB a row)."""
MIN_REBUILD_ROWS_PER_PARTITION = 10_000
DEFAULT_KEY_FILTER_BYTES = _DEFAULT_BUDGET.key_filter
"""Largest size of the filter of seen trace/task keys: it grows with its keys (~4 bytes a key) up to
this size; past it more keys only cost more reads of stored spans."""
DEFAULT_SPAN_INDEX_BYTES = _DEFAULT_BUDGET.span_index
"""Largest size of the locator of stored span, trace and task keys (more keys only cost larger reads).
Its blocks fill as spans arrive (~6 bytes a span)."""
DEFAULT_DB_MEMORY_BYTES = _DEFAULT_BUDGET.duckdb
"""DuckDB's memory limit (its buffer pool; larger operations spill to a temporary directory). DuckDB
keeps the blocks it writes and reads cached up to this limit, so a long-running collector's memory
grows towards it. A larger limit makes large ad-hoc queries and the start-up rebuild faster."""
DEFAULT_CHECKPOINT_WAL_BYTES = 64 * 1024 * 1024
"""Write-ahead log size at which DuckDB checkpoints the file (its own default is 16MiB). Each
checkpoint compresses the row group still being filled again, so checkpointing less often costs less
CPU per stored span (1000-span inserts: ~11 µs a span at 16MiB, ~8 at 64MiB, ~6.6 at 256MiB); the WAL
on disk and its replay after a crash grow with it."""
DEFAULT_DB_THREADS = 1
"""DuckDB's worker threads in `meritlens serve` (DuckDB's own default: one per core). The collector's
statements are small (a 1000-span insert, a window pass), and handing them to a second thread cost
a few points of a core with no gain in throughput; large user queries and the start-up rebuild
run ~1.3-1.9x slower on one thread of a 2-core machine."""
DEFAULT_MAX_ATTRIBUTES = 1024
DEFAULT_MAX_ATTRIBUTE_BYTES = 1024 * 1024
DEFAULT_GRPC_MAX_CONCURRENT_RPCS = 16
DEFAULT_SQL_TIMEOUT_S = 30.0
DEFAULT_SQL_MAX_ROWS = 10_000
DEFAULT_SHUTDOWN_TIMEOUT_S = 10.0
"""How long a graceful stop (SIGTERM) may take; requests in progress get up to half of it."""
DEFAULT_URL = f"http://{DEFAULT_HOST}:{DEFAULT_HTTP_PORT}"
DEFAULT_TARGET_FALLBACK = "{service.name}/{model}"
TARGET_FALLBACK_OFF = "none"

RETRY_AFTER_SECONDS = 1
"""What an overloaded collector tells clients to wait (HTTP Retry-After, gRPC RetryInfo)."""

TRACES_PATH = "/v1/traces"
SQL_PATH = "/api/sql"
READINESS_PATH = "/api/readiness"
EXPERIMENTS_PATH = "/api/experiments"
"""POST an experiment manifest {"manifest": {...}} to create or update it."""
HEALTH_PATH = "/healthz"
WINDOWS_PATH = "/api/windows"
WINDOWS_RANGE_PATH = "/api/windows/range"
"""POST {"since_us", "until_us", "target", "scope"}: the windows of a time range (from the windows by time)."""
"""POST evaluated windows {"windows": [...]} (written by `meritlens evaluate` when a collector holds the file)."""
GRPC_TRACE_SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"


class SettingsError(ValueError):
    """A setting is invalid; the message names it and says why."""

# The dashboard page, the read-only JSON endpoints it reads, and the Arrow export endpoint
# (collector/serve/_dashboard.py).
DASHBOARD_PATH = "/"
STATIC_PATH_PREFIX = "/static/"
"""The page and its static files carry no data: they are served without the bearer token."""
API_TARGETS_PATH = "/api/dashboard/targets"
API_WINDOWS_PATH = "/api/dashboard/windows"
API_TASKS_PATH = "/api/dashboard/tasks"
API_PROFILES_PATH = "/api/dashboard/profiles"
API_ARROW_PATH = "/api/arrow"
ARROW_STREAM_MEDIA_TYPE = "application/vnd.apache.arrow.stream"
ARROW_ROW_COUNT_HEADER = "X-Meritlens-Row-Count"


def address_file(db: str) -> str:
    """Where a running collector writes its URL, so that commands given only --db can find it."""
    return db + ".collector"


def staging_path(db: str) -> str:
    """The collector's staging log of the DuckDB file ``db``: acknowledged spans not yet in the file."""
    return db + ".staged"


_SIZE = re.compile(r"^\s*(\d+)\s*([kmg]i?b?|b)?\s*$", re.IGNORECASE)
_SIZE_FACTORS = {"": 1, "b": 1, "k": 1024, "m": 1024**2, "g": 1024**3}


def parse_bytes(raw: str | int, name: str = "size") -> int:
    """A byte count: a plain integer or one with a K/M/G suffix (binary: 1K = 1024), e.g. `20MiB`."""
    if isinstance(raw, int):
        return raw
    match = _SIZE.match(raw)
    if not match:
        raise SettingsError(f"{name}={raw!r} is not a byte count (e.g. 1048576, 512KiB, 20MiB, 1GiB)")
    unit = (match.group(2) or "").lower()[:1]
    return int(match.group(1)) * _SIZE_FACTORS[unit]


def _mib(n: int) -> str:
    return f"{n / 2**20:.4g}MiB"


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise SettingsError(f"{name}={raw!r} is not an integer") from None


def _env_bytes(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    return parse_bytes(raw, name)


def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return float(raw)
    except ValueError:
        raise SettingsError(f"{name}={raw!r} is not a number") from None


def _env_str(name: str) -> str | None:
    return os.environ.get(name) or None


def resolve_token(token: str | None = None, token_file: str | None = None) -> str | None:
    """The bearer token from an explicit value or a file (first line, whitespace stripped), else
    from `MERITLENS_TOKEN` / `MERITLENS_TOKEN_FILE`; None when none is configured."""
    if token is None and token_file is None:
        token, token_file = _env_str(ENV_TOKEN), _env_str(ENV_TOKEN_FILE)
    if token and token_file:
        raise SettingsError("give a token or a token file, not both")
    if token_file:
        try:
            with open(token_file, encoding="utf-8") as fh:
                token = fh.readline().strip()
        except OSError as exc:
            raise SettingsError(f"cannot read token file {token_file}: {exc.strerror or exc}") from None
        if not token:
            raise SettingsError(f"token file {token_file} is empty")
    if token is not None:
        token = token.strip()
        if not token:
            return None
        if any(ch.isspace() or not ch.isprintable() for ch in token):
            raise SettingsError("the token must be printable characters without spaces")
    return token or None


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` keeps the collector reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass
class ServerSettings:
    """Everything `meritlens serve` can be told; each field also reads a `MERITLENS_*` variable."""

    db: str = field(default_factory=lambda: os.environ.get(ENV_DB) or DEFAULT_DB)
    host: str = field(default_factory=lambda: os.environ.get(ENV_HOST) or DEFAULT_HOST)
    http_port: int = field(default_factory=lambda: _env_int(ENV_HTTP_PORT, DEFAULT_HTTP_PORT))
    grpc_port: int | None = field(default_factory=lambda: _env_int(ENV_GRPC_PORT, DEFAULT_GRPC_PORT))
    """None (or a negative number) turns the gRPC receiver off; 0 picks a free port."""
    max_body_bytes: int = field(default_factory=lambda: _env_bytes(ENV_MAX_BODY_BYTES, DEFAULT_MAX_BODY_BYTES))
    target_fallback: str = field(
        default_factory=lambda: os.environ.get(ENV_TARGET_FALLBACK) or DEFAULT_TARGET_FALLBACK
    )
    """Template naming the target of LLM-call spans that carry none; "none" turns it off."""
    max_pending_batches: int = field(
        default_factory=lambda: _env_int(ENV_MAX_PENDING_BATCHES, DEFAULT_MAX_PENDING_BATCHES)
    )
    max_spans_per_request: int = field(
        default_factory=lambda: _env_int(ENV_MAX_SPANS_PER_REQUEST, DEFAULT_MAX_SPANS_PER_REQUEST)
    )
    memory_limit: int = field(default_factory=lambda: _env_bytes(ENV_MEMORY_LIMIT, DEFAULT_MEMORY_LIMIT))
    """The anonymous memory the whole process may take (`memory_budget`)."""
    memory_spike: int | None = field(default_factory=lambda: _env_bytes(ENV_MEMORY_SPIKE, 0) or None)
    """The memory limiter's spike headroom, when larger than its share of the limit (`memory_limiter`)."""
    checkpoint_wal_bytes: int = field(
        default_factory=lambda: _env_bytes(ENV_CHECKPOINT_WAL_BYTES, DEFAULT_CHECKPOINT_WAL_BYTES)
    )
    db_threads: int = field(default_factory=lambda: _env_int(ENV_DB_THREADS, DEFAULT_DB_THREADS))
    stage_s: float = field(default_factory=lambda: _env_float(ENV_STAGE_SECONDS, DEFAULT_STAGE_MOVE_S))
    """How long acknowledged spans may wait in the staging log before they are stored in DuckDB;
    0 stores every export in DuckDB before answering it."""
    max_attributes: int = field(default_factory=lambda: _env_int(ENV_MAX_ATTRIBUTES, DEFAULT_MAX_ATTRIBUTES))
    max_attribute_bytes: int = field(
        default_factory=lambda: _env_bytes(ENV_MAX_ATTRIBUTE_BYTES, DEFAULT_MAX_ATTRIBUTE_BYTES)
    )
    grpc_max_concurrent_rpcs: int = field(
        default_factory=lambda: _env_int(ENV_GRPC_MAX_CONCURRENT_RPCS, DEFAULT_GRPC_MAX_CONCURRENT_RPCS)
    )
    token: str | None = field(default_factory=resolve_token)
    tls_cert: str | None = field(default_factory=lambda: _env_str(ENV_TLS_CERT))
    tls_key: str | None = field(default_factory=lambda: _env_str(ENV_TLS_KEY))
    sql_timeout_s: float = field(default_factory=lambda: _env_float(ENV_SQL_TIMEOUT, DEFAULT_SQL_TIMEOUT_S))
    sql_max_rows: int = field(default_factory=lambda: _env_int(ENV_SQL_MAX_ROWS, DEFAULT_SQL_MAX_ROWS))
    shutdown_timeout_s: float = field(
        default_factory=lambda: _env_float(ENV_SHUTDOWN_TIMEOUT, DEFAULT_SHUTDOWN_TIMEOUT_S)
    )
    quantile_error: float = field(default_factory=lambda: _env_float(ENV_QUANTILE_ERROR, DEFAULT_RELATIVE_ERROR))
    """Bound on the relative error of the quantiles of windows beyond the exact range."""

    profiles: tuple[str, ...] = ()
    """Task profiles (TOML files, or directories of them) the dashboard checks readiness against."""
    lake: str | None = field(default_factory=lambda: _env_str(ENV_LAKE))
    """A span lake (directory or pyarrow filesystem URI): spans go there as Parquet segments, not into ``db``."""
    collector_id: str | None = field(default_factory=lambda: _env_str(ENV_COLLECTOR_ID))
    """This collector's name on the lake (its segments' prefix); default: the host name."""

    def memory_budget(self) -> "MemoryBudget":
        return MemoryBudget.of(self.memory_limit)

    def memory_limiter(self) -> "MemoryLimiterConfig":
        return self.memory_budget().limiter(self.memory_spike)

    def db_memory_floor(self) -> int:
        """DuckDB keeps the rows written since its last checkpoint in memory (up to the checkpoint WAL
        bytes) and needs as much again for the rows being stored (`IngestPipeline`'s move bytes)."""
        return 2 * self.checkpoint_wal_bytes

    @property
    def tls(self) -> bool:
        return bool(self.tls_cert)

    @property
    def grpc_enabled(self) -> bool:
        return self.grpc_port is not None and self.grpc_port >= 0

    def worst_case_request_bytes(self) -> int:
        """What one admissible request can charge to the in-flight share."""
        return request_memory_bytes(self.max_body_bytes, self.max_spans_per_request)

    def validate(self) -> None:
        """Raise SettingsError naming the first setting that cannot work."""
        positive = {
            "max body bytes": self.max_body_bytes,
            "max pending batches": self.max_pending_batches,
            "max spans per request": self.max_spans_per_request,
            "max attributes": self.max_attributes,
            "max attribute bytes": self.max_attribute_bytes,
            "gRPC max concurrent RPCs": self.grpc_max_concurrent_rpcs,
            "SQL max rows": self.sql_max_rows,
            "memory limit": self.memory_limit,
            "checkpoint WAL bytes": self.checkpoint_wal_bytes,
            "DuckDB threads": self.db_threads,
        }
        for name, value in positive.items():
            if value <= 0:
                raise SettingsError(f"{name} must be positive, got {value}")
        request = self.worst_case_request_bytes()
        minimum = MemoryBudget.minimum(request, self.db_memory_floor())
        if self.memory_limit < minimum:
            raise SettingsError(
                f"the memory limit must be at least {minimum >> 20}MiB, got {_mib(self.memory_limit)}: a quarter"
                f" of it holds the requests in flight, one of them up to {_mib(request)} (max body bytes"
                f" {self.max_body_bytes}, max spans per request {self.max_spans_per_request}), and DuckDB needs"
                f" twice the checkpoint WAL bytes ({_mib(self.db_memory_floor())}) of the rest")
        if self.memory_spike is not None and self.memory_spike < self.memory_budget().spike:
            raise SettingsError(f"{ENV_MEMORY_SPIKE} must be at least an eighth of the memory limit"
                                f" ({_mib(self.memory_budget().spike)}), got {_mib(self.memory_spike)}")
        self.memory_limiter().validate()
        try:
            scale_for(self.quantile_error)
        except ValueError as exc:
            raise SettingsError(str(exc)) from None
        if not 0 <= self.stage_s <= 60:
            raise SettingsError(f"stage seconds must be between 0 and 60, got {self.stage_s}")
        if self.sql_timeout_s <= 0 or self.shutdown_timeout_s < 0:
            raise SettingsError("the SQL timeout must be positive and the shutdown timeout not negative")
        for name, port in (("HTTP port", self.http_port), ("gRPC port", self.grpc_port)):
            if port is not None and port > 65535:
                raise SettingsError(f"{name} {port} is not a TCP port")
        if self.http_port < 0:
            raise SettingsError(f"HTTP port {self.http_port} is not a TCP port")
        if bool(self.tls_cert) != bool(self.tls_key):
            raise SettingsError("TLS needs both a certificate (--tls-cert) and its key (--tls-key)")
        for name, path in (("TLS certificate", self.tls_cert), ("TLS key", self.tls_key)):
            if path and not os.access(path, os.R_OK):
                raise SettingsError(f"{name} {path} is not a readable file")
