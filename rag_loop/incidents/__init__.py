"""Quality incidents (seed 004 §14, issue 48): an incident is a window of traffic (and slices of
it) that went wrong. `record` stores it (`incidents`, `incident_traces`), `facts` gathers what the
data says about it (impact, detection, timeline, root-cause evidence, why offline tests missed
it, its regression goldens and the eval runs that tested them), `postmortem` writes the runbook's
Markdown from those facts. No Dagster imports: the CLI (`rag-loop incident`) drives it.
"""
