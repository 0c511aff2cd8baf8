"""`meritlens serve` hands back the library pages only its start-up used (Linux, MADV_PAGEOUT);
`--keep-startup-pages` (or MERITLENS_RELEASE_STARTUP_PAGES=0) keeps them; the collector works the
same either way. Like the rest of the suite (which reads /proc), these run on Linux, where the
collector's machines and CI run; elsewhere `release_library_pages` does nothing
(`test_where_the_platform_cannot_nothing_is_done_and_nothing_raises`)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import time

import httpx
import pytest

from meritlens.collector import _ospages
from tests.collector.collector_proc import CollectorProcess, make_request, run_serve_refused

_RELEASED = re.compile(r"handed back library pages only start-up used: resident file-backed memory "
                       r"(\d+) -> (\d+) MiB \((\d+) read-only mappings\)")


def _rss_file_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("RssFile:"))


def _file_on_disk(path, mib: int):
    """A file of ``mib`` MiB, on disk before it is mapped (dirty page-cache pages are not reclaimed),
    that only the test's child maps: the test process does not share its pages."""
    with open(path, "wb") as fh:
        fh.write(os.urandom(1 << 20) * mib)
        fh.flush()
        os.fsync(fh.fileno())
    return path


def test_a_read_only_file_mapping_the_process_alone_touched_is_reclaimed(tmp_path):
    path = _file_on_disk(tmp_path / "code.bin", 32)
    child = textwrap.dedent(f"""
        import json, mmap
        from meritlens.collector._ospages import release_library_pages, _resident_file_bytes
        with open({str(path)!r}, "rb") as fh:
            view = mmap.mmap(fh.fileno(), 0, prot=mmap.PROT_READ)
        touched = sum(view[i] for i in range(0, len(view), 4096))  # every page resident
        mapped = _resident_file_bytes()
        released = release_library_pages()
        after = _resident_file_bytes()
        again = sum(view[i] for i in range(0, len(view), 4096))  # read back: same bytes
        print(json.dumps({{"mapped": mapped, "before": released.file_bytes_before,
                          "after": released.file_bytes_after, "now": after, "mappings": released.mappings,
                          "same": touched == again}}))
    """)
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["same"]  # pages faulted back in read the file's bytes again
    assert result["mappings"] >= 1
    assert result["before"] >= 32 << 20
    # the 32 MiB the child touched are gone from its resident set
    assert result["before"] - result["after"] >= 30 << 20, result
    assert result["after"] == result["now"] or abs(result["after"] - result["now"]) < 4 << 20


def test_where_the_platform_cannot_nothing_is_done_and_nothing_raises(monkeypatch):
    monkeypatch.setattr(_ospages, "_libc", None)
    assert _ospages.release_library_pages() is None


def test_serve_hands_back_startup_pages_and_still_stores_and_answers(tmp_path):
    with CollectorProcess(tmp_path / "pages.duckdb", args=("--no-grpc",)) as collector:
        match = collector.wait_for_log(_RELEASED)
        before, after, mappings = (int(g) for g in match.groups())
        # How much goes depends on what other processes map (the kernel keeps pages that another
        # process, such as this test run's other collectors, also has mapped), and the collector's
        # threads may fault pages in meanwhile: the reclaim itself is asserted on a private mapping
        # above; here, that the call ran over the libraries' mappings and the collector goes on.
        assert mappings > 10 and before > 0 and after > 0
        r = httpx.post(collector.url + "/v1/traces", content=make_request(3, 20).SerializeToString(),
                       headers={"Content-Type": "application/x-protobuf"})
        assert r.status_code == 200
        assert collector.sql("SELECT count(*) FROM spans")["rows"] == [[20]]
        sent = collector.sql("SELECT sum(input_tokens) FROM spans")["rows"]
        assert sent[0][0] > 0
        deadline = time.monotonic() + 30  # the window thread follows the stored spans
        while collector.sql("SELECT sum(value) FROM windows WHERE metric = 'input_tokens'"
                            " AND scope = 'all'")["rows"] != sent:
            assert time.monotonic() < deadline, collector.sql("SELECT * FROM windows")
            time.sleep(0.1)


@pytest.mark.parametrize("how", ["flag", "env"])
def test_keep_startup_pages_keeps_them(tmp_path, how):
    args = ("--no-grpc", "--keep-startup-pages") if how == "flag" else ("--no-grpc",)
    env = {"MERITLENS_RELEASE_STARTUP_PAGES": "0"} if how == "env" else None
    with CollectorProcess(tmp_path / "kept.duckdb", args=args, env=env) as collector:
        collector.wait_for_log(
            "library pages only start-up used: kept (--keep-startup-pages or MERITLENS_RELEASE_STARTUP_PAGES=0)")
        assert "handed back library pages" not in collector.log()
        # the libraries' code stays mapped: far more than the few MiB a released collector keeps
        assert _rss_file_kib(collector.proc.pid) > 20 * 1024


def test_a_flag_value_that_is_not_one_is_refused_by_name(tmp_path):
    out = run_serve_refused(tmp_path / "x.duckdb", {"MERITLENS_RELEASE_STARTUP_PAGES": "maybe"})
    assert out.returncode != 0
    assert "MERITLENS_RELEASE_STARTUP_PAGES='maybe'" in out.stderr
    assert not (tmp_path / "x.duckdb").exists()  # refused before anything was opened


def test_only_the_pages_faulted_in_since_a_snapshot_are_reclaimed(tmp_path):
    """What a store's reopen of its database does (`SpanStore.drop_block_cache_if_due`): the pages
    that became resident between `resident_library_pages` and `release_library_pages_since` go,
    those resident before stay."""
    path = _file_on_disk(tmp_path / "code.bin", 8)
    child = textwrap.dedent(f"""
        import json, mmap
        from meritlens.collector._ospages import release_library_pages_since, resident_library_pages
        with open({str(path)!r}, "rb") as fh:
            view = mmap.mmap(fh.fileno(), 0, prot=mmap.PROT_READ)
        pages = len(view) // 4096
        early = sum(view[i * 4096] for i in range(pages // 2))  # the first half: resident before
        before = resident_library_pages()
        late = sum(view[i * 4096] for i in range(pages // 2, pages))  # the second half: faulted in since
        asked = release_library_pages_since(before)
        now = next(v for (start, length), v in resident_library_pages().items() if length == len(view))
        print(json.dumps({{"pages": pages, "asked": asked, "first_half": int(now[:pages // 2].sum()),
                          "second_half": int(now[pages // 2:].sum()), "same": late == sum(view[i * 4096]
                          for i in range(pages // 2, pages))}}))
    """)
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    half = result["pages"] // 2
    assert result["asked"] >= half  # the second half (and whatever else the child faulted in meanwhile)
    assert result["first_half"] == half
    assert result["second_half"] < half // 4
    assert result["same"]


def test_without_a_snapshot_nothing_is_reclaimed():
    assert _ospages.release_library_pages_since(None) == 0
