"""What `pip install rag-loop` puts into site-packages, and homes set up before the Dagster side
moved into its package (issue 43)."""

import shutil
import subprocess
import sys
import zipfile

import pytest
from dagster import DagsterInstance

from rag_loop_dagster import jobs_cli
from rag_loop_dagster.assets.run_liveness import RagLoopRunLauncher
from tests.helpers import PROJECT


@pytest.mark.slow
def test_the_wheel_holds_our_two_packages_and_nothing_else_top_level(tmp_path):
    """Top-level `assets`, `definitions` and `jobs_cli` collided with any other package of
    those names; the console script names a module inside our package."""
    source = tmp_path / "source"
    for part in ("rag_loop", "rag_loop_dagster"):
        shutil.copytree(PROJECT / part, source / part, ignore=shutil.ignore_patterns("__pycache__"))
    for part in ("pyproject.toml", "README.md"):
        shutil.copy(PROJECT / part, source / part)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    str(source), "-w", str(tmp_path / "wheel")], check=True, cwd=tmp_path)
    (wheel,) = (tmp_path / "wheel").glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        entry_points = archive.read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert {name.split("/")[0] for name in names if ".dist-info/" not in name} == {"rag_loop", "rag_loop_dagster"}
    assert "rag-loop = rag_loop_dagster.jobs_cli:main" in entry_points
    assert "rag_loop_dagster/assets/run_liveness.py" in names
    assert "rag_loop/ingest/presets/phoenix-spans.yaml" in names  # the mapping presets ship with it


def test_a_home_set_up_before_the_move_gets_its_run_launcher_renamed(tmp_path, monkeypatch, capsys):
    old = jobs_cli.INSTANCE_SETTINGS.read_text().replace("rag_loop_dagster.assets.run_liveness", "assets.run_liveness")
    assert "module: assets.run_liveness" in old
    (tmp_path / "dagster.yaml").write_text(old)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    assert jobs_cli.instance_home() == tmp_path
    assert "run launcher's module renamed" in capsys.readouterr().err
    with DagsterInstance.from_config(str(tmp_path)) as instance:
        assert isinstance(instance.run_launcher, RagLoopRunLauncher)
    jobs_cli.instance_home()  # up to date now: left as it is, nothing said
    assert capsys.readouterr().err == ""
    assert (tmp_path / "dagster.yaml").read_text() == jobs_cli.INSTANCE_SETTINGS.read_text()
