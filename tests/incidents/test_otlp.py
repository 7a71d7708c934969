"""An incident on what real instrumentations write (tests/fixtures/otlp/: LlamaIndex, LangChain,
OpenAI GenAI spans): no language (ingestion detects one), tenant or query type, no knowledge
base. The postmortem says what is not recorded and fills the rest."""

import duckdb

from rag_loop.incidents.record import IncidentRequest, parse_instant
from rag_loop.incidents.runbook import open_incident
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


def test_an_incident_on_real_spans_traffic(tmp_path):
    with duckdb.connect() as con:
        create_tables(con)
        ingest_directory(con, FIXTURES)
        compute_signals(con, SignalSettings())
        select_candidates(con, SamplingPolicy(random_rate=1.0, daily_budget_usd=None))
        embed_candidates(con, hashing_router())
        cluster_intents(con, ClusterSettings())
        request = IncidentRequest(parse_instant("2026-11-30"), parse_instant("2026-11-30", end=True))
        report = open_incident(con, request, tmp_path / "reports", tmp_path / "goldens")
        by_tenant = IncidentRequest(request.start, request.end, {"tenant": ["acme"]})  # none emitted
        empty = open_incident(con, by_tenant, tmp_path / "reports", tmp_path / "goldens")
    text = report.text
    assert report.incident["affected"] == 132 and "**132** requests in the window" in text
    assert "Not recorded on these traces: tenant, query_type." in text
    assert "Language detected from the query text for 132 of the requests" in text
    assert "document version published" not in text  # no knowledge base
    assert "release that gated the last deploy: not recorded" in text
    assert report.facts.impact["intents"]["requests"].sum() == 132  # every request sampled: each has an intent
    assert empty.incident["affected"] == 0 and "No request in the window matches" in empty.text
    vi = report.facts.impact["slices"]["language"].set_index("value")
    assert vi.loc["vi", "requests"] == 27  # detected languages are sliceable
