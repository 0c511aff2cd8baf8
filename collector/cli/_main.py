"""The `meritlens` console script. It imports only the standard library until it has checked that
the collector's dependencies (`pip install 'meritlens[server]'`) are installed."""

from __future__ import annotations

import importlib.util
import sys

# What every command needs beyond the application side (`pip install meritlens`); see pyproject's [server].
SERVER_MODULES = ("click", "rich", "duckdb", "pyarrow", "aiohttp", "pydantic")
SERVER_EXTRA_HINT = "pip install 'meritlens[server]'"


def missing_server_modules() -> list[str]:
    return [name for name in SERVER_MODULES if importlib.util.find_spec(name) is None]


def main() -> None:
    """Console-script entry point. Exit codes: 0 ok, 1 failure, 2 usage error, 130 interrupted."""
    missing = missing_server_modules()
    if missing:
        print(f"meritlens: the command line is part of the collector, which is not installed here "
              f"(missing {', '.join(missing)}): {SERVER_EXTRA_HINT}", file=sys.stderr)
        sys.exit(2)
    import click

    from meritlens.collector.cli._group import cli

    debug = "--debug" in sys.argv[1:]
    try:
        code = cli.main(prog_name="meritlens", standalone_mode=False)
    except click.exceptions.Abort:
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except Exception as exc:  # noqa: BLE001 - one line unless --debug
        if debug:
            raise
        message = " ".join(str(exc).split()) or type(exc).__name__
        click.echo(f"Error: {message}", err=True)
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)
