"""Drawing a frontier (matplotlib, headless): PNG or SVG by the file's extension."""

from __future__ import annotations

from pathlib import Path

from meritlens.analytics._catalogue import Direction
from meritlens.analytics._frontier import Frontier

PLOT_SUFFIXES = (".png", ".svg")
_OPTIMAL = "#1b6ac9"
_DOMINATED = "#8c8c8c"
_FRONTIER_LINE = "#1b6ac9"


def _axis_label(rule) -> str:
    better = "higher" if rule.direction is Direction.HIGHER else "lower"
    return f"{rule.metric} ({rule.aggregation.value}, {rule.unit})  —  {better} is better"


def plot_frontier(result: Frontier, path: str | Path) -> Path:
    """Write the frontier plot to ``path`` (.png or .svg): every placed arm with its 95% intervals on
    both axes, the frontier joined by a line, dominated arms in grey with who dominates them, the third
    metric (if any) as each point's colour and label. Returns the path."""
    path = Path(path)
    if path.suffix.lower() not in PLOT_SUFFIXES:
        raise ValueError(f"the plot file must end in {' or '.join(PLOT_SUFFIXES)}, got {path.name!r}")
    import logging

    import matplotlib

    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    from matplotlib import colormaps
    from matplotlib.colors import Normalize

    x_rule, y_rule = result.axes[0], result.axes[1]
    z_rule = result.axes[2] if len(result.axes) == 3 else None
    placed = [a for a in result.arms if a.status != "excluded"]

    fig, ax = plt.subplots(figsize=(9, 6.5), dpi=150)
    norm = cmap = None
    if z_rule is not None and placed:
        z_values = [a.values[z_rule.metric].value for a in placed]
        norm = Normalize(min(z_values), max(z_values) if max(z_values) > min(z_values) else min(z_values) + 1e-12)
        cmap = colormaps["viridis_r" if z_rule.direction is Direction.LOWER else "viridis"]

    xs = [a.values[x_rule.metric].value for a in placed]
    x_mid = (min(xs) + max(xs)) / 2 if xs else 0.0
    for arm in placed:
        x, y = arm.values[x_rule.metric], arm.values[y_rule.metric]
        optimal = arm.status == "optimal"
        colour = _OPTIMAL if optimal else _DOMINATED
        face = cmap(norm(arm.values[z_rule.metric].value)) if cmap is not None else colour
        ax.errorbar(
            x.value, y.value,
            xerr=[[x.value - x.ci_low], [x.ci_high - x.value]], yerr=[[y.value - y.ci_low], [y.ci_high - y.value]],
            fmt="none", ecolor=colour, elinewidth=1.4 if optimal else 1.0, capsize=4, alpha=0.9 if optimal else 0.6,
            zorder=2,
        )
        ax.scatter([x.value], [y.value], s=150 if optimal else 100, c=[face], edgecolors="black" if optimal else colour,
                   linewidths=1.6 if optimal else 1.2, marker="o" if optimal else "s", zorder=3)
        label = arm.arm
        if z_rule is not None:
            label += f" · {arm.values[z_rule.metric].value:.3g} {z_rule.unit}"
        if not optimal:
            label += "\ndominated by " + ", ".join(d.by + ("" if d.confident else "?") for d in arm.dominated_by)
        # Labels point away from the middle, so that they stay inside the axes and off the frontier line.
        right_half = x.value > x_mid
        ax.annotate(label, (x.value, y.value), xytext=(-12 if right_half else 12, -16), textcoords="offset points",
                    ha="right" if right_half else "left", va="top", fontsize=9,
                    fontweight="bold" if optimal else "normal", color="black" if optimal else "#555555", zorder=4,
                    bbox=dict(boxstyle="round,pad=0.25", fc="white", ec="none", alpha=0.7))

    frontier_arms = sorted((a for a in placed if a.status == "optimal"), key=lambda a: a.values[x_rule.metric].value)
    if z_rule is None and len(frontier_arms) > 1:
        # Over two metrics the frontier is a staircase: each step is the best y reachable for that x.
        ax.step([a.values[x_rule.metric].value for a in frontier_arms],
                [a.values[y_rule.metric].value for a in frontier_arms],
                where="post" if (x_rule.direction is Direction.LOWER) == (y_rule.direction is Direction.HIGHER)
                else "pre", color=_FRONTIER_LINE, linewidth=1.3, linestyle="--", zorder=1, alpha=0.8)

    if cmap is not None:
        bar = fig.colorbar(plt.cm.ScalarMappable(norm=norm, cmap=cmap), ax=ax, pad=0.02)
        bar.set_label(_axis_label(z_rule))

    ax.set_xlabel(_axis_label(x_rule))
    ax.set_ylabel(_axis_label(y_rule))
    ax.grid(True, color="#e5e5e5", linewidth=0.8)
    ax.set_axisbelow(True)
    ax.margins(x=0.22, y=0.15)
    # Say which corner is best, so that the plot reads without the legend.
    best_x = "right" if x_rule.direction is Direction.HIGHER else "left"
    best_y = "top" if y_rule.direction is Direction.HIGHER else "bottom"
    ax.text(0.015 if best_x == "left" else 0.985, 0.975 if best_y == "top" else 0.025, f"better: {best_y}-{best_x}",
            transform=ax.transAxes, ha=best_x, va=best_y, fontsize=9, color="#1b6ac9",
            bbox=dict(boxstyle="round,pad=0.3", fc="#eef4fc", ec="#1b6ac9", lw=0.8))

    e = result.experiment
    cert = result.certificate()
    ax.set_title(f"Experiment {e['experiment_id']}: Pareto frontier", fontsize=13, loc="left", pad=22)
    ax.text(0.0, 1.01, (
        f"revision {e['application_revision']} · manifest {e['manifest_digest'][:12]} · "
        f"{result.method.confidence:.0%} intervals, bootstrap seed {result.method.seed} · "
        + ("certified" if cert["certified"] else "NOT certified")
    ), transform=ax.transAxes, fontsize=8, color="#555555", va="bottom")

    from matplotlib.lines import Line2D

    handles = [
        Line2D([], [], marker="o", linestyle="none", markerfacecolor=_OPTIMAL, markeredgecolor="black",
               markersize=9, label="on the frontier"),
        Line2D([], [], marker="s", linestyle="none", markerfacecolor=_DOMINATED, markeredgecolor=_DOMINATED,
               markersize=8, label="dominated (? = not confident)"),
        Line2D([], [], color=_OPTIMAL, linewidth=1.2, label=f"{result.method.confidence:.0%} interval"),
    ]
    if z_rule is None and len(frontier_arms) > 1:
        handles.append(Line2D([], [], color=_FRONTIER_LINE, linestyle="--", label="Pareto frontier"))
    elif z_rule is not None:
        handles.append(Line2D([], [], linestyle="none", label=f"frontier over 3 metrics (colour: {z_rule.metric})"))
    excluded = [a for a in result.arms if a.status == "excluded"]
    if excluded:
        handles.append(Line2D([], [], linestyle="none",
                              label="not placed: " + ", ".join(a.arm for a in excluded)))
    ax.legend(handles=handles, loc="best", fontsize=8, framealpha=0.9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format=path.suffix.lower().lstrip("."))
    plt.close(fig)
    return path
