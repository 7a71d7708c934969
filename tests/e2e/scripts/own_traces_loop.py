"""The README's "your own traces" path in one process, configured by environment only.

Run by tests/test_own_traces.py with RAG_LOOP_* variables pointing at the fixture traces, a
temporary database and folders, no knowledge base, and a stand-in HTTP RAG service. Prints a
JSON line: which jobs succeeded and whether anything imported `rag_loop.demo`.
"""

import json
import os
import sys
from datetime import UTC, datetime
from pathlib import Path

from dagster import DagsterInstance

from definitions import defs
from rag_loop.curation.queue_files import read_queue

instance = DagsterInstance.ephemeral()
loop = defs.get_job_def("rag_loop_job").execute_in_process(instance=instance)
curation = Path(os.environ["RAG_LOOP_CURATION_DIR"])
queue = max((curation / "queue").glob("*.jsonl"))
rows = read_queue(queue)[:6]
labels = [{**row, "decision": "accept", "expected_output": f"The answer to: {row['input']}",
           "expected_sources": [], "tags": ["own-traces"], "origin": row["suggested_origin"],
           "failure_type": row["suggested_failure_type"], "curator": "test",
           "labeled_at": datetime.now(UTC).isoformat()} for row in rows]
(curation / "labels").mkdir(parents=True, exist_ok=True)
(curation / "labels" / "first.jsonl").write_text("".join(json.dumps(r) + "\n" for r in labels))
release = defs.get_job_def("release_goldens").execute_in_process(
    instance=instance, run_config={"ops": {"golden_release": {"config": {
        "notes": "first goldens from our own traces", "released_by": "test"}},
        "curated_labels": {"config": {"settle_seconds": 0}}}})  # written whole, just above
evaluation = defs.get_job_def("regression_eval_job").execute_in_process(instance=instance,
                                                                        raise_on_error=False)
print(json.dumps({"loop": loop.success, "release": release.success, "labels": len(labels),
                  "eval_ran": any(e.event_type_value == "ASSET_MATERIALIZATION"
                                  for e in evaluation.all_events),
                  "demo_imported": sorted(m for m in sys.modules if m.startswith("rag_loop.demo"))}))
