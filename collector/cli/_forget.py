"""`meritlens forget`: remove spans on request, through the running collector or on a DuckDB file no collector
holds (collector/windows/_forget.py)."""

from __future__ import annotations

import re

import click

from meritlens.collector.cli._options import connection_options, env_help, setting_option

_HMAC_CALL = re.compile(r"\bhmac\(\s*'((?:[^']|'')*)'\s*\)", re.IGNORECASE)


def with_hashes(where: str, policy_path: str | None) -> str:
    """``where`` with each ``hmac('value')`` replaced by the value's hash under the redaction policy's key, as
    the collector stored it (`RedactionPolicy.hash_text`)."""
    if not _HMAC_CALL.search(where):
        return where
    if not policy_path:
        raise click.UsageError("hmac('...') in --where needs the redaction policy whose key hashed the values: "
                               "--redact PATH (or $MERITLENS_REDACT)")
    from meritlens.analytics.engine import sql_string
    from meritlens.instrumentation.redaction import RedactionPolicyError, load_policy

    try:
        policy = load_policy(policy_path)
        return _HMAC_CALL.sub(lambda m: sql_string(policy.hash_text(m.group(1).replace("''", "'"))), where)
    except RedactionPolicyError as exc:
        raise click.ClickException(str(exc)) from None


@click.command()
@click.option("--trace-id", "trace_ids", multiple=True, metavar="ID",
              help="Forget every span of this trace (32 hex characters). Repeatable.")
@click.option("--where", default=None, metavar="CONDITION",
              help="Forget the spans this SQL condition over `spans` selects, e.g. \"attributes->>'user.id' = "
                   "'u1'\". A value the redaction policy hashes is written hmac('u1'): it is replaced by its hash "
                   "(needs --redact).")
@click.option("--yes", is_flag=True, help="Remove them; without it, only print what would be removed.")
@setting_option("redact", metavar="PATH", help=env_help("The redaction policy whose key hashed the values that "
                                                      "hmac('...') in --where names", "MERITLENS_REDACT"))
@connection_options
def forget(trace_ids: tuple[str, ...], where: str | None, yes: bool, redact: str | None, connection) -> None:
    """Remove spans on request: from DuckDB, the staging log and the archive, with the windows brought to what
    they would be without them.

    A dry run by default: it prints the spans that match (by target, with their traces, and how many are in the
    archive); --yes removes them. The windows, the windows by time and their evidence digests then equal those of a
    collector that never received the spans. The archive segments that hold matching spans are rewritten without
    them. A crash in the middle shows none of them in `spans`: the next start finishes rewriting the segments, and
    the windows leave them out. Through the running collector when one holds the file, else on the file. Bytes of
    removed spans can remain in the DuckDB file's free blocks until it is compacted (docs/operations.md,
    "Forgetting")."""
    from meritlens.collector.windows._forget import ForgetError, condition

    try:
        where_sql = condition(trace_ids, None if where is None else with_hashes(where, redact))
    except ForgetError as exc:
        raise click.UsageError(str(exc)) from None
    source = connection.source()
    if source.is_collector:
        report = _through_collector(source, where_sql, yes)
    else:
        report = _on_file(source.db, where_sql, yes)
    for line in report.lines():
        click.echo(line)


def _through_collector(source, where: str, act: bool):
    from meritlens.collector._paths import FORGET_PATH
    from meritlens.collector.cli._client import CollectorClient, CollectorRefused, QueryError
    from meritlens.collector.windows._forget import ForgetReport

    try:
        with CollectorClient(source.url, token=source.token, ca_file=source.ca_file, timeout=600.0) as client:
            return ForgetReport(**client.post_json(FORGET_PATH, {"where": where, "yes": act}))
    except CollectorRefused as exc:
        if exc.status == 404:
            raise click.ClickException(f"the collector at {source.url} offers no forgetting (a lake collector: its "
                                       "spans are the lake's Parquet files, which forget does not rewrite)") from None
        raise click.ClickException(str(exc)) from None
    except QueryError as exc:
        raise click.ClickException(str(exc)) from None


def _on_file(db: str, where: str, act: bool):
    from meritlens.collector.cli._resolve import open_file_or_explain
    from meritlens.collector.store._store import SpanStore
    from meritlens.collector.windows._forget import ForgetError, forget
    from meritlens.collector.windows._processor import WindowProcessor

    store = SpanStore(db)
    open_file_or_explain(db, store.start, click.ClickException)
    processor = None
    try:
        processor = WindowProcessor(store)
        processor.open_windows()
        processor.update_windows()  # the spans stored after the saved state's watermark
        return forget(processor, where, act=act)
    except ForgetError as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        if processor is not None:
            processor.shutdown()
        store.shutdown()
