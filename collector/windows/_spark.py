"""The Spark engine: the sample rows of a span lake computed by Apache Spark.

The samples are the single node's (`sample_rows_sql` of `meritlens.analytics._samples`), carried to
Spark SQL by sqlglot, with the few DuckDB-only constructs rewritten in the syntax tree (nothing of the
definitions is restated here):

- ``md5_number`` and the two 64-bit halves read from it: Spark's ``md5`` hex, each half's 8 bytes
  reversed (little-endian) and read by ``conv`` as an unsigned DECIMAL(20, 0); the sums mod 2**64
  stay exact in decimals (``UBIGINT`` becomes DECIMAL(20, 0));
- ``list_sum``/``list_avg`` of a sorted list: a fold (``aggregate``) over the sorted array, the same
  additions in the same order, so the doubles are equal bit for bit; NULL for an empty list;
- ``len`` of a list: ``size``; ``epoch_us``: ``unix_micros``;
- ``UNION ALL BY NAME``: both sides padded with NULL to the same columns, in one order.

Spark deduplicates the spans by ``(trace_id, span_id)``, computes the samples and writes them as
Parquet next to the lake; the driver streams them back in Arrow batches (`samples`) into the shared
`WindowBook` (`compute_windows`), so the window rows are those of the single node by construction.
"""

from __future__ import annotations

import shutil
from functools import lru_cache
from typing import Iterator

import duckdb
import pyarrow as pa
import pyarrow.dataset as pads
import sqlglot
from sqlglot import exp

from meritlens.analytics.engine import (
    APPLICATION_SPANS,
    KEY_HIGH,
    KEY_LOW,
    SPANS_DDL,
    SPANS_TABLE,
    TASK_KEY,
    WINDOW_INPUT_COLUMNS,
    sample_rows_sql,
)

BATCH_ROWS = 65_536
MAX_ROUNDS = 20
"""Rounds of widening the spans new segments reach before the run gives up on them (recomputes all)."""
_DECIMAL_U64 = "DECIMAL(20, 0)"


def _md5_half(column: str, first_byte: int) -> str:
    """Spark SQL: bytes ``first_byte``..+7 of the md5 hex in ``column``, read little-endian, unsigned."""
    pairs = ", ".join(f"substr({column}, {2 * (first_byte + i) + 1}, 2)" for i in reversed(range(8)))
    return f"CAST(conv(concat({pairs}), 16, 10) AS {_DECIMAL_U64})"


def _spark(sql: str) -> exp.Expression:
    return sqlglot.parse_one(sql, read="spark")


def _fold(array: exp.Expression, average: bool) -> exp.Expression:
    """Sum (or mean) of a sorted array added left to right, NULL when it is empty (as DuckDB's)."""
    arr = array.sql(dialect="spark")
    total = f"aggregate({arr}, CAST(0 AS DOUBLE), (acc, x) -> acc + x)"
    value = f"{total} / size({arr})" if average else total
    return _spark(f"CASE WHEN size({arr}) > 0 THEN {value} END")


class _Rewrite:
    """The DuckDB-to-Spark rewrites of one sample statement (see the module's docstring)."""

    def __init__(self) -> None:
        self.key_halves = {
            sqlglot.parse_one(KEY_HIGH, read="duckdb"): _spark(_md5_half("span_md5", 0)),
            sqlglot.parse_one(KEY_LOW, read="duckdb"): _spark(_md5_half("span_md5", 8)),
        }

    def __call__(self, node: exp.Expression) -> exp.Expression:
        for duck, spark in self.key_halves.items():
            if node == duck:
                return spark.copy()
        if isinstance(node, exp.Anonymous):
            name = node.name.lower()
            args = node.expressions
            if name == "md5_number":
                return exp.MD5(this=args[0])
            if name == "epoch_us":
                return exp.Anonymous(this="unix_micros", expressions=args)
            if name in ("list_sum", "list_avg"):
                return _fold(args[0], name == "list_avg")
        if isinstance(node, exp.Length) and isinstance(node.this, (exp.ArrayDistinct, exp.ArrayAgg, exp.ArraySort)):
            return exp.ArraySize(this=node.this)
        if isinstance(node, exp.DataType) and node.this == exp.DataType.Type.UBIGINT:
            return exp.DataType.build(_DECIMAL_U64, dialect="spark")
        return node


def _projection(side: exp.Expression) -> list[str]:
    """The column names a side of the union gives (through a ``SELECT *`` over one subquery)."""
    select = side
    while isinstance(select, exp.Select) and any(isinstance(e, exp.Star) for e in select.expressions):
        select = select.args["from_"].this.this
    return list(select.named_selects)


def _union_by_position(union: exp.Union) -> exp.Expression:
    """``a UNION ALL BY NAME b`` as a positional UNION ALL: both sides give every column, NULL where absent."""
    left, right = union.this, union.expression
    left_names, right_names = _projection(left), _projection(right)
    names = left_names + [n for n in right_names if n not in left_names]

    def padded(side: exp.Expression, has: list[str], alias: str) -> exp.Expression:
        columns = ", ".join(n if n in has else f"CAST(NULL AS DOUBLE) AS {n}" for n in names)
        return _spark(f"SELECT {columns} FROM ({side.sql(dialect='spark')}) AS {alias}")

    return exp.Union(this=padded(left, left_names, "_by_name_l"), expression=padded(right, right_names, "_by_name_r"),
                     distinct=False)


@lru_cache(maxsize=8)
def spark_sample_sql(source: str) -> str:
    """`sample_rows_sql` over ``source`` (a relation with the columns of `spans`, each span once), in Spark SQL."""
    tree = sqlglot.parse_one(sample_rows_sql(source), read="duckdb")
    tree = tree.transform(_Rewrite())
    # after the rewrites, which the union's padded sides are rendered with
    tree = tree.transform(lambda n: _union_by_position(n) if isinstance(n, exp.Union) and n.args.get("by_name") else n)
    return tree.sql(dialect="spark")


@lru_cache(maxsize=1)
def sample_schema() -> pa.Schema:
    """The Arrow schema of the sample rows as DuckDB gives them: Spark's rows are cast to it."""
    con = duckdb.connect()
    try:
        con.execute(SPANS_DDL)
        return con.sql(sample_rows_sql(SPANS_TABLE)).to_arrow_table().schema
    finally:
        con.close()


_SPARK_TYPES = {"string": "STRING", "int8": "TINYINT", "int32": "INT", "int64": "BIGINT", "double": "DOUBLE",
                "bool": "BOOLEAN"}


@lru_cache(maxsize=1)
def window_input_ddl() -> str:
    """The Spark schema (DDL) of the span columns the windows read, from the lake's Arrow schema."""
    from meritlens.collector.lake._layout import spans_schema

    schema = spans_schema()

    def spark_type(t: pa.DataType) -> str:
        return "TIMESTAMP" if pa.types.is_timestamp(t) else _SPARK_TYPES[str(t)]

    return ", ".join(f"{name} {spark_type(schema.field(name).type)}" for name in WINDOW_INPUT_COLUMNS)


class SparkEngine:
    """Samples of the span segments ``files`` (URIs Spark reads), computed on ``spark`` (a SparkSession).
    ``scratch`` is a directory beside them (on a filesystem the workers and the driver share) where
    the samples are written; it is removed afterwards."""

    def __init__(self, spark, files: list[str], scratch: str, *, scratch_local: str | None = None):
        """``files``: the segments `samples` reads."""
        self.spark = spark
        self.files = files
        self.scratch = scratch
        self.scratch_local = scratch_local
        """The scratch directory as the driver's pyarrow reads it (a local path), when not ``scratch``."""
        self.sample_rows = 0

    def spans(self, files: list[str] | None = None):
        """The spans of the files, each (trace_id, span_id) once: the first received copy."""
        from pyspark.sql import Window, functions as F

        # the schema given, not inferred: no footer of the many small segments is read to plan the job
        raw = self.spark.read.schema(window_input_ddl()).parquet(*(self.files if files is None else files))
        first = Window.partitionBy("trace_id", "span_id").orderBy("received_at")
        return raw.withColumn("_copy", F.row_number().over(first)).where("_copy = 1").drop("_copy")

    def samples(self) -> Iterator[pa.Table]:
        if not self.files:
            return
        yield from self._computed(self.spans(), "all")

    def _computed(self, spans, name: str) -> Iterator[pa.Table]:
        """The sample rows of ``spans`` (a DataFrame of span rows, each once), through Parquet in the scratch directory."""
        view = f"lake_{name}"
        spans.createOrReplaceTempView(view)
        self.spark.sql(spark_sample_sql(view)).write.mode("overwrite").parquet(f"{self.scratch}/{name}")
        schema = sample_schema()
        local = f"{self.scratch_local or self.scratch}/{name}"
        for batch in pads.dataset(local, format="parquet").to_batches(batch_size=BATCH_ROWS):
            table = pa.Table.from_batches([batch]).select(schema.names)
            self.sample_rows += table.num_rows
            yield table.cast(schema)

    def delta_samples(self, old_files: list[str], new_files: list[str]) -> tuple[pa.Table, pa.Table]:
        """The sample rows that the spans of ``new_files`` change, as they were over ``old_files``
        alone (removed) and are over both (added). They are the samples of every task and trace the
        new spans reach, and of every task and trace those reach in turn (whole components: a task's
        sample needs all its spans, and a span's flags all the spans of its trace)."""
        from pyspark.sql import functions as F

        old = self.spans(old_files) if old_files else None
        new = self.spans(new_files)
        if old is not None:
            new = new.join(old.select("trace_id", "span_id"), ["trace_id", "span_id"], "left_anti")
            both = old.withColumn("_new", F.lit(False)).unionByName(new.withColumn("_new", F.lit(True)))
        else:
            both = new.withColumn("_new", F.lit(True))
        app = both.where(APPLICATION_SPANS).withColumn("_task", F.expr(TASK_KEY)).localCheckpoint()
        reached = app.where("_new")
        size = -1
        for _ in range(MAX_ROUNDS):
            traces = reached.select("trace_id").distinct()
            tasks = reached.select("target_id", "_task").distinct()
            reached = app.join(traces, "trace_id", "left_semi").unionByName(
                app.join(tasks, ["target_id", "_task"], "left_semi")).dropDuplicates(["trace_id", "span_id"])
            reached = reached.localCheckpoint()
            grown = reached.count()
            if grown == size:
                break
            size = grown
        else:
            raise RuntimeError(f"the spans the new segments reach did not close in {MAX_ROUNDS} rounds")
        columns = list(WINDOW_INPUT_COLUMNS)
        removed = list(self._computed(reached.where("NOT _new").select(*columns), "removed"))
        added = list(self._computed(reached.select(*columns), "added"))
        schema = sample_schema()
        return (pa.concat_tables(removed) if removed else schema.empty_table(),
                pa.concat_tables(added) if added else schema.empty_table())

    def close(self) -> None:
        if self.scratch_local:
            shutil.rmtree(self.scratch_local, ignore_errors=True)
