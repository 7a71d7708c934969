"""Stage 3: embed the candidates, cluster them by intent, and queue representatives for curators."""

from pathlib import Path

from dagster import (
    AssetExecutionContext,
    Config,
    MaterializeResult,
    MetadataValue,
    asset,
)
from dagster_duckdb import DuckDBResource
from pydantic import Field

from assets.resources import EmbedderResource, RagLoopPaths
from assets.selection import failure_candidates
from assets.tables import stage_asset
from rag_loop import plots
from rag_loop.clustering import ClusterSettings
from rag_loop.curation import QueueSettings
from rag_loop.intents import build_curation_queue, cluster_intents, embed_candidates

_CLUSTER_DEFAULTS = ClusterSettings()
_QUEUE_DEFAULTS = QueueSettings()


@stage_asset(group_name="intents", deps=[failure_candidates],
             description="Embedding keys of the candidates' queries (vectors in "
                         "`embedding_cache`, keyed by model and text hash: a rerun embeds "
                         "nothing twice).",
             parts={"embedding_cache": "Vectors by model and text hash; every embedding step "
                                       "(trace_novelty, query_mix, curation_queue) fills it"})
def query_embeddings(context: AssetExecutionContext, duckdb: DuckDBResource,
                     embedder: EmbedderResource) -> MaterializeResult:
    with duckdb.get_connection() as con:
        figures = embed_candidates(con, embedder.router(), log=context.log.info)
        preview = con.sql("SELECT language, model_id, count(*) AS queries, count(DISTINCT text_hash) "
                          "AS distinct_texts FROM query_embeddings GROUP BY ALL ORDER BY 1").df()
    on_default = MetadataValue.json(figures.pop("languages_on_default_model"))
    return MaterializeResult(metadata={"dagster/row_count": figures.pop("traces"), **figures,
                                       "languages_on_default_model": on_default,
                                       "preview": MetadataValue.md(preview.to_markdown(index=False))})


class ClusterConfig(Config):
    pca_dims: int = Field(_CLUSTER_DEFAULTS.pca_dims, description="PCA dimensions before HDBSCAN.")
    min_cluster_size: int = _CLUSTER_DEFAULTS.min_cluster_size
    min_samples: int = _CLUSTER_DEFAULTS.min_samples
    selection_method: str = Field(_CLUSTER_DEFAULTS.selection_method, description='"eom" or "leaf".')
    merge_distance: float = Field(_CLUSTER_DEFAULTS.merge_distance,
                                  description="Clusters closer than this fraction of the median "
                                              "pairwise distance merge into one intent.")
    fit_sample: int = Field(_CLUSTER_DEFAULTS.fit_sample,
                            description="Above this many queries, fit on a sample; the rest join "
                                        "their nearest sample point's cluster.")


@stage_asset(group_name="intents", deps=["query_embeddings", "embedding_cache"],
       parts={"trace_clusters": "The intent cluster of each candidate trace"},
       description="Intent clusters per language (HDBSCAN on PCA-reduced embeddings, close "
                   "clusters merged) with size, weight (Σ 1/π), medoid, c-TF-IDF label, signal "
                   "and failure mix, first/last seen, new since the previous run; noise queries "
                   "as singletons. `trace_clusters` maps each candidate to its cluster.")
def intent_clusters(context: AssetExecutionContext, config: ClusterConfig,
                    duckdb: DuckDBResource) -> MaterializeResult:
    settings = ClusterSettings(**config.model_dump())
    with duckdb.get_connection() as con:
        figures = cluster_intents(con, settings, log=context.log.info)
        top = con.sql("SELECT cluster_id, language, size, round(weight, 1) AS weight, label, "
                      "medoid_query, is_new FROM intent_clusters WHERE NOT is_singleton "
                      "ORDER BY weight DESC LIMIT 15").df()
    chart = plots.bars({f"{r.cluster_id} {r.label}": r.weight for r in top.itertuples()},
                       "Largest intent clusters", "weight (production traces, Σ 1/π)")
    return MaterializeResult(metadata={
        "dagster/row_count": figures["clusters"] + figures["singletons"], **figures,
        "cluster_sizes": MetadataValue.md(plots.markdown_image(chart, "cluster sizes")),
        "largest_clusters": MetadataValue.md(top.to_markdown(index=False))})


class QueueConfig(Config):
    duplicate_similarity: float = Field(_QUEUE_DEFAULTS.duplicate_similarity,
                                        description="Cosine at which two queries are one variant.")
    large_cluster: int = Field(_QUEUE_DEFAULTS.large_cluster,
                               description="From this size a cluster gets a second representative.")
    max_representatives: int = _QUEUE_DEFAULTS.max_representatives
    golden_similarity: float = Field(_QUEUE_DEFAULTS.golden_similarity,
                                     description="A representative this close to a released "
                                                 "golden's input is covered, not queued.")
    diverse_singletons: int = Field(_QUEUE_DEFAULTS.diverse_singletons,
                                    description="Per priority tier, this many singletons are "
                                                "queued farthest first, the rest by weight.")


@asset(group_name="intents", deps=["intent_clusters", "trace_clusters"],
       description="Representatives to label, sorted by priority then cluster weight, with "
                   "suggested failure_type and origin; exported to "
                   "data/curation/queue/<batch>.jsonl and .csv.")
def curation_queue(context: AssetExecutionContext, config: QueueConfig, duckdb: DuckDBResource,
                   embedder: EmbedderResource, paths: RagLoopPaths) -> MaterializeResult:
    with duckdb.get_connection() as con:
        figures = build_curation_queue(con, embedder.router(), QueueSettings(**config.model_dump()),
                                       Path(paths.curation_dir) / "queue", Path(paths.goldens_dir),
                                       log=context.log.info)
        preview = con.sql("SELECT priority, language, input, cluster_label, cluster_weight, "
                          "suggested_failure_type FROM curation_queue LIMIT 15").df() \
            if figures["queued"] else None
    metadata = {
        "dagster/row_count": figures["queued"], "covered_by_goldens": figures["covered_by_goldens"],
        "batch": figures["batch"],
        **{f"priority_{k}": int(v) for k, v in figures["by_priority"].items()},
        **{f"suggested_{k}": int(v) for k, v in figures["by_suggested_failure_type"].items()},
    }
    if figures["files"]:
        metadata["queue_file"] = MetadataValue.path(figures["files"][0])
        metadata["queue_csv"] = MetadataValue.path(figures["files"][1])
    if preview is not None:
        metadata["preview"] = MetadataValue.md(preview.to_markdown(index=False))
    return MaterializeResult(metadata=metadata)
