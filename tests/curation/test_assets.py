"""The label asset and sensor leave a label file alone while it may still be being written."""

import os
from types import SimpleNamespace

from dagster import DagsterInstance, build_sensor_context, materialize
from dagster_duckdb import DuckDBResource

from rag_loop.curation import labels as labels_module
from rag_loop_dagster.assets.curation import SETTLE_SECONDS, curated_labels, new_label_files_sensor
from rag_loop_dagster.assets.resources import RagLoopPaths
from tests.helpers import GOOD, write_labels


def test_a_label_file_being_written_is_neither_read_nor_asked_for(db, tmp_path, monkeypatch):
    db.close()
    paths = RagLoopPaths(curation_dir=str(tmp_path / "curation"))
    labels = tmp_path / "curation" / "labels"
    write_labels(labels, "fresh.csv.jsonl", [GOOD])  # a spreadsheet still saving it
    # the label stage's clock stays half a second after the write: a run slower than the settle
    # time under load would otherwise find the file settled
    written = (labels / "fresh.csv.jsonl").stat().st_mtime
    monkeypatch.setattr(labels_module, "time", SimpleNamespace(time=lambda: written + 0.5))
    resources = {"duckdb": DuckDBResource(database=str(tmp_path / "db.duckdb")), "paths": paths}
    result = materialize([curated_labels], resources=resources)
    metadata = result.asset_materializations_for_node("curated_labels")[0].metadata
    assert metadata["run_stored"].value == 0 and "fresh.csv.jsonl" in metadata["files_waiting"].value[0]
    with DagsterInstance.ephemeral() as instance:
        assert not hasattr(new_label_files_sensor(build_sensor_context(instance=instance,
                                                                       resources={"paths": paths})), "run_key")
        settled = written - SETTLE_SECONDS - 1
        os.utime(labels / "fresh.csv.jsonl", (settled, settled))
        assert new_label_files_sensor(build_sensor_context(instance=instance, resources={"paths": paths})).run_key
    result = materialize([curated_labels], resources=resources)
    assert result.asset_materializations_for_node("curated_labels")[0].metadata["run_stored"].value == 1
