"""The DuckDB engine compiles a stage once per shape: for the same stage on other days, the SQL
it gives (the cached one, its date literals moved) is the SQL Ibis compiles for those days."""

from datetime import date, timedelta
from unittest.mock import patch

import duckdb
import ibis
import pytest
from hypothesis import HealthCheck, Phase, assume, given, settings
from hypothesis import strategies as st

from rag_loop.drift import query_mix_expressions as drift
from rag_loop.drift import retrieval_expressions as retrieval
from rag_loop.engines.engine import DuckDBEngine
from rag_loop.engines.literals import dates_in, from_sentinel_era, same_sql, shifted, to_sentinel_era
from rag_loop.selection import estimate_expressions as estimates
from rag_loop.selection import sampling_expressions as sampling
from rag_loop.selection import signal_expressions as signals
from rag_loop.selection.estimates import DEFAULT_SLICES, OUTCOMES
from rag_loop.selection.sampling import SamplingPolicy, select_candidates
from rag_loop.selection.signals import SignalSettings, compute_signals
from rag_loop.store.tables import create_tables

day = st.dates(date(1990, 1, 1), date(2150, 12, 31))
some_days = st.lists(day, min_size=1, max_size=4, unique=True).map(lambda d: tuple(sorted(d)))
window = st.tuples(day, st.integers(1, 14)).map(lambda w: (w[0] - timedelta(days=w[1]), w[0]))
# every stage the DuckDB engine compiles with dates in its settings: (inputs, build, settings)
STAGES = {
    "retrieval": (retrieval.RETRIEVAL_INPUTS, retrieval.retrieval_expression, window.map(
        lambda w: retrieval.DriftWindow(w[0], w[1] - timedelta(days=1), w[1]))),
    "stale": (retrieval.STALE_INPUTS, retrieval.stale_expression, window.map(
        lambda w: retrieval.DriftWindow(w[0], w[1] - timedelta(days=1), w[1]))),
    "mix": (drift.INPUTS, drift.mix_counts_expression, window.map(
        lambda w: drift.MixWindow(w[0], w[1], ((1, 3, "short"), (4, 1000, "long"))))),
    "signals": (signals.INPUTS, signals.signals_of_days_expression,
                some_days.map(lambda d: signals.SignalDays(SignalSettings(), d))),
    "candidates": (sampling.INPUTS, sampling.candidates_of_days_expression,
                   some_days.map(lambda d: sampling.PolicyDays(SamplingPolicy(), d))),
    "novelty_sample": (("raw_traces",), sampling.novelty_sample_expression,
                       some_days.map(lambda d: sampling.SampleDays(40, d))),
    "slice_counts": (estimates.INPUTS, estimates.slice_counts_expression,
                     some_days.map(lambda d: estimates.SliceCounts(DEFAULT_SLICES, OUTCOMES, d))),
    "population": (("trace_signals",), estimates.population_expression,
                   day.map(lambda d: estimates.DaySlices(d, (("language",), ("query_type", "language"))))),
    "app_cost": (("raw_traces",), estimates.app_cost_expression, day),
}


@pytest.fixture(scope="module")
def con(tmp_path_factory):
    """Every input table, empty: the stages' SQL depends on their schemas only."""
    connection = duckdb.connect(str(tmp_path_factory.mktemp("literals") / "db.duckdb"))
    create_tables(connection)
    compute_signals(connection, SignalSettings())
    select_candidates(connection, SamplingPolicy())
    yield connection
    connection.close()


def _compiled_directly(con, inputs, build, wanted) -> str:
    engine = DuckDBEngine()
    return ibis.to_sql(build(engine.inputs(con, inputs), wanted, engine.functions), dialect="duckdb")


@pytest.mark.parametrize("stage", sorted(STAGES))
@settings(max_examples=1, deadline=None, phases=(Phase.explicit, Phase.generate),  # no slow shrinking
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), moved=st.integers(-20_000, 20_000))
def test_the_sql_for_other_days_is_what_ibis_compiles_for_them(con, stage, data, moved):
    """Each stage once per run, on days hypothesis draws afresh (a compile takes up to 0.5 s)."""
    inputs, build, wanted = STAGES[stage]
    first = data.draw(wanted)
    later = shifted(first, moved)  # the same stage shape, other days
    assume(date(1900, 1, 1) < min(dates_in(later)) and max(dates_in(later)) < date(2250, 1, 1))
    engine = DuckDBEngine()
    with patch.object(DuckDBEngine, "_compiled", {}), patch.object(DuckDBEngine, "_movable", {}):
        assert same_sql(engine._sql(con, stage, inputs, build, first), _compiled_directly(con, inputs, build, first))
        assert DuckDBEngine._movable == {build: True}  # the stage passed its check
        with patch.object(DuckDBEngine, "_compile", side_effect=AssertionError("compiled again")):
            got = engine._sql(con, stage, inputs, build, later)  # from the cache
    assert same_sql(got, _compiled_directly(con, inputs, build, later))


def test_a_literal_the_settings_did_not_make_stays_and_an_unknown_one_refuses():
    moved = (date(2400, 1, 1) - date(2026, 11, 1)).days
    sql = "SELECT MAKE_DATE(2400, 1, 3), MAKE_DATE(1970, 1, 1), MAKE_TIMESTAMPTZ(2400, 1, 1, 0, 0, 0.0, 'UTC')"
    assert from_sentinel_era(sql, moved) == ("SELECT MAKE_DATE(2026, 11, 3), MAKE_DATE(1970, 1, 1), "
                                             "MAKE_TIMESTAMPTZ(2026, 11, 1, 0, 0, 0.0, 'UTC')")
    assert from_sentinel_era("SELECT '2400-01-03'::DATE", moved) is None  # not a literal it knows: compile
    assert to_sentinel_era(SamplingPolicy()) == (SamplingPolicy(), 0)
