"""Thin Dagster wrappers around rag_loop: assets, checks, jobs, sensors, resources."""
