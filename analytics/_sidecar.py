"""Sidecar files: a metric's numbers along axes a measurement does not hold.

A sidecar is JSON Lines in the run directory, named after the metric (``<metric>.jsonl``), one
row per line, written with a pydantic model and read back with the same model. A row that does
not parse or validate costs that row, with a log line naming the file and line; it is never
replaced by a default value.
"""

from __future__ import annotations

import json
import logging
import math
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

log = logging.getLogger("meritlens.analytics.sidecar")

SIDECAR_SUFFIX = ".jsonl"
Row = TypeVar("Row", bound=BaseModel)


class KeyedObservation(BaseModel):
    """One number from a sidecar with the keys it is grouped by (each key a chartable dimension)."""

    model_config = ConfigDict(frozen=True)

    keys: dict[str, str]
    value: float

    @field_validator("value")
    @classmethod
    def _finite(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError("value must be finite")
        return value


def sidecar_path(run_dir: Path, metric_name: str) -> Path:
    """Where the sidecar of ``metric_name`` lives in ``run_dir``."""
    if not metric_name or "/" in metric_name or "\\" in metric_name or metric_name.startswith("."):
        raise ValueError(f"metric name {metric_name!r} cannot name a sidecar file")
    return Path(run_dir) / f"{metric_name}{SIDECAR_SUFFIX}"


def write_sidecar(run_dir: Path, metric_name: str, rows: Iterable[BaseModel]) -> Path:
    """Write ``rows`` as the sidecar of ``metric_name``, replacing an earlier one atomically."""
    path = sidecar_path(run_dir, metric_name)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{metric_name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            for row in rows:
                fh.write(row.model_dump_json() + "\n")
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path


def read_sidecar(run_dir: Path, metric_name: str, row_model: type[Row]) -> list[Row] | None:
    """The rows of ``metric_name``'s sidecar validated with ``row_model``; None when there is no
    sidecar. Malformed rows are logged (file and line) and skipped."""
    path = sidecar_path(run_dir, metric_name)
    try:
        handle = path.open(encoding="utf-8")
    except FileNotFoundError:
        return None
    rows: list[Row] = []
    with handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                rows.append(row_model.model_validate(json.loads(line)))
            except ValidationError as exc:
                problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'row'}: {e['msg']}" for e in exc.errors())
                log.warning("skipping malformed row at %s:%d (%s)", path, number, problems)
            except ValueError as exc:
                log.warning("skipping malformed row at %s:%d (not JSON: %s)", path, number, exc)
    return rows
