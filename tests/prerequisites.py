"""Programs some tests need beyond the venv (Debian's chromium, prometheus and openjdk-17-jre-headless).
`make test` installs them when missing and run as root; otherwise a test that needs one fails with
one line naming it and the command that installs it."""

from __future__ import annotations

import os

import pytest


def require_program(path: str, *, what: str, install: str) -> str:
    """``path`` when it is an executable; else fail the test in one line (no traceback)."""
    if not os.access(path, os.X_OK):
        pytest.fail(f"missing prerequisite: {what} ({path}); install it with `{install}` "
                    "(`make test` does when run as root)", pytrace=False)
    return path
