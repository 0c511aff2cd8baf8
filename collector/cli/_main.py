"""The `meritlens` console script. It imports only the standard library until it has checked that
the collector's dependencies (`pip install 'meritlens[server]'`) are installed.

Every command ends with one of three exit statuses (collector/cli/_exit.py). The mapping is made
here, once: a command signals a negative answer with ``answer(False)``; anything it raises is an error."""

from __future__ import annotations

import importlib.util
import sys
import traceback

from meritlens.collector.cli._exit import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_NO, EXIT_OK, NegativeAnswer

# What every command needs beyond the application side (`pip install meritlens`); see pyproject's [server].
SERVER_MODULES = ("click", "rich", "duckdb", "pyarrow", "aiohttp", "httpx", "pydantic")
SERVER_EXTRA_HINT = "pip install 'meritlens[server]'"


def missing_server_modules() -> list[str]:
    return [name for name in SERVER_MODULES if importlib.util.find_spec(name) is None]


def main() -> None:
    """Console-script entry point: 0 success, 1 a negative answer, 2 any error, 130 interrupted."""
    missing = missing_server_modules()
    if missing:
        print(f"meritlens: the command line is part of the collector, which is not installed here "
              f"(missing {', '.join(missing)}): {SERVER_EXTRA_HINT}", file=sys.stderr)
        sys.exit(EXIT_ERROR)
    import click

    from meritlens.collector.cli._group import cli

    debug = "--debug" in sys.argv[1:]
    try:
        code = cli.main(prog_name="meritlens", standalone_mode=False)
    except NegativeAnswer:
        sys.exit(EXIT_NO)
    except (click.exceptions.Abort, KeyboardInterrupt):
        sys.exit(EXIT_INTERRUPTED)
    except click.UsageError as exc:  # one line too, naming the help that shows the usage
        where = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
        click.echo(f"Error: {' '.join(exc.format_message().split())}{where}", err=True)
        sys.exit(EXIT_ERROR)
    except click.ClickException as exc:
        exc.show()
        sys.exit(EXIT_ERROR)
    except SystemExit as exc:
        # Only a negative answer may end a command with 1; any other way out of it is 0 or an error.
        sys.exit(EXIT_OK if exc.code in (None, EXIT_OK) else EXIT_ERROR)
    except Exception as exc:  # noqa: BLE001 - one line unless --debug
        if debug:
            traceback.print_exc()
            sys.exit(EXIT_ERROR)
        message = " ".join(str(exc).split()) or type(exc).__name__
        click.echo(f"Error: {message}", err=True)
        sys.exit(EXIT_ERROR)
    sys.exit(EXIT_OK if code in (None, EXIT_OK) else EXIT_ERROR)
