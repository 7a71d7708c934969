"""The engines that run the traffic-sized stages' Ibis expressions on DuckDB (the embedded
default) or Spark: the engines, the per-engine function registry, the compile cache's literals,
and day fingerprints. The expressions live with their stages; ingestion into the lake is
rag_loop.ingest.lake."""
