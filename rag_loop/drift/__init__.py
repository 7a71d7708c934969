"""Drift, one day at a time: statistics, checks against limits, per-day figures and the daily
tables with their verdicts."""
