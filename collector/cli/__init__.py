"""The `meritlens` command line, grouped as the README groups it."""
