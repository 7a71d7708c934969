"""A deployment's home: one folder holding everything a rag-loop deployment writes — the
database, the curation queue and labels, the golden releases, the reports and the Dagster
instance — so that two deployments (yours and the demo's) never share state.

`RAG_LOOP_HOME` names it (default: `.rag-loop/` in the project); each part can still be moved
by its own variable (`RAG_LOOP_DB`, `RAG_LOOP_CURATION_DIR`, `RAG_LOOP_GOLDENS_DIR`,
`RAG_LOOP_REPORTS_DIR`, `DAGSTER_HOME`). The demo lives under its own home, `.demo/`
(`make demo`, `make ui`); `data/demo/` holds only its inputs. Read when called, never at
import.
"""

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_HOME = PROJECT_ROOT / ".rag-loop"
DEMO_INPUTS = PROJECT_ROOT / "data" / "demo"


@dataclass(frozen=True)
class Home:
    """Where one deployment keeps its state."""

    root: Path
    database: Path
    curation_dir: Path  # queue/ exports, labels/ inputs
    goldens_dir: Path  # vNNNN/ releases
    reports_dir: Path  # HTML reports of releases and evals
    dagster_home: Path  # the Dagster instance (runs, event log, schedules)


def home(environ: Mapping[str, str] | None = None) -> Home:
    """The deployment's home from the environment (RAG_LOOP_HOME and the per-part variables)."""
    env = os.environ if environ is None else environ
    root = Path(env.get("RAG_LOOP_HOME") or DEFAULT_HOME).resolve()

    def part(variable: str, default: str) -> Path:
        return Path(env.get(variable) or root / default)
    return Home(root, part("RAG_LOOP_DB", "rag_loop.duckdb"), part("RAG_LOOP_CURATION_DIR", "curation"),
                part("RAG_LOOP_GOLDENS_DIR", "goldens"), part("RAG_LOOP_REPORTS_DIR", "reports"),
                part("DAGSTER_HOME", "dagster"))
