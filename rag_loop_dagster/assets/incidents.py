"""Incidents (issue 48): their two tables are written by `rag-loop incident open|close` (and the
workspace's incident forms, which run it), outside Dagster, as `judge_calibrations` by `rag-loop
calibrate`; declared here so that the lineage graph shows who reads them."""

from dagster import AssetSpec

incidents = AssetSpec(
    "incidents", group_name="curation", kinds={"duckdb"},
    description="One row per quality incident (seed 004 §14): its window and slices, who opened it, "
                "affected and failing requests, the release that gated the last deploy, and once "
                "closed the corrective actions and the release holding its regression goldens. "
                "Written by `rag-loop incident open|close`; the postmortem is reports/incident-INC-NNNN.md.")
incident_traces = AssetSpec(
    "incident_traces", group_name="curation", kinds={"duckdb"},
    description="An incident's failing requests (the others are counted in `incidents`): trace, why it "
                "failed (bad signals, failing judged metrics, a failure label, a thumbs-down), whether "
                "selection chose it, its intent. The "
                "open incidents' failing traces are P0 in curation_queue; a golden built from one "
                "records the incident.")
