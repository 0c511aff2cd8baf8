"""Options every command group shares: the connection options and output formats."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import click

from click.core import ParameterSource

from meritlens.collector._settings import DEFAULT_URL, ENV_TLS_CA, ENV_URL, SETTINGS, Setting, SettingsError


def env_help(text: str, env: str | None = None, default=None) -> str:
    """An option's help in the one notation every command uses: 'text [env NAME; default VALUE]'."""
    notes = [f"env {env}"] if env else []
    if default is not None:
        notes.append(f"default {default}")
    return f"{text} [{'; '.join(notes)}]" if notes else text


class SettingValue(click.ParamType):
    """A value of a declared `Setting`, read by its own parser; an error names the variable when the
    value came from it."""

    _NAMES = {"str": "text", "int": "integer", "float": "float", "bytes": "size"}

    def __init__(self, declared: Setting):
        self.declared = declared
        self.name = self._NAMES[declared.kind]

    def convert(self, value, param, ctx):
        from_env = ctx is not None and param is not None and \
            ctx.get_parameter_source(param.name) is ParameterSource.ENVIRONMENT
        try:
            return self.declared.parse(value, None if from_env or param is None else param.opts[0])
        except SettingsError as exc:
            self.fail(str(exc), param, ctx)


def setting_option(name: str, **overrides):
    """The option of the server setting ``name`` (collector/_settings.py): its flag, variable, default,
    parser and help, as declared; ``overrides`` change any of click's option arguments."""
    declared = SETTINGS[name]
    arguments = dict(type=SettingValue(declared), envvar=declared.env, default=declared.default,
                     hidden=declared.hidden, help=env_help(declared.help.rstrip("."), declared.env,
                                                           declared.default_text))
    return click.option(declared.flag, name, **{**arguments, **overrides})


@dataclass(frozen=True)
class Connection:
    """The connection options as given; ``source()`` resolves them (collector/cli/_resolve.py)."""

    db: str | None
    url: str | None
    token: str | None
    token_file: str | None
    tls_ca: str | None
    create: bool = False
    lake: str | None = None
    lake_allowed: bool = False

    def source(self):
        """Where the command's data is; a one-line error when nowhere usable."""
        from meritlens.collector.cli._resolve import ResolveError, resolve

        try:
            return resolve(self.db, self.url, token=self.token, token_file=self.token_file, ca_file=self.tls_ca,
                           create=self.create, lake=self.lake, lake_allowed=self.lake_allowed)
        except ResolveError as exc:
            raise click.ClickException(str(exc)) from None


_CONNECTION_PARAMS = ("db", "url", "token", "token_file", "tls_ca")


def connection_options(command=None, *, create: bool = False, lake: bool = False):
    """--db, --url, --token, --token-file and --tls-ca, handed to the command as ``connection``;
    with ``lake``, --lake too (a command that reads a span lake's files as it reads a DuckDB file)."""

    def decorate(function):
        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            given = {name: kwargs.pop(name) for name in _CONNECTION_PARAMS}
            if lake:
                given["lake"] = kwargs.pop("lake")
            return function(*args, connection=Connection(**given, create=create, lake_allowed=lake), **kwargs)

        db_text = ("DuckDB file to write into, created if missing" if create else
                   "DuckDB file; it must exist. Without --db and --url: ./meritlens.duckdb when it exists, else "
                   "the running collector")
        for option in reversed((
            setting_option("db", default=None, metavar="PATH",
                           help=env_help(f"{db_text}. When a collector holds the file, the command goes through it.",
                                         SETTINGS["db"].env, SETTINGS["db"].default)),
            click.option("--url", default=None,
                         help=env_help("Go through this running collector instead of opening a file; "
                                       f"${ENV_URL} is used only when no --db is given", ENV_URL,
                                       f"{DEFAULT_URL} when no --db is given and no file exists")),
            click.option("--token", default=None,
                         help=env_help("Bearer token the collector requires; prefer --token-file",
                                       SETTINGS["token"].env)),
            click.option("--token-file", type=click.Path(dir_okay=False), default=None,
                         help=env_help("File whose first line is the collector's bearer token",
                                       SETTINGS["token_file"].env)),
            click.option("--tls-ca", type=click.Path(dir_okay=False), default=None,
                         help=env_help("CA file to trust for an https collector", ENV_TLS_CA, "the system CAs")),
            *([lake_option] if lake else []),
        )):
            wrapper = option(wrapper)
        return wrapper

    return decorate(command) if command is not None else decorate


lake_option = click.option(
    "--lake", default=None, metavar="PATH",
    help=env_help("Read this span lake (a directory or URI written by `serve --lake`; windows by `lake windows`) "
                  f"instead of a DuckDB file or collector; ${SETTINGS['lake'].env} is used only when neither --db nor "
                  "--url is given", SETTINGS["lake"].env))


def format_option(*choices: str, default: str | None = None, extra: str = ""):
    """--format with these choices (first is the default)."""
    choices = choices or ("table", "csv", "json")
    return click.option("--format", "fmt", type=click.Choice(choices), default=default or choices[0],
                        show_default=True, help=f"How to print the result{extra}.")


progress_option = click.option(
    "--progress/--no-progress", default=None,
    help="Show a progress bar on stderr [default: when stderr is a terminal].",
)


def iso_time(ctx, param, value):
    """An ISO 8601 time with a time zone (or None)."""
    import datetime as dt

    if value is None:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not an ISO 8601 time (e.g. 2025-01-31T12:00:00+00:00)") from None
    if parsed.tzinfo is None:
        raise click.BadParameter(f"{value!r} has no time zone; add one (e.g. +00:00 or Z)")
    return parsed
