"""`meritlens serve` makes DuckDB's and Arrow's jemalloc purge freed pages at once and fixes glibc's
mmap threshold (`collector/_freedmemory.py`); `--keep-freed-memory` (or MERITLENS_RETURN_FREED_MEMORY=0)
leaves the allocators as they were. Each allocator's behaviour is checked in a fresh interpreter,
once tuned and once not, so the assertion would fail if the tuning did nothing."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap

import httpx
import pytest

from meritlens.collector import _freedmemory
from tests.collector.collector_proc import CollectorProcess, make_request, run_serve_refused


def _child(code: str) -> dict:
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                         timeout=180)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


_DUCKDB_CHILD = """
    import ctypes, json, duckdb
    from meritlens.collector._freedmemory import duckdb_mallctl, return_freed_memory
    tune = {tune}
    policy = return_freed_memory() if tune else None
    mallctl = duckdb_mallctl()
    def read(name, kind=ctypes.c_size_t):
        value, size = kind(0), ctypes.c_size_t(ctypes.sizeof(kind))
        assert mallctl(name.encode(), ctypes.byref(value), ctypes.byref(size), None, 0) == 0, name
        return value.value
    con = duckdb.connect()
    con.execute("SET threads = 2")
    # a hash aggregate of 2M keys: tens of MiB allocated by DuckDB's threads, then freed
    assert con.execute("SELECT count(*) FROM (SELECT i % 2000000 AS k, count(*) FROM range(4000000) t(i)"
                   " GROUP BY k)").fetchone()[0] == 2000000
    epoch = ctypes.c_uint64(1)
    mallctl(b"epoch", None, None, ctypes.byref(epoch), 8)
    decays = []
    for index in range(read("arenas.narenas", ctypes.c_uint)):
        value, size = ctypes.c_ssize_t(0), ctypes.c_size_t(8)
        if mallctl(f"arena.{{index}}.dirty_decay_ms".encode(), ctypes.byref(value), ctypes.byref(size), None, 0) == 0:
            decays.append(value.value)
    print(json.dumps({{"arenas": None if policy is None else policy.duckdb_arenas, "decays": decays,
                      "dirty_pages": read("stats.arenas.4096.pdirty"),
                      "allocated": read("stats.allocated")}}))
"""


def test_duckdb_purges_the_pages_its_queries_free_at_once():
    tuned = _child(_DUCKDB_CHILD.format(tune=True))
    kept = _child(_DUCKDB_CHILD.format(tune=False))
    assert tuned["arenas"] is not None and tuned["arenas"] >= 1
    # every arena, including those DuckDB's threads created after the call, purges at once
    assert len(tuned["decays"]) >= 2 and set(tuned["decays"]) == {0}, tuned
    assert set(kept["decays"]) == {1000}, kept  # jemalloc's own default (DuckDB keeps it)
    # untuned, the freed hash table stays in DuckDB's arenas as dirty pages (4 KiB each)
    assert kept["dirty_pages"] * 4096 > 8 << 20, kept
    assert tuned["dirty_pages"] * 4096 < 1 << 20, tuned


_GLIBC_CHILD = """
    import ctypes, json
    from meritlens.collector._freedmemory import GLIBC_MMAP_THRESHOLD_BYTES, return_freed_memory
    class MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in
                    ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
                     "fordblks", "keepcost")]
    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    libc.mallinfo2.restype = MallInfo2
    policy = return_freed_memory() if {tune} else None
    size = 4 * GLIBC_MMAP_THRESHOLD_BYTES
    libc.free(libc.malloc(size))  # untuned, freeing a mapped block raises glibc's threshold past it
    before = libc.mallinfo2().hblkhd
    block = libc.malloc(size)
    mapped = libc.mallinfo2().hblkhd - before
    libc.free(block)
    print(json.dumps({{"threshold": None if policy is None else policy.glibc_mmap_threshold,
                      "mapped": mapped, "size": size}}))
"""


def test_glibc_serves_large_blocks_from_their_own_mapping_after_one_was_freed():
    tuned = _child(_GLIBC_CHILD.format(tune=True))
    kept = _child(_GLIBC_CHILD.format(tune=False))
    assert tuned["threshold"] == _freedmemory.GLIBC_MMAP_THRESHOLD_BYTES
    assert tuned["mapped"] >= tuned["size"], tuned  # its own mapping: returned to the system on free
    assert kept["mapped"] == 0, kept  # from the heap, where a free leaves a hole the process keeps


_ARROW_CHILD = """
    import json, os
    from meritlens.collector._freedmemory import prepare_arrow_allocator, return_freed_memory
    os.environ["ARROW_DEFAULT_MEMORY_POOL"] = "jemalloc"
    prepared = prepare_arrow_allocator() if {tune} else False
    import numpy as np
    import pyarrow as pa
    def anonymous_mib():
        with open("/proc/self/status") as fh:
            return next(int(line.split()[1]) / 1024 for line in fh if line.startswith("RssAnon:"))
    pool = pa.default_memory_pool()
    assert pool.backend_name == "jemalloc", pool.backend_name
    before = anonymous_mib()
    buffers = [pa.allocate_buffer(256 * 1024, memory_pool=pool) for _ in range(200)]  # 50 MiB, like staged rows
    for buffer in buffers:
        np.frombuffer(buffer, dtype=np.uint8)[:] = 1
    held = anonymous_mib() - before
    del buffers
    after_free = anonymous_mib() - before
    print(json.dumps({{"prepared": prepared, "reported": return_freed_memory().arrow_jemalloc,
                      "held": held, "after_free": after_free,
                      "again": prepare_arrow_allocator()}}))
"""


def test_arrow_purges_the_buffers_it_frees_at_once_when_prepared_before_import():
    tuned = _child(_ARROW_CHILD.format(tune=True))
    kept = _child(_ARROW_CHILD.format(tune=False))
    assert tuned["prepared"] is True and tuned["reported"] is True, tuned
    assert tuned["again"] is False  # pyarrow is imported now: too late to configure its allocator
    assert kept["reported"] is False, kept
    assert tuned["held"] > 40 and kept["held"] > 40  # the 50 MiB were touched in both
    assert tuned["after_free"] < 8, tuned  # handed back when freed
    assert kept["after_free"] > 25, kept  # Arrow's default keeps freed pages for reuse


def test_arrow_allocator_configured_by_the_environment_is_left_alone(monkeypatch):
    monkeypatch.setenv("JE_ARROW_MALLOC_CONF", "narenas:2")
    monkeypatch.delitem(sys.modules, "pyarrow", raising=False)
    assert _freedmemory.prepare_arrow_allocator() is False
    assert os.environ["JE_ARROW_MALLOC_CONF"] == "narenas:2"


def test_where_an_allocator_cannot_be_tuned_it_is_reported_and_nothing_raises(monkeypatch):
    monkeypatch.setattr(_freedmemory, "_libc", None)
    monkeypatch.setattr(_freedmemory, "duckdb_mallctl", lambda: None)
    policy = _freedmemory.return_freed_memory()
    assert policy == _freedmemory.FreedMemoryPolicy(glibc_mmap_threshold=None, duckdb_arenas=None)

    def broken():
        raise OSError("no such symbol")

    monkeypatch.setattr(_freedmemory, "duckdb_mallctl", broken)
    assert _freedmemory.return_freed_memory().duckdb_arenas is None


def test_serve_returns_freed_memory_and_still_stores_and_answers(tmp_path):
    with CollectorProcess(tmp_path / "freed.duckdb", args=("--no-grpc",)) as collector:
        line = collector.wait_for_log(re.compile(r"freed memory handed back at once: .*")).group(0)
        assert "DuckDB's jemalloc purges freed pages at once" in line
        assert "Arrow's jemalloc purges freed pages at once" in line
        assert f"glibc's mmap threshold fixed at {_freedmemory.GLIBC_MMAP_THRESHOLD_BYTES // 1024} KiB" in line
        r = httpx.post(collector.url + "/v1/traces", content=make_request(3, 20).SerializeToString(),
                       headers={"Content-Type": "application/x-protobuf"})
        assert r.status_code == 200
        assert collector.sql("SELECT count(*) FROM spans")["rows"] == [[20]]


@pytest.mark.parametrize("how", ["flag", "env"])
def test_keep_freed_memory_leaves_the_allocators_alone(tmp_path, how):
    args = ("--no-grpc", "--keep-freed-memory") if how == "flag" else ("--no-grpc",)
    env = {"MERITLENS_RETURN_FREED_MEMORY": "0"} if how == "env" else None
    with CollectorProcess(tmp_path / "kept.duckdb", args=args, env=env) as collector:
        collector.wait_for_log("freed memory kept for reuse by the allocators "
                               "(--keep-freed-memory or MERITLENS_RETURN_FREED_MEMORY=0)")
        assert "freed memory handed back" not in collector.log()


def test_a_freed_memory_value_that_is_not_a_flag_is_refused_by_name(tmp_path):
    out = run_serve_refused(tmp_path / "x.duckdb", {"MERITLENS_RETURN_FREED_MEMORY": "sometimes"})
    assert out.returncode != 0
    assert "MERITLENS_RETURN_FREED_MEMORY='sometimes'" in out.stderr
    assert not (tmp_path / "x.duckdb").exists()
