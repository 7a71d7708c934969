"""Golden coverage on what real instrumentations write (tests/fixtures/otlp/: LlamaIndex,
LangChain, OpenAI GenAI spans; no tenant or query type, id-only documents)."""

from datetime import date

import duckdb
import pandas as pd
import pytest

from rag_loop.goldens.coverage import GoldenSet, coverage_day, coverage_of_day
from rag_loop.ingest import ingest_directory
from rag_loop.intents.clusters import cluster_intents
from rag_loop.intents.query_embeddings import embed_candidates
from rag_loop.selection.sampling import SamplingPolicy, select_candidates
from rag_loop.selection.signals import SignalSettings, compute_signals
from rag_loop.store.tables import create_tables
from rag_loop.vectors.clustering import ClusterSettings
from tests.helpers import PROJECT
from tests.helpers.fakes import hashing_router

FIXTURES = PROJECT / "tests" / "fixtures" / "otlp" / "traces"
DAY = date(2026, 11, 30)  # every fixture request's day


def _intents(con, policy: SamplingPolicy) -> None:
    select_candidates(con, policy)
    embed_candidates(con, hashing_router())
    cluster_intents(con, ClusterSettings())


def test_coverage_of_real_spans_traffic_is_not_evaluated_on_a_small_sample_then_measured():
    with duckdb.connect() as con:
        create_tables(con)
        ingest_directory(con, FIXTURES)
        compute_signals(con, SignalSettings())
        _intents(con, SamplingPolicy())  # the default budget: a handful of traces
        largest = con.execute("SELECT cluster_id, medoid_trace_id FROM intent_clusters "
                              "ORDER BY size DESC, cluster_id LIMIT 1").fetchall()[0]
        release = GoldenSet("v0001", pd.DataFrame(
            [("g1", largest[1], largest[0]), ("g2", "no-such-trace", "gone-0001")],
            columns=["golden", "trace_id", "cluster_id"]))
        [small] = coverage_day(con, DAY, release)
        stored = con.execute("SELECT traffic, n, covered_share, goldens_unplaced FROM golden_coverage "
                             "WHERE slice = 'all'").fetchall()[0]
        assert not small.evaluated and "below the minimum sample" in small.note
        assert stored[0] == 132 and 0 < stored[1] < 30 and 0 <= stored[2] <= 1 and stored[3] == 1
        slices = dict(con.execute("SELECT slice, list(slice_value ORDER BY slice_value) FROM golden_coverage "
                                  "GROUP BY 1").fetchall())
        assert slices["tenant"] == ["unknown"] and slices["query_type"] == ["unknown"]  # not emitted

        _intents(con, SamplingPolicy(random_rate=1.0, daily_budget_usd=None))  # every trace: π = 1
        covered = con.execute("SELECT cluster_id FROM trace_clusters WHERE trace_id = ?", [largest[1]]).fetchall()[0][0]
        members = con.execute("SELECT count(*) FROM trace_clusters WHERE cluster_id = ?", [covered]).fetchall()[0][0]
        [full] = coverage_day(con, DAY, release)
        assert full.evaluated and full.n == 132 and full.value == pytest.approx(members / 132)
        result = coverage_of_day(con, DAY, release)
        volumes = result.intents[result.intents["slice"] == "all"]
        assert volumes["volume"].sum() == pytest.approx(132) and volumes["covered"].sum() == 1
