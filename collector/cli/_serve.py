"""`meritlens serve`: the collector process, with one-line answers when its file or ports are taken."""

from __future__ import annotations

import errno
import socket

import click
from click.core import ParameterSource

from meritlens.collector._settings import SETTINGS, ServerSettings, SettingsError
from meritlens.collector.cli._options import setting_option


def _settings_options(command):
    """An option for every server setting, in their declaration's order (collector/_settings.py)."""
    for name in reversed(SETTINGS):
        command = setting_option(name)(command)
    return command


@click.command()
@_settings_options
@click.option("--no-grpc", is_flag=True, help="Do not start the OTLP/gRPC receiver.")
@click.option("--profile", "profiles", multiple=True, type=click.Path(exists=True),
              help="A task profile (TOML), or a directory of them; the dashboard at / shows each "
                   "profile's target's readiness, and the collector evaluates its [[alerts]] rules. Repeatable.")
@click.pass_context
def serve(ctx: click.Context, no_grpc: bool, profiles: tuple[str, ...], **options) -> None:
    """Receive OTLP spans, store them in DuckDB and keep the metric windows current.

    Also serves a read-only dashboard at its HTTP address (http://127.0.0.1:4318/ by default).
    Every option also reads the environment variable named in its help; see docs/collector.md.
    """
    given = {name: value for name, value in options.items() if value is not None}
    # A token or token file given as an option wins over the other one's variable.
    sources = {name: ctx.get_parameter_source(name) for name in ("token", "token_file")}
    if {"token", "token_file"} <= set(given) and sources["token"] != sources["token_file"]:
        del given[next(name for name, source in sources.items() if source is ParameterSource.ENVIRONMENT)]
    if no_grpc:
        given["grpc_port"] = None
    try:
        settings = ServerSettings(**given, profiles=profiles)
        settings.validate()
    except SettingsError as exc:
        raise click.UsageError(str(exc)) from None
    from meritlens.collector.serve._server import normalize_options
    from meritlens.collector.serve._server import serve as run

    try:
        normalize_options(settings)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--target-fallback") from None
    if settings.profiles:
        from meritlens.collector.alerts._watch import watched_rules
        from meritlens.collector.serve._profiles_view import load_profiles

        try:
            watched_rules(load_profiles(settings.profiles))
        except ValueError as exc:  # a ProfileError lists every problem of the file
            raise click.BadParameter(str(exc), param_hint="--profile") from None
    if settings.redact:
        from meritlens.collector.process._redact import SpanRedactor
        from meritlens.instrumentation.redaction import RedactionPolicyError

        try:
            SpanRedactor.from_file(settings.redact)
        except RedactionPolicyError as exc:  # one line naming the file and the rule
            raise click.ClickException(str(exc)) from None
    check_free(settings)
    from meritlens.collector.store._archive import ArchiveError, RecomputeRefused

    try:
        run(settings)
    except (ArchiveError, RecomputeRefused) as exc:
        raise click.ClickException(str(exc)) from None


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
    ports = [(SETTINGS["http_port"], settings.http_port)]
    if settings.grpc_port is not None:
        ports.append((SETTINGS["grpc_port"], settings.grpc_port))
    for declared, port in ports:
        if port and not _can_bind(settings.host, port):
            raise click.ClickException(f"port {port} on {settings.host} is already in use: choose another with "
                                       f"{declared.flag} (or ${declared.env}), or stop what listens there")


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


