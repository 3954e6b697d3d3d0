"""engine/objectives.py: each pre-training objective is described once, and everything that differs between
objectives (data, model, labels, loss, metrics) follows from its description."""
import math
from dataclasses import replace

import pytest

import engine
from engine import runs
from engine.errors import EngineError
from engine.objectives import LTR, MLM, MLM_NSP, MLM_SOP, OBJECTIVES, SUMS, Objective, every, objective
from engine.pretraining.config import PretrainConfig, model_config, validate
from engine.pretraining.run import pretrain


def test_the_papers_three_objectives_and_albert_s():
    assert engine.OBJECTIVES is OBJECTIVES and list(OBJECTIVES) == ["mlm+nsp", "mlm", "ltr", "mlm+sop", "electra",
                                                                 "electra-15", "replace-mlm", "all-tokens-mlm"]
    assert (MLM_NSP.nsp, MLM_NSP.causal, MLM.nsp, MLM.causal, LTR.nsp, LTR.causal) == (True, False, False, False, False, True)
    assert (MLM_SOP.nsp, MLM_SOP.causal, MLM_SOP.pairs, MLM_NSP.pairs, MLM.pairs) == (True, False, "sop", "nsp", "")
    assert (MLM_NSP.min_documents, MLM_SOP.min_documents, MLM.min_documents) == (2, 1, 1)  # SOP's B is A's own text
    # the metrics.jsonl keys each one writes
    assert MLM_NSP.metrics == ("loss", "mlm_loss", "mlm_acc", "nsp_loss", "nsp_acc")
    assert MLM_SOP.metrics == ("loss", "mlm_loss", "mlm_acc", "sop_loss", "sop_acc")
    assert MLM.metrics == ("loss", "mlm_loss", "mlm_acc")
    assert LTR.metrics == ("loss", "lm_loss", "lm_acc")
    assert MLM_NSP.held_out_metrics == ("mlm_acc", "mlm_ppl", "mlm_mask_acc", "mlm_mask_baseline", "nsp_acc")
    assert MLM_SOP.held_out_metrics == ("mlm_acc", "mlm_ppl", "mlm_mask_acc", "mlm_mask_baseline", "sop_acc")
    assert LTR.held_out_metrics == ("lm_acc", "lm_ppl")
    assert every("held_out_metrics") == ("mlm_acc", "mlm_ppl", "mlm_mask_acc", "mlm_mask_baseline", "nsp_acc", "lm_acc",
                                         "lm_ppl", "sop_acc", "disc_acc")  # what study tables read
    assert set(every("metrics")) == {"loss", "mlm_loss", "mlm_acc", "nsp_loss", "nsp_acc", "lm_loss", "lm_acc",
                                     "sop_loss", "sop_acc", "disc_loss", "disc_acc", "disc_replaced",
                                     "gen_loss", "gen_acc"}
    for name, obj in OBJECTIVES.items():
        m = model_config(PretrainConfig.classroom(objective=name), vocab_size=500)
        assert (m.causal, m.has_nsp_head, m.has_mlm_head) == (obj.causal, obj.nsp, not obj.rtd)  # ELECTRA: the generator's


def test_unknown_objective_is_one_line_naming_the_choices():
    with pytest.raises(EngineError, match="unknown objective 'nsp'; choose one of mlm\\+nsp, mlm, ltr, mlm\\+sop"):
        objective("nsp")
    with pytest.raises(EngineError, match="unknown objective"):
        validate(PretrainConfig.classroom(objective="nsp"))


def test_records_are_means_of_the_named_sums():
    sums = dict.fromkeys(SUMS, 0.0)
    sums.update(loss=9.0, batches=3, token_loss=20.0, token_correct=5, token_n=10, nsp_loss=4.0, nsp_correct=6, nsp_n=8, tokens=99)
    assert MLM_NSP.record(sums) == {"loss": 3.0, "mlm_loss": 2.0, "mlm_acc": 0.5, "nsp_loss": 0.5, "nsp_acc": 0.75}
    assert MLM_SOP.record(sums) == {"loss": 3.0, "mlm_loss": 2.0, "mlm_acc": 0.5, "sop_loss": 0.5, "sop_acc": 0.75}
    assert MLM_SOP.eval_record(sums, 8)["eval_loss"] == pytest.approx(2.5)  # the pair task's loss counts, under its name
    assert LTR.record(sums) == {"loss": 3.0, "lm_loss": 2.0, "lm_acc": 0.5}
    ev = MLM_NSP.eval_record(sums, instances=8)
    assert ev["eval_mlm_ppl"] == pytest.approx(math.exp(2.0)) and ev["eval_loss"] == pytest.approx(2.5)
    assert ev["eval_instances"] == 8 and ev["eval_nsp_acc"] == 0.75
    assert LTR.eval_record(sums, 8)["eval_lm_ppl"] == pytest.approx(math.exp(2.0))
    empty = dict.fromkeys(SUMS, 0.0)
    assert MLM.record(empty) == {"loss": 0.0, "mlm_loss": 0.0, "mlm_acc": 0.0}  # an empty window divides by 1


@pytest.mark.slow
def test_a_new_objective_is_one_entry(tmp_path, monkeypatch):
    """A fourth objective made of the existing parts (here a left-to-right LM that also learns NSP) is one
    Objective in OBJECTIVES: data, model, labels, loss and metrics follow without another change."""
    both = Objective("ltr+nsp", "Left-to-right LM + NSP", nsp=True, causal=True)
    monkeypatch.setitem(OBJECTIVES, both.name, both)
    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]
    docs = ["\n".join(" ".join(words[(d + s + k) % 8] for k in range(6)).capitalize() + "." for s in range(12))
            for d in range(12)]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n\n".join(d.replace("\n", " ") for d in docs) + "\n", encoding="utf-8")
    cfg = PretrainConfig.classroom(corpus=str(corpus), objective=both.name, vocab_size=120, cache_dir=str(tmp_path / "cache"),
                         layers=1, hidden=32, heads=2, max_positions=32, seq_len=32, phase2_seq_len=None, batch_size=4, steps=2, log_every=1,
                         eval_every=0, save_every=0, eval_fraction=0.2, eval_max_instances=8, quiet=True, num_threads=1,
                         out=str(tmp_path / "run"))
    run = pretrain(cfg)
    info = runs.read_run_json(run)
    assert info["status"] == "finished" and info["objective"] == "ltr+nsp"
    assert info["model"]["causal"] is True and info["model"]["has_nsp_head"] is True
    train = [r for r in runs.read_metrics(run) if r["split"] == "train"]
    evals = [r for r in runs.read_metrics(run) if r["split"] == "eval"]
    assert set(both.metrics) <= set(train[-1]) and "mlm_loss" not in train[-1]
    assert {"eval_lm_ppl", "eval_nsp_acc"} <= set(evals[-1])
    assert train[-1]["nsp_loss"] > 0 and math.isfinite(train[-1]["lm_loss"])  # both losses were computed
    # the same settings with the paper's LTR: no NSP head, no NSP metric
    run2 = pretrain(replace(cfg, objective=LTR.name, out=str(tmp_path / "run2")))
    assert "nsp_acc" not in [r for r in runs.read_metrics(run2) if r["split"] == "train"][-1]


@pytest.mark.slow
def test_sop_trains_end_to_end_and_its_loss_falls(tmp_path, bbc_docs):
    """`--objective mlm+sop`: the run writes sop_* metrics (no nsp_*), its loss falls, and its checkpoint carries the
    pair head (`cls.seq_relationship`, so transformers' BertForPreTraining loads it)."""
    corpus = tmp_path / "bbc.txt"
    corpus.write_text("\n\n".join(" ".join(d) for d in bbc_docs[::20]), encoding="utf-8")  # 112 documents
    cfg = PretrainConfig.classroom(corpus=str(corpus), objective=MLM_SOP.name, vocab_size=1000, cache_dir=str(tmp_path / "cache"),
                         layers=1, hidden=64, heads=2, max_positions=64, seq_len=64, phase2_seq_len=None, batch_size=16,
                         steps=40, lr=2e-3, warmup=4, log_every=10, eval_every=40, save_every=0, eval_max_instances=32,
                         quiet=True, num_threads=1, out=str(tmp_path / "run"))
    run = pretrain(cfg)
    train = [r for r in runs.read_metrics(run) if r["split"] == "train"]
    evals = [r for r in runs.read_metrics(run) if r["split"] == "eval"]
    assert set(MLM_SOP.metrics) <= set(train[-1]) and "nsp_acc" not in train[-1]
    assert "eval_sop_acc" in evals[-1] and "eval_nsp_acc" not in evals[-1]
    assert train[-1]["loss"] < train[0]["loss"] - 0.3
    import transformers
    hf = transformers.BertForPreTraining.from_pretrained(str(runs.latest_checkpoint(run)))
    assert hf.cls.seq_relationship.weight.shape == (2, 64)


@pytest.mark.slow
def test_span_masking_reaches_the_training_step_and_trains(tmp_path, bbc_docs, monkeypatch):
    """`--span-mask`: every training batch is masked in SpanBERT's spans (the loop asks span_selection), the held-out
    set keeps the paper's fixed masking, and the run trains; with --whole-word-mask, or for LTR, one line."""
    from engine.pretraining import masking
    calls = []
    real = masking.span_selection
    monkeypatch.setattr(masking, "span_selection", lambda *a, **k: calls.append(1) or real(*a, **k))
    corpus = tmp_path / "bbc.txt"
    corpus.write_text("\n\n".join(" ".join(d) for d in bbc_docs[::40]), encoding="utf-8")
    cfg = PretrainConfig.classroom(corpus=str(corpus), objective=MLM.name, span_mask=True, vocab_size=1000, cache_dir=str(tmp_path / "c"),
                         layers=1, hidden=64, heads=2, max_positions=64, seq_len=64, phase2_seq_len=None, batch_size=8,
                         steps=20, lr=2e-3, warmup=2, log_every=5, eval_every=20, save_every=0, eval_max_instances=16,
                         quiet=True, num_threads=1, prefetch=0, out=str(tmp_path / "run"))
    run = pretrain(cfg)
    train = [r for r in runs.read_metrics(run) if r["split"] == "train"]
    assert len(calls) >= 20 and train[-1]["loss"] < train[0]["loss"]
    assert runs.read_run_json(run)["config"]["span_mask"] is True
    with pytest.raises(EngineError, match="two masking schemes"):
        validate(replace(cfg, whole_word_mask=True))
    with pytest.raises(EngineError, match="predicts the next token"):
        validate(replace(cfg, objective=LTR.name))
