"""Both span stores a collector can hold offer what `CollectorStore` states (collector/store/_sink.py)."""

from __future__ import annotations

import inspect

import pytest

from meritlens.collector.lake._store import LakeStore
from meritlens.collector.store._sink import CollectorStore, SpanQueries, SpanSink
from meritlens.collector.store._store import SpanStore


@pytest.mark.parametrize("make", [lambda tmp: SpanStore(str(tmp / "s.duckdb")), lambda tmp: LakeStore(str(tmp / "lake"))],
                         ids=["duckdb", "lake"])
def test_each_store_offers_the_collector_store_interface(tmp_path, make):
    store = make(tmp_path)
    assert isinstance(store, CollectorStore)
    for protocol in (SpanSink, SpanQueries):
        for name, member in vars(protocol).items():
            if name.startswith("_") or not callable(member):
                continue
            wanted = list(inspect.signature(member).parameters)
            offered = list(inspect.signature(getattr(type(store), name)).parameters)
            assert offered[:len(wanted)] == wanted, (type(store).__name__, name, offered)


def test_an_object_without_the_staging_side_is_no_sink():
    class ReadOnly:
        db_name = "x"

        def query(self, sql, **options):
            return None

    assert not isinstance(ReadOnly(), SpanSink)
