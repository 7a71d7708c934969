"""Mapping files for the exports of the tools teams already use: copy one into the folder of
the exported files as `rag-loop-mapping.yaml` (`rag-loop ingest preset NAME`)."""

from pathlib import Path

PRESETS_DIR = Path(__file__).parent
PRESETS = sorted(p.stem for p in PRESETS_DIR.glob("*.yaml"))


def preset_path(name: str) -> Path:
    """The preset's file; raises KeyError naming the presets there are."""
    if name not in PRESETS:
        raise KeyError(f"no preset {name!r}: {', '.join(PRESETS)}")
    return PRESETS_DIR / f"{name}.yaml"
