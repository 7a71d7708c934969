"""First copy wins across a Spark ingestion run's staged files, as one Spark window: the
verdict of every staged record against the copies already stored and the other files' copies.

A run's tasks stage each file's tables as `<run>/<folder>/file-<order>.parquet`, repeats inside
a file already resolved: its first copies (tier 1) and its repeats (tier 2). A record's key
(a trace id; a trace id and span id) keeps its first copy: stored ones first, then by file
order, then by line. A staged copy that loses is a duplicate, unless a stored copy is this
very line (same file and line: a file read again), which is dropped as the DuckDB path does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb

from rag_loop.store.files import quoted, write_parquet

RESOLVE_SQL = """
    SELECT tier, file_order, line_no, {key}, verdict
    FROM (SELECT *,
                 CASE WHEN tier = 1 AND row_number() OVER (PARTITION BY {key}
                                                           ORDER BY tier, file_order, line_no) = 1
                      THEN 'keep'
                      WHEN array_contains(collect_set(IF(tier = 0, struct(source_file, line_no), NULL))
                                          OVER (PARTITION BY {key}), struct(source_file, line_no))
                      THEN 'reread'
                      ELSE 'duplicate' END AS verdict
          FROM (SELECT {key}, 0 AS tier, CAST(NULL AS BIGINT) AS file_order, source_file,
                       source_line AS line_no FROM {{stored}}
                UNION ALL
                SELECT {key}, 1, file_order, source_file, source_line FROM {{firsts}}
                UNION ALL
                SELECT {key}, 2, file_order, source_file, line_no FROM {{repeats}}))
    WHERE tier > 0"""


def staged_file(run: Path, folder: str, order: int) -> Path:
    return run / folder / f"file-{order:08d}.parquet"  # zero-padded: read back in file order


def staged(run: Path, folder: str) -> str:
    """The staged files of `folder` as a DuckDB table expression."""
    return f"read_parquet({quoted(run / folder / 'file-*.parquet')})"


def resolve(session: Any, con: duckdb.DuckDBPyConnection, run: Path, stored_table: str | Any,
            key: tuple[str, ...], firsts: str, repeats: str, table: str) -> None:
    """Every staged copy's verdict, as the control database's temp table `table` (tier,
    file_order, line_no, key..., verdict): the staged folders `firsts` (key, source_file,
    source_line) and `repeats` (key, source_file, line_no) against the stored copies of the
    keys staged (only those: a key nobody staged has no verdict to give). `stored_table`: the
    database's table of stored copies, or a Spark frame of them (the trace lake's), which
    Spark narrows to the keys staged."""
    columns = ", ".join(key)

    def read(path: Path, line: str, staged_copies: bool = True) -> Any:  # these columns, as Spark reads them
        names = "".join(f"{column} string, " for column in key)
        order = ", file_order long" if staged_copies else ""
        return session.read.schema(f"{names}source_file string, {line} long{order}").parquet(str(path))

    staged_firsts, staged_repeats = read(run / firsts, "source_line"), read(run / repeats, "line_no")
    if isinstance(stored_table, str):
        path = run / f"{table}-stored"
        write_parquet(con, f"""
            SELECT {columns}, source_file, source_line FROM {stored_table}
            SEMI JOIN (SELECT {columns} FROM {staged(run, firsts)}
                       UNION SELECT {columns} FROM {staged(run, repeats)}) USING ({columns})""",
                      path / "part-0.parquet")
        stored = read(path, "source_line", staged_copies=False)
    else:
        keys = staged_firsts.select(*key).union(staged_repeats.select(*key))
        stored = stored_table.select(*key, "source_file", "source_line").join(keys.distinct(), list(key), "left_semi")
    target = run / f"{table}-verdicts"
    session.sql(RESOLVE_SQL.format(key=columns), stored=stored, firsts=staged_firsts,
                repeats=staged_repeats).write.parquet(str(target))
    con.execute(f"CREATE OR REPLACE TEMP TABLE {table} AS SELECT * FROM "
                f"read_parquet({quoted(target / '*.parquet')})")


def verdict(table: str, tier: int, wanted: str, key: str) -> str:
    """A join clause keeping the staged rows of `tier` whose verdict in `table` is `wanted`."""
    return (f"SEMI JOIN (SELECT * FROM {table} WHERE tier = {tier} AND verdict = '{wanted}') "
            f"USING ({key})")


def store_set_aside(con: duckdb.DuckDBPyConnection, run: Path, verdicts: str, key: str,
                    folders: tuple[str, str, str], lost: str) -> None:
    """The staged quarantine rows, and the staged copies that are duplicates, inserted (inside
    the caller's transaction, wall-clock columns at its time): the repeats whose verdict in
    `verdicts` is duplicate, and the first copies that lost, as `lost` selects them (the
    trace_duplicates columns but seen_at). `folders`: quarantine, repeats, first copies."""
    quarantine, repeats, firsts = folders
    con.execute(f"""INSERT INTO quarantine BY NAME SELECT * EXCLUDE (file_order)
                    REPLACE (now() AS quarantined_at) FROM {staged(run, quarantine)}""")
    con.execute(f"""
        INSERT INTO trace_duplicates BY NAME
        SELECT * EXCLUDE (file_order) REPLACE (now() AS seen_at) FROM {staged(run, repeats)}
        {verdict(verdicts, 2, 'duplicate', f'file_order, line_no, {key}')}
        UNION ALL BY NAME
        SELECT {lost}, now() AS seen_at FROM {staged(run, firsts)}
        {verdict(verdicts, 1, 'duplicate', f'file_order, {key}')}""")
