"""Intents: embed the candidates' queries and cluster them by intent per language."""


from typing import Literal

from dagster import (
    AssetExecutionContext,
    Config,
    MaterializeResult,
    MetadataValue,
)
from dagster_duckdb import DuckDBResource
from pydantic import Field

from rag_loop.intents.clusters import cluster_intents
from rag_loop.intents.query_embeddings import embed_candidates
from rag_loop.reporting import plots
from rag_loop.vectors.clustering import ClusterSettings
from rag_loop_dagster.assets.resources import EmbedderResource, RagLoopPaths
from rag_loop_dagster.assets.selection import failure_candidates
from rag_loop_dagster.assets.stage import stage_asset

_CLUSTER_DEFAULTS = ClusterSettings()


@stage_asset(group_name="intents", deps=[failure_candidates],
             description="Embedding keys of the candidates' queries (vectors in "
                         "`embedding_cache`, keyed by model and text hash: a rerun embeds "
                         "nothing twice).",
             parts={"embedding_cache": "Vectors by model and text hash; every embedding step "
                                       "(trace_novelty, query_mix, curation_queue) fills it"})
def query_embeddings(context: AssetExecutionContext, duckdb: DuckDBResource,
                     embedder: EmbedderResource) -> MaterializeResult:
    with duckdb.get_connection() as con:
        report = embed_candidates(con, embedder.router(), log=context.log.info)
        preview = con.sql("SELECT language, model_id, count(*) AS queries, count(DISTINCT text_hash) "
                          "AS distinct_texts FROM query_embeddings GROUP BY ALL ORDER BY 1").df()
    return MaterializeResult(metadata={"dagster/row_count": report.traces, **report.figures(),
                                       "languages_on_default_model":
                                           MetadataValue.json(report.languages_on_default_model),
                                       "preview": MetadataValue.md(preview.to_markdown(index=False))})


class ClusterConfig(Config):
    pca_dims: int = Field(_CLUSTER_DEFAULTS.pca_dims, description="PCA dimensions before HDBSCAN.")
    min_cluster_size: int = _CLUSTER_DEFAULTS.min_cluster_size
    min_samples: int = _CLUSTER_DEFAULTS.min_samples
    selection_method: str = Field(_CLUSTER_DEFAULTS.selection_method, description='"eom" or "leaf".')
    merge_distance: float = Field(_CLUSTER_DEFAULTS.merge_distance,
                                  description="Clusters closer than this fraction of the median "
                                              "pairwise distance merge into one intent.")
    backend: Literal["fast_hdbscan", "hdbscan"] = Field(
        _CLUSTER_DEFAULTS.backend, description='"fast_hdbscan" (default: parallel, about twice as fast '
                                               'here) or "hdbscan": the same labels.')
    fit_sample: int = Field(_CLUSTER_DEFAULTS.fit_sample,
                            description="Above this many queries, fit on a sample; the rest join "
                                        "their nearest sample point's cluster.")


@stage_asset(group_name="intents", deps=["query_embeddings", "embedding_cache", "trace_judgments"],
       parts={"trace_clusters": "The intent cluster of each candidate trace"},
       description="Intent clusters per language (HDBSCAN on PCA-reduced embeddings, close "
                   "clusters merged) with size, weight (Σ 1/π), medoid, c-TF-IDF label, signal "
                   "and failure mix (signals and the online judge's verdicts), first/last seen, new since "
                   "the previous run; noise queries "
                   "as singletons. `trace_clusters` maps each candidate to its cluster.")
def intent_clusters(context: AssetExecutionContext, config: ClusterConfig,
                    duckdb: DuckDBResource, paths: RagLoopPaths) -> MaterializeResult:
    settings = ClusterSettings(**config.model_dump())
    with duckdb.get_connection() as con:
        report = cluster_intents(con, settings, log=context.log.info)
        top = con.sql("SELECT cluster_id, language, size, round(weight, 1) AS weight, label, "
                      "medoid_query, is_new FROM intent_clusters WHERE NOT is_singleton "
                      "ORDER BY weight DESC LIMIT 15").df()
    chart = plots.bars({f"{r.cluster_id} {r.label}": r.weight for r in top.itertuples()},
                       "Largest intent clusters", "weight (production traces, Σ 1/π)")
    return MaterializeResult(metadata={
        "dagster/row_count": report.clusters + report.singletons, **report.figures(),
        "in_workspace": paths.workspace("/intents"),  # the intents map
        "cluster_sizes": MetadataValue.md(plots.markdown_image(chart, "cluster sizes")),
        "largest_clusters": MetadataValue.md(top.to_markdown(index=False))})


