"""The window processor: cumulative metric windows from committed spans, behind one engine seam."""
