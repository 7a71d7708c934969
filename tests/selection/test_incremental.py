"""Computing only the changed days keeps trace_signals, failure_candidates and quality_estimates
equal to a whole run: over runs that bring new traffic (late traffic on earlier days, sessions across
midnight), forget a day's traffic (retention), or change nothing (then no day is computed)."""

from datetime import date

import duckdb
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rag_loop.engines.incremental import DayState, compute_changed, days_to_compute
from rag_loop.ingest import ingest_directory
from rag_loop.selection.estimates import estimate_inputs, update_estimates
from rag_loop.selection.sampling import candidate_inputs, select_candidates
from rag_loop.selection.signals import SignalSettings, compute_signals, signal_inputs
from tests.helpers import trace_line
from tests.selection.test_days import MIDNIGHT, POLICY, TURN, _tables

SETTINGS = SignalSettings()
SLICES = ((), ("language",))  # few: each set of days compiles its own query


def run_changed(con, states: dict) -> dict:
    """One incremental run of both stages, in order, as their assets make it; the days each
    computed (None: all)."""
    stages = {"trace_signals": (lambda: signal_inputs(con, SETTINGS),
                                lambda days: compute_signals(con, SETTINGS, days=days)),
              "failure_candidates": (lambda: candidate_inputs(con, POLICY),
                                     lambda days: select_candidates(con, POLICY, days=days)),
              "quality_estimates": (lambda: estimate_inputs(con, SLICES, 0.95),
                                    lambda days: update_estimates(con, SLICES, days=days))}
    computed = {}
    for table, (inputs, compute) in stages.items():
        states[table], computed[table] = compute_changed(con, table, states.get(table),
                                                         DayState("db", inputs()), compute)
    return computed


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(runs=st.lists(st.tuples(st.lists(TURN, max_size=12), st.booleans()), min_size=2, max_size=4))
def test_computing_the_changed_days_equals_a_whole_run(tmp_path_factory, runs):
    folder = tmp_path_factory.mktemp("traces")
    states: dict = {}
    with duckdb.connect() as con:
        for run, (turns, forget_a_day) in enumerate(runs):
            lines = [trace_line(f"r{run}t{i:02d}", session_id=f"s{session}", turn_id=10 * run + i,
                                original_query=query, timestamp=(MIDNIGHT + pd.Timedelta(seconds=at)).isoformat(),
                                feedback={"rating": "negative"} if down else None)
                     for i, (session, at, query, down) in enumerate(turns)]
            (folder / f"run{run}.jsonl").write_text("".join(line + "\n" for line in lines))
            ingest_directory(con, folder)
            if forget_a_day:  # retention: the oldest day's traffic is gone
                con.execute("""DELETE FROM raw_traces WHERE timezone('UTC', "timestamp")::DATE =
                               (SELECT min(timezone('UTC', "timestamp")::DATE) FROM raw_traces)""")
            run_changed(con, states)
            incremental = _with_estimates(con)
            compute_signals(con, SETTINGS)
            select_candidates(con, POLICY)
            update_estimates(con, SLICES)
            for name, rows in _with_estimates(con).items():
                pd.testing.assert_frame_equal(incremental[name], rows, obj=name)
            assert run_changed(con, states) == dict.fromkeys(incremental, [])


def _with_estimates(con) -> dict[str, pd.DataFrame]:
    estimates = con.execute("SELECT * FROM quality_estimates ORDER BY day, slice, slice_value, outcome").df()
    return {**_tables(con), "quality_estimates": estimates}


def test_new_traffic_on_a_day_computes_it_and_the_day_before_it(tmp_path):
    (tmp_path / "a.jsonl").write_text("".join(
        trace_line(f"t{day}", timestamp=f"2026-11-0{day}T12:00:00+00:00") + "\n" for day in (1, 2, 3)))
    states: dict = {}
    with duckdb.connect() as con:
        ingest_directory(con, tmp_path)
        assert run_changed(con, states) == dict.fromkeys(states, None)  # all
        (tmp_path / "b.jsonl").write_text(trace_line("late", timestamp="2026-11-02T23:59:00+00:00") + "\n")
        ingest_directory(con, tmp_path)
        computed = run_changed(con, states)
        assert computed["trace_signals"] == [date(2026, 11, 1), date(2026, 11, 2)]
        assert computed["failure_candidates"] == [date(2026, 11, 2)]  # 11-01's signals are the same
        assert computed["quality_estimates"] == [date(2026, 11, 2)]
        con.execute("DELETE FROM trace_signals WHERE day = '2026-11-03'")  # edited since the last run
        assert run_changed(con, states)["trace_signals"] == [date(2026, 11, 3)]
        assert days_to_compute(DayState("other.duckdb", states["trace_signals"].inputs),
                               states["trace_signals"]) is None  # another database: all


@pytest.mark.parametrize("data", [None, {}, {"database": 1, "days": {}}, {"database": "db", "days": []},
                                  {"database": "db", "days": {"11-02": ["a", "b"]}},
                                  {"database": "db", "days": {"2026-11-02": [3, "b"]}}])
def test_a_state_that_is_not_one_means_the_whole_table(data):
    assert DayState.from_json(data) is None


def test_a_state_round_trips_through_json():
    state = DayState("db", {date(2026, 11, 1): "a", date(2026, 11, 2): "b"}, {date(2026, 11, 2): "c"})
    assert DayState.from_json(state.as_json()) == state
    assert days_to_compute(state, state) == []
