"""Where rag-loop keeps its state unless told otherwise: the one home of these defaults (the
resources, the CLI and the summary all read them from here)."""

from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = PROJECT_ROOT / "data"
DEFAULT_DATABASE = DATA_DIR / "rag_loop.duckdb"
DEFAULT_CURATION_DIR = DATA_DIR / "curation"  # queue/ exports, labels/ inputs
DEFAULT_GOLDENS_DIR = DATA_DIR / "goldens"  # vNNNN/ releases
DEFAULT_REPORTS_DIR = DATA_DIR / "reports"  # HTML reports of releases and evals
