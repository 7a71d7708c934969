"""The trace lake's Delta tables (rag_loop.store.lake): days replaced by predicate and whole
overwrites, one version per write, a column added later (older files read NULL), executors'
files committed by the driver in one version (whole days too), the days, files and fingerprints of a
version, DuckDB views over a version's files (a table with no files too), compaction that keeps
the rows, vacuum that removes only unreferenced files; and a property test: any sequence of day
writes and deletes leaves the same rows per day as a dict would."""

from __future__ import annotations

import os
import time
from datetime import date, timedelta
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from rag_loop.store.lake import Lake, create_lake_views, expose_lake_tables, files_query

D1, D2, D3 = date(2026, 11, 1), date(2026, 11, 2), date(2026, 11, 3)
SCHEMA = pa.schema([("trace_id", pa.string()), ("n", pa.int64()), ("day", pa.date32())])


def rows(day: date, count: int, tag: str = "a", start: int = 0) -> pa.Table:
    return pa.table({"trace_id": [f"{tag}{day:%d}-{i}" for i in range(start, start + count)],
                     "n": list(range(start, start + count)), "day": [day] * count}, schema=SCHEMA)


def read(lake: Lake, table: str, columns=None) -> list[tuple]:
    """The table's current rows through DuckDB over the version's file list, sorted."""
    sql = files_query(lake.files(table), lake.schema(table), columns)
    with duckdb.connect() as con:
        return sorted(con.execute(sql).fetchall(), key=repr)


def read_dataset(lake: Lake, table: str) -> list[tuple]:
    """The same through the version's Arrow dataset, as DuckDB scans it."""
    with duckdb.connect() as con:
        con.register("t", lake.dataset(table))
        return sorted(con.execute(f"SELECT {', '.join(SCHEMA.names)} FROM t").fetchall(), key=repr)


def version(lake: Lake, table: str) -> int:
    return lake.delta(table).version()


def on_disk(lake: Lake, table: str) -> set[str]:
    """The table's data files in its folder (not its log), relative."""
    folder = lake.path(table)
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*")
            if p.is_file() and "_delta_log" not in p.parts}


def listed(lake: Lake, table: str) -> set[str]:
    return {Path(f).relative_to(lake.path(table)).as_posix() for f in lake.files(table)}


def as_tuples(table: pa.Table) -> list[tuple]:
    return sorted(zip(*table.to_pydict().values(), strict=True), key=repr)


def test_a_write_replaces_only_its_days_in_one_version(tmp_path):
    lake = Lake.of(tmp_path)
    lake.write("t", pa.concat_tables([rows(D1, 3), rows(D2, 2)]), days={D1, D2})
    assert version(lake, "t") == 0 and lake.days("t") == [D1, D2]
    before = lake.day_fingerprints("t")

    lake.write("t", rows(D2, 4, "b"), days={D2})  # D2 replaced, D1 left as it was
    assert version(lake, "t") == 1
    assert read(lake, "t") == as_tuples(pa.concat_tables([rows(D1, 3), rows(D2, 4, "b")]))
    assert read_dataset(lake, "t") == read(lake, "t")
    after = lake.day_fingerprints("t")
    assert after[D1] == before[D1] and after[D2] != before[D2]

    lake.write("t", rows(D3, 1), days={D2, D3})  # a day written with no rows is emptied
    assert lake.days("t") == [D1, D3] and version(lake, "t") == 2
    assert [r[2] for r in read(lake, "t")] == [D1] * 3 + [D3]
    lake.write("t", rows(D3, 1), days=set())  # no days: nothing written
    assert version(lake, "t") == 2


def test_a_whole_overwrite_replaces_every_day(tmp_path):
    lake = Lake.of(tmp_path)
    lake.write("t", pa.concat_tables([rows(D1, 3), rows(D2, 2)]), days={D1, D2})
    lake.write("t", rows(D3, 2, "w"))  # days None: the table's whole content
    assert lake.days("t") == [D3] and read(lake, "t") == as_tuples(rows(D3, 2, "w"))

    documents = pa.table({"doc_id": ["a", "b"], "version": ["1", "2"]})  # unpartitioned (documents)
    lake.write("documents", documents, partitioned=False)
    lake.write("documents", documents.slice(1), partitioned=False)
    with duckdb.connect() as con:
        con.register("d", lake.dataset("documents"))
        assert con.execute("SELECT * FROM d").fetchall() == [("b", "2")]
    assert lake.days("documents") == []


def test_a_column_added_later_reads_null_in_older_files(tmp_path):
    lake = Lake.of(tmp_path)
    lake.write("t", rows(D1, 2), days={D1})
    wider = rows(D2, 2).append_column("language", pa.array(["vi", "en"]))
    lake.write("t", wider, days={D2})
    assert lake.schema("t").names == ["trace_id", "n", "day", "language"]
    expected = [(f"a01-{i}", i, D1, None) for i in range(2)] + \
               [(f"a02-{i}", i, D2, lang) for i, lang in enumerate(["vi", "en"])]
    assert read(lake, "t", ["trace_id", "n", "day", "language"]) == sorted(expected, key=repr)
    with duckdb.connect() as con:
        con.register("t", lake.dataset("t"))
        assert sorted(con.execute("SELECT trace_id, n, day, language FROM t").fetchall(), key=repr) == \
            sorted(expected, key=repr)
    # the files of D1 alone lack the column: the query still has it, NULL
    assert {r[3] for r in duckdb.sql(files_query(lake.files("t", [D1]), lake.schema("t"))).fetchall()} == {None}


def _executor_file(lake: Lake, table: str, day: date, data: pa.Table, name: str) -> Path:
    """A Parquet file as a Spark executor leaves it: in the table's day folder, without `day`."""
    path = lake.path(table) / f"day={day.isoformat()}" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(data.drop_columns(["day"]), path)
    return path


def test_commit_files_adds_and_removes_in_one_version(tmp_path):
    lake = Lake.of(tmp_path)
    lake.write("t", pa.concat_tables([rows(D1, 3), rows(D2, 2)]), days={D1, D2})
    old_d1 = [p for p in pa.table(lake.delta("t").get_add_actions()).column("path").to_pylist()
              if p.startswith(f"day={D1}")]
    added = [_executor_file(lake, "t", D1, rows(D1, 5, "s"), "part-s1.parquet"),
             _executor_file(lake, "t", D3, rows(D3, 2, "s"), "part-s2.parquet")]
    assert version(lake, "t") == 0
    lake.commit_files("t", added, old_d1, SCHEMA)
    assert version(lake, "t") == 1  # one commit: a reader never sees D1 twice or not at all
    assert lake.days("t") == [D1, D2, D3]
    assert read(lake, "t") == as_tuples(pa.concat_tables([rows(D1, 5, "s"), rows(D2, 2), rows(D3, 2, "s")]))
    assert listed(lake, "t") == {"day=2026-11-01/part-s1.parquet", "day=2026-11-03/part-s2.parquet",
                                 *(p for p in on_disk(lake, "t") if p.startswith(f"day={D2}"))}

    # a column the files add joins the schema first; the older days read NULL there
    wider = rows(D2, 1, "w").append_column("language", pa.array(["vi"]))
    path = _executor_file(lake, "t", D2, wider, "part-w.parquet")
    lake.commit_files("t", [path], [], wider.schema)
    assert lake.schema("t").names == ["trace_id", "n", "day", "language"]
    got = read(lake, "t", ["trace_id", "language"])
    assert ("w02-0", "vi") in got and ("a02-0", None) in got and len(got) == 10

    # the first commit of a table makes it
    first = _executor_file(lake, "u", D1, rows(D1, 2), "part-0.parquet")
    lake.commit_files("u", [first], [], SCHEMA)
    assert version(lake, "u") == 0 and read(lake, "u") == as_tuples(rows(D1, 2))


def test_commit_days_replaces_whole_days_and_adds_a_column_in_one_version(tmp_path):
    """A Spark stage's commit: its files in place of the days it computed (a partition
    overwrite), a column the files add joining the schema in the same version; all days at once
    (None) for a whole run; and the first commit makes the table."""
    lake = Lake.of(tmp_path)
    lake.write("t", pa.concat_tables([rows(D1, 3), rows(D2, 2)]), days={D1, D2})
    wider = rows(D1, 1, "w").append_column("language", pa.array(["vi"]))
    added = [_executor_file(lake, "t", D1, wider, "part-w1.parquet"),
             _executor_file(lake, "t", D3, rows(D3, 2, "s"), "part-s3.parquet")]
    lake.commit_days("t", added, {D1, D3}, wider.schema)
    assert version(lake, "t") == 1  # one commit: D1's rows replaced and the column added together
    assert lake.schema("t").names == ["trace_id", "n", "day", "language"]
    assert sorted(read(lake, "t", ["trace_id", "language"])) == \
        [("a02-0", None), ("a02-1", None), ("s03-0", None), ("s03-1", None), ("w01-0", "vi")]
    lake.commit_days("t", [_executor_file(lake, "t", D2, rows(D2, 1, "z"), "part-z.parquet")], None, SCHEMA)
    assert version(lake, "t") == 2 and read(lake, "t", ["trace_id"]) == [("z02-0",)]
    assert lake.schema("t").names == ["trace_id", "n", "day", "language"]  # a column is never dropped
    lake.commit_days("u", [_executor_file(lake, "u", D1, rows(D1, 2), "part-0.parquet")], {D1}, SCHEMA)
    assert version(lake, "u") == 0 and read(lake, "u") == as_tuples(rows(D1, 2))


def test_days_files_and_fingerprints_of_a_version(tmp_path):
    lake = Lake.of(tmp_path)
    assert (lake.delta("t"), lake.days("t"), lake.files("t"), lake.day_fingerprints("t"), lake.schema("t")) == \
        (None, [], [], {}, None)
    with pytest.raises(FileNotFoundError):
        lake.dataset("t")
    assert lake.tables() == [] and Lake.of(tmp_path / "none").tables() == []
    lake.write("t", pa.concat_tables([rows(D1, 3), rows(D3, 2)]), days={D1, D3})
    (tmp_path / ".staging" / "run").mkdir(parents=True)  # folders that are no table
    (tmp_path / "notes").mkdir()
    assert lake.tables() == ["t"]
    assert sorted(lake.stored_files("t")) == sorted(listed(lake, "t"))
    assert lake.days("t") == [D1, D3]
    assert len(lake.files("t")) == 2 and all(Path(f).is_file() for f in lake.files("t"))
    assert [Path(f).parent.name for f in lake.files("t", [D3])] == ["day=2026-11-03"]
    assert lake.files("t", []) == [] and lake.files("t", [D2]) == []
    prints = lake.day_fingerprints("t")
    assert set(prints) == {D1, D3}
    lake.write("t", rows(D3, 2), days={D3})  # the same rows written again: a new file, a new print
    assert lake.day_fingerprints("t")[D1] == prints[D1] and lake.day_fingerprints("t")[D3] != prints[D3]
    assert lake.uri("t") == str(tmp_path / "t") and Lake.of(lake) is lake
    assert Lake.of("s3://bucket/lake").uri("t") == "s3://bucket/lake/t"
    with pytest.raises(ValueError):
        Lake.of("s3://bucket/lake").path("t")


def test_views_over_a_version_files_in_a_database_file(tmp_path):
    lake, database = Lake.of(tmp_path / "lake"), tmp_path / "control.duckdb"
    lake.write("raw_traces", pa.concat_tables([rows(D1, 3), rows(D2, 2)]), days={D1, D2})
    lake.write("trace_feedback", rows(D1, 2), days={D1})
    lake.delta("trace_feedback").delete("day = '2026-11-01'")  # a table whose version lists no file
    assert lake.files("trace_feedback") == [] and lake.schema("trace_feedback") is not None
    columns = {"raw_traces": ["n", "trace_id", "day"], "trace_feedback": ["trace_id", "day"]}
    with duckdb.connect(str(database)) as con:
        con.execute("CREATE TABLE raw_traces (old INTEGER)")  # the database's own table, replaced
        expose_lake_tables(con, lake, columns)
    with duckdb.connect(str(database), read_only=True) as con:  # the views outlive the connection
        assert con.execute("SELECT count(*), min(n), max(day) FROM raw_traces").fetchall()[0] == (5, 0, D2)
        assert [c[0] for c in con.execute("DESCRIBE raw_traces").fetchall()] == ["n", "trace_id", "day"]
        assert con.execute("SELECT * FROM trace_feedback").fetchall() == []
        assert con.execute("DESCRIBE trace_feedback").fetchall()[1][:2] == ("day", "DATE")

    lake.write("raw_traces", rows(D2, 1, "b"), days={D2})  # a new version: the view still lists the old files
    with duckdb.connect(str(database)) as con:
        assert con.execute("SELECT count(*) FROM raw_traces").fetchall()[0] == (5,)
        create_lake_views(con, lake, {"raw_traces": columns["raw_traces"]})  # a writer makes it again
        assert con.execute("SELECT count(*) FROM raw_traces").fetchall()[0] == (4,)
        con.execute("ATTACH ':memory:' AS other")  # the view made in another catalog's schema
        create_lake_views(con, lake, {"raw_traces": ["trace_id"]}, catalog="other")
        assert con.execute("SELECT count(*) FROM other.main.raw_traces").fetchall()[0] == (4,)
        with pytest.raises(FileNotFoundError):
            create_lake_views(con, lake, {"missing": ["x"]})


def test_optimize_reduces_the_files_and_keeps_the_rows(tmp_path):
    lake = Lake.of(tmp_path)
    lake.write("t", rows(D2, 3), days={D2})
    small = [_executor_file(lake, "t", D1, rows(D1, 50, "s", start=50 * i), f"part-{i}.parquet") for i in range(8)]
    lake.commit_files("t", small, [], SCHEMA)
    before, files_before = read(lake, "t"), len(lake.files("t"))
    assert files_before == 9
    metrics = lake.optimize("t")
    assert metrics["numFilesRemoved"] == 8 and metrics["numFilesAdded"] == 1
    assert len(lake.files("t")) == 2 and read(lake, "t") == before and read_dataset(lake, "t") == before
    assert lake.optimize("t")["numFilesAdded"] == 0  # nothing left to compact
    assert lake.optimize("missing") == {}


def test_vacuum_removes_unreferenced_files_only(tmp_path):
    lake = Lake.of(tmp_path)
    lake.write("t", pa.concat_tables([rows(D1, 3), rows(D2, 2)]), days={D1, D2})
    lake.write("t", rows(D2, 4, "b"), days={D2})  # D2's first file no longer listed
    orphan = lake.path("t") / "day=2026-11-01" / "part-killed.parquet"  # a killed write's file
    orphan.write_bytes(b"half a file")
    rows_now = read(lake, "t")
    assert len(on_disk(lake, "t")) == 4 and len(listed(lake, "t")) == 2

    assert lake.vacuum("t") == []  # all of them younger than a week: kept (a slow writer's too)
    assert len(on_disk(lake, "t")) == 4
    week_ago = time.time() - 8 * 86_400
    os.utime(orphan, (week_ago, week_ago))
    assert lake.vacuum("t") == ["day=2026-11-01/part-killed.parquet"]  # older than the retention

    removed = lake.vacuum("t", retention_hours=0)
    assert len(removed) == 1 and removed[0].startswith("day=2026-11-02/")
    assert on_disk(lake, "t") == listed(lake, "t")  # what is left is what the version lists
    assert read(lake, "t") == rows_now and lake.vacuum("missing") == []


# the property: day writes and deletes on a Lake and on a dict of rows per day agree
DAYS = [D1 + timedelta(days=i) for i in range(4)]
operations = st.lists(st.one_of(
    st.tuples(st.just("write"), st.sets(st.sampled_from(DAYS), max_size=3),
              st.dictionaries(st.sampled_from(DAYS), st.integers(0, 4), max_size=3)),
    st.tuples(st.just("delete"), st.sampled_from(DAYS), st.none()),
    st.tuples(st.just("overwrite"), st.none(), st.dictionaries(st.sampled_from(DAYS), st.integers(0, 3))),
), min_size=1, max_size=6)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(operations)
# the shapes the 25 draws it had covered, kept whatever is drawn: deletes only (no table made);
# a day written with no rows, rows of a day not written (dropped), a rewritten day, a delete, an
# empty write, overwrites whole and to nothing
@example([("delete", DAYS[0], None)])
@example([("write", {DAYS[0], DAYS[1]}, {DAYS[0]: 2, DAYS[1]: 0}), ("write", {DAYS[1]}, {DAYS[1]: 3, DAYS[2]: 1}),
          ("delete", DAYS[0], None), ("write", set(), {}), ("overwrite", None, {DAYS[2]: 1, DAYS[3]: 0}),
          ("write", {DAYS[3]}, {DAYS[3]: 2})])
@example([("write", {DAYS[0]}, {DAYS[0]: 1}), ("overwrite", None, {})])
def test_day_writes_and_deletes_agree_with_a_dict(tmp_path_factory, ops):
    lake, model = Lake.of(tmp_path_factory.mktemp("lake")), {}
    for step, (kind, days, counts) in enumerate(ops):
        if kind == "write":  # rows only of the days written (a write's contract)
            data = [rows(d, n, f"w{step}-") for d, n in (counts or {}).items() if d in days]
            lake.write("t", pa.concat_tables(data) if data else SCHEMA.empty_table(), days=days)
            for d in days:
                model[d] = as_tuples(rows(d, counts.get(d, 0), f"w{step}-"))
        elif kind == "delete":
            if lake.delta("t") is not None:  # delta-rs's delete by predicate, one commit
                lake.delta("t").delete(f"day = '{days.isoformat()}'")
            model.pop(days, None)
        else:
            data = [rows(d, n, f"o{step}-") for d, n in counts.items()]
            lake.write("t", pa.concat_tables(data) if data else SCHEMA.empty_table())
            model = {d: as_tuples(rows(d, n, f"o{step}-")) for d, n in counts.items()}
    expected = sorted((r for day_rows in model.values() for r in day_rows), key=repr)
    if lake.delta("t") is None:  # only deletes: no table was made
        assert expected == []
        return
    assert read(lake, "t") == expected
    assert read_dataset(lake, "t") == expected
    assert lake.days("t") == sorted(d for d, r in model.items() if r)
