"""What the file sensors share: one run per new input, retried when its run failed.

The cursor remembers the input (a fingerprint of the folder) a run was requested for; every run
carries it as a tag. An input whose run succeeded, or is still queued or running, is not asked
for again; one whose runs all failed (the database locked by a notebook, say) is requested again
with a new run key, after a pause that doubles with each failure (at most an hour).
"""

from datetime import UTC, datetime

from dagster import DagsterRunStatus, RunRequest, RunsFilter, SensorEvaluationContext, SkipReason

INPUT_TAG = "rag-loop/input"
RETRY_AFTER_SECONDS, RETRY_AT_MOST_SECONDS = 60, 3600
_FAILED = {DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED}


def request_for_input(context: SensorEvaluationContext, job_name: str, fingerprint: str,
                      what: str) -> RunRequest | SkipReason:
    """A RunRequest for `fingerprint` unless its run succeeded or is under way."""
    if fingerprint != context.cursor:
        context.update_cursor(fingerprint)
        return RunRequest(run_key=fingerprint, tags={INPUT_TAG: fingerprint})
    runs = context.instance.get_runs(RunsFilter(job_name=job_name, tags={INPUT_TAG: fingerprint}))
    if not runs or any(r.status not in _FAILED for r in runs):  # requested, queued, running or done
        return SkipReason(f"no new {what}")
    failures = len(runs)
    ended = max((context.instance.get_run_record_by_id(r.run_id).end_time or 0) for r in runs)
    pause = min(RETRY_AFTER_SECONDS * 2 ** (failures - 1), RETRY_AT_MOST_SECONDS)
    if datetime.now(UTC).timestamp() < ended + pause:
        return SkipReason(f"{what}: the run failed {failures}x; next try in {pause} s")
    return RunRequest(run_key=f"{fingerprint}:retry-{failures}", tags={INPUT_TAG: fingerprint})
