"""A comparison as text: the experiment, the arms' checks, then one row per metric and arm."""

from __future__ import annotations

from meritlens.analytics._calculator import METHOD_NAME
from meritlens.analytics._catalogue import Direction
from meritlens.analytics._compare import Comparison
from meritlens.analytics._format import format_signed, format_value
from meritlens.analytics._profiles import text_table
from meritlens.analytics._rules import ResultState


def _num(value: float | None, unit: str) -> str:
    return "-" if value is None else format_value(value, unit)


def _ci(low: float | None, high: float | None, unit: str) -> str:
    return "-" if low is None else f"[{format_value(low, unit)}, {format_value(high, unit)}]"


def _signed(value: float | None, unit: str) -> str:
    return "-" if value is None else format_signed(value, unit)


def _yes(value: bool | None) -> str:
    return "-" if value is None else ("yes" if value else "NO")


def format_comparison(comparison: Comparison) -> str:
    """The comparison as text: the experiment, the arms' checks, then one row per metric and arm."""
    e = comparison.experiment
    m = comparison.method
    lines = [
        f"experiment {e['experiment_id']} (revision {e['application_revision']}, manifest {e['manifest_digest'][:12]}),"
        f" baseline {comparison.baseline}",
        f"rules: {comparison.rules_source}; {METHOD_NAME}, {m.confidence:.0%} intervals, {m.resamples} resamples, "
        f"seed {m.seed}",
    ]
    for check in comparison.arms:
        status = "REFUSED" if check.refused else "ok"
        lines.append(f"  arm {check.arm}: {status}, assessment {check.assessment_id}, {check.tasks} tasks, "
                     f"models {', '.join(check.response_models) or '(none reported)'}")
        lines += [f"    ! {p}" for p in check.problems]
        lines += [f"    - {w}" for w in check.warnings]
    headers = ["metric", "arm", "value", "95% CI", "n", "diff", "diff 95% CI", "tolerance", "constraint", "result"]
    rows = []
    for mc in comparison.metrics:
        r = mc.rule
        bound = "-" if r.constraint is None else (
            (">=" if r.direction is Direction.HIGHER else "<=") + f" {format_value(r.constraint, r.unit)}")
        b = mc.baseline
        rows.append([
            f"{r.metric} ({r.aggregation.value})", f"{b.arm} (baseline)", _num(b.value, r.unit),
            _ci(b.ci_low, b.ci_high, r.unit), str(b.samples), "", "", _num(r.tolerance, r.unit),
            f"{bound} {_yes(b.meets_constraint)}" if r.constraint is not None else "-",
            b.state.value if b.state is not ResultState.MEASURED else "",
        ])
        for c in mc.challengers:
            if c.state is ResultState.COMPARED:
                result = c.verdict.value + ("" if c.certified else " (not certified)")
            else:
                result = c.state.value
            rows.append([
                "", c.arm, _num(c.value.value, r.unit), _ci(c.value.ci_low, c.value.ci_high, r.unit),
                str(c.value.samples), _signed(c.difference, r.unit), _ci(c.ci_low, c.ci_high, r.unit),
                f"meets: {_yes(c.meets_tolerance)}" if c.state is ResultState.COMPARED else "",
                f"{bound} {_yes(c.value.meets_constraint)}" if r.constraint is not None else "-",
                result,
            ])
    lines += ["", text_table(headers, rows)]
    notes = [f"  {mc.rule.metric} / {c.arm}: {c.reason}" for mc in comparison.metrics for c in mc.challengers
             if c.reason and c.state is not ResultState.REFUSED]
    notes += [f"  {mc.rule.metric} / {mc.baseline.arm}: {mc.baseline.reason}" for mc in comparison.metrics
              if mc.baseline.reason and mc.baseline.state is not ResultState.REFUSED]
    if notes:
        lines += ["", "why some results have no verdict:", *notes]
    return "\n".join(lines)
