"""meritlens.analytics: metric catalogue, windows, profiles, readiness and queries."""

__all__: list[str] = []
