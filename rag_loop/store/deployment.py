"""Where each table lives, per deployment: an embedded deployment keeps every table in the DuckDB
file; a lake-backed one keeps the trace-sized tables (`TRACE_SIZED`) in its Delta lake, the
database holding a view of each, and the small ones in the file.

The home is configuration, never something a run decides: a run that finds a table in the other
home refuses (`require_home`), and `migrate` moves the tables between homes, explicitly and
idempotently, each table in one database transaction after its lake commit.
"""

from __future__ import annotations

from typing import Literal

import duckdb

from rag_loop.store.ddl import KEPT_IN_LAKE, span_day, utc_day
from rag_loop.store.lake import Lake, expose_lake_tables, in_lake, lake_view_uri
from rag_loop.store.tables import create_tables, relation_kind, transaction

# the tables a lake-backed deployment keeps in its lake: ingestion's and the stages whose rows
# grow with traffic (the engine's `run` stores them)
STAGE_TABLES = ("trace_signals", "failure_candidates")
TRACE_SIZED = (*KEPT_IN_LAKE, *STAGE_TABLES)
SMALL_JOINED = ("documents",)  # small tables the Spark engine's stages join, copied whole to the lake
# a lake row's day, for the kept tables whose rows do not carry one (a child row carries its trace's)
ROW_DAY = {"raw_traces": utc_day(), "otlp_spans": span_day(), "otlp_traces": utc_day("assembled_at")}


class WrongHome(RuntimeError):
    """A table is not where the deployment keeps it (a run refuses to move it)."""


def require_home(con: duckdb.DuckDBPyConnection, lake: Lake | None, name: str) -> None:
    """Raise WrongHome when the database's `name` holds rows the deployment keeps elsewhere: a
    table with rows in a lake-backed deployment, or a view of a lake in an embedded one (or of
    another lake). An empty table, or none, is fine: there is nothing to move."""
    kind = relation_kind(con, name)
    if lake is None and lake_view_uri(con, name) is not None:
        raise WrongHome(f"{name} is in the trace lake {lake_view_uri(con, name)}, and this deployment is "
                        "embedded: run `rag-loop lake migrate --to embedded` first (or configure the lake)")
    if lake is not None and kind == "view" and lake_view_uri(con, name) not in (None, lake.uri(name)):
        raise WrongHome(f"{name} is in another trace lake ({lake_view_uri(con, name)}), not {lake.root}: "
                        f"run `rag-loop lake migrate --to embedded`, then `--to lake` with this one")
    if lake is not None and kind == "table" and con.execute(f'SELECT count(*) FROM "{name}"').fetchall()[0][0]:
        raise WrongHome(f"{name} is in the DuckDB file, and this deployment keeps it in the trace lake "
                        f"{lake.root}: run `rag-loop lake migrate --to lake` first")


def migrate(con: duckdb.DuckDBPyConnection, lake: Lake, to: Literal["lake", "embedded"]) -> dict[str, int]:
    """Move every trace-sized table to the lake (`to="lake"`: written there in one commit, the
    database's table replaced by a view of it) or back into the DuckDB file (`to="embedded"`:
    the view replaced by a table of its rows; the lake's files stay until removed). Tables
    already in their new home are left alone, so a second run moves nothing. Returns the rows
    moved per table."""
    moved = {}
    for name in TRACE_SIZED:
        kind = relation_kind(con, name)
        if to == "lake" and kind == "table":
            day = ROW_DAY.get(name)
            rows = f'SELECT *, {day} AS day FROM "{name}"' if day else f'SELECT * FROM "{name}"'
            lake.write(name, con.sql(rows).to_arrow_reader())
            columns = [c for c, *_ in con.execute(f'DESCRIBE "{name}"').fetchall()]
            moved[name] = con.execute(f'SELECT count(*) FROM "{name}"').fetchall()[0][0]
            expose_lake_tables(con, lake, {name: columns})
        elif to == "embedded" and kind == "view" and in_lake(con, lake, name):
            with transaction(con):
                con.execute(f'ALTER VIEW "{name}" RENAME TO "{name}__lake"')
                if name in KEPT_IN_LAKE:  # ingestion's tables, with their DDL
                    create_tables(con)
                    con.execute(f'INSERT INTO "{name}" BY NAME SELECT * FROM "{name}__lake"')
                else:
                    con.execute(f'CREATE TABLE "{name}" AS SELECT * FROM "{name}__lake"')
                con.execute(f'DROP VIEW "{name}__lake"')
            moved[name] = con.execute(f'SELECT count(*) FROM "{name}"').fetchall()[0][0]
    return moved


def copy_small_tables(con: duckdb.DuckDBPyConnection, lake: Lake) -> dict[str, int]:
    """The small tables the stages join (`SMALL_JOINED`) written whole to the lake, one commit
    each (they stay the database's: this is a copy for Spark's executors); returns their rows.
    The trace-sized tables are in the lake already, or the run refuses (WrongHome): ingestion
    writes them there, and `migrate` moves an embedded deployment's."""
    for name in KEPT_IN_LAKE:
        require_home(con, lake, name)
    copied = {}
    for name in SMALL_JOINED:
        lake.write(name, con.sql(f'SELECT * FROM "{name}"').to_arrow_reader(), partitioned=False)
        copied[name] = con.execute(f'SELECT count(*) FROM "{name}"').fetchall()[0][0]
    return copied
