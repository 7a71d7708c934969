"""The DuckDB engine compiles a stage once per shape: for the same stage on other days (another
window of the same length; a day list of any count up to its slots and any spacing), or with
other figures in settings that declare them literals, the SQL it gives (the cached one, its date
literals moved, its placeholders replaced) is the SQL Ibis compiles for those settings, in
DuckDB's and in Spark's dialect."""

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from itertools import accumulate
from unittest.mock import patch

import duckdb
import ibis
import pytest
from hypothesis import HealthCheck, Phase, assume, example, given, settings
from hypothesis import strategies as st

from rag_loop.drift import query_mix_expressions as drift
from rag_loop.drift import retrieval_expressions as retrieval
from rag_loop.engines import sql_cache
from rag_loop.engines.engine import DuckDBEngine
from rag_loop.engines.functions import DUCKDB, SPARK, day_range, double, on_days
from rag_loop.engines.literals import (
    LEAST_SLOTS,
    REACH,
    SPACING,
    Literals,
    Text,
    dates_in,
    from_sentinel_era,
    same_sql,
    shifted,
    to_placeholders,
    to_sentinel_era,
)
from rag_loop.selection import estimate_expressions as estimates
from rag_loop.selection import sampling_expressions as sampling
from rag_loop.selection import signal_expressions as signals
from rag_loop.selection.estimates import DEFAULT_SLICES, OUTCOMES
from rag_loop.selection.sampling import SamplingPolicy, select_candidates
from rag_loop.selection.signals import SignalSettings, compute_signals
from rag_loop.store.tables import create_tables

day = st.dates(date(1990, 1, 1), date(2150, 12, 31))


def day_lists(most: int) -> st.SearchStrategy[tuple[date, ...]]:
    """Strictly increasing days, up to `most`: neighbours (whose windows overlap) and far apart."""
    gaps = st.lists(st.integers(1, 2) | st.integers(1, 400), max_size=most - 1)
    return st.tuples(day, gaps).map(lambda s: tuple(accumulate(s[1], lambda d, g: d + timedelta(days=g),
                                                               initial=s[0])))


some_days = day_lists(LEAST_SLOTS)  # one shape: any of them is the SQL of any other
window = st.tuples(day, st.integers(1, 14)).map(lambda w: (w[0] - timedelta(days=w[1]), w[0]))
# a slice of each kind (none, one, two columns) where DEFAULT_SLICES has 12: a quarter of the compile
SLICE_KINDS = ((), ("language",), ("query_type", "language"))
assert set(map(len, DEFAULT_SLICES)) == set(map(len, SLICE_KINDS)) and set(SLICE_KINDS) <= set(DEFAULT_SLICES)
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
                     some_days.map(lambda d: estimates.SliceCounts(SLICE_KINDS, OUTCOMES, d))),
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
    return ibis.to_sql(build(engine.inputs(con, inputs), wanted, engine.functions), dialect="duckdb", pretty=False)


@pytest.mark.parametrize("stage", sorted(STAGES))
@settings(max_examples=1, deadline=None, phases=(Phase.explicit, Phase.generate),  # no slow shrinking
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), moved=st.integers(-20_000, 20_000))
def test_the_sql_for_other_days_is_what_ibis_compiles_for_them(con, stage, data, moved):
    """Each stage once per run, on days hypothesis draws afresh (a compile takes up to 0.5 s):
    a stage with a day list on another list (another count and spacing), else its days moved."""
    inputs, build, wanted = STAGES[stage]
    first = data.draw(wanted)
    listed = isinstance(to_sentinel_era(first)[1], tuple)
    later = data.draw(wanted) if listed else shifted(first, moved)  # the same stage shape, other days
    assume(date(1900, 1, 1) < min(dates_in(later)) and max(dates_in(later)) < date(2250, 1, 1))
    engine, compiled, compile = DuckDBEngine(), {}, DuckDBEngine._compile

    def recorded(self, con, inputs, build, settings) -> str:
        compiled[repr(settings)] = sql = compile(self, con, inputs, build, settings)
        return sql
    with patch.object(DuckDBEngine, "_compiled", {}), patch.object(DuckDBEngine, "_movable", {}), \
            patch.dict("os.environ", {sql_cache.VARIABLE: ""}):  # as in a process's first compile
        with patch.object(DuckDBEngine, "_compile", recorded):
            got = engine._sql(con, stage, inputs, build, first)
        # the engine compiled the canonical settings and, for its check, `first` as given (the
        # call _compiled_directly makes, made once): the canonical SQL moved back is the latter
        assert compiled.keys() == {repr(to_placeholders(first)[0]), repr(first)}
        assert same_sql(got, compiled[repr(first)])
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
    listed = (date(2026, 11, 1), date(2026, 11, 2))  # slots 2400-01-01, 2400-03-05 (the 3rd to 16th: the 2nd day)
    assert from_sentinel_era("SELECT x IN (MAKE_DATE(2400, 3, 5), MAKE_DATE(2400, 3, 6), MAKE_DATE(2400, 5, 8), "
                             "MAKE_DATE(2400, 1, 2), MAKE_DATE(2400, 5, 9)), MAKE_DATE(2399, 12, 1)", listed) == (
        "SELECT x IN (MAKE_DATE(2026, 11, 2), MAKE_DATE(2026, 11, 3)), MAKE_DATE(2026, 10, 1)")
    # between two slots (a day the list does not reach), beyond the last slot: compile
    assert from_sentinel_era("SELECT MAKE_DATE(2400, 2, 2)", listed) is None
    assert from_sentinel_era("SELECT MAKE_DATE(2402, 11, 1)", listed) is None


@dataclass(frozen=True)
class Days:
    days: tuple[date, ...]
    ahead: int
    before: int


def _uses_of_days(dialect: str):
    """A stage using a day list as the stages may: membership, its first and last day (a range
    of instants), each day's neighbours, a day as a value."""
    table = ibis.table({"day": "date", "t": "timestamp('UTC')"}, name="t")
    fn = DUCKDB if dialect == "duckdb" else SPARK

    def build(wanted: Days) -> ibis.Table:
        near = sorted({d + timedelta(days=k) for d in wanted.days for k in range(-wanted.before, wanted.ahead + 1)})
        later = [d + timedelta(days=1) for d in wanted.days]
        return table.filter(table.day.isin(list(wanted.days)) | on_days(fn, table.t, near),
                            table.day < wanted.days[-1] + timedelta(days=wanted.ahead)).select(
            "day", first=ibis.literal(wanted.days[0]), ahead=table.day.isin(later))
    return build


@pytest.mark.parametrize("dialect", ["duckdb", "pyspark"])
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
# past LEAST_SLOTS too (the next shape); windows short, a week, as long as a slot reaches (its end a day later)
@given(days=day_lists(LEAST_SLOTS + 2), ahead=st.sampled_from([0, 1, 2, REACH - 1]),
       before=st.sampled_from([0, 1, 7, REACH]))
@example(days=(date(2026, 11, 1),), ahead=0, before=0)
@example(days=tuple(day_range(date(2026, 11, 1), date(2026, 11, LEAST_SLOTS))), ahead=REACH - 1, before=REACH)
@example(days=(date(2024, 2, 28), date(2024, 2, 29), date(2024, 3, 1), date(2025, 3, 1)), ahead=1, before=7)
def test_a_day_list_of_any_count_and_spacing_gives_the_sql_of_its_days(request, dialect, days, ahead, before):
    """A day list's canonical SQL (the same for every count up to its slots and any spacing),
    moved back, is the SQL of its days, each literal where Ibis writes it: in `IN` lists, the
    range of instants they span, their neighbours'."""
    if dialect == "pyspark":
        request.getfixturevalue("spark_dialect")
    build = _uses_of_days(dialect)
    canonical, placed = to_placeholders(Days(days, ahead, before))
    assert canonical == to_placeholders(Days(days[:1], ahead, before))[0] or len(days) > LEAST_SLOTS
    got = placed.back(ibis.to_sql(build(canonical), dialect=dialect, pretty=False), dialect)
    assert got == ibis.to_sql(build(Days(days, ahead, before)), dialect=dialect, pretty=False)


def test_a_build_that_takes_the_days_between_listed_days_compiles_directly():
    """The days between a list's first and last are no set of its days: the canonical SQL
    names days between its slots, which move back to no day (the engine compiles as given)."""
    table = ibis.table({"day": "date"}, name="t")
    for days in [(date(2026, 11, 1),), (date(2026, 11, 1), date(2026, 11, 3))]:
        canonical, placed = to_placeholders(Days(days, 0, 0))
        spanned = table.filter(table.day.isin(day_range(canonical.days[0], canonical.days[-1])))
        assert placed.back(ibis.to_sql(spanned, dialect="duckdb", pretty=False), "duckdb") is None
    assert SPACING > 2 * REACH  # a literal is near one slot only


rate = st.floats(0.0, 1.0)
policies = st.builds(
    lambda salt, rates, signal_rates, risk, budget, share, high: SamplingPolicy(
        salt=salt, random_rate=rates[0], signal_rates=signal_rates, query_type_rates={"faq": rates[1]},
        risk_level_rates=risk, daily_budget_usd=budget, random_budget_share=share, judge_cost_usd=rates[2] + 1e-4,
        high_risk_query_types=high),
    salt=st.text(max_size=8), rates=st.tuples(rate, rate, rate),
    signal_rates=st.fixed_dictionaries({"thumbs_down": rate, "no_citation": rate}),
    risk=st.sampled_from([{}, {"high": 1.0}]).flatmap(lambda r: st.fixed_dictionaries({k: rate for k in r})),
    budget=st.none() | st.floats(0.0, 100.0), share=st.none() | rate, high=st.sampled_from([(), ("legal",)]))


def _compiled_for(con, dialect, build, wanted) -> str:
    functions = DUCKDB if dialect == "duckdb" else SPARK
    tables = DuckDBEngine().inputs(con, sampling.INPUTS)
    return ibis.to_sql(build(tables, wanted, functions), dialect=dialect, pretty=False)


@pytest.fixture(scope="module")
def spark_dialect():
    """Ibis compiles for Spark once its backend's options are registered (a session does it)."""
    from ibis.backends.pyspark import Backend
    Backend.register_options()


@pytest.mark.parametrize("dialect", ["duckdb", "pyspark"])
@settings(max_examples=2, deadline=None, phases=(Phase.explicit, Phase.generate),
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(policy=policies, days=st.none() | some_days)
# every optional part of a policy absent, then present (two random policies more: 4 a dialect, were 6 random)
@example(policy=SamplingPolicy(salt="", random_rate=0.0, signal_rates={"thumbs_down": 0.0, "no_citation": 0.0},
                               query_type_rates={"faq": 0.0}, risk_level_rates={}, daily_budget_usd=None,
                               random_budget_share=None, judge_cost_usd=1e-4, high_risk_query_types=()), days=None)
@example(policy=SamplingPolicy(salt="it's", random_rate=1.0, signal_rates={"thumbs_down": 0.25, "no_citation": 1.0},
                               query_type_rates={"faq": 0.5}, risk_level_rates={"high": 0.75}, daily_budget_usd=12.5,
                               random_budget_share=0.3, judge_cost_usd=0.02, high_risk_query_types=("legal",)),
         days=(date(2026, 11, 2), date(2026, 11, 4)))
def test_the_sql_for_other_rates_is_what_ibis_compiles_for_them(con, spark_dialect, dialect, policy, days):
    """The sampling stage's canonical SQL (compiled once per shape), its placeholders replaced by
    a random policy's figures, is the SQL Ibis compiles for that policy."""
    draws = sampling.Draws.of(policy)
    build, wanted = ((sampling.candidates_expression, draws) if days is None else
                     (sampling.candidates_of_days_expression, sampling.PolicyDays(draws, days)))
    canonical, placed = to_placeholders(wanted)
    assert placed is not None and len(placed.values) >= 6  # salt, four rates, fingerprint (and capacities)
    template = _TEMPLATES.get((dialect, build, repr(canonical)))
    if template is None:
        template = _TEMPLATES[dialect, build, repr(canonical)] = _compiled_for(con, dialect, build, canonical)
    assert same_sql(placed.back(template, dialect), _compiled_for(con, dialect, build, wanted))


_TEMPLATES: dict = {}


@dataclass(frozen=True)
class Figures(Literals):
    number: int
    share: float
    text: Text
    instant: datetime


@pytest.mark.parametrize("dialect", ["duckdb", "pyspark"])
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(number=st.integers(-2 ** 62, 2 ** 62), share=st.floats(allow_nan=False, allow_infinity=False),
       text=st.text(), instant=st.datetimes(datetime(1900, 1, 1), datetime(2250, 1, 1), timezones=st.just(UTC)))
# each shape named (30 random examples more, were 150): zero and empty, the ends of every range, a subnormal,
# exponents, an integral float, quotes, backslashes, line breaks, NUL, other scripts, and figures spelled
# as a placeholder's token
@example(number=0, share=0.0, text="", instant=datetime(2000, 1, 1, 0, 0, 0, 247700, tzinfo=UTC))  # seconds 0.2477
@example(number=-2 ** 62, share=-0.0, text="'", instant=datetime(1900, 1, 1, tzinfo=UTC))
@example(number=2 ** 62, share=1.7976931348623157e308, text="\\", instant=datetime(2250, 1, 1, tzinfo=UTC))
@example(number=-1, share=5e-324, text="a''b\\'\n\r\t", instant=datetime(2024, 2, 29, 23, 59, 59, 999999, tzinfo=UTC))
@example(number=7_919_000_000_000, share=0.70710678000001, text="rlplaceholder0q",
         instant=datetime(2149, 12, 31, 23, 59, 59, tzinfo=UTC))
@example(number=123456789, share=-1e16, text="\x00 é 中 😀 %s {0} $1", instant=datetime(1970, 1, 1, tzinfo=UTC))
@example(number=-987654321987, share=1e-05, text='"double" `back`', instant=datetime(2026, 11, 1, 12, tzinfo=UTC))
@example(number=42, share=3.0, text="x" * 300, instant=datetime(2099, 12, 31, 0, 0, 0, 1, tzinfo=UTC))
def test_every_literal_is_spelled_as_ibis_spells_it(spark_dialect, dialect, number, share, text, instant):
    """Numbers of any sign and size, any text (quotes, backslashes, newlines), instants: the
    placeholders' SQL, replaced, is the SQL of the figures, wherever a literal sits."""
    table = ibis.table({"a": "int64", "f": "float64", "s": "string", "t": "timestamp('UTC')"}, name="t")

    def expression(figures: Figures) -> ibis.Table:
        return table.select(
            minus=figures.number - table.a, times=table.f * figures.number, most=ibis.greatest(table.a, figures.number),
            share=table.f - double(figures.share), raw=table.f * ibis.literal(figures.share, "float64"),
            text=ibis.literal(f"{figures.text}:") + table.s, alone=ibis.literal(str(figures.text)),
            later=table.t > figures.instant)
    figures = Figures(number, share, Text(text), instant)
    canonical, placed = to_placeholders(figures)
    got = placed.back(ibis.to_sql(expression(canonical), dialect=dialect, pretty=False), dialect)
    assert got == ibis.to_sql(expression(figures), dialect=dialect, pretty=False)


def test_rates_written_as_integers_give_the_sql_of_their_figures(con):
    """A rate of 1 (an int, as a config file may spell it) is the rate 1.0: its placeholder is a
    float's, so double()'s text of it is replaced like any rate's."""
    draws = sampling.Draws.of(SamplingPolicy(random_rate=1, signal_rates={"thumbs_down": 1, "no_citation": 0}))
    canonical, placed = to_placeholders(draws)
    template = _compiled_for(con, "duckdb", sampling.candidates_expression, canonical)
    wanted = _compiled_for(con, "duckdb", sampling.candidates_expression, draws)
    assert same_sql(placed.back(template, "duckdb"), wanted)


def test_a_placeholder_the_build_spelled_otherwise_is_never_left_in_the_sql():
    """An int placed where the build writes it as a float's text (`7919….0`) is not a token the
    SQL can take back: `back` says so (None: the engine compiles the settings as given)."""
    canonical, placed = to_placeholders(Figures(1, 0.5, Text("x"), datetime(2026, 11, 1, tzinfo=UTC)))
    table = ibis.table({"f": "float64"}, name="t")
    sql = ibis.to_sql(table.select(x=table.f * double(canonical.number)), dialect="duckdb", pretty=False)
    assert placed.back(sql, "duckdb") is None
