"""How an experiment manifest is stored (the `experiments` and `experiment_arms` tables) and read
back through a query function. Every statement is written with ``?`` markers: writes bind them,
reads go through ``bind`` (a query function takes SQL text)."""

from __future__ import annotations

import datetime as _dt
import json
from typing import Any, Sequence

from meritlens.analytics._manifest import (
    ExperimentError,
    ExperimentManifest,
    ExperimentNotFound,
    check_update,
    validate_manifest,
)
from meritlens.analytics._schema import (
    EXPERIMENT_ARM_COLUMN_NAMES,
    EXPERIMENT_ARMS_TABLE,
    EXPERIMENT_COLUMN_NAMES,
    EXPERIMENTS_TABLE,
)
from meritlens.analytics._sql import bind, row_time


def upsert_experiment_statements(manifest: ExperimentManifest) -> list[tuple[str, list[Any]]]:
    """The parameterised statements that store ``manifest`` (run them in one transaction)."""
    experiment = {
        "experiment_id": manifest.experiment_id,
        "target_id": manifest.target_id,
        "application_revision": manifest.application_revision,
        "case_set": list(manifest.cases),
        "shuffle_seed": manifest.shuffle_seed,
        "case_order": list(manifest.case_order),
        "repetitions": manifest.repetitions,
        "baseline_arm": manifest.baseline,
        # the profile's own key order is its metrics' order: kept as written
        "profile": json.dumps(manifest.profile) if manifest.profile is not None else None,
        "description": manifest.description,
        "manifest_digest": manifest.digest,
        "created_at": manifest.created_at,
        "updated_at": manifest.updated_at,
    }
    statements = [(
        f"INSERT OR REPLACE INTO {EXPERIMENTS_TABLE} ({', '.join(EXPERIMENT_COLUMN_NAMES)}) "
        f"VALUES ({', '.join('?' for _ in EXPERIMENT_COLUMN_NAMES)})",
        [experiment[name] for name in EXPERIMENT_COLUMN_NAMES],
    ), (f"DELETE FROM {EXPERIMENT_ARMS_TABLE} WHERE experiment_id = ?", [manifest.experiment_id])]
    for position, arm in enumerate(manifest.arms):
        row = {
            "experiment_id": manifest.experiment_id, "arm": arm.name, "position": position,
            "assessment_id": arm.assessment_id, "target_id": arm.target_id, "request_model": arm.request_model,
            "response_models": list(arm.response_models), "started_at": arm.started_at,
            "finished_at": arm.finished_at, "description": arm.description,
        }
        statements.append((
            f"INSERT INTO {EXPERIMENT_ARMS_TABLE} ({', '.join(EXPERIMENT_ARM_COLUMN_NAMES)}) "
            f"VALUES ({', '.join('?' for _ in EXPERIMENT_ARM_COLUMN_NAMES)})",
            [row[name] for name in EXPERIMENT_ARM_COLUMN_NAMES],
        ))
    return statements


SELECT_EXPERIMENT = f"SELECT {', '.join(EXPERIMENT_COLUMN_NAMES)} FROM {EXPERIMENTS_TABLE} WHERE experiment_id = ?"
SELECT_ARMS = (f"SELECT {', '.join(EXPERIMENT_ARM_COLUMN_NAMES)} FROM {EXPERIMENT_ARMS_TABLE} "
               "WHERE experiment_id = ? ORDER BY position")


def list_experiments_sql() -> str:
    """One row per stored experiment with its arms' names, newest first."""
    return f"""SELECT e.experiment_id, e.target_id, e.application_revision, len(e.case_set) AS cases,
  e.repetitions, e.baseline_arm, list(a.arm ORDER BY a.position) FILTER (WHERE a.arm IS NOT NULL) AS arms,
  e.manifest_digest, e.updated_at
FROM {EXPERIMENTS_TABLE} e LEFT JOIN {EXPERIMENT_ARMS_TABLE} a USING (experiment_id)
GROUP BY ALL ORDER BY e.updated_at DESC, e.experiment_id"""


def manifest_from_rows(
    experiment_columns: Sequence[str], experiment_row: Sequence[Any],
    arm_columns: Sequence[str], arm_rows: Sequence[Sequence[Any]],
) -> ExperimentManifest:
    """A manifest from its stored rows (as returned by a query function)."""
    e = dict(zip(experiment_columns, experiment_row))
    profile = e["profile"]
    arms = []
    for row in arm_rows:
        a = dict(zip(arm_columns, row))
        arms.append({
            "name": a["arm"], "assessment_id": a["assessment_id"], "target_id": a["target_id"],
            "request_model": a["request_model"], "response_models": tuple(a["response_models"] or ()),
            "started_at": row_time(a["started_at"]), "finished_at": row_time(a["finished_at"]),
            "description": a["description"],
        })
    return validate_manifest({
        "experiment_id": e["experiment_id"], "target_id": e["target_id"],
        "application_revision": e["application_revision"], "cases": tuple(e["case_set"]),
        "shuffle_seed": int(e["shuffle_seed"]), "case_order": tuple(e["case_order"]),
        "repetitions": int(e["repetitions"]), "arms": arms, "baseline": e["baseline_arm"],
        "profile": json.loads(profile) if isinstance(profile, str) else profile,
        "description": e["description"], "created_at": row_time(e["created_at"]), "updated_at": row_time(e["updated_at"]),
    })


def load_experiment(query, experiment_id: str) -> ExperimentManifest:
    """The stored manifest of ``experiment_id`` read through ``query``; ExperimentNotFound if none."""
    try:
        experiment = query(bind(SELECT_EXPERIMENT, [experiment_id]))
    except Exception as exc:
        if "does not exist" in str(exc) and EXPERIMENTS_TABLE in str(exc):
            raise ExperimentNotFound(
                f"no experiments are stored in this database (no {EXPERIMENTS_TABLE} table yet); "
                "create one with `meritlens experiment create`"
            ) from None
        raise
    if not experiment.rows:
        raise ExperimentNotFound(f"no experiment {experiment_id!r} is stored; `meritlens experiment list` shows them")
    arms = query(bind(SELECT_ARMS, [experiment_id]))
    return manifest_from_rows(experiment.columns, experiment.rows[0], arms.columns, arms.rows)


def save_manifest(manifest: ExperimentManifest, query, execute, *, create: bool = False) -> ExperimentManifest:
    """Store ``manifest`` inside the caller's transaction: read the stored one with ``query``, refuse an
    update that rewrites the past (``check_update``) or, with ``create``, any existing experiment of
    that id; stamp the times; write with ``execute(sql, params)``."""
    try:
        stored = load_experiment(query, manifest.experiment_id)
    except ExperimentNotFound:
        stored = None
    now = _dt.datetime.now(_dt.timezone.utc)
    if stored is not None and create:
        raise ExperimentError([f"already exists (created {stored.created_at.isoformat()}); "
                               f"`meritlens experiment show {manifest.experiment_id}`"], manifest.experiment_id)
    if stored is not None:
        check_update(stored, manifest)
    final = manifest.model_copy(update={"created_at": stored.created_at if stored else now, "updated_at": now})
    for sql, params in upsert_experiment_statements(final):
        execute(sql, params)
    return final
