"""Throwaway installed distributions of metric plugins, for discovery through importlib.metadata."""

from __future__ import annotations

from pathlib import Path

from meritlens.analytics import ENTRY_POINT_GROUP


def make_distribution(site: Path, dist: str, module: str, source: str, entry_points: dict[str, str]) -> None:
    """A minimal installed distribution in ``site``: a module and a .dist-info with METADATA and the
    metric entry points (name -> "module:Class")."""
    site.mkdir(parents=True, exist_ok=True)
    (site / f"{module}.py").write_text(source)
    info = site / f"{dist}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    lines = "\n".join(f"{name} = {value}" for name, value in entry_points.items())
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n{lines}\n")
