"""The `meritlens` command line, grouped as the README groups it; `_main.main` is the console script."""

__all__: list[str] = []
