"""Can DuckDB take and give Arrow data without pyarrow? (issue 7, the RSS target)

Run with an interpreter that has `duckdb` and `nanoarrow` but not the project (a throwaway venv:
`python3 -m venv /tmp/nv && /tmp/nv/bin/pip install duckdb==2.0.1 nanoarrow`). Builds 100,000 rows of
an int64 and a string column with nanoarrow, scans them with DuckDB through `__arrow_c_stream__`,
reads a relation back through DuckDB's own `__arrow_c_stream__`, and prints whether pyarrow or numpy
was imported and the process's anonymous and file-backed RSS.

Correctness: the sum and count DuckDB computes over the scanned rows, and the rows read back, match
what was built.

usage: /tmp/nv/bin/python bench/arrow_c_stream_check.py
"""

import sys

import duckdb
import nanoarrow as na

ROWS = 100_000


class Rows:
    """An Arrow C stream producer of two columns (what a native scanner could hand to DuckDB)."""

    def __init__(self) -> None:
        self._ints = na.c_array(list(range(ROWS)), na.int64())
        self._strings = na.c_array([f"span-{i}" for i in range(ROWS)], na.string())

    def __arrow_c_stream__(self, requested_schema=None):
        batch = na.c_array_from_buffers(na.struct({"n": na.int64(), "s": na.string()}), ROWS, [None],
                                        children=[self._ints, self._strings])
        return na.ArrayStream(batch).__arrow_c_stream__(requested_schema)


def rss() -> str:
    with open("/proc/self/status") as fh:
        fields = dict(line.split(":", 1) for line in fh)
    return f"RssAnon {int(fields['RssAnon'].split()[0]) // 1024} MiB, RssFile {int(fields['RssFile'].split()[0]) // 1024} MiB"


def main() -> None:
    rows = Rows()  # noqa: F841 - DuckDB finds it by name
    con = duckdb.connect()
    [(total, count, distinct)] = con.sql("SELECT sum(n), count(*), count(DISTINCT s) FROM rows").fetchall()
    back = na.ArrayStream(con.sql("SELECT n, s FROM rows WHERE n < 3 ORDER BY n")).read_all()
    got = list(zip(back.child(0).iter_py(), back.child(1).iter_py()))
    ok = (total, count, distinct) == (ROWS * (ROWS - 1) // 2, ROWS, ROWS) and got == [(i, f"span-{i}") for i in range(3)]
    print(f"scanned {count:,} rows, read back {got}; pyarrow imported: {'pyarrow' in sys.modules}, "
          f"numpy imported: {'numpy' in sys.modules}; {rss()}")
    if not ok:
        raise SystemExit("arrow C stream check: WRONG RESULT")
    print("correctness checks passed")


if __name__ == "__main__":
    main()
