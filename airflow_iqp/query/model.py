"""The Query model: what runs per batch and what runs at the end of a window.

A :class:`Query` is built from the user's SQL by :func:`airflow_iqp.query.decompose`, or
given as two PySpark DataFrame functions (``Query(id=..., streams=..., partial=fn,
final=fn)``). Either way the Spark side calls the same two methods:

* :meth:`Query.compute_partial` ``(spark, tables)``: one batch's partial state, from the
  batch's stream DataFrames and the static tables;
* :meth:`Query.compute_final` ``(spark, partials, static)``: the window's result, from the
  union of every partial and the static tables joined above the aggregations.

A SQL query may aggregate its streams several times (subqueries, CTEs joined to each
other): each aggregation has its own merge, and one batch's partial holds every
aggregation's rows in one table, told apart by its ``_agg`` column
(:mod:`airflow_iqp.query.split._combine`).

Pure Python: no Airflow and no Spark import (a ``spark`` session is passed in).
A SQL query travels as plain JSON (:meth:`to_dict`); a function query as a cloudpickle
of its two functions, made when it is saved (never when a DAG file is parsed).
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from airflow_iqp.errors import ConfigError
from airflow_iqp.paths import check_name

#: ``CAST(... AS __type_of__<col>__)`` in a merge step: the type of partial column <col>.
TYPE_OF = "__type_of__{}__"
#: ``CAST(... AS __avg_type_of__<col>__)``: AVG's type for an input whose SUM is <col>.
AVG_TYPE_OF = "__avg_type_of__{}__"
_TYPE_MARK = re.compile(r"__(type_of|avg_type_of)__(\w+?)__")
_ID = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
#: The final step's names for the merged rows: ``merged``, or ``merged0``, ``merged1``, ...
_MERGED = re.compile(r"merged\d*")


def check_query_id(qid: str) -> str:
    """A query id names a directory of the state directory: letters, digits, ``_ . -``."""
    if not isinstance(qid, str) or not _ID.fullmatch(qid) or qid in (".", ".."):  # fullmatch: no trailing "\n"
        raise ConfigError(f"must be letters, digits, '_', '.' or '-' (it names a state directory), got {qid!r}",
                          field="name")
    return qid


def _avg_type(sum_type: str) -> str:
    """Spark's AVG result type for an input whose SUM has ``sum_type``: SUM widens a
    decimal(p, s) to decimal(p + 10, s) and AVG to decimal(p + 4, s + 4), both at most 38."""
    m = re.fullmatch(r"decimal\((\d+),(\d+)\)", sum_type.replace(" ", ""))
    if not m:
        return "double"
    p, s = int(m.group(1)) - 10, int(m.group(2))
    return f"decimal({min(38, p + 4)},{min(38, s + 4)})"


def resolve_types(sql: str, types: Mapping[str, str | None], unknown: Callable[[re.Match], str] | None = None) -> str:
    """Fill a merge step's type marks from the partials' column types (``simpleString``).
    With ``unknown``, a mark whose column has no type becomes ``unknown(mark)``."""
    def fill(m: re.Match) -> str:
        col_type = types.get(m.group(2)) if unknown else types[m.group(2)]
        if col_type is None:
            return unknown(m)
        return col_type if m.group(1) == "type_of" else _avg_type(col_type)

    return _TYPE_MARK.sub(fill, sql)


def show_types(sql: str, types: Mapping[str, str | None] = {}) -> str:
    """A merge step's type marks, for ``explain``: filled where the partials' ``types`` are
    known, as words where not."""
    return resolve_types(sql, types, lambda m: f"<type of {m.group(2)}>" if m.group(1) == "type_of"
                         else f"<AVG type for {m.group(2)}>")


def _column_types(partials, schema=None) -> dict[str, str]:
    """The partials' column types (``simpleString``), from ``schema`` if given (no request
    to a Connect server), else from ``partials``: what a merge's or fold's type marks read."""
    return {f.name: f.dataType.simpleString() for f in (schema or partials.schema).fields}


def lazy_sql(spark, text: str, **frames):
    """``spark.sql(text, **frames)``, without its round trip on Spark Connect.

    A Connect client's ``spark.sql`` sends the statement to the server at once, to be
    analysed there: one round trip per step, and a fused tail's steps (its batch, the
    merge, the finish) would take three before the one job that writes the result. Here the
    statement is a relation of the plan, as ``spark.sql`` builds it when the server returns
    no result for a command, and it is analysed with the job: an error in it surfaces there.
    A classic session's ``spark.sql`` is local and is used as it is.
    """
    if type(spark).__module__ != "pyspark.sql.connect.session":
        return spark.sql(text, **frames)
    from pyspark.sql.connect.dataframe import DataFrame
    from pyspark.sql.connect.plan import SQL, SubqueryAlias
    from pyspark.sql.connect.sql_formatter import SQLStringFormatter

    formatter = SQLStringFormatter(spark)
    text = formatter.format(text, **frames)
    return DataFrame(SQL(text, [], {}, [SubqueryAlias(df._plan, name) for df, name in formatter._temp_views]), spark)


@dataclass(frozen=True)
class Aggregation:
    """One of several aggregations of a SQL query, as ``explain`` shows it: its own
    per-batch step (its rows of the batch's partial), the streams it reads, and the scan of
    the batch's rows it shares with the other aggregations of the same scan number."""

    partial_sql: str
    streams: tuple[str, ...]
    scan: int = 0

    def to_dict(self) -> dict:
        return {"partial_sql": self.partial_sql, "streams": list(self.streams), "scan": self.scan}


@dataclass(frozen=True)
class Query:
    """One recurring query.

    ``streams`` are the tables whose rows arrive over the window (each batch sees its own
    units' rows); ``static`` the tables read whole by every batch. For a SQL query,
    ``partial_sql`` is the per-batch step over ``{stream}``/``{static}`` references,
    ``merge_sql`` merges ``{partials}`` group by group, and ``finish_sql`` computes
    everything above the aggregation over ``{merged}`` and the static tables joined above
    it, ``final_static`` (a subset of ``static``). ``columns`` are the result's columns, in
    order; ``ordered`` says the result's row order is defined (ORDER BY).

    A query of several aggregations has one ``merge_sql`` per aggregation (a tuple), the
    ``i``-th one's merged rows are ``{merged<i>}`` in ``finish_sql``, and ``aggregations``
    says what each one computes per batch.
    """

    id: str
    streams: tuple[str, ...]
    static: tuple[str, ...] = ()
    partial: Callable | None = field(default=None, compare=False)
    final: Callable | None = field(default=None, compare=False)
    sql: str | None = None
    partial_sql: str | None = None
    merge_sql: str | tuple[str, ...] | None = None
    #: Partials of several batches folded into one partial, the same columns and types
    #: (:meth:`compute_fold`); None when a state does not fold, and for function queries.
    fold_sql: str | None = None
    finish_sql: str | None = None
    columns: tuple[str, ...] = ()
    ordered: bool = False
    title: str = ""
    single_batch: bool = False  #: a query that cannot be split, run as one batch after the window's end
    final_static: tuple[str, ...] = ()  #: the static tables the final step reads (joined above the aggregation)
    aggregations: tuple[Aggregation, ...] = ()  #: with several aggregations, each one's per-batch step

    def __post_init__(self) -> None:
        check_query_id(self.id)
        object.__setattr__(self, "streams", tuple(self.streams))
        object.__setattr__(self, "static", tuple(self.static))
        object.__setattr__(self, "final_static", tuple(self.final_static))
        object.__setattr__(self, "aggregations", tuple(self.aggregations))
        if isinstance(self.merge_sql, list):
            object.__setattr__(self, "merge_sql", tuple(self.merge_sql))
        unknown = [t for t in self.final_static if t not in self.static]
        if unknown:
            raise ConfigError(f"query {self.id}: the final step reads {', '.join(unknown)}, which is not one of its "
                              f"static tables", field="static")
        if any(_MERGED.fullmatch(t) for t in self.final_static):  # the final step's names for the merged rows
            raise ConfigError(f"query {self.id}: a static table joined above the aggregation cannot be named merged "
                              f"(nor merged<N>); rename it", field="static")
        for kind in ("streams", "static"):  # names of views, of schema records and of static/<table>.parquet
            for name in getattr(self, kind):
                check_name(name, kind)
        object.__setattr__(self, "columns", tuple(self.columns))
        if not self.streams:
            raise ConfigError(f"query {self.id} reads no stream; name at least one", field="streams")
        functions = self.partial is not None or self.final is not None
        if functions and self.partial_sql is not None:
            raise ConfigError(f"query {self.id}: give either SQL or partial=/final= functions, not both",
                              field="partial")
        if functions and not (callable(self.partial) and callable(self.final)):
            raise ConfigError(f"query {self.id}: partial= and final= must both be functions", field="final")
        if not functions and self.partial_sql is None:
            raise ConfigError(f"query {self.id}: give sql= or partial= and final= functions", field="sql")

    @property
    def tables(self) -> tuple[str, ...]:
        return self.streams + self.static

    @property
    def merges(self) -> tuple[str, ...]:
        """Each aggregation's merge, over ``{partials}``."""
        if self.merge_sql is None:
            return ()
        return (self.merge_sql,) if isinstance(self.merge_sql, str) else tuple(self.merge_sql)

    @property
    def merged_names(self) -> tuple[str, ...]:
        """The final step's name for each merge's rows, ``{merged}`` or ``{merged<i>}``."""
        n = len(self.merges)
        return ("merged",) if n == 1 else tuple(f"merged{i}" for i in range(n))

    @property
    def kind(self) -> str:
        return "sql" if self.partial_sql is not None else "functions"

    # ----------------------------------------------------------------- Spark side

    def compute_partial(self, spark, tables: Mapping[str, Any]):
        """One batch's partial state, a DataFrame (``tables``: name -> DataFrame)."""
        missing = [t for t in self.tables if t not in tables]
        if missing:
            raise ConfigError(f"query {self.id}: no DataFrame for table(s) {', '.join(missing)}", field="tables")
        if self.partial is not None:
            return self.partial({t: tables[t] for t in self.tables})
        return lazy_sql(spark, self.partial_sql, **{t: tables[t] for t in self.tables})

    def compute_final(self, spark, partials, schema=None, static: Mapping[str, Any] | None = None):
        """The window's result, a DataFrame, from the union of all partials.

        ``schema``: the partials' columns, when the caller has them already (a fused tail's
        written partials, read ahead); else the merge's types are asked of ``partials``.
        ``static``: name -> DataFrame of (at least) the static tables in ``final_static``.
        """
        if self.final is not None:
            return self.final(partials)
        missing = [t for t in self.final_static if t not in (static or {})]
        if missing:
            raise ConfigError(f"query {self.id}: no DataFrame for static table(s) {', '.join(missing)}, joined "
                              f"above the aggregation", field="static")
        types = None
        merged = {}
        for name, merge in zip(self.merged_names, self.merges):
            if _TYPE_MARK.search(merge):
                if types is None:
                    types = _column_types(partials, schema)
                merge = resolve_types(merge, types)
            merged[name] = lazy_sql(spark, merge, partials=partials)
        return lazy_sql(spark, self.finish_sql, **merged, **{t: static[t] for t in self.final_static})

    def compute_fold(self, spark, partials, schema=None):
        """Several batches' partials (a DataFrame of their union) folded into one partial,
        with the same columns and types: merging it with more partials gives the result
        merging them all gives. None when the query's states do not fold (:attr:`fold_sql`).

        A fused tail folds the partials written during the window (the DISS paper's kept
        aggregate state), so that after the window's end its merge reads one state and the
        last batch, not every batch's partial.
        """
        if self.fold_sql is None:
            return None
        fold = self.fold_sql
        if _TYPE_MARK.search(fold):
            fold = resolve_types(fold, _column_types(partials, schema))
        return lazy_sql(spark, fold, partials=partials)

    # ----------------------------------------------------------------- JSON

    def to_dict(self) -> dict:
        out = {"id": self.id, "kind": self.kind, "title": self.title, "streams": list(self.streams),
               "static": list(self.static), "columns": list(self.columns), "ordered": self.ordered,
               "single_batch": self.single_batch, "final_static": list(self.final_static)}
        if self.kind == "sql":
            merge = self.merge_sql if isinstance(self.merge_sql, str) else list(self.merges)
            out |= {"sql": self.sql, "partial_sql": self.partial_sql, "merge_sql": merge, "fold_sql": self.fold_sql,
                    "finish_sql": self.finish_sql}
            if self.aggregations:
                out["aggregations"] = [a.to_dict() for a in self.aggregations]
        else:
            from pyspark import cloudpickle  # at save time only: functions travel by value

            out["functions"] = base64.b64encode(cloudpickle.dumps((self.partial, self.final))).decode()
        return out

    @classmethod
    def from_dict(cls, d: Mapping) -> "Query":
        common = dict(id=d["id"], streams=tuple(d["streams"]), static=tuple(d.get("static", ())),
                      columns=tuple(d.get("columns", ())), ordered=bool(d.get("ordered")),
                      title=d.get("title", ""), single_batch=bool(d.get("single_batch")),
                      final_static=tuple(d.get("final_static", ())))
        if d.get("kind", "sql") == "sql":
            aggs = tuple(Aggregation(a["partial_sql"], tuple(a["streams"]), int(a.get("scan", 0)))
                         for a in d.get("aggregations", ()))
            return cls(**common, sql=d.get("sql"), partial_sql=d["partial_sql"], merge_sql=d["merge_sql"],
                       fold_sql=d.get("fold_sql"), finish_sql=d["finish_sql"], aggregations=aggs)
        import pickle

        partial, final = pickle.loads(base64.b64decode(d["functions"]))
        return cls(**common, partial=partial, final=final)
