"""Stages that grow with traffic, written once as Ibis expressions and run on DuckDB (the
embedded default) or Spark: the per-engine function registry, the engines and the trace lake."""
