"""Drift, one day at a time: statistics, checks against limits, per-day figures and the daily
tables with their verdicts; the `*_expressions` modules are the traffic-sized parts as Ibis
expressions for either engine."""
