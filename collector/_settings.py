"""Configuration keys and defaults of the collector: the one home of `MERITLENS_*` server settings."""

from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import dataclass, field, fields

from meritlens.analytics.engine import DEFAULT_RELATIVE_ERROR, scale_for
from meritlens.collector.alerts._config import AlertConfig

ENV_URL = "MERITLENS_URL"
"""The collector the commands go through when given no --db (the commands' side only)."""
ENV_TLS_CA = "MERITLENS_TLS_CA"
"""The CA file the commands trust for an https collector (the commands' side only)."""

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
    def of(cls, limit: int) -> MemoryBudget:
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
                check_interval_s: float = DEFAULT_MEMORY_CHECK_INTERVAL_S) -> MemoryLimiterConfig:
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
SHUTDOWN_WINDOW_ROWS = 20_000
"""At a graceful stop, a backlog of at most this many committed span rows is windowed before the state is
saved (about a second's pass); a larger one is left to the next start, which follows it from the spans."""
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


class SettingsError(ValueError):
    """A setting is invalid; the message names it and says why."""


def address_file(db: str) -> str:
    """Where a running collector writes its URL, so that commands given only --db can find it."""
    return db + ".collector"


ARCHIVE_OFF = "none"
"""`--archive none`: spans past the retention horizon are dropped."""


def default_archive(db: str) -> str:
    """Where a collector of the DuckDB file ``db`` moves spans past its retention horizon by default."""
    return db + ".archive"


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


def _seconds(raw: str) -> float:
    from meritlens.analytics.engine import parse_duration  # its module loads numpy: on use, not at start

    return parse_duration(raw).total_seconds()


def _mib(n: int) -> str:
    return f"{n / 2**20:.4g}MiB"


def _parse_int(raw: str) -> int:
    return int(raw)


def _parse_float(raw: str) -> float:
    return float(raw)


_KINDS: dict[str, tuple] = {
    "str": (str, None),
    "int": (_parse_int, "an integer"),
    "float": (_parse_float, "a number"),
    "bytes": (None, None),  # parse_bytes names the forms it takes
    "duration": (_seconds, "a duration such as 30s, 30m, 24h, 7d or 2w"),
}


@dataclass(frozen=True)
class Setting:
    """One server setting, declared once: its option (``flag``), its environment variable (named
    after the option: ``--http-port`` reads `MERITLENS_HTTP_PORT`), its default, how a value is read
    (``kind``: str, int, float or bytes, e.g. `20MiB`) and its help. ``shown``: how the default reads
    in the help, when not as written; ``hidden``: set by its variable only (no option in the help)."""

    flag: str
    default: object
    help: str
    kind: str = "str"
    shown: str | None = None
    hidden: bool = False

    @property
    def env(self) -> str:
        return "MERITLENS_" + self.flag.removeprefix("--").upper().replace("-", "_")

    @property
    def default_text(self) -> str | None:
        """The default as the help shows it (None: no default to show)."""
        if self.shown is not None or self.default is None:
            return self.shown
        if self.kind == "bytes":
            return _mib(self.default)
        return f"{self.default:g}" if self.kind == "float" else str(self.default)

    def parse(self, raw, name: str | None = None):
        """``raw`` (a string from an option or the environment) as this setting's value; SettingsError
        names it as ``name`` (default: its variable) when it is not one."""
        if not isinstance(raw, str):
            return raw
        name = name or self.env
        if self.kind == "bytes":
            return parse_bytes(raw, name)
        parse, what = _KINDS[self.kind]
        try:
            return parse(raw.strip() if what else raw)
        except ValueError:
            raise SettingsError(f"{name}={raw!r} is not {what}") from None


def setting(flag: str, default: object, help: str, **details):
    """A `ServerSettings` field declared by its `Setting`."""
    return field(default=default, metadata={"setting": Setting(flag, default, help, **details)})


def resolve_token(token: str | None = None, token_file: str | None = None) -> str | None:
    """The bearer token from an explicit value or a file (first line, whitespace stripped), else
    from `MERITLENS_TOKEN` / `MERITLENS_TOKEN_FILE`; None when none is configured."""
    if token is None and token_file is None:
        token, token_file = (os.environ.get(SETTINGS[name].env) or None for name in ("token", "token_file"))
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
    """Everything `meritlens serve` can be told: each field a `Setting`, read from its option
    (collector/cli/_serve.py) or its `MERITLENS_*` variable (`from_env`)."""

    db: str = setting("--db", DEFAULT_DB, "DuckDB file.")
    host: str = setting("--host", DEFAULT_HOST, "Bind address of both receivers. A non-loopback address "
                        "without a token logs a warning.")
    http_port: int = setting("--http-port", DEFAULT_HTTP_PORT, "OTLP/HTTP and SQL port; 0 picks a free one.",
                             kind="int")
    grpc_port: int | None = setting("--grpc-port", DEFAULT_GRPC_PORT, "OTLP/gRPC port; 0 picks a free one.",
                                    kind="int")
    """None (or a negative number) turns the gRPC receiver off; 0 picks a free port."""
    token: str | None = setting("--token", None, "Bearer token every endpoint requires; prefer --token-file.")
    token_file: str | None = setting("--token-file", None, "File whose first line is the bearer token.")
    """Read into the token by `bearer_token` (not both)."""
    tls_cert: str | None = setting("--tls-cert", None, "PEM certificate (chain) for HTTPS and gRPC TLS.")
    tls_key: str | None = setting("--tls-key", None, "PEM private key of --tls-cert.")
    max_body_bytes: int = setting("--max-body-bytes", DEFAULT_MAX_BODY_BYTES, "Largest request after "
                                  "decompression, e.g. 20MiB.", kind="bytes")
    memory_limit: int = setting(
        "--memory-limit", DEFAULT_MEMORY_LIMIT, "The anonymous memory the whole process may take, e.g. 1GiB; above "
        "all but an eighth of it exports get 503/UNAVAILABLE until it falls. A quarter holds the requests in flight; "
        "the rest is split among the process, DuckDB's buffer pool (larger operations spill to disk), the window "
        "state and the key filters (docs/collector.md).", kind="bytes")
    """The anonymous memory the whole process may take (`memory_budget`)."""
    memory_spike: int | None = setting(
        "--memory-spike", None, "The memory limiter's spike headroom, when larger than an eighth of --memory-limit: "
        "exports are refused sooner; the parts keep their shares.", kind="bytes", hidden=True)
    """The memory limiter's spike headroom, when larger than its share of the limit (`memory_limiter`)."""
    checkpoint_wal_bytes: int = setting(
        "--checkpoint-wal-bytes", DEFAULT_CHECKPOINT_WAL_BYTES, "Write-ahead log size at which DuckDB checkpoints "
        "the file; larger: less CPU per span, a larger WAL to replay after a crash.", kind="bytes")
    db_threads: int = setting(
        "--db-threads", DEFAULT_DB_THREADS, "DuckDB's worker threads; more make large SQL queries and the start-up "
        "rebuild faster and cost the collector's small statements CPU.", kind="int")
    stage_s: float = setting(
        "--stage-seconds", DEFAULT_STAGE_MOVE_S, "How long acknowledged spans may wait in the staging log (forced to "
        "disk next to the DuckDB file) before one INSERT stores them in DuckDB; 0 stores each export in DuckDB "
        "before answering it, at ~2x the writer's CPU.", kind="float")
    max_pending_batches: int = setting("--max-pending-batches", DEFAULT_MAX_PENDING_BATCHES,
                                       "Batches waiting for the writer.", kind="int")
    max_spans_per_request: int = setting(
        "--max-spans-per-request", DEFAULT_MAX_SPANS_PER_REQUEST, "Spans one export may carry; a larger one is "
        "refused whole (400/INVALID_ARGUMENT).", kind="int")
    max_attributes: int = setting("--max-attributes", DEFAULT_MAX_ATTRIBUTES, "Attributes per span, event, link "
                                  "or resource; a span over it is refused.", kind="int")
    max_attribute_bytes: int = setting("--max-attribute-bytes", DEFAULT_MAX_ATTRIBUTE_BYTES, "Longest string/bytes "
                                       "value, key or name; a span over it is refused.", kind="bytes")
    grpc_max_concurrent_rpcs: int = setting(
        "--grpc-max-concurrent-rpcs", DEFAULT_GRPC_MAX_CONCURRENT_RPCS, "gRPC exports handled at once; a call beyond "
        "it is answered UNAVAILABLE before its message is read.", kind="int")
    sql_timeout_s: float = setting("--sql-timeout", DEFAULT_SQL_TIMEOUT_S, "Seconds before a SQL query is "
                                   "interrupted.", kind="float")
    sql_max_rows: int = setting("--sql-max-rows", DEFAULT_SQL_MAX_ROWS, "Rows a SQL response holds at most.",
                                kind="int")
    target_fallback: str = setting(
        "--target-fallback", DEFAULT_TARGET_FALLBACK, "Target ID for LLM-call spans that carry none, from "
        "{service.name}, {model}, {provider}, {scope}; 'none' turns it off.")
    """Template naming the target of LLM-call spans that carry none; "none" turns it off."""
    redact: str | None = setting(
        "--redact", None, "A redaction policy (TOML: docs/redaction.md) applied to every span before it is stored: "
        "attributes dropped by key, patterns masked, values hashed; an invalid policy refuses to start.")
    """The redaction policy file (`collector/process/_redact.py`); None: spans are stored as received."""
    shutdown_timeout_s: float = setting(
        "--shutdown-timeout", DEFAULT_SHUTDOWN_TIMEOUT_S, "Seconds a graceful stop (SIGTERM) may take; requests in "
        "progress get up to half of it.", kind="float")
    quantile_error: float = setting(
        "--quantile-error", DEFAULT_RELATIVE_ERROR, "Bound on the relative error of min, max and p50-p99 of windows "
        "of more than 1,000 samples (fewer are exact); smaller costs more memory per window.", kind="float")
    """Bound on the relative error of the quantiles of windows beyond the exact range."""
    lake: str | None = setting(
        "--lake", None, "Store spans as Parquet segments in this lake (a directory or URI shared with other "
        "collectors) instead of --db; its windows come from `meritlens lake windows`.")
    """A span lake (directory or pyarrow filesystem URI): spans go there as Parquet segments, not into ``db``."""
    retain_s: float | None = setting(
        "--retain", None, "Keep spans in DuckDB for this long after they were received (30d, 12h, 90s; off by "
        "default), then move them to --archive; the windows keep counting them (docs/operations.md).",
        kind="duration")
    """Seconds a span stays in DuckDB after its received_at; None keeps every span there."""
    archive: str | None = setting(
        "--archive", None, "Where --retain moves spans: a directory or a pyarrow filesystem URI (Parquet segments "
        "in the lake layout), or 'none' to drop them (windows can then no longer be recomputed).",
        shown="DB.archive, beside the DuckDB file")
    """The archive's location (`archive_location`); "none" drops moved spans."""
    collector_id: str | None = setting("--collector-id", None, "This collector's name on the lake, unique among "
                                       "its collectors.", shown="the host name")
    """This collector's name on the lake (its segments' prefix); default: the host name."""
    alert_webhook_url: str | None = setting(
        "--alert-webhook-url", None, "POST each alert event (fired, resolved) of the profiles' rules here as JSON, "
        "at least once, retried with backoff (docs/alerts.md).")
    alert_webhook_secret_file: str | None = setting(
        "--alert-webhook-secret-file", None, "File whose contents are the HMAC-SHA256 key signing each alert "
        "delivery (header X-Meritlens-Signature).")
    alert_interval_s: float = setting(
        "--alert-interval", AlertConfig.interval_s, "Seconds between evaluations of the alert rules when no "
        "window changes (no-data rules, a new range).", kind="float")
    alert_retry_s: float = setting(
        "--alert-retry", AlertConfig.retry_s, "Seconds before a failed alert delivery is tried again; doubled after "
        "each failure, up to 10 minutes.", kind="float")

    profiles: tuple[str, ...] = ()
    """Task profiles (TOML files, or directories of them): the dashboard checks readiness against them,
    and the collector evaluates their alert rules."""

    @classmethod
    def declared(cls) -> dict[str, Setting]:
        """Every field's `Setting`, by field name."""
        return {f.name: f.metadata["setting"] for f in fields(cls) if "setting" in f.metadata}

    @classmethod
    def from_env(cls, environ=None, **given) -> ServerSettings:
        """Settings from the ``given`` values, else from their `MERITLENS_*` variables (empty: unset),
        else their defaults. Raises SettingsError naming a variable that holds no such value."""
        environ = os.environ if environ is None else environ
        for name, declared in cls.declared().items():
            raw = environ.get(declared.env)
            if name not in given and raw:
                given[name] = declared.parse(raw)
        return cls(**given)

    def archive_location(self) -> str | None:
        """Where the store moves spans (`SpanStore`'s ``archive``): the --archive given ('none' drops
        them), else with --retain a directory beside the DuckDB file; None: where earlier moves went."""
        if self.archive is not None:
            return ARCHIVE_OFF if self.archive.strip().lower() == ARCHIVE_OFF else self.archive
        return default_archive(self.db) if self.retain_s is not None else None

    def bearer_token(self) -> str | None:
        """The token every endpoint requires (`resolve_token` of the token or its file); None: no token."""
        if self.token is None and self.token_file is None:
            return None
        return resolve_token(self.token, self.token_file)

    def alert_config(self) -> AlertConfig:
        return AlertConfig(self.alert_webhook_url, self.alert_webhook_secret_file, self.alert_interval_s,
                           self.alert_retry_s)

    def memory_budget(self) -> MemoryBudget:
        return MemoryBudget.of(self.memory_limit)

    def memory_limiter(self) -> MemoryLimiterConfig:
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
        self.bearer_token()
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
        if self.memory_spike and self.memory_spike < self.memory_budget().spike:
            raise SettingsError(f"{SETTINGS['memory_spike'].env} must be at least an eighth of the memory limit"
                                f" ({_mib(self.memory_budget().spike)}), got {_mib(self.memory_spike)}")
        self.memory_limiter().validate()
        try:
            self.alert_config().validate()
        except ValueError as exc:
            raise SettingsError(str(exc)) from None
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
        if self.lake and self.retain_s is not None:
            raise SettingsError("--retain is not offered with --lake: a lake's segments are removed by deleting"
                                " old files under its spans/ directory (docs/operations.md)")
        if self.retain_s is not None and self.retain_s <= 0:
            raise SettingsError(f"--retain must be a positive duration, got {self.retain_s:g} s")
        if self.archive is not None and not self.archive.strip():
            raise SettingsError("--archive is empty: give a directory, a URI or 'none'")
        if bool(self.tls_cert) != bool(self.tls_key):
            raise SettingsError("TLS needs both a certificate (--tls-cert) and its key (--tls-key)")
        for name, path in (("TLS certificate", self.tls_cert), ("TLS key", self.tls_key)):
            if path and not os.access(path, os.R_OK):
                raise SettingsError(f"{name} {path} is not a readable file")


SETTINGS: dict[str, Setting] = ServerSettings.declared()
"""The server settings' declarations, by field name (the commands' options read some of them too)."""
