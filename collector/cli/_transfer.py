"""Moving spans in and out: `meritlens import` and `meritlens export`."""

from __future__ import annotations

import os

import click

from meritlens.collector.cli._options import connection_options, format_option, progress_option


@click.command("import")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=True, readable=True))
@connection_options(create=True)
@format_option()
@progress_option
def import_command(files: tuple[str, ...], connection, fmt: str, progress: bool | None) -> None:
    """Load span FILES into the store: OTLP JSON or protobuf (gzip too), JSON lines as the OTel
    Collector's file exporter writes them, or a `meritlens export` directory or spans.parquet.

    Writes into the DuckDB file when no process holds it (creating it if needed), else through the
    collector that holds it (its /v1/traces). Spans already stored are not counted twice. A file that
    could not be read or a refused span is an error (exit status 2); everything accepted is kept."""
    from meritlens.collector.cli._import import ImportFailed, import_files, open_destination
    from meritlens.collector.cli._import_files import expand_paths
    from meritlens.collector.cli._output import render
    from meritlens.collector.cli._progress import progress_bar
    from meritlens.collector.store._results import QueryResult

    paths = expand_paths(list(files))
    if not paths:
        raise click.UsageError("no files to import (the directories given are empty)")
    source = connection.source()
    try:
        destination = open_destination(source)
    except ImportFailed as exc:
        raise click.ClickException(str(exc)) from None
    sizes = [max(1, os.path.getsize(p)) for p in paths]
    where = source.db if destination.via == "file" else destination.url
    with progress_bar(progress, total=sum(sizes), unit="spans") as bar:
        done_before = [sum(sizes[:i]) for i in range(len(paths))]
        spans_read = [0] * len(paths)

        def advance(index: int, fraction: float, spans: int) -> None:
            spans_read[index] = spans
            bar.update(completed=done_before[index] + fraction * sizes[index],
                       description=os.path.basename(paths[index]), count=sum(spans_read))

        try:
            results = import_files(paths, destination, progress=advance)
        except ImportFailed as exc:
            raise click.ClickException(str(exc)) from None
    columns = ["file", "format", "spans", "refused", "new", "duplicates", "problem"]
    rows = [(r.file, r.format, r.spans, r.refused, r.new, r.duplicates,
             "; ".join(r.problems + r.refusal_reasons) or None) for r in results]
    render(QueryResult(columns, [], rows), fmt)
    total = sum(r.spans for r in results)
    refused = sum(r.refused for r in results)
    failed = [r for r in results if r.problems]
    summary = f"read {total} span{'s' if total != 1 else ''} from {len(results)} file{'s' if len(results) != 1 else ''}"
    if destination.via == "file":
        summary += (f" into {where}: {sum(r.new for r in results)} new, "
                    f"{sum(r.duplicates for r in results)} already stored")
    else:
        summary += f" through the collector at {where}: {total - refused} accepted"
    if refused:
        summary += f", {refused} refused"
    if failed:
        summary += f"; {len(failed)} file{'s' if len(failed) != 1 else ''} could not be fully read"
    if refused or failed:
        raise click.ClickException(summary)
    click.echo(summary, err=True)


@click.command("export")
@click.option("--parquet", "parquet_dir", required=True, type=click.Path(file_okay=False),
              help="Write <DIR>/spans.parquet and <DIR>/windows.parquet.")
@connection_options(lake=True)
@click.option("--table", "tables", multiple=True, type=click.Choice(["spans", "windows"]),
              help="Only these tables (repeatable; default both).")
@click.option("--compression", type=click.Choice(["snappy", "zstd", "gzip", "none"]), default="snappy",
              show_default=True, help="Parquet compression codec.")
@format_option()
@progress_option
def export_command(parquet_dir: str, connection, tables: tuple[str, ...], compression: str, fmt: str,
                   progress: bool | None) -> None:
    """Export spans and windows as Parquet files (readable by DuckDB, pandas, Spark).

    Reads the DuckDB file read-only when no process holds it, else the collector that holds it
    (its read-only /api/arrow endpoint); with --lake, the lake's spans (each once) and windows."""
    from meritlens.collector.cli._export import ExportFailed, export_parquet
    from meritlens.collector.cli._output import render
    from meritlens.collector.cli._progress import progress_bar
    from meritlens.collector.store._results import QueryResult

    source = connection.source()
    with progress_bar(progress, total=None, unit="rows") as bar:
        current = [None]

        def advance(table: str, rows: int, total: int | None) -> None:
            if current[0] != table:
                current[0] = table
                bar.new_row(f"{table}.parquet", total)
            bar.update(completed=rows, count=rows)

        try:
            written = export_parquet(source, parquet_dir, tables=tables or ("spans", "windows"),
                                     compression=compression, progress=advance)
        except ExportFailed as exc:
            raise click.ClickException(str(exc)) from None
    render(QueryResult(["table", "file", "rows"], [], [(w.table, w.path, w.rows) for w in written]), fmt)
