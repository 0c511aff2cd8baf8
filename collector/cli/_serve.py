"""`meritlens serve`: the collector process, with one-line answers when its file or ports are taken."""

from __future__ import annotations

import errno
import socket

import click

from meritlens.collector._settings import (
    DEFAULT_DB,
    DEFAULT_MEMORY_LIMIT,
    DEFAULT_DB_THREADS,
    DEFAULT_GRPC_MAX_CONCURRENT_RPCS,
    DEFAULT_GRPC_PORT,
    DEFAULT_HOST,
    DEFAULT_HTTP_PORT,
    DEFAULT_MAX_ATTRIBUTES,
    DEFAULT_MAX_PENDING_BATCHES,
    DEFAULT_MAX_SPANS_PER_REQUEST,
    DEFAULT_RELATIVE_ERROR,
    DEFAULT_SHUTDOWN_TIMEOUT_S,
    DEFAULT_SQL_MAX_ROWS,
    DEFAULT_SQL_TIMEOUT_S,
    DEFAULT_STAGE_MOVE_S,
    DEFAULT_TARGET_FALLBACK,
    ENV_CHECKPOINT_WAL_BYTES,
    ENV_COLLECTOR_ID,
    ENV_DB,
    ENV_MEMORY_LIMIT,
    ENV_DB_THREADS,
    ENV_GRPC_MAX_CONCURRENT_RPCS,
    ENV_GRPC_PORT,
    ENV_HOST,
    ENV_HTTP_PORT,
    ENV_LAKE,
    ENV_MAX_ATTRIBUTE_BYTES,
    ENV_MAX_ATTRIBUTES,
    ENV_MAX_BODY_BYTES,
    ENV_MAX_PENDING_BATCHES,
    ENV_MAX_SPANS_PER_REQUEST,
    ENV_QUANTILE_ERROR,
    ENV_SHUTDOWN_TIMEOUT,
    ENV_SQL_MAX_ROWS,
    ENV_SQL_TIMEOUT,
    ENV_STAGE_SECONDS,
    ENV_TARGET_FALLBACK,
    ENV_TLS_CERT,
    ENV_TLS_KEY,
    ENV_TOKEN,
    ENV_TOKEN_FILE,
    ServerSettings,
    SettingsError,
    parse_bytes,
    resolve_token,
)


def _size(ctx, param, value):
    if value is None:
        return None
    try:
        return parse_bytes(value, "--" + param.name.replace("_", "-"))
    except SettingsError as exc:
        raise click.BadParameter(str(exc)) from None


@click.command()
@click.option("--db", default=None, help=f"DuckDB file [env {ENV_DB}; default {DEFAULT_DB}].")
@click.option("--host", default=None,
              help=f"Bind address of both receivers [env {ENV_HOST}; default {DEFAULT_HOST}]. "
                   "A non-loopback address without a token logs a warning.")
@click.option("--http-port", type=int, default=None,
              help=f"OTLP/HTTP and SQL port; 0 picks a free one [env {ENV_HTTP_PORT}; default {DEFAULT_HTTP_PORT}].")
@click.option("--grpc-port", type=int, default=None,
              help=f"OTLP/gRPC port; 0 picks a free one [env {ENV_GRPC_PORT}; default {DEFAULT_GRPC_PORT}].")
@click.option("--no-grpc", is_flag=True, help="Do not start the OTLP/gRPC receiver.")
@click.option("--token", default=None,
              help=f"Bearer token every endpoint requires [env {ENV_TOKEN}]; prefer --token-file.")
@click.option("--token-file", type=click.Path(dir_okay=False), default=None,
              help=f"File whose first line is the bearer token [env {ENV_TOKEN_FILE}].")
@click.option("--tls-cert", type=click.Path(dir_okay=False), default=None,
              help=f"PEM certificate (chain) for HTTPS and gRPC TLS [env {ENV_TLS_CERT}].")
@click.option("--tls-key", type=click.Path(dir_okay=False), default=None,
              help=f"PEM private key of --tls-cert [env {ENV_TLS_KEY}].")
@click.option("--max-body-bytes", callback=_size, default=None,
              help=f"Largest request after decompression, e.g. 20MiB [env {ENV_MAX_BODY_BYTES}; default 20MiB].")
@click.option("--memory-limit", callback=_size, default=None,
              help="The anonymous memory the whole process may take, e.g. 1GiB; above all but an eighth of it "
                   "exports get 503/UNAVAILABLE until it falls. A quarter holds the requests in flight; the rest "
                   "is split among the process, DuckDB's buffer pool (larger operations spill to disk), the window "
                   f"state and the key filters (docs/collector.md) [env {ENV_MEMORY_LIMIT}; default "
                   f"{DEFAULT_MEMORY_LIMIT >> 20}MiB].")
@click.option("--checkpoint-wal-bytes", callback=_size, default=None,
              help="Write-ahead log size at which DuckDB checkpoints the file; larger: less CPU per span, a "
                   f"larger WAL to replay after a crash [env {ENV_CHECKPOINT_WAL_BYTES}; default 64MiB].")
@click.option("--db-threads", type=int, default=None,
              help="DuckDB's worker threads; more make large SQL queries and the start-up rebuild faster and "
                   f"cost the collector's small statements CPU [env {ENV_DB_THREADS}; default {DEFAULT_DB_THREADS}].")
@click.option("--stage-seconds", "stage_s", type=float, default=None,
              help="How long acknowledged spans may wait in the staging log (forced to disk next to the "
                   "DuckDB file) before one INSERT stores them in DuckDB; 0 stores each export in DuckDB "
                   f"before answering it, at ~2x the writer's CPU [env {ENV_STAGE_SECONDS}; default "
                   f"{DEFAULT_STAGE_MOVE_S:g}].")
@click.option("--max-pending-batches", type=int, default=None,
              help=f"Batches waiting for the writer [env {ENV_MAX_PENDING_BATCHES}; default "
                   f"{DEFAULT_MAX_PENDING_BATCHES}].")
@click.option("--max-spans-per-request", type=int, default=None,
              help="Spans one export may carry; a larger one is refused whole (400/INVALID_ARGUMENT) "
                   f"[env {ENV_MAX_SPANS_PER_REQUEST}; default {DEFAULT_MAX_SPANS_PER_REQUEST}].")
@click.option("--max-attributes", type=int, default=None,
              help="Attributes per span, event, link or resource; a span over it is refused "
                   f"[env {ENV_MAX_ATTRIBUTES}; default {DEFAULT_MAX_ATTRIBUTES}].")
@click.option("--max-attribute-bytes", callback=_size, default=None,
              help="Longest string/bytes value, key or name; a span over it is refused "
                   f"[env {ENV_MAX_ATTRIBUTE_BYTES}; default 1MiB].")
@click.option("--grpc-max-concurrent-rpcs", type=int, default=None,
              help="gRPC exports handled at once; a call beyond it is answered UNAVAILABLE before its message is "
                   f"read [env {ENV_GRPC_MAX_CONCURRENT_RPCS}; default {DEFAULT_GRPC_MAX_CONCURRENT_RPCS}].")
@click.option("--sql-timeout", "sql_timeout_s", type=float, default=None,
              help="Seconds before a SQL query is interrupted "
                   f"[env {ENV_SQL_TIMEOUT}; default {DEFAULT_SQL_TIMEOUT_S:g}].")
@click.option("--sql-max-rows", type=int, default=None,
              help=f"Rows a SQL response holds at most [env {ENV_SQL_MAX_ROWS}; default {DEFAULT_SQL_MAX_ROWS}].")
@click.option("--target-fallback", default=None,
              help="Target ID for LLM-call spans that carry none, from {service.name}, {model}, {provider}, "
                   f"{{scope}}; 'none' turns it off [env {ENV_TARGET_FALLBACK}; default {DEFAULT_TARGET_FALLBACK}].")
@click.option("--shutdown-timeout", "shutdown_timeout_s", type=float, default=None,
              help="Seconds a graceful stop (SIGTERM) may take; requests in progress get up to half of it "
                   f"[env {ENV_SHUTDOWN_TIMEOUT}; default {DEFAULT_SHUTDOWN_TIMEOUT_S:g}].")
@click.option("--quantile-error", type=float, default=None,
              help="Bound on the relative error of min, max and p50-p99 of windows of more than 1,000 samples "
                   "(fewer are exact); smaller costs more memory per window "
                   f"[env {ENV_QUANTILE_ERROR}; default {DEFAULT_RELATIVE_ERROR:g}].")
@click.option("--profile", "profiles", multiple=True, type=click.Path(exists=True),
              help="A task profile (TOML), or a directory of them; the dashboard at / shows each "
                   "profile's target's readiness. Repeatable.")
@click.option("--lake", default=None, metavar="PATH",
              help="Store spans as Parquet segments in this lake (a directory or URI shared with other collectors) "
                   f"instead of --db; its windows come from `meritlens lake windows` [env {ENV_LAKE}].")
@click.option("--collector-id", default=None,
              help=f"This collector's name on the lake, unique among its collectors [env {ENV_COLLECTOR_ID}; "
                   "default the host name].")
def serve(token: str | None, token_file: str | None, no_grpc: bool, **options) -> None:
    """Receive OTLP spans, store them in DuckDB and keep the metric windows current.

    Also serves a read-only dashboard at its HTTP address (http://127.0.0.1:4318/ by default).
    Every option also reads the environment variable named in its help; see docs/collector.md.
    """
    given = {name: value for name, value in options.items() if value is not None}
    try:
        if token is not None or token_file is not None:
            given["token"] = resolve_token(token, token_file)
        if no_grpc:
            given["grpc_port"] = None
        settings = ServerSettings(**given)
        settings.validate()
    except SettingsError as exc:
        raise click.UsageError(str(exc)) from None
    from meritlens.collector.serve._server import normalize_options, serve as run

    try:
        normalize_options(settings)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--target-fallback") from None
    if settings.profiles:
        from meritlens.collector.serve._profiles_view import load_profiles

        try:
            load_profiles(settings.profiles)
        except ValueError as exc:  # a ProfileError lists every problem of the file
            raise click.BadParameter(str(exc), param_hint="--profile") from None
    check_free(settings)
    run(settings)


def check_free(settings: ServerSettings) -> None:
    """Refuse at once, in one line, when the file or a port is taken: before anything is opened,
    so that nothing is logged as if a collector had run."""
    import os

    parent = os.path.dirname(os.path.abspath(settings.db))
    if not settings.lake and not os.path.isdir(parent):
        raise click.ClickException(f"cannot create {settings.db}: the directory {parent} does not exist")
    if not settings.lake and os.path.exists(settings.db):
        import duckdb

        from meritlens.collector.cli._resolve import describe_lock_holder, is_lock_conflict

        try:
            duckdb.connect(settings.db, read_only=True).close()
        except duckdb.Error as exc:
            if is_lock_conflict(exc):
                raise click.ClickException(f"{settings.db} is in use by {describe_lock_holder(exc)}; stop it, or "
                                           "serve another file with --db") from None
    ports = [("--http-port", ENV_HTTP_PORT, settings.http_port)]
    if settings.grpc_port is not None:
        ports.append(("--grpc-port", ENV_GRPC_PORT, settings.grpc_port))
    for flag, env, port in ports:
        if port and not _can_bind(settings.host, port):
            raise click.ClickException(f"port {port} on {settings.host} is already in use: choose another with "
                                       f"{flag} (or ${env}), or stop what listens there")


def _can_bind(host: str, port: int) -> bool:
    """Whether a listening socket could bind (host, port) now, as the receivers will (SO_REUSEADDR)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror:
        return True  # the receivers report an unusable host themselves
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
        except OSError as exc:
            return exc.errno != errno.EADDRINUSE
    return True


