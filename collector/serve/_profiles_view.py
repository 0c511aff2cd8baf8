"""Readiness for the dashboard: the task profiles `serve --profile` loaded, checked against the
collector's own store whenever the page asks (read-only: nothing is recorded)."""

from __future__ import annotations

from pathlib import Path

from meritlens.analytics.engine import TaskProfile, check_readiness, load_profile
from meritlens.collector.store._sink import SpanQueries


def profile_files(paths: tuple[str, ...] | list[str]) -> list[Path]:
    """Each path as given, and each directory's ``*.toml`` files in name order."""
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = sorted(p for p in path.glob("*.toml") if p.is_file())
            if not found:
                raise ValueError(f"--profile {raw}: the directory has no *.toml profile")
            files.extend(found)
        elif path.is_file():
            files.append(path)
        else:
            raise ValueError(f"--profile {raw}: no such file or directory")
    return files


def load_profiles(paths) -> list[tuple[str, TaskProfile]]:
    """(name, profile) of every profile file, the name being the file's stem; raise ValueError
    naming the file (a ProfileError lists each problem)."""
    loaded = []
    for file in profile_files(paths):
        loaded.append((file.stem, load_profile(file)))
    return loaded


class ProfileReadiness:
    """The `ReadinessProvider` of the dashboard: a target's coverage against every loaded profile
    that names it."""

    def __init__(self, store: SpanQueries, profiles: list[tuple[str, TaskProfile]]):
        self._store = store
        self._profiles = profiles

    @classmethod
    def load(cls, store: SpanQueries, paths) -> "ProfileReadiness":
        return cls(store, load_profiles(paths))

    @property
    def profiles(self) -> list[tuple[str, TaskProfile]]:
        """(name, profile) of every loaded profile, in load order."""
        return list(self._profiles)

    @property
    def targets(self) -> list[str]:
        """The targets the profiles name, in load order, once each."""
        return list(dict.fromkeys(profile.target for _, profile in self._profiles))

    def __call__(self, target: str) -> dict:
        reports = []
        for name, profile in self._profiles:
            if profile.target != target:
                continue
            report = check_readiness(profile, self._store.query, target=target)
            reports.append({"profile": name, **report.model_dump(mode="json")})
        return {"target_id": target, "profiles_loaded": len(self._profiles), "reports": reports}
