"""Table helpers every stage uses: does a table exist, replace one from a frame, the ingestion
tables."""

from __future__ import annotations

import duckdb

from rag_loop.store.ddl import INGESTION_DDL


def create_tables(con: duckdb.DuckDBPyConnection) -> None:
    """Create every ingestion table that does not exist yet."""
    con.execute(INGESTION_DDL)


def has_table(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    return bool(con.execute("SELECT 1 FROM duckdb_tables() WHERE table_name = ?", [name]).fetchall())


def replace_table(con: duckdb.DuckDBPyConnection, name: str, frame) -> None:
    """(Re)create table `name` from a pandas DataFrame or Arrow table."""
    con.register("_replacement", frame)
    try:
        con.execute(f"CREATE OR REPLACE TABLE {name} AS SELECT * FROM _replacement")
    finally:
        con.unregister("_replacement")
