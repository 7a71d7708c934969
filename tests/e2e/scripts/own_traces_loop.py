"""The README's "your own traffic" path in one process, configured by environment only, with
the `rag-loop` commands a user types: `run rag_loop_job`, then `release --notes --by` and
`eval --release latest`.

Run by tests/test_own_traces.py with RAG_LOOP_* variables pointing at the fixture traces, a
temporary database and folders, no knowledge base, and a stand-in HTTP RAG service. Prints a
JSON line: which commands succeeded and whether anything imported `rag_loop.demo`.
"""

import json
import os
import sys
from datetime import UTC, datetime
from pathlib import Path

from rag_loop.curation.queue_files import read_queue
from rag_loop_dagster.jobs_cli import main as rag_loop


def command(*args: str) -> bool:
    """`rag-loop ARGS`, in this process: True when it exits 0."""
    try:
        rag_loop.main(list(args), standalone_mode=False)
    except SystemExit as done:
        return done.code in (0, None)
    return True


loop = command("run", "rag_loop_job")
curation = Path(os.environ["RAG_LOOP_CURATION_DIR"])
queue = max((curation / "queue").glob("*.jsonl"))
rows = read_queue(queue)[:6]
labels = [{**row, "decision": "accept", "expected_output": f"The answer to: {row['input']}",
           "expected_sources": [], "tags": ["own-traces"], "origin": row["suggested_origin"],
           "failure_type": row["suggested_failure_type"], "curator": "test",
           "labeled_at": datetime.now(UTC).isoformat()} for row in rows]
(curation / "labels").mkdir(parents=True, exist_ok=True)
(curation / "labels" / "first.jsonl").write_text("".join(json.dumps(r) + "\n" for r in labels))
release = command("release", "--notes", "first goldens from our own traces", "--by", "test",
                  "--settle-seconds", "0")  # the label file was written whole, just above
evaluation = command("eval", "--release", "latest")  # its gates may block: the test reads the run
print(json.dumps({"loop": loop, "release": release, "labels": len(labels),
                  "demo_imported": sorted(m for m in sys.modules if m.startswith("rag_loop.demo"))}))
