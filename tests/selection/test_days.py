"""Day by day equals the whole table: trace_signals and failure_candidates computed for some
days only (in any order, again and again) give those days the rows the whole-table run gives
them, with sessions that cross midnight (a rephrase flag needs the next day's first turn)."""

from datetime import UTC, date, datetime, timedelta

import duckdb
import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rag_loop.ingest import ingest_directory
from rag_loop.selection.sampling import SamplingPolicy, select_candidates
from rag_loop.selection.signals import SignalSettings, compute_signals
from tests.helpers import trace_line

MIDNIGHT = datetime(2026, 11, 2, tzinfo=UTC)
QUERIES = ["how many leave days do I get", "how many leave days do I get?", "parental leave", "vpn setup"]
AROUND_MIDNIGHT = st.sampled_from([-86_400, 0, 86_400]).flatmap(lambda m: st.integers(m - 60, m + 60))
TURN = st.tuples(st.integers(0, 2),  # session
                 st.integers(-200_000, 100_000) | AROUND_MIDNIGHT,  # seconds from 11-02 00:00 (11-01 .. 11-03)
                 st.sampled_from(QUERIES), st.booleans())  # query, thumbs down
POLICY = SamplingPolicy(random_rate=0.3, daily_budget_usd=0.004, judge_cost_usd=0.001)  # 4 a day


def _tables(con: duckdb.DuckDBPyConnection) -> dict[str, pd.DataFrame]:
    return {t: con.execute(f"SELECT * FROM {t} ORDER BY trace_id").df()
            for t in ("trace_signals", "failure_candidates")}


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(turns=st.lists(TURN, min_size=1, max_size=30), order=st.randoms(use_true_random=False))
def test_day_by_day_equals_the_whole_table_and_a_rerun_of_a_day_changes_nothing(tmp_path_factory, turns, order):
    folder = tmp_path_factory.mktemp("traces")
    lines = [trace_line(f"t{i:02d}", session_id=f"s{session}", turn_id=i, original_query=query,
                        timestamp=(MIDNIGHT + timedelta(seconds=at)).isoformat(),
                        feedback={"rating": "negative"} if down else None)
             for i, (session, at, query, down) in enumerate(turns)]
    (folder / "t.jsonl").write_text("\n".join(lines) + "\n")
    with duckdb.connect() as con:
        ingest_directory(con, folder)
        compute_signals(con, SignalSettings())
        select_candidates(con, POLICY)
        whole = _tables(con)
        days = sorted(set(whole["trace_signals"]["day"].dt.date))
        con.execute("DROP TABLE trace_signals")
        con.execute("DROP TABLE failure_candidates")
        for group in _in_groups(days, order):
            compute_signals(con, SignalSettings(), days=group)
        for group in _in_groups(days, order):
            select_candidates(con, POLICY, days=group)
        for name, rows in _tables(con).items():
            pd.testing.assert_frame_equal(rows, whole[name], obj=name)
        again = order.choice(days)
        assert compute_signals(con, SignalSettings(), days=[again]) == (whole["trace_signals"]["day"].dt.date
                                                                        == again).sum()
        # a day without traffic is fine (a week on: after every turn; the same shape of days each example,
        # so one compile of its SQL)
        select_candidates(con, POLICY, days=[again, again + timedelta(days=7)])
        for name, rows in _tables(con).items():
            pd.testing.assert_frame_equal(rows, whole[name], obj=name)


def _in_groups(days: list[date], order) -> list[list[date]]:
    """The days shuffled, in groups of one or two."""
    shuffled = order.sample(days, len(days))
    groups, i = [], 0
    while i < len(shuffled):
        size = order.choice((1, 2))
        groups.append(shuffled[i:i + size])
        i += size
    return groups
