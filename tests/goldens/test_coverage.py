"""Golden coverage (issue 48): figures by hand on a tiny DuckDB world, hostile worlds (hypothesis),
the asset through `dagster.materialize`."""

import json
from datetime import UTC, date, datetime, timedelta

import duckdb
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rag_loop.drift.checks import Limit
from rag_loop.goldens.coverage import (
    CHECK,
    UNASSIGNED,
    CoverageSettings,
    GoldenSet,
    coverage_change,
    coverage_day,
    coverage_of_day,
    intent_coverage,
    largest_uncovered,
    release_goldens,
)
from rag_loop.store.releases import serialize
from rag_loop.store.tables import create_tables

DAY = date(2026, 11, 2)


def world(con, traces, clusters=("A", "B", "C"), judged=(), labelled=()):
    """traces: (trace_id, day, language, tenant, query_type, π or None: not sampled, cluster or None)."""
    con.execute('CREATE TABLE IF NOT EXISTS raw_traces (trace_id VARCHAR, "timestamp" TIMESTAMPTZ, '
                "original_query VARCHAR, language VARCHAR, tenant VARCHAR, query_type VARCHAR)")
    con.execute("CREATE TABLE failure_candidates (trace_id VARCHAR, day DATE, inclusion_probability DOUBLE)")
    con.execute("CREATE TABLE trace_clusters (trace_id VARCHAR, language VARCHAR, cluster_id VARCHAR, "
                "similarity DOUBLE)")
    con.execute("CREATE TABLE intent_clusters (cluster_id VARCHAR, label VARCHAR, medoid_query VARCHAR, "
                "is_singleton BOOLEAN)")
    con.execute("CREATE TABLE trace_judgments (trace_id VARCHAR, metric VARCHAR, status VARCHAR, "
                "passed BOOLEAN, judged_at TIMESTAMPTZ)")
    con.execute("CREATE TABLE current_labels (trace_id VARCHAR, decision VARCHAR, failure_type VARCHAR)")
    for trace_id, day, language, tenant, query_type, pi, cluster in traces:
        at = datetime.combine(day, datetime.min.time(), UTC) + timedelta(hours=12)
        con.execute('INSERT INTO raw_traces (trace_id, "timestamp", original_query, language, tenant, query_type) '
                    "VALUES (?, ?, 'q', ?, ?, ?)", [trace_id, at, language, tenant, query_type])
        if pi is not None:
            con.execute("INSERT INTO failure_candidates VALUES (?, ?, ?)", [trace_id, day, pi])
        if cluster is not None:
            con.execute("INSERT INTO trace_clusters VALUES (?, ?, ?, 1.0)", [trace_id, language, cluster])
    for cluster in clusters:
        con.execute("INSERT INTO intent_clusters VALUES (?, ?, ?, false)", [cluster, f"label {cluster}", "q"])
    for trace_id, passed in judged:
        con.execute("INSERT INTO trace_judgments VALUES (?, 'Faithfulness', 'judged', ?, now())", [trace_id, passed])
    for trace_id, failure_type in labelled:
        con.execute("INSERT INTO current_labels VALUES (?, 'accept', ?)", [trace_id, failure_type])
    return con


def goldens(*rows, version="v0001"):
    return GoldenSet(version, pd.DataFrame(rows, columns=["golden", "trace_id", "cluster_id"]))


@pytest.fixture
def tiny():
    """Day 2: 10 traces; 4 sampled with weights 1, 1, 2, 4 in intents A, A, B, C."""
    con = duckdb.connect()
    traces = [("t1", DAY, "en", "acme", "faq", 1.0, "A"), ("t2", DAY, "vi", "acme", "faq", 1.0, "A"),
              ("t3", DAY, "en", "globex", "pay", 0.5, "B"), ("t4", DAY, None, None, None, 0.25, "C")]
    traces += [(f"u{i}", DAY, "en", "acme", "faq", None, None) for i in range(6)]
    yield world(con, traces)
    con.close()


def test_covered_share_is_the_weighted_share_of_sampled_traffic(tiny):
    result = coverage_of_day(tiny, DAY, goldens(("g1", "t1", "A")))
    overall = result.summary.set_index(["slice", "slice_value"]).loc[("all", "all")]
    assert overall["traffic"] == 10 and overall["n"] == 4 and overall["volume"] == 8.0
    assert overall["covered_share"] == pytest.approx(2 / 8) and overall["covered_traffic"] == pytest.approx(2.5)
    assert overall["covered_intents"] == 1 and overall["intents"] == 3
    assert list(overall["largest_uncovered"]) == ["C", "B"]
    by_language = result.summary[result.summary["slice"] == "language"].set_index("slice_value")
    # en: t1 (1, A) and t3 (2, B); vi: t2 (1, A); no language: t4 (4, C) → 'und'
    assert by_language["covered_share"].to_dict() == pytest.approx({"en": 1 / 3, "vi": 1.0, "und": 0.0})
    assert by_language.loc["en", "traffic"] == 8
    intents = result.intents[result.intents["slice"] == "all"].set_index("cluster_id")
    assert intents["volume"].to_dict() == {"C": 4.0, "B": 2.0, "A": 2.0}
    assert intents["covered"].to_dict() == {"C": False, "B": False, "A": True}
    assert intents.loc["B", "label"] == "label B"


def test_a_golden_covers_its_traces_intent_then_its_recorded_cluster_else_nothing(tiny):
    # g1: trace t3 is clustered in B (its recorded A is stale); g2: trace gone, recorded C exists;
    # g3: trace gone, recorded cluster gone
    result = coverage_of_day(tiny, DAY, goldens(("g1", "t3", "A"), ("g2", "gone", "C"), ("g3", "gone2", "Z")))
    intents = result.intents[result.intents["slice"] == "all"].set_index("cluster_id")
    assert intents["covered"].to_dict() == {"C": True, "B": True, "A": False}
    assert result.goldens_unplaced == 1


def test_check_warns_under_the_floor_with_the_sample_size(tiny):
    floor = CoverageSettings(Limit(0.5, None, False, min_sample=3))
    [verdict] = coverage_day(tiny, DAY, goldens(("g1", "t1", None)), floor)
    assert verdict.name == CHECK and verdict.fired and verdict.severity == "WARN"
    assert verdict.value == pytest.approx(0.25) and verdict.n == 4
    assert verdict.details["traffic"] == 10 and verdict.details["largest_uncovered"][0].startswith("C label C")
    [fine] = coverage_day(tiny, DAY, goldens(("g1", "t4", None)), floor)  # C: 4 of 8
    assert not fine.fired and fine.evaluated
    [small] = coverage_day(tiny, DAY, goldens(("g1", "t1", None)), CoverageSettings())  # min sample 30
    assert not small.fired and not small.evaluated and "minimum sample" in small.note
    stored = tiny.execute("SELECT count(*), any_value(release) FROM golden_coverage WHERE day = ?", [DAY]).fetchall()
    assert stored == [(1 + 3 + 3 + 3, "v0001")]  # all, language (en, vi, und), tenant, query_type: rerun replaced


def test_no_release_empty_day_and_no_selection_are_not_evaluated(tiny):
    [no_release] = coverage_day(tiny, DAY, GoldenSet(None))
    assert not no_release.evaluated and no_release.note == "no golden release to cover the traffic"
    assert intent_coverage(tiny, GoldenSet(None))["uncovered_volume"].tolist() == [4.0, 2.0, 2.0]  # all of it
    stored = tiny.execute("SELECT covered_share, release FROM golden_coverage WHERE slice = 'all'").fetchall()
    assert stored == [(None, None)]
    [empty] = coverage_day(tiny, DAY + timedelta(days=5), goldens(("g1", "t1", "A")))
    assert not empty.evaluated and empty.note == "no traffic on the day"
    bare = duckdb.connect()
    bare.execute('CREATE TABLE raw_traces (trace_id VARCHAR, "timestamp" TIMESTAMPTZ, language VARCHAR, '
                 "tenant VARCHAR, query_type VARCHAR)")
    bare.execute("INSERT INTO raw_traces VALUES ('x', '2026-11-02 10:00+00', 'en', 'a', 'b')")
    [unselected] = coverage_day(bare, DAY, goldens(("g1", "x", "A")))
    assert not unselected.evaluated and unselected.note.startswith("no sampled trace")


def test_unclustered_candidates_are_an_uncovered_intent_of_their_own():
    con = world(duckdb.connect(), [("t1", DAY, "en", "a", "q", 0.5, None), ("t2", DAY, "en", "a", "q", 0.5, "A")])
    result = coverage_of_day(con, DAY, goldens(("g", "t2", None)))
    overall = result.summary[result.summary["slice"] == "all"].iloc[0]
    assert overall["covered_share"] == 0.5 and overall["unassigned_share"] == 0.5
    assert UNASSIGNED in set(result.intents["cluster_id"])


def test_failure_rate_rises_while_uncovered_against_the_intents_own_baseline():
    before, settings = DAY - timedelta(days=1), CoverageSettings(min_assessed=2, rising_by=0.3)
    traces = [(f"b{i}", before, "en", "a", "q", 1.0, "A") for i in range(4)]
    traces += [(f"d{i}", DAY, "en", "a", "q", 1.0, "A") for i in range(4)]
    traces += [(f"c{i}", DAY, "en", "a", "q", 1.0, "B") for i in range(3)]
    judged = [(f"b{i}", i != 0) for i in range(4)] + [(f"d{i}", False) for i in range(4)]
    labelled = [("c0", "retrieval"), ("c1", "none"), ("c2", "generation")]  # labels: B fails 2 of 3
    con = world(duckdb.connect(), traces, judged=judged, labelled=labelled)
    result = coverage_of_day(con, DAY, goldens(("g", "zz", None)), settings).intents
    intents = result[result["slice"] == "all"].set_index("cluster_id")
    assert intents.loc["A", "failure_rate"] == 1.0 and intents.loc["A", "baseline_failure_rate"] == 0.25
    assert bool(intents.loc["A", "rising"])
    # B has no past of its own: compared with the window's overall rate (0.25)
    assert intents.loc["B", "failure_rate"] == pytest.approx(2 / 3) and bool(intents.loc["B", "rising"])
    covered = coverage_of_day(con, DAY, goldens(("g", "d0", None)), settings).intents.query("slice == 'all'") \
        .set_index("cluster_id")
    assert not bool(covered.loc["A", "rising"])  # covered: a golden tests it already


def test_largest_uncovered_over_days_and_the_release_on_disk(tmp_path, tiny):
    assert release_goldens(tmp_path / "none").version is None
    write_release(tmp_path / "goldens", "v0001", [("g1", "t1", "A")])
    write_release(tmp_path / "goldens", "v0002", [("g1", "t1", "A"), ("g2", "t4", "C")])
    newest = release_goldens(tmp_path / "goldens")
    assert newest.version == "v0002" and list(newest.goldens["trace_id"]) == ["t1", "t4"]
    assert release_goldens(tmp_path / "goldens", "v0001").goldens["golden"].tolist() == ["g1"]
    assert release_goldens(tmp_path / "goldens", "v0009").version is None
    coverage_day(tiny, DAY, release_goldens(tmp_path / "goldens", "v0001"))
    top = largest_uncovered(tiny, [DAY])
    assert top["cluster_id"].tolist() == ["C", "B"] and top["volume"].tolist() == [4.0, 2.0]


def write_release(directory, version, rows):
    import hashlib
    folder = directory / version
    folder.mkdir(parents=True)
    payload = serialize([{"name": name, "input": "q", "additional_metadata": {"trace_id": trace, "cluster_id": cluster}}
                         for name, trace, cluster in rows])
    (folder / "goldens.json").write_text(payload, encoding="utf-8")
    (folder / "manifest.json").write_text(json.dumps({"version": version,
                                                      "sha256": hashlib.sha256(payload.encode()).hexdigest()}))


# hostile worlds: any mix of missing tables, unsampled or unclustered traces, missing slices,
# goldens whose trace is gone, no release, an empty day → figures or "not evaluated", shares in [0, 1]
_trace = st.tuples(st.sampled_from([DAY, DAY - timedelta(days=1), DAY - timedelta(days=3)]),
                   st.sampled_from(["en", "vi", None]), st.sampled_from(["acme", None]),
                   st.sampled_from(["faq", "pay", None]),
                   st.one_of(st.none(), st.floats(0.001, 1.0), st.just(1.5)),
                   st.sampled_from(["A", "B", "s-1", None]),
                   st.sampled_from([None, True, False]), st.sampled_from([None, "none", "retrieval"]))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(traces=st.lists(_trace, max_size=8),
       golden_rows=st.lists(st.tuples(st.sampled_from(["t0", "t1", "t5", "gone"]),
                                      st.sampled_from(["A", "Z", None])), max_size=3),
       has_release=st.booleans(),
       dropped=st.sets(st.sampled_from(["failure_candidates", "trace_clusters", "intent_clusters",
                                        "trace_judgments", "current_labels", "raw_traces"])))
def test_hostile_worlds_give_figures_or_not_evaluated_never_a_crash(traces, golden_rows, has_release, dropped):
    rows = [(f"t{i}", day, lang, tenant, qtype, pi, cluster)
            for i, (day, lang, tenant, qtype, pi, cluster, _, _) in enumerate(traces)]
    judged = [(f"t{i}", passed) for i, t in enumerate(traces) if (passed := t[6]) is not None]
    labelled = [(f"t{i}", kind) for i, t in enumerate(traces) if (kind := t[7]) is not None]
    with duckdb.connect() as con:
        world(con, rows, clusters=("A", "B"), judged=judged, labelled=labelled)
        for table in dropped:
            con.execute(f"DROP TABLE {table}")
        release = goldens(*[(f"g{i}", t, c) for i, (t, c) in enumerate(golden_rows)]) if has_release \
            else GoldenSet(None)
        [verdict] = coverage_day(con, DAY, release, CoverageSettings(Limit(0.5, None, False, min_sample=1)))
        shares = con.execute("SELECT covered_share, unassigned_share FROM golden_coverage UNION ALL "
                             "SELECT share, failure_rate FROM golden_coverage_intents").fetchall()
        change = coverage_change(con, release, GoldenSet(None))
        exported = intent_coverage(con, release)  # the workspace's export
    assert (exported["uncovered_volume"] <= exported["volume"]).all()
    assert exported["covered"].isna().all() or has_release
    if change is not None:  # the release report's figures: a release against no parent
        assert change.slices[["parent_share", "share"]].stack().between(0, 1).all()
    assert all(0.0 <= s <= 1.0 + 1e-9 for row in shares for s in row if s is not None)
    if verdict.evaluated:
        assert 0.0 <= verdict.value <= 1.0 and verdict.n >= 1 and has_release
    else:
        assert verdict.note and not verdict.fired


def test_the_asset_writes_its_tables_and_its_check_warns_or_says_not_evaluated(tmp_path):
    from dagster import materialize
    from dagster_duckdb import DuckDBResource

    from rag_loop_dagster.assets.coverage import golden_coverage
    from rag_loop_dagster.assets.resources import DuckDBEngineResource, RagLoopPaths
    database = tmp_path / "rag.duckdb"
    with duckdb.connect(str(database)) as con:
        create_tables(con)  # the whole trace schema: the chart reads version changes from it
        world(con, [(f"t{i}", DAY, "en", "acme", "faq", 0.5, "A" if i < 10 else "B") for i in range(40)])
    write_release(tmp_path / "goldens", "v0001", [("g1", "t0", "A")])
    resources = {"duckdb": DuckDBResource(database=str(database)), "engine": DuckDBEngineResource(),
                 "paths": RagLoopPaths(goldens_dir=str(tmp_path / "goldens"), reports_dir=str(tmp_path / "r"))}
    config = {"ops": {"golden_coverage": {"config": {"min_share": 0.5}}}}
    result = materialize([golden_coverage], resources=resources, partition_key=DAY.isoformat(), run_config=config)
    assert result.success
    [check] = result.get_asset_check_evaluations()
    assert check.check_name == CHECK and not check.passed and check.severity.value == "WARN"
    assert check.metadata["n"].value == 40 and check.metadata["value"].value == pytest.approx(0.25)
    metadata = result.asset_materializations_for_node("golden_coverage")[0].metadata
    assert metadata["release"].value == "v0001" and "| B " in metadata["largest_uncovered"].value
    assert metadata["covered_share_mean"].value == pytest.approx(0.25)
    exported = pd.read_parquet(tmp_path / "r" / "intent_coverage.parquet").set_index("cluster_id")
    assert exported["uncovered_volume"].to_dict() == {"B": 60.0, "A": 0.0} and exported.loc["A", "covered"]
    # before the first release (the demo's drift_job): figures, and a check not evaluated
    resources["paths"] = RagLoopPaths(goldens_dir=str(tmp_path / "none"), reports_dir=str(tmp_path / "r"))
    early = materialize([golden_coverage], resources=resources, partition_key=DAY.isoformat())
    [unknown] = early.get_asset_check_evaluations()
    assert not unknown.passed and unknown.description == "not evaluated: no golden release to cover the traffic"
    with duckdb.connect(str(database), read_only=True) as con:
        assert con.execute("SELECT count(*), count(covered) FROM golden_coverage_intents WHERE slice = 'all'"
                           ).fetchall() == [(2, 0)]
    exported = pd.read_parquet(tmp_path / "r" / "intent_coverage.parquet").set_index("cluster_id")
    assert exported["uncovered_volume"].to_dict() == {"A": 20.0, "B": 60.0} and exported["covered"].isna().all()


def test_a_release_against_its_parent_on_the_same_window(tiny, tmp_path):
    from rag_loop.reporting.reports import coverage_section
    change = coverage_change(tiny, goldens(("g1", "t1", None), ("g2", "t4", None), version="v0002"),
                             goldens(("g1", "t1", None), version="v0001"))
    overall = change.slices.set_index("slice").loc["all"]
    assert (overall["parent_share"], overall["share"]) == (pytest.approx(0.25), pytest.approx(0.75))
    assert change.newly_covered["cluster_id"].tolist() == ["C"]
    assert change.still_uncovered["cluster_id"].tolist() == ["B"]
    assert change.first == DAY - timedelta(days=13) and change.last == DAY
    html = coverage_section(change)
    assert "75.0% of the traffic" in html and "25.0% with v0001" in html
    assert coverage_change(tiny, GoldenSet(None), GoldenSet(None)) is None
    assert coverage_section(None).startswith("<p>Not computed")


def test_the_summary_prints_coverage_per_day_and_the_largest_uncovered(tiny, capsys):
    from rag_loop.reporting.summary import _print_coverage
    coverage_day(tiny, DAY, goldens(("g1", "t1", None)))
    _print_coverage(tiny)
    printed = capsys.readouterr().out
    assert "2026-11-02   v0001       10        4           0.25" in printed
    assert printed.index("C label C") < printed.index("B label B")


def test_equal_volumes_rank_by_intent_whatever_order_they_were_added_in():
    """Volumes are sums an engine adds in its own order (0.1 + 0.2 is not 0.3 in floats): equal
    ones rank by cluster id, so DuckDB and Spark list the same largest uncovered intents."""
    from rag_loop.goldens.coverage import SAMPLED_COLUMNS, compute_coverage
    rows = [(DAY, "en", "a", "q", "B", False, False, 1, 0.1), (DAY, "vi", "a", "q", "B", False, False, 1, 0.2),
            (DAY, "en", "a", "q", "A", False, False, 1, 0.3)]
    traffic = pd.DataFrame([("all", "all", 3)], columns=["slice", "slice_value", "traffic"])
    summary, intents = compute_coverage(traffic, pd.DataFrame(rows, columns=SAMPLED_COLUMNS), DAY, set())
    assert 0.1 + 0.2 > 0.3 and intents.query("slice == 'all'")["cluster_id"].tolist() == ["A", "B"]
    assert summary.query("slice == 'all'")["largest_uncovered"].iloc[0] == ["A", "B"]
