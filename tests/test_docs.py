"""docs/architecture.md stays true: it names every module of engine/ and studio/, every module it names exists, and
the worked example's registration lines have the shape the registries take."""
import dataclasses
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
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
    from engine.pretrain_config import PretrainConfig, model_config, validate
    obj = _ltr_nsp(monkeypatch)
    cfg = PretrainConfig(objective=obj.name, out="x")
    validate(cfg)
    bert = model_config(cfg, vocab_size=1000)
    assert bert.causal and bert.has_mlm_head and bert.has_nsp_head
    assert obj.metrics == ("loss", "lm_loss", "lm_acc", "nsp_loss", "nsp_acc")


@pytest.mark.slow
def test_worked_example_objective_pretrains_end_to_end(monkeypatch, tmp_path):
    """The doc says one Objective line is all a made-of-parts objective needs: a tiny run trains with it."""
    import random

    import engine
    from engine import runs
    from engine.pretrain import PretrainConfig, pretrain
    obj = _ltr_nsp(monkeypatch)
    rng = random.Random(0)
    words = ["ba", "ke", "mo", "ti", "ru", "sa", "po", "ne"]
    docs = ["\n".join(" ".join(rng.choice(words) for _ in range(6)).capitalize() + "." for _ in range(8)) for _ in range(12)]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    run = pretrain(PretrainConfig(corpus=str(corpus), objective=obj.name, vocab_size=200, hidden=32, heads=2, layers=1,
                                  max_positions=64, seq_len=32, batch_size=4, steps=2, log_every=1, eval_every=2,
                                  save_every=2, cache_dir=str(tmp_path / "cache"), quiet=True, num_threads=1,
                                  out=str(tmp_path / "run")))
    recs = runs.read_metrics(run)
    train = [r for r in recs if r.get("split") == "train"]
    held = [r for r in recs if r.get("split") == "eval"]
    assert train and set(obj.metrics) <= set(train[-1]) and "mlm_loss" not in train[-1]
    assert held and {"eval_lm_ppl", "eval_nsp_acc"} <= set(held[-1])
    model = engine.load(run).model
    assert model.config.causal and model.nsp is not None
