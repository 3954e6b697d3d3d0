"""studio.uploads (the one upload sanitiser of the Pre-train and Fine-tune pages), engine.tasks.shared_files (the
shared benchmark files) and studio.projection (PCA / t-SNE of sentence features)."""
import json

import numpy as np
import pytest

from engine.errors import EngineError
from engine.tasks.shared_files import SHARED_TASKS, shared_task_files, shared_tasks
from studio.projection import project
from studio.uploads import safe_upload_name, save_upload


def test_upload_names_are_plain_hashed_and_checked():
    name = safe_upload_name("../../etc/My Train!.TSV", b"a\tb\n", ("tsv", "csv"), "glue file")
    stem, ext = name.rsplit(".", 1)
    assert ext == "tsv" and stem.startswith("My-Train-") and len(stem) == len("My-Train-") + 10
    assert safe_upload_name("C:\\docs\\corpus.txt", b"x", ("txt",)).startswith("corpus-")  # a Windows path keeps its name only
    assert safe_upload_name("...txt", b"x", ("txt",)).startswith("file-")
    assert safe_upload_name("a.txt", b"x", ("txt",)) != safe_upload_name("a.txt", b"y", ("txt",))  # content decides
    with pytest.raises(EngineError, match=r"'notes.pdf' is not a corpus file; use one of \.txt, \.jsonl"):
        safe_upload_name("notes.pdf", b"x", ("txt", "jsonl"), "corpus file")


def test_save_upload_writes_once_under_uploads(tmp_path):
    p = save_upload(tmp_path, "c.txt", b"one doc\n", ("txt",))
    assert p.parent == tmp_path / "uploads" and p.read_bytes() == b"one doc\n"
    mtime = p.stat().st_mtime_ns
    assert save_upload(tmp_path, "c.txt", b"one doc\n", ("txt",)) == p and p.stat().st_mtime_ns == mtime
    with pytest.raises(EngineError, match="is empty"):
        save_upload(tmp_path, "e.txt", b"  \n", ("txt",))


def test_shared_tasks_are_those_present_and_squad_is_split_by_article(tmp_path):
    assert shared_tasks(tmp_path) == []
    (tmp_path / "rte").mkdir()
    (tmp_path / "rte" / "train.tsv").write_text("x")
    assert shared_tasks(tmp_path) == []  # train without dev
    (tmp_path / "rte" / "dev.tsv").write_text("x")
    (tmp_path / "squad_v1.1").mkdir()
    articles = [{"title": f"t{i}", "paragraphs": [{"context": "c", "qas": []}]} for i in range(40)]
    (tmp_path / "squad_v1.1" / "dev-v1.1.json").write_text(json.dumps({"version": "1.1", "data": articles}))
    assert [t.name for t in shared_tasks(tmp_path)] == ["RTE", "SQuAD v1.1"]
    rte, squad = shared_tasks(tmp_path)
    assert shared_task_files(rte, tmp_path / "out", tmp_path) == (tmp_path / "rte" / "train.tsv", tmp_path / "rte" / "dev.tsv")
    train, dev = shared_task_files(squad, tmp_path / "out", tmp_path)
    assert [a["title"] for a in json.loads(train.read_text())["data"]] == [f"t{i}" for i in range(38)]
    assert [a["title"] for a in json.loads(dev.read_text())["data"]] == ["t38", "t39"]
    assert {t.kind for t in SHARED_TASKS} == {"glue", "squad"}


def test_pca_projection_separates_two_clusters_and_unknown_method_is_refused():
    g = np.random.default_rng(0)
    X = np.concatenate([g.normal(0, 0.1, (20, 8)), g.normal(5, 0.1, (20, 8))])
    xy = project(X, "PCA")
    assert xy.shape == (40, 2)
    assert abs(xy[:20, 0].mean() - xy[20:, 0].mean()) > 10 * (xy[:20, 0].std() + xy[20:, 0].std())  # the first axis splits them
    with pytest.raises(ValueError, match="unknown projection"):
        project(X, "UMAP")


@pytest.mark.slow
def test_tsne_projection_keeps_two_clusters_apart():
    g = np.random.default_rng(0)
    X = np.concatenate([g.normal(0, 0.1, (10, 8)), g.normal(5, 0.1, (10, 8))])
    xy = project(X, "t-SNE")
    inside = max(np.linalg.norm(xy[:10] - xy[:10].mean(0), axis=1).max(), np.linalg.norm(xy[10:] - xy[10:].mean(0), axis=1).max())
    assert xy.shape == (20, 2) and np.linalg.norm(xy[:10].mean(0) - xy[10:].mean(0)) > 2 * inside
