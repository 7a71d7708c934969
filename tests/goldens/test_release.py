"""Curator labels, the labeling command, and golden releases."""
import json
import multiprocessing
import re
from pathlib import Path

import pytest

from rag_loop.curation.labels import store_label_files
from rag_loop.goldens.lineage import refresh_release_tables
from rag_loop.goldens.manifest import diff_goldens
from rag_loop.goldens.redaction import Redactor
from rag_loop.goldens.release import build_goldens, publish_release
from rag_loop.store.releases import read_goldens, release_versions
from tests.helpers import GOOD, demo_config, query, write_labels


def _goldens(db, tmp_path, rows, redactor=None):
    labels = tmp_path / "labels"
    write_labels(labels, f"{len(list(labels.glob('*')) if labels.exists() else [])}.jsonl", rows)
    store_label_files(db, labels)
    return build_goldens(db, redactor or Redactor())


def test_goldens_load_with_deepeval_with_every_field_intact(db, tmp_path):
    goldens = _goldens(db, tmp_path, [GOOD])
    result = publish_release(tmp_path / "goldens", goldens, "first", "ana", {})
    from deepeval.dataset import EvaluationDataset
    dataset = EvaluationDataset()
    dataset.add_goldens_from_json_file(str(tmp_path / "goldens" / result.version / "goldens.json"))
    (golden,) = dataset.goldens
    assert golden.input == "how many leave days? (t1)" and golden.expected_output == "15 days."
    assert golden.name == goldens[0]["name"]
    assert golden.context == ["Full-time employees get 15 days of paid annual leave per year."]
    assert golden.retrieval_context == golden.context
    meta = golden.additional_metadata
    assert meta["origin"] == "production_failure" and meta["failure_type"] == "retrieval"
    assert meta["expected_sources"] == ["leave@2026#annual-en"] and meta["source_trace_ids"] == ["t1"]
    assert {"tags", "cluster_id", "cluster_weight", "priority", "curator", "labeled_at"} <= set(meta)


def test_no_op_release_and_correct_diff(db, tmp_path):
    first = publish_release(tmp_path / "g", _goldens(db, tmp_path, [GOOD, {**GOOD, "trace_id": "t2"}]),
                            "one", "ana", {})
    assert first.version == "v0001"
    again = publish_release(tmp_path / "g", build_goldens(db, Redactor()), "same", "ana", {})
    assert again.version is None and "nothing changed since v0001" in again.message
    goldens = _goldens(db, tmp_path, [{**GOOD, "expected_output": "Fifteen."},
                                      {**GOOD, "trace_id": "t2", "decision": "reject"},
                                      {**GOOD, "trace_id": "t3"}])
    second = publish_release(tmp_path / "g", goldens, "two", "ana", {})
    names = {g["additional_metadata"]["trace_id"]: g["name"] for g in read_goldens(tmp_path / "g", "v0001")}
    names["t3"] = next(g["name"] for g in goldens if g["additional_metadata"]["trace_id"] == "t3")
    assert second.version == "v0002" and second.parent == "v0001"
    assert (second.diff.added, second.diff.removed, second.diff.changed) == \
        ([names["t3"]], [names["t2"]], [names["t1"]])
    manifest = json.loads((tmp_path / "g" / "v0002" / "manifest.json").read_text())
    assert manifest["diff"] == {"added": 1, "removed": 1, "changed": 1, "redacted_differently": 0}
    assert manifest["parent_version"] == "v0001"
    assert "## v0002" in (tmp_path / "g" / "CHANGELOG.md").read_text()
    assert refresh_release_tables(db, tmp_path / "g") == 2
    assert db.execute("SELECT count(*) FROM golden_lineage WHERE version = 'v0002'").fetchall() == [(2,)]


def test_diff_goldens():
    a, b, c = ({"name": n, "x": 1} for n in "abc")
    diff = diff_goldens([a, b], [{**a, "x": 2}, c])
    assert (diff.added, diff.removed, diff.changed) == (["c"], ["b"], ["a"])


def test_a_failure_mid_release_leaves_no_version_directory(db, tmp_path, monkeypatch):
    import rag_loop.goldens.release as goldens_module
    real_write = goldens_module._write

    def failing_write(path, text):
        if path.name == "manifest.json":
            raise RuntimeError("disk gone")
        real_write(path, text)

    monkeypatch.setattr(goldens_module, "_write", failing_write)
    with pytest.raises(RuntimeError):
        publish_release(tmp_path / "g", _goldens(db, tmp_path, [GOOD]), "", "", {})
    assert list((tmp_path / "g").iterdir()) == []


def _release_in_process(directory: str, goldens: list, queue) -> None:
    queue.put(publish_release(Path(directory), goldens, "", "p", {}).version)


@pytest.mark.parametrize("same", [True, False])
def test_concurrent_releases_give_distinct_complete_versions_or_one(db, tmp_path, same):
    base = _goldens(db, tmp_path, [GOOD])
    other = base if same else [{**base[0], "expected_output": "other"}]
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    workers = [context.Process(target=_release_in_process, args=(str(tmp_path / "g"), g, results))
               for g in (base, other) for _ in range(3)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    versions = sorted(v for v in (results.get() for _ in workers) if v)
    assert versions == sorted(set(versions))  # no version released twice
    on_disk = release_versions(tmp_path / "g")
    assert on_disk == versions and len(on_disk) >= 1 + (not same)
    for version in on_disk:  # complete
        assert {p.name for p in (tmp_path / "g" / version).iterdir()} == \
            {"goldens.json", "manifest.json", "CHANGES.md"}
    assert not [p for p in (tmp_path / "g").iterdir() if p.name.startswith(".tmp")]
    contents = [(tmp_path / "g" / v / "goldens.json").read_text() for v in on_disk]
    assert all(a != b for a, b in zip(contents, contents[1:]))  # consecutive releases differ
    changelog = (tmp_path / "g" / "CHANGELOG.md").read_text()
    assert [v for v in on_disk if f"## {v} " in changelog] == on_disk  # the last writer saw all


PII = ("jane.doe@gmail.com", "4111 1111 1111 1111", "+84 912 345 678", "sk-live0123456789abcdefXYZ",
       "AKIAABCDEFGHIJKLMNOP")


def test_planted_pii_never_reaches_goldens_json(db, tmp_path):
    db.execute("UPDATE raw_traces SET original_query = ? WHERE trace_id = 't1'",
               [f"I am {PII[0]}, card {PII[1]}, call {PII[2]}: leave days?"])
    goldens = _goldens(db, tmp_path, [{**GOOD, "expected_output": f"15 days. Key {PII[3]} / {PII[4]}; "
                                                                   "ask hr@company.example"}],
                       Redactor(keep_email_domains=["company.example"]))
    result = publish_release(tmp_path / "g", goldens, "", "", {"email": 1})
    text = (tmp_path / "g" / result.version / "goldens.json").read_text()
    for secret in PII:
        assert secret not in text
    assert "hr@company.example" in text
    assert len(re.findall(r"\[REDACTED_[A-Z]+\]", text)) == 5


def test_demo_curator_rounds_make_v0001_then_v0002(demo_releases):
    from dagster import materialize
    from dagster_duckdb import DuckDBResource

    from rag_loop_dagster.assets.curation import curated_labels
    from rag_loop_dagster.assets.goldens import golden_release, golden_releases
    root, paths = demo_releases  # the two rounds, labelled and released (tests/conftest.py)
    resources = {"duckdb": DuckDBResource(database=str(root / "rag.duckdb")), "paths": paths}
    release = [curated_labels, golden_release, golden_releases]
    config = demo_config("release/round-2")
    assert release_versions(root / "goldens") == ["v0001", "v0002"]
    changes = query(root / "rag.duckdb", "SELECT version, added, removed, changed FROM golden_releases")
    assert changes[1][2:] == (1, 2) and changes[1][1] > 10
    assert materialize(release, resources=resources, run_config=config).success
    assert release_versions(root / "goldens") == ["v0001", "v0002"]  # nothing new
    page = (root / "reports" / "release-v0002.html").read_text()
    assert "Golden release v0002" in page and "data:image/png;base64," in page
    goldens = (root / "goldens" / "v0002" / "goldens.json").read_text()
    assert "security@company.example" in goldens  # the demo keeps its company's addresses


def test_releases_are_world_readable_durable_and_stale_staging_is_swept(db, tmp_path):
    import os
    import stat
    import time
    directory = tmp_path / "g"
    directory.mkdir()
    for name in (".tmp-killed", ".tmp-in-progress"):
        (directory / name).mkdir()
        (directory / name / "goldens.json").write_text("{}")
    (directory / ".CHANGELOG.killed").write_text("x")
    old = time.time() - 2 * 3600
    os.utime(directory / ".tmp-killed", (old, old))
    os.utime(directory / ".CHANGELOG.killed", (old, old))
    result = publish_release(directory, _goldens(db, tmp_path, [GOOD]), "n", "p", {})
    left = sorted(p.name for p in directory.iterdir())
    assert left == [".lock", ".tmp-in-progress", "CHANGELOG.md", result.version]
    for path in [directory / result.version, directory / "CHANGELOG.md",
                 *(directory / result.version).iterdir()]:
        assert stat.S_IMODE(path.stat().st_mode) & 0o005 in (0o004, 0o005), path  # others may read


def test_an_edited_release_is_refused_wherever_it_is_read(db, tmp_path):
    from rag_loop.evaluation.runner import release_of
    from rag_loop.store.releases import ReleaseIntegrityError
    goldens_dir = tmp_path / "g"
    publish_release(goldens_dir, _goldens(db, tmp_path, [GOOD]), "", "", {})
    edited = goldens_dir / "v0001" / "goldens.json"
    edited.write_text(edited.read_text().replace("15 days.", "16 days."))
    for read in (lambda: release_of(goldens_dir, "latest"),  # the eval
                 lambda: refresh_release_tables(db, goldens_dir),  # lineage
                 lambda: publish_release(goldens_dir, _goldens(db, tmp_path, [{**GOOD, "tags": ["x"]}]),
                                         "", "", {})):  # the parent of the next release
        with pytest.raises(ReleaseIntegrityError, match="v0001/goldens.json does not match its manifest"):
            read()
    assert release_versions(goldens_dir) == ["v0001"]


def test_a_labelled_trace_that_was_quarantined_later_fails_the_release_loudly(db, tmp_path):
    from rag_loop.goldens.release import MissingTraceError
    from rag_loop.store.tables import create_tables
    create_tables(db)
    assert len(_goldens(db, tmp_path, [GOOD, {**GOOD, "trace_id": "t2"}])) == 2
    db.execute("DELETE FROM raw_traces WHERE trace_id = 't2'")  # a late span re-assembled it into quarantine
    db.execute("INSERT INTO otlp_traces (trace_id, state, reason) VALUES "
               "('t2', 'quarantined', 'wrong_type: rag.temperature')")
    with pytest.raises(MissingTraceError, match=r"t2: quarantined \(wrong_type: rag.temperature\)"):
        build_goldens(db, Redactor())


def test_the_redaction_policy_is_part_of_a_release_and_inherited_unless_changed(db, tmp_path):
    from rag_loop.goldens.release import release_policy
    goldens_dir = tmp_path / "g"
    quoted = {**GOOD, "expected_output": "15 days. Ask hr@company.example."}
    write_labels(tmp_path / "labels", "a.jsonl", [quoted])
    store_label_files(db, tmp_path / "labels")
    first, _ = release_policy(goldens_dir, keep_email_domains=["company.example"])
    v1 = publish_release(goldens_dir, build_goldens(db, first.redactor()), "", "", {}, policy=first)
    assert "hr@company.example" in (goldens_dir / v1.version / "goldens.json").read_text()
    inherited, parent = release_policy(goldens_dir)  # the README's config: notes and released_by only
    assert inherited == parent == first
    again = publish_release(goldens_dir, build_goldens(db, inherited.redactor()), "notes", "ana", {},
                            policy=inherited)
    assert again.version is None and "nothing changed" in again.message
    stricter, parent = release_policy(goldens_dir, keep_email_domains=[])
    v2 = publish_release(goldens_dir, build_goldens(db, stricter.redactor()), "", "", {}, policy=stricter,
                         under_parent_policy=build_goldens(db, parent.redactor()))
    assert (v2.diff.changed, len(v2.diff.redacted_differently)) == ([], 1)  # a policy change, not content
    assert v2.manifest["redaction_policy"]["keep_email_domains"] == []
    assert v2.manifest["redaction_policy_change"]["from"]["keep_email_domains"] == ["company.example"]
    changes = (goldens_dir / v2.version / "CHANGES.md").read_text()
    assert "Redaction policy changed: keep_email_domains: ['company.example'] → []" in changes
