"""The `meritlens` command line."""

from __future__ import annotations

import logging
import sys

import click

from meritlens.collector._settings import (
    DEFAULT_DB,
    ENV_DB,
    ENV_GRPC_PORT,
    ENV_HOST,
    ENV_HTTP_PORT,
    ENV_MAX_BODY_BYTES,
    ENV_TARGET_FALLBACK,
    ENV_URL,
    DEFAULT_TARGET_FALLBACK,
    ServerSettings,
)

_db_option = click.option(
    "--db", envvar=ENV_DB, default=DEFAULT_DB, show_default=True, help=f"DuckDB file (env {ENV_DB})."
)
_url_option = click.option(
    "--url", envvar=ENV_URL, default=None,
    help=f"Query through this running collector instead of opening the file (env {ENV_URL}).",
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show tracebacks and debug logs.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """meritlens: evidence-grade metrics for LLM applications, native to OpenTelemetry."""
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


@cli.command()
@_db_option
@click.option("--host", envvar=ENV_HOST, default="127.0.0.1", show_default=True, help=f"Bind address (env {ENV_HOST}).")
@click.option("--http-port", envvar=ENV_HTTP_PORT, type=int, default=4318, show_default=True,
              help=f"OTLP/HTTP port; 0 picks a free one (env {ENV_HTTP_PORT}).")
@click.option("--grpc-port", envvar=ENV_GRPC_PORT, type=int, default=4317, show_default=True,
              help=f"OTLP/gRPC port (env {ENV_GRPC_PORT}).")
@click.option("--max-body-bytes", envvar=ENV_MAX_BODY_BYTES, type=int, default=20 * 1024 * 1024, show_default=True,
              help=f"Largest request body after decompression (env {ENV_MAX_BODY_BYTES}).")
@click.option("--target-fallback", envvar=ENV_TARGET_FALLBACK, default=DEFAULT_TARGET_FALLBACK, show_default=True,
              help="Target ID for LLM-call spans that carry none, from {service.name}, {model}, {provider}, "
                   f"{{scope}}; 'none' turns it off (env {ENV_TARGET_FALLBACK}).")
def serve(db: str, host: str, http_port: int, grpc_port: int, max_body_bytes: int, target_fallback: str) -> None:
    """Receive OTLP spans, store them in DuckDB and keep the metric windows current."""
    from meritlens.collector._server import normalize_options, serve as run

    settings = ServerSettings(db=db, host=host, http_port=http_port, grpc_port=grpc_port,
                              max_body_bytes=max_body_bytes, target_fallback=target_fallback)
    try:
        normalize_options(settings)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--target-fallback") from None
    run(settings)


@cli.command()
@click.argument("query")
@_db_option
@_url_option
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
def sql(query: str, db: str, url: str | None, fmt: str) -> None:
    """Run a read-only SQL QUERY over `spans` and `windows`."""
    from meritlens.collector._output import render
    from meritlens.collector._query import QueryError, run_query

    try:
        result = run_query(query, db=db, url=url)
    except QueryError as exc:
        raise click.ClickException(str(exc)) from None
    render(result, fmt)


def main() -> None:
    """Console-script entry point."""
    debug = "--debug" in sys.argv[1:]
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except Exception as exc:  # noqa: BLE001 - one line unless --debug
        if debug:
            raise
        click.echo(f"Error: {exc}", err=True)
        sys.exit(1)
