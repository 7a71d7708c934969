"""The engines that run the traffic-sized stages' Ibis expressions on DuckDB (the embedded
default) or Spark: the engines, the per-engine function registry, the compile cache's literals,
day fingerprints, and Spark ingestion into the trace lake. The expressions live with their stages."""
