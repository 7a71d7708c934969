"""Where each table lives, per deployment: an embedded deployment keeps every table in the DuckDB
file; a lake-backed one keeps the trace-sized tables (`TRACE_SIZED`) in its Delta lake, the
database holding a view of each, and the small ones in the file.

The home is configuration, recorded once in the database: a lake-backed deployment's database
has one row in `rag_loop_deployment` (the lake's URI and the names of its storage options, never
their values), which `rag-loop lake migrate` writes and removes. A run compares the lake it is
configured with to that row (`require_home`) and refuses when they differ; nothing asks where a
single table lives. `migrate` moves the tables between homes, explicitly and idempotently, each
table in one database transaction after its lake commit.
"""

from __future__ import annotations

import os
from typing import Literal

import duckdb

from rag_loop.store.ddl import KEPT_IN_LAKE, span_day, utc_day
from rag_loop.store.lake import OPTIONS_VARIABLE, Lake, expose_lake_tables
from rag_loop.store.tables import create_tables, relation_kind, transaction

DEPLOYMENT = "rag_loop_deployment"  # one row in a lake-backed deployment's database, none in an embedded one
# the tables a lake-backed deployment keeps in its lake: ingestion's and the stages whose rows
# grow with traffic (the engine's `run` stores them)
STAGE_TABLES = ("trace_signals", "failure_candidates")
TRACE_SIZED = (*KEPT_IN_LAKE, *STAGE_TABLES)
SMALL_JOINED = ("documents",)  # small tables the Spark engine's stages join, copied whole to the lake
# a lake row's day, for the kept tables whose rows do not carry one (a child row carries its trace's)
ROW_DAY = {"raw_traces": utc_day(), "otlp_spans": span_day(), "otlp_traces": utc_day("assembled_at")}


class WrongHome(RuntimeError):
    """The deployment's configured home is not the one its database records (a run refuses)."""


def recorded_lake(con: duckdb.DuckDBPyConnection) -> Lake | None:
    """The lake the database records (None: embedded), with the storage options of the lake
    this connection was attached to (`Lake.attach`) when it is that one, else the recorded
    options' values from the environment."""
    if not con.execute("SELECT count(*) FROM duckdb_tables() WHERE database_name = current_database() "
                       "AND schema_name = current_schema() AND table_name = ?", [DEPLOYMENT]).fetchall()[0][0]:
        return None
    return _read_record(con)


def _read_record(con: duckdb.DuckDBPyConnection) -> Lake | None:
    """`recorded_lake` of a database that has the record's table."""
    rows = con.execute(f"SELECT lake, storage_options, getvariable('{OPTIONS_VARIABLE}') "
                       f"FROM {DEPLOYMENT}").fetchall()
    if not rows:
        return None
    root, names, attached = rows[0]
    if attached and attached.get("root") == root:
        return Lake(root, {k: v for k, v in attached.items() if k != "root"})
    return Lake(root, {name: os.environ[name] for name in names if name in os.environ})


def record_lake(con: duckdb.DuckDBPyConnection, lake: Lake | None) -> None:
    """The database records `lake` as its deployment's (None: embedded), inside the caller's
    transaction; the names of the storage options only."""
    con.execute(f"CREATE TABLE IF NOT EXISTS {DEPLOYMENT} (lake VARCHAR NOT NULL, storage_options VARCHAR[])")
    con.execute(f"DELETE FROM {DEPLOYMENT}")
    if lake is not None:
        con.execute(f"INSERT INTO {DEPLOYMENT} VALUES (?, ?)", [lake.root, sorted(lake.storage_options)])


def require_home(con: duckdb.DuckDBPyConnection, lake: Lake | None) -> None:
    """Raise WrongHome when the database records another home than `lake` (the configured one:
    None, embedded). A database that records none and has no trace-sized rows (a new one) is
    not refused: a lake-backed run makes it the lake's (`migrate`, every table empty)."""
    has_record, views = _home(con)
    recorded = _read_record(con) if has_record else None
    if lake is None and recorded is not None:
        raise WrongHome(f"the trace-sized tables are in the trace lake {recorded.root}, and this deployment is "
                        "embedded: run `rag-loop lake migrate --to embedded` first (or configure the lake)")
    if lake is None and views:  # a lake-backed database from before the record
        raise WrongHome(f"{', '.join(views)} are views of a trace lake, and this deployment is embedded: "
                        "run `rag-loop lake migrate --to embedded` with that lake first (or configure it)")
    if lake is not None and recorded is not None and recorded.root != lake.root:
        raise WrongHome(f"the trace-sized tables are in another trace lake ({recorded.root}), not {lake.root}: "
                        "run `rag-loop lake migrate --to embedded`, then `--to lake` with this one")
    if lake is not None and recorded is None:
        if any(rows for _, rows in _tables(con)):
            raise WrongHome(f"the trace-sized tables are in the DuckDB file, and this deployment keeps them in "
                            f"the trace lake {lake.root}: run `rag-loop lake migrate --to lake` first")
        migrate(con, lake, "lake")


def _home(con: duckdb.DuckDBPyConnection) -> tuple[bool, list[str]]:
    """Whether the database has the record's table, and the trace-sized names it holds as views:
    one catalog query (require_home's, before each run and ingestion)."""
    rows = con.execute(f"""
        SELECT table_name, 'table' FROM duckdb_tables() WHERE database_name = current_database()
          AND schema_name = current_schema() AND table_name = '{DEPLOYMENT}'
        UNION ALL
        SELECT view_name, 'view' FROM duckdb_views() WHERE database_name = current_database()
          AND schema_name = current_schema() AND NOT internal""").fetchall()
    return (any(kind == "table" for _, kind in rows),
            sorted(name for name, kind in rows if kind == "view" and name in TRACE_SIZED))


def _tables(con: duckdb.DuckDBPyConnection) -> list[tuple[str, int]]:
    """The trace-sized tables the database holds as tables (not views), with their rows."""
    names = [name for (name,) in con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() AND "
        "schema_name = current_schema() AND table_name IN (SELECT unnest(?))", [list(TRACE_SIZED)]).fetchall()]
    if not names:
        return []
    counts = " UNION ALL ".join(f"SELECT '{name}', count(*) FROM \"{name}\"" for name in names)
    return [(name, rows) for name, rows in con.execute(counts).fetchall()]


def migrate(con: duckdb.DuckDBPyConnection, lake: Lake, to: Literal["lake", "embedded"]) -> dict[str, int]:
    """Move every trace-sized table to the lake (`to="lake"`: written there in one commit, the
    database's table replaced by a view of it) or back into the DuckDB file (`to="embedded"`:
    the view replaced by a table of its rows; the lake's files stay until removed), and record
    the new home. Tables already in their new home are left alone, so a second run moves
    nothing. Returns the rows moved per table."""
    recorded = recorded_lake(con)
    if recorded is not None and recorded.root != lake.root:
        raise WrongHome(f"the database records the trace lake {recorded.root}, not {lake.root}: "
                        f"migrate it with that lake")
    moved = {}
    if to == "lake":
        create_tables(con)  # every ingestion table, so that none is made in the file later
        for name, rows in _tables(con):
            day = ROW_DAY.get(name)
            query = f'SELECT *, {day} AS day FROM "{name}"' if day else f'SELECT * FROM "{name}"'
            lake.write(name, con.sql(query).to_arrow_reader())
            columns = [c for c, *_ in con.execute(f'DESCRIBE "{name}"').fetchall()]
            expose_lake_tables(con, lake, {name: columns})
            moved[name] = rows
        if recorded is None:
            record_lake(con, lake)
        return moved
    for name in TRACE_SIZED:  # a view of the name is the lake's table (a database from before the record too)
        if relation_kind(con, name) != "view":
            continue
        with transaction(con):
            con.execute(f'ALTER VIEW "{name}" RENAME TO "{name}__lake"')
            if name in KEPT_IN_LAKE:  # ingestion's tables, with their DDL
                create_tables(con)
                con.execute(f'INSERT INTO "{name}" BY NAME SELECT * FROM "{name}__lake"')
            else:
                con.execute(f'CREATE TABLE "{name}" AS SELECT * FROM "{name}__lake"')
            con.execute(f'DROP VIEW "{name}__lake"')
        moved[name] = con.execute(f'SELECT count(*) FROM "{name}"').fetchall()[0][0]
    if recorded is not None:
        record_lake(con, None)
    return moved


def copy_small_tables(con: duckdb.DuckDBPyConnection, lake: Lake) -> dict[str, int]:
    """The small tables the stages join (`SMALL_JOINED`) written whole to the lake, one commit
    each (they stay the database's: this is a copy for Spark's executors); returns their rows.
    The trace-sized tables are in the lake already, or the run refuses (WrongHome)."""
    require_home(con, lake)
    copied = {}
    for name in SMALL_JOINED:
        lake.write(name, con.sql(f'SELECT * FROM "{name}"').to_arrow_reader(), partitioned=False)
        copied[name] = con.execute(f'SELECT count(*) FROM "{name}"').fetchall()[0][0]
    return copied
