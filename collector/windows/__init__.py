"""The window processor: cumulative metric windows from committed spans, behind one engine seam."""

from meritlens.collector.windows._engine import DuckDBEngine, WindowEngine, compute_windows
from meritlens.collector.windows._local import LocalStore
from meritlens.collector.windows._processor import WindowProcessor

__all__ = ["DuckDBEngine", "LocalStore", "WindowEngine", "WindowProcessor", "compute_windows"]
