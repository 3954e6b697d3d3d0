"""docs/architecture.md stays true: it names every module of engine/ and studio/, every module it names exists, and
the worked example's registration lines have the shape the registries take; every picture README.md and docs/ show is
a file of the repository under 200 KB."""
import dataclasses
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOC = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")


def test_every_module_is_described_and_every_described_module_exists():
    modules = sorted(str(p.relative_to(REPO)) for d in ("engine", "studio") for p in (REPO / d).rglob("*.py"))
    missing = [m for m in modules if f"`{m}`" not in DOC]
    assert not missing, f"docs/architecture.md does not describe {missing}; add a line for each to its module table"
    named = set(re.findall(r"`((?:engine|studio)/[\w/]+\.py)`", DOC))
    assert not [m for m in named if not (REPO / m).is_file()], "docs/architecture.md names modules that do not exist"


def test_worked_example_matches_the_registries():
    from engine.tasks.glue import TextTask
    from engine.tasks.registry import BUILTINS, BuiltinTask
    assert [f.name for f in dataclasses.fields(BuiltinTask)] == ["name", "description", "load", "format"]
    assert "BuiltinTask(\"sentiment\", \"movie-review polarity (2 classes, accuracy)\", sentiment_task, \"glue\")" in DOC
    assert BUILTINS["bbc-topic"].load.__annotations__["return"] is TextTask  # the example's loader returns one too
    assert [f.name for f in dataclasses.fields(TextTask)][:7] == ["name", "kind", "labels", "train", "dev", "metrics", "info"]


def _ltr_nsp(monkeypatch):
    """The worked example's objective, registered as the doc's two-line diff does."""
    from engine import objectives
    example = objectives.Objective("ltr+nsp", "Left-to-right LM + NSP", nsp=True, causal=True)
    assert f'LTR_NSP = Objective("ltr+nsp", "Left-to-right LM + NSP", nsp=True, causal=True)' in DOC
    monkeypatch.setitem(objectives.OBJECTIVES, example.name, example)
    return example


def test_worked_example_objective_gives_a_causal_model_with_an_nsp_head(monkeypatch):
    from engine.pretraining.config import PretrainConfig, model_config, validate
    obj = _ltr_nsp(monkeypatch)
    cfg = PretrainConfig.classroom(objective=obj.name, out="x")
    validate(cfg)
    bert = model_config(cfg, vocab_size=1000)
    assert bert.causal and bert.has_mlm_head and bert.has_nsp_head
    assert obj.metrics == ("loss", "lm_loss", "lm_acc", "nsp_loss", "nsp_acc")


def test_every_test_reliability_md_names_exists():
    """RELIABILITY.md names the test that does each fault: every test file it names exists, and every
    `file::test` names a test function defined in that file."""
    text = (REPO / "RELIABILITY.md").read_text(encoding="utf-8")
    files = set(re.findall(r"`?(tests/[\w/]+\.py)", text))
    assert len(files) > 5
    assert not [f for f in files if not (REPO / f).is_file()], "RELIABILITY.md names test files that do not exist"
    missing = []
    for f, name in re.findall(r"(tests/[\w/]+\.py)::(\w+)", text):
        if f"def {name}(" not in (REPO / f).read_text(encoding="utf-8"):
            missing.append(f"{f}::{name}")
    assert not missing, f"RELIABILITY.md names tests that do not exist: {missing}"


IMAGE = re.compile(r"!\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)|<img\b[^>]*\bsrc=[\"']([^\"']+)[\"']", re.I)
MAX_IMAGE_BYTES = 200_000  # examples/screenshots.py keeps every picture under this


def test_every_image_readme_and_docs_name_exists_and_is_small():
    """Every picture README.md and docs/**/*.md show (`![..](path)` or `<img src>`) is a file of the repository, under
    200 KB; README.md opens with the studio's pictures (examples/screenshots.py makes them)."""
    named = {}
    for doc in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]:
        for m in IMAGE.finditer(doc.read_text(encoding="utf-8")):
            named.setdefault(doc, []).append(m.group(1) or m.group(2))
    assert len(named.get(REPO / "README.md", [])) >= 3, "README.md shows no pictures of the studio"
    problems = []
    for doc, refs in named.items():
        for ref in refs:
            path = (doc.parent / ref.split("#")[0]).resolve()
            where = f"{doc.relative_to(REPO)} -> {ref}"
            if "://" in ref or not path.is_file() or REPO not in path.parents:
                problems.append(f"{where}: no such file in the repository")
            elif path.stat().st_size >= MAX_IMAGE_BYTES:
                problems.append(f"{where}: {path.stat().st_size:,} bytes, over {MAX_IMAGE_BYTES:,}")
    assert not problems, problems
