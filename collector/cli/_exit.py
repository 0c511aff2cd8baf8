"""The exit statuses of every command, as grep's: 0 success (or ready), 1 a negative answer only
(not ready, a failed check), 2 any error, 130 interrupted. Standard library only: the console
script imports it before it has checked the collector's dependencies."""

from __future__ import annotations

EXIT_OK = 0
EXIT_NO = 1
EXIT_ERROR = 2
EXIT_INTERRUPTED = 130


class NegativeAnswer(SystemExit):
    """A command's answer is "no" (not ready, a failed check): exit status 1, and no error message."""

    def __init__(self) -> None:
        super().__init__(EXIT_NO)


def answer(yes: bool) -> None:
    """End a command that answers a yes/no question: exit 0 for yes, 1 for no."""
    if not yes:
        raise NegativeAnswer()
