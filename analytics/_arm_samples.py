"""An arm's samples of a metric, read from the spans exactly as its window computes them
(``window_samples_sql``: one sample per task, or per call for call metrics), with the window they
are the evidence of."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from meritlens.analytics._definitions import SPAN_WINDOW_METRICS
from meritlens.analytics._evidence import span_keys_digest
from meritlens.analytics._manifest import ExperimentManifest
from meritlens.analytics._samples import window_samples_sql
from meritlens.analytics._schema import WINDOW_COLUMN_NAMES, WINDOWS_TABLE
from meritlens.analytics._sql import bind
from meritlens.analytics._windows import Window


@dataclass(frozen=True)
class Sample:
    key: str
    case_id: str | None
    value: float
    success: bool | None
    span_keys: tuple[str, ...]


@dataclass(frozen=True)
class WindowRef:
    """The window a set of samples is the evidence of, and whether they are exactly its evidence."""

    target_id: str
    metric: str
    scope: str
    evidence_digest: str | None
    """The stored window's digest (None when no window is stored)."""
    samples_digest: str | None
    """sha256 of the sorted span keys of the samples read now."""
    state: str | None
    sample_count: int | None

    @property
    def matches(self) -> bool:
        return self.evidence_digest is not None and self.evidence_digest == self.samples_digest

    def to_json(self) -> dict[str, Any]:
        return {
            "target_id": self.target_id, "metric": self.metric, "scope": self.scope,
            "evidence_digest": self.evidence_digest, "samples_digest": self.samples_digest,
            "matches": self.matches, "state": self.state, "sample_count": self.sample_count,
        }


@dataclass(frozen=True)
class ArmData:
    """One arm's samples of one metric: those in the case set (or without a case) and how many are not."""

    arm: str
    samples: tuple[Sample, ...]
    outside_case_set: int
    window: WindowRef


def _as_bool(value: Any) -> bool | None:
    return None if value is None else bool(value)


_WINDOW_SQL = (f"SELECT {', '.join(WINDOW_COLUMN_NAMES)} FROM {WINDOWS_TABLE} "
               "WHERE target_id = ? AND metric = ? AND scope = ?")


def load_arm_data(query, manifest: ExperimentManifest, arm_name: str, metric: str) -> ArmData:
    """The samples of ``metric`` in the arm's scope (its assessment), read from the spans."""
    arm = manifest.arm(arm_name)
    target = manifest.target_of(arm)
    window_rows = query(bind(_WINDOW_SQL, [target, metric, arm.assessment_id]))
    window = Window.from_row(window_rows.rows[0], window_rows.columns) if window_rows.rows else None
    samples: list[Sample] = []
    if metric in SPAN_WINDOW_METRICS:
        result = query(window_samples_sql(target, arm.assessment_id, metric))
        for row in result.rows:
            r = dict(zip(result.columns, row))
            samples.append(Sample(r["sample_key"], r["case_id"], float(r["v"]), _as_bool(r["outcome_success"]),
                                  tuple(r["span_keys"])))
    all_keys = [k for s in samples for k in s.span_keys]
    ref = WindowRef(
        target, metric, arm.assessment_id,
        evidence_digest=window.evidence_digest if window else None,
        samples_digest=span_keys_digest(all_keys) if samples else None,
        state=window.state if window else None,
        sample_count=window.sample_count if window else None,
    )
    case_set = set(manifest.cases)
    kept = tuple(s for s in samples if s.case_id is None or s.case_id in case_set)
    return ArmData(arm_name, kept, len(samples) - len(kept), ref)
