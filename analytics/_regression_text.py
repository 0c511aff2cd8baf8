"""The regressions report and a profile's sample plans as text (`regression_report`, `plan_report`)."""

from __future__ import annotations

from meritlens.analytics._format import format_signed, format_value, significant
from meritlens.analytics._profiles import text_table


def _percent(share: float | None) -> str:
    return "?" if share is None else f"{'+' if share >= 0 else ''}{significant(share * 100, 3)}%"


def _change(row: dict) -> tuple[str, str]:
    """The change in the metric's unit and relative to the baseline, each with its interval."""
    unit = row["unit"]
    difference, relative = row["difference"], row["relative"]
    if difference is None:
        return "-", "-"

    def interval(estimate: dict, text) -> str:
        low, high = ("unbounded" if estimate[b] is None else text(estimate[b]) for b in ("low", "high"))
        return f"{text(estimate['value'])} [{low}, {high}]"

    absolute = interval(difference, lambda v: format_signed(v, unit))
    return absolute, "-" if relative is None else interval(relative, _percent)


def _range_text(span: dict) -> str:
    return f"{span['from'][:16]} to {span['to'][:16]} UTC"


def format_regressions(report: dict) -> str:
    """The report as a table with units, under what was compared and how."""
    baseline = report["baseline"]
    if report["same_hours"]:
        where = (f"the same hours of the {len(baseline)} day{'s' if len(baseline) != 1 else ''} before "
                 f"({_range_text(baseline[-1])} ... {_range_text(baseline[0])})")
    else:
        where = _range_text(baseline[0])
    lines = [f"recent:   {_range_text(report['recent'])} ({report['recent_buckets']} time buckets)",
             f"baseline: {where} ({report['baseline_buckets']} time buckets)"]
    family = report["family_size"]
    if family:
        lines.append(f"{family} comparison{'s' if family != 1 else ''} at {significant(report['confidence'] * 100)}% "
                     f"together ({report['correction']}: each interval at "
                     f"{significant(report['interval_confidence'] * 100, 6)}%)")
    rows = []
    for r in report["regressions"]:
        unit = r["unit"]
        absolute, relative = _change(r)
        rows.append([r["target"], r["metric"], r["statistic"],
                     "-" if r["baseline"] is None else format_value(r["baseline"], unit),
                     "-" if r["recent"] is None else format_value(r["recent"], unit),
                     absolute, relative, r["verdict"].replace("_", " "),
                     f"{r['recent_samples']} / {r['baseline_samples']}"])
    if rows:
        lines += ["", text_table(["target", "metric", "statistic", "baseline", "recent", "change [interval]",
                                  "relative [interval]", "verdict", "samples recent / baseline"], rows)]
    else:
        lines += ["", "no window by time holds samples of these ranges"]
    for r in report["regressions"]:
        if r["verdict"] == "not_enough_samples" and r["reason"]:
            lines.append(f"  {r['target']} {r['metric']}: {r['reason']}")
    skipped = report["not_compared"]
    if skipped:
        lines.append("not compared: " + "; ".join(f"{s['target']} {s['metric']} ({s['reason']})" for s in skipped))
    worse = [f"{r['target']} {r['metric']}" for r in report["regressions"] if r["verdict"] == "worse"]
    lines += ["", f"worse: {', '.join(worse)}" if worse else "no metric is worse"]
    return "\n".join(lines)


def format_plans(report: dict) -> str:
    """How many samples each metric needs to show the change, with the profile's min_samples beside it."""
    head = (f"samples per side to detect a {significant(report['relative_change'] * 100)}% change in the bad "
            f"direction with power {significant(report['power'])}, at {significant(report['confidence'] * 100)}% "
            f"over the {report['family_size']} metric{'s' if report['family_size'] != 1 else ''} planned "
            f"({report['correction']}), from the windows of {report['target']} from {report['from'][:16]} to "
            f"{report['to'][:16]} UTC ({report['buckets']} time buckets)")
    rows = []
    for p in report["plans"]:
        unit = p["unit"]
        if p.get("method") is None:
            rows.append([p["metric"], "-", "-", "-", "-", str(p["min_samples"]), p["note"]])
            continue
        samples = "more than 10 million" if p["samples"] is None else f"{p['samples']:,}"
        rows.append([p["metric"], p["statistic"], format_value(p["baseline"], unit), format_signed(p["change"], unit),
                     samples, str(p["min_samples"]), p["method"]])
    return "\n".join([head, "", text_table(["metric", "statistic", "now", "change", "samples needed", "min samples",
                                            "method or note"], rows)])


__all__ = ["format_plans", "format_regressions"]
