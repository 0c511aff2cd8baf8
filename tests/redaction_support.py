"""Policy files for the redaction tests: real TOML files with a real key file beside them."""

from __future__ import annotations

import shutil
from pathlib import Path

from meritlens.instrumentation.redaction import RedactionPolicy, load_policy

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "redaction.toml"
KEY = b"0123456789abcdef-test-key-32-bytes"


def example_policy(folder: Path, key: bytes = KEY) -> Path:
    """The shipped example policy, copied into ``folder`` with its key file beside it."""
    shutil.copy(EXAMPLE, folder / "redaction.toml")
    (folder / "redaction.key").write_bytes(key)
    return folder / "redaction.toml"


def write_policy(folder: Path, text: str, key: bytes | None = KEY, name: str = "policy.toml") -> Path:
    if key is not None:
        (folder / "redaction.key").write_bytes(key)
    path = folder / name
    path.write_text(text)
    return path


def policy(folder: Path, text: str, key: bytes | None = KEY) -> RedactionPolicy:
    return load_policy(write_policy(folder, text, key))


EVERY_BUILTIN = """
[mask]
builtins = ["email", "phone", "payment_card", "ipv4", "ipv6", "openai_key", "anthropic_key", "aws_access_key",
            "github_token", "google_api_key", "jwt", "bearer_token"]
"""
