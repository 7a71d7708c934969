"""What a judging run reads and writes follows what is due: the days a judged history settles
are not planned row by row (and the plan is the same as planning every row), a trace's texts
come from its day, results of a slow judge are written as time passes."""

import time
from datetime import date, timedelta
from functools import cache

import duckdb
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rag_loop.online.judgments import (
    MAY_ARRIVE,
    ONLINE_DDL,
    JudgingSettings,
    OnlineMetric,
    _draw,
    judge_traces,
    judge_version,
    planned_work,
    trace_cases,
)
from rag_loop.store.tables import create_tables
from tests.online.test_judgments import REFERENCELESS, _traces
from tests.online.world import ScriptedJudge, build_world

NAMES = [m.name for m in REFERENCELESS]
VERSION = "v1"


def every_row_planned(con: duckdb.DuckDBPyConnection, metrics: list[OnlineMetric], salt: str, version: str):
    """The plan as it was computed before days were skipped: every drawn candidate joined with
    every stored row of the version."""
    parts = [f"""SELECT c.trace_id, c.day, c.streams, c.by_random, '{m.name}' AS metric,
                        {float(m.rate)} AS metric_rate, c.inclusion_probability * {float(m.rate)}
                            AS inclusion_probability
                 FROM failure_candidates c WHERE {_draw(salt, m.name)} < {float(m.rate)}""" for m in metrics]
    return con.execute(f"""
        SELECT p.*, done.status AS previous_status, done.reason AS previous_reason
        FROM ({" UNION ALL ".join(parts)}) p
        LEFT JOIN (SELECT trace_id, metric, status, reason FROM trace_judgments WHERE judge_version = ?) done
            USING (trace_id, metric)
        WHERE done.status IS NULL OR done.status = 'errored'
              OR (done.status = 'unjudgeable' AND list_contains(?, done.reason))
        ORDER BY p.day, p.trace_id, p.metric""", [version, list(MAY_ARRIVE)]).df()


STORED = st.sampled_from([("judged", None)] * 4 + [
    ("errored", None), ("unjudgeable", MAY_ARRIVE[1]), ("unjudgeable", MAY_ARRIVE[0]),
    ("unjudgeable", "unjudgeable: needs an expected output (production has none)"),
    ("unjudgeable", None), (None, None)])
ROW = st.fixed_dictionaries({
    "candidate": st.booleans(), "day": st.one_of(st.none(), st.integers(0, 3)),
    # per metric: not stored, or stored by this or another version, on the candidate's day or another
    "stored": st.lists(st.one_of(st.none(), st.tuples(STORED, st.sampled_from([VERSION, VERSION, "v0"]),
                                                       st.sampled_from(["same", "same", "other", "none"]))),
                       min_size=3, max_size=3)})


@cache
def _plan_world() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    create_tables(con)
    con.execute(ONLINE_DDL)
    con.execute("CREATE TABLE failure_candidates (trace_id VARCHAR, day DATE, streams VARCHAR[], "
                "by_random BOOLEAN, inclusion_probability DOUBLE)")
    return con


def _emptied_world() -> duckdb.DuckDBPyConnection:
    """The tables made once (a third of an example's time), emptied for each example: the
    history, the candidates, and the re-judging window the plan fixes."""
    con = _plan_world()
    for table in ("trace_judgments", "failure_candidates", "judge_windows"):
        con.execute(f"DELETE FROM {table}")
    return con


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(ROW, max_size=40), rates=st.lists(st.sampled_from([1.0, 1.0, 0.5, 0.0]), min_size=3, max_size=3),
       settle=st.booleans())
def test_the_plan_skips_settled_days_and_is_the_plan_of_every_row(rows, rates, settle):
    """Random histories: candidates on a few days (and none), rows stored by this version or
    another, settled, errored, unjudgeable for an input that may arrive or not, on the
    candidate's day or another, and judged traces that are no longer candidates. `settle`:
    every drawn pair stored as judged first, then the history's rows over it, so that whole
    days are settled and skipped."""
    con = _emptied_world()
    metrics = [OnlineMetric(name, 0.5, rate) for name, rate in zip(NAMES, rates, strict=True)]
    first = date(2026, 11, 1)
    days = {i: None if row["day"] is None else first + timedelta(days=row["day"]) for i, row in enumerate(rows)}
    # each table's rows in one statement (a statement per row was a third of an example's time)
    candidates = [[f"t{i}", days[i]] for i, row in enumerate(rows) if row["candidate"]]
    if candidates:
        con.execute("INSERT INTO failure_candidates VALUES "
                    + ", ".join(["(?, ?, ['random'], true, 0.5)"] * len(candidates)),
                    [value for candidate in candidates for value in candidate])
    if settle:
        con.execute("""INSERT INTO trace_judgments (trace_id, day, metric, judge_version, status)
                       SELECT trace_id, day, metric, ?, 'judged' FROM failure_candidates,
                       (SELECT unnest(?) AS metric)""", [VERSION, NAMES])
    history = []  # one row per trace × metric: no key twice in the statement
    for i, row in enumerate(rows):
        for name, stored in zip(NAMES, row["stored"], strict=True):
            if stored is None:
                continue
            (status, reason), version, where = stored
            day = {"same": days[i], "other": first + timedelta(days=9), "none": None}[where]
            history += [f"t{i}", day, name, version, status, reason]
    if history:
        con.execute("INSERT OR REPLACE INTO trace_judgments (trace_id, day, metric, judge_version, status, reason) "
                    "VALUES " + ", ".join(["(?, ?, ?, ?, ?, ?)"] * (len(history) // 6)), history)
    judging = JudgingSettings(metrics)
    assert planned_work(con, judging, VERSION).equals(every_row_planned(con, metrics, judging.salt, VERSION))


def test_a_judged_history_is_not_planned_again_and_a_new_day_is(tmp_path):
    con = build_world(tmp_path, _traces(8))
    judge = ScriptedJudge(lambda name, case: 0.9)
    assert judge_traces(con, judge, JudgingSettings(REFERENCELESS)).judged == 24
    con.execute("UPDATE failure_candidates SET day = DATE '2030-01-01' WHERE trace_id = 't003'")
    con.execute("INSERT INTO failure_candidates SELECT * REPLACE ('t999' AS trace_id) FROM failure_candidates "
                "WHERE trace_id = 't001'")
    plan = planned_work(con, JudgingSettings(REFERENCELESS), judge_version(judge)[1])
    assert set(plan["trace_id"]) == {"t999"}  # t003 moved to another day, judged already: not planned


def test_a_trace_is_read_from_its_day_and_from_any_day_when_its_timestamp_moved(tmp_path):
    con = build_world(tmp_path, _traces(3))
    work = planned_work(con, JudgingSettings(REFERENCELESS), VERSION)
    expected = {c.trace_id: (c.query, c.answer, c.context) for c in trace_cases(con, work)}
    con.execute("""UPDATE raw_traces SET "timestamp" = "timestamp" + INTERVAL 3 DAY WHERE trace_id = 't001'""")
    found = {c.trace_id: (c.query, c.answer, c.context) for c in trace_cases(con, work)}
    assert found == expected and expected["t001"][1] == "You get 15 days."


def test_a_slow_judge_has_its_results_written_as_time_passes(tmp_path):
    """flush_every is never reached; flush_seconds writes what was judged all the same."""
    con = build_world(tmp_path, _traces(6))
    seen = []

    def slow(name, case):
        seen.append(con.cursor().execute("SELECT count(*) FROM trace_judgments").fetchall()[0][0])
        time.sleep(0.01)
        return 0.9
    run = judge_traces(con, ScriptedJudge(slow), JudgingSettings(REFERENCELESS, concurrency=1, flush_every=1000,
                                                                 flush_seconds=0.02))
    assert run.judged == 18 and max(seen) > 0
    assert con.execute("SELECT count(*) FROM trace_judgments").fetchall() == [(18,)]


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flush_every=st.integers(1, 30))
def test_the_rows_written_do_not_depend_on_the_batches(tmp_path_factory, flush_every):
    con = build_world(tmp_path_factory.mktemp("w"), _traces(5))
    judge_traces(con, ScriptedJudge(lambda n, c: 0.5), JudgingSettings(REFERENCELESS, flush_every=flush_every))
    assert con.execute("SELECT count(*), count(DISTINCT (trace_id, metric)), min(score), max(score) "
                       "FROM trace_judgments").fetchall() == [(15, 15, 0.5, 0.5)]
