"""Pre-training loop: it learns, LTR is causal, resume is exact, DDP under torchrun, HF parity, CLI errors.

Hermetic: a synthetic corpus written to tmp (topics of made-up words in a fixed cyclic order, so masked words
are predictable from their neighbours and NotNext segments usually come from another topic), its own
tokenizer, and a private pre-training data cache.
"""
import importlib
import json
import math
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

import engine
from engine import runs
from engine.errors import EngineError
from engine.optim import lr_at, param_groups
from engine.pretraining.config import PretrainConfig, model_config, validate
from engine.pretraining.loss import ltr_labels
from engine.pretraining.run import _pretrain, pretrain

REPO = Path(__file__).resolve().parents[3]
TOPICS = 6
WORDS = 8


def _synthetic_docs(n_docs: int, seed: int = 0) -> list:
    """Documents of made-up words; each document keeps to one topic's 8 words, and half of its words are the
    topic's first word. A model that reads the context knows the topic, so it predicts a masked word far better
    than the corpus-wide most frequent token, and it can tell a NotNext segment from another topic."""
    rng = random.Random(seed)
    letters = "bdfgklmnprstvz"
    vocab = [["".join(rng.choice(letters) + rng.choice("aeiou") for _ in range(3)) for _ in range(WORDS)] for _ in range(TOPICS)]
    docs = []
    for d in range(n_docs):
        words = vocab[d % TOPICS]
        sents = []
        for _ in range(rng.randint(20, 30)):
            n = rng.randint(4, 7)
            sents.append(" ".join(words[0] if rng.random() < 0.5 else rng.choice(words[1:]) for _ in range(n)).capitalize() + ".")
        docs.append(sents)
    return docs


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """A corpus file, a trained tokenizer folder and a data cache shared by the tests of this module."""
    root = tmp_path_factory.mktemp("pretrain")
    docs = _synthetic_docs(120)
    corpus = root / "corpus.txt"
    corpus.write_text("\n\n".join(" ".join(d) for d in docs) + "\n", encoding="utf-8")
    # a fixed vocabulary (every word whole), not a trained one: the tokenizers WordPiece trainer breaks ties in
    # hash-map order, so a trained vocabulary differs from run to run and with it the ids, the init and when
    # test_tiny_run_learns's NSP jump comes
    letters = sorted({c for d in docs for sent in d for c in sent.lower() if c.isalpha()})
    words = sorted({w.strip(".").lower() for d in docs for sent in d for w in sent.split()})
    (root / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "."] + words + letters
                                              + [f"##{c}" for c in letters]) + "\n", encoding="utf-8")
    tok_dir = engine.Tokenizer.from_file(root / "vocab.txt").save(root / "tok")
    base = PretrainConfig.classroom(corpus=str(corpus), tokenizer=str(tok_dir), cache_dir=str(root / "cache"), preset="tiny",
                          hidden=64, heads=2, layers=2, max_positions=64, seq_len=64, phase2_seq_len=None, batch_size=8, steps=8,
                          log_every=2, eval_every=4, save_every=4, eval_max_instances=64, quiet=True, num_threads=1)
    return {"root": root, "corpus": corpus, "tok_dir": tok_dir, "base": base}


def _weights(ckpt: Path) -> dict:
    from safetensors.torch import load_file
    return load_file(str(ckpt / "model.safetensors"))


# ------------------------------------------------------------------------------------------------ pieces
def test_schedule_and_param_groups():
    cfg = PretrainConfig.classroom(steps=100, warmup=10, lr=1e-3)
    lrs = [lr_at(s, cfg) for s in range(100)]
    assert lrs[0] == pytest.approx(1e-4) and lrs[9] == pytest.approx(1e-3)
    assert all(a < b for a, b in zip(lrs[:9], lrs[1:10]))  # warmup rises
    assert all(a > b for a, b in zip(lrs[10:-1], lrs[11:]))  # then decays linearly
    assert lrs[-1] == pytest.approx(1e-3 / 90)
    assert PretrainConfig.classroom(steps=200, warmup=0.1).warmup == 0.1 and lr_at(19, PretrainConfig.classroom(steps=200, warmup=0.1, lr=1.0)) == 1.0
    model = engine.BertForPreTraining(model_config(PretrainConfig.classroom(hidden=32, heads=2), 100))
    decay, no_decay = param_groups(model, 0.01)
    names = {id(p): n for n, p in model.named_parameters()}
    assert decay["weight_decay"] == 0.01 and no_decay["weight_decay"] == 0.0
    assert all("norm" in names[id(p)] or names[id(p)].endswith("bias") for p in no_decay["params"])
    assert any(names[id(p)] == "bert.embeddings.word.weight" for p in decay["params"])
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(model.parameters()))


@pytest.mark.slow
def test_accuracy_at_mask_counts_only_positions_whose_input_is_mask():
    from engine.pretraining.evaluation import mask_position_accuracy
    M = 3  # [MASK]'s id in this hand-made batch
    b = {"input_ids": torch.tensor([[1, M, 9, M, 8], [1, M, 5, 6, M]]),
         "labels": torch.tensor([[-100, 7, 9, 7, 4], [-100, 7, -100, -100, 5]])}
    b["mask_input"] = b["input_ids"] == M
    # labelled positions in row-major order: (0,1) 7 [MASK], (0,2) 9 kept, (0,3) 7 [MASK], (0,4) 4 random, (1,1) 7
    # [MASK], (1,4) 5 [MASK]; the model copies the kept 9 and gets two of the four [MASK] positions right
    pred = torch.tensor([7, 9, 2, 1, 7, 2])
    got = mask_position_accuracy([b], [pred])
    assert got == {"eval_mlm_mask_acc": 0.5, "eval_mlm_mask_baseline": 0.75}  # 7 is three of the four [MASK] labels
    assert mask_position_accuracy([{**b, "mask_input": torch.zeros(2, 5, dtype=torch.bool)}], [pred]) == {}


def test_objective_shapes_the_model():
    assert model_config(PretrainConfig.classroom(objective="mlm+nsp"), 100).has_nsp_head
    m = model_config(PretrainConfig.classroom(objective="mlm"), 100)
    assert not m.has_nsp_head and not m.causal
    ltr = model_config(PretrainConfig.classroom(objective="ltr", hidden=256), 100)
    assert ltr.causal and not ltr.has_nsp_head and ltr.num_heads == 4 and ltr.intermediate_size == 1024


def test_ltr_labels_shift_left_on_real_tokens():
    ids = torch.tensor([[2, 7, 8, 9, 3, 0, 0], [2, 5, 6, 4, 7, 8, 3]])
    mask = (ids != 0).long()
    lab = ltr_labels(ids, mask)
    assert lab[0].tolist() == [7, 8, 9, 3, -100, -100, -100]
    assert lab[1].tolist() == [5, 6, 4, 7, 8, 3, -100]


@pytest.mark.slow
def test_ltr_model_never_sees_the_right_context():
    """Changing tokens after position t never changes any output at positions <= t."""
    cfg = model_config(PretrainConfig.classroom(objective="ltr", hidden=32, heads=2, layers=2, max_positions=32), 50)
    torch.manual_seed(0)
    model = engine.BertForPreTraining(cfg).eval()
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, 50, (3, 20), generator=g)
    types = torch.zeros_like(ids)
    types[:, 12:] = 1
    with torch.no_grad():
        ref = model(ids, types, output_hidden_states=True)
        for t in (0, 5, 18):
            changed = ids.clone()
            changed[:, t + 1:] = torch.randint(5, 50, changed[:, t + 1:].shape, generator=g)
            out = model(changed, types, output_hidden_states=True)
            for a, b in zip(ref.hidden_states, out.hidden_states):
                torch.testing.assert_close(a[:, :t + 1], b[:, :t + 1], atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(ref.mlm_logits[:, :t + 1], out.mlm_logits[:, :t + 1], atol=1e-5, rtol=1e-5)
            assert not torch.allclose(ref.mlm_logits[:, t + 1:], out.mlm_logits[:, t + 1:])  # the right side did change
    # and the bidirectional model does see it (the test can fail)
    bi = engine.BertForPreTraining(cfg.replace(causal=False)).eval()
    with torch.no_grad():
        changed = ids.clone()
        changed[:, 10:] = 7
        assert not torch.allclose(bi(ids).last_hidden_state[:, :5], bi(changed).last_hidden_state[:, :5])


@pytest.mark.slow
def test_validation_errors_are_one_line():
    for bad in (dict(objective="nsp"), dict(preset="huge"), dict(mask_ratios=(0.5, 0.1, 0.1)), dict(seq_len=600),
                dict(steps=0), dict(hidden=100, heads=3), dict(phase2_seq_len=1024), dict(seq_len=256, phase2_seq_len=128)):
        with pytest.raises(EngineError) as e:
            from engine.pretraining.config import validate
            validate(replace(PretrainConfig.classroom(out="x"), **bad))
        assert "\n" not in str(e.value)
    assert "is not longer than --seq-len 256" in str(e.value)  # a second phase shorter than the first: refused


# ------------------------------------------------------------------------------------------------ learning
@pytest.mark.slow
def test_tiny_run_learns(env):
    """MLM loss falls well below its start, MLM accuracy beats the most-frequent-token baseline, NSP > 0.6.

    500 steps, not fewer: NSP is learned in a sudden jump whose timing depends on the vocabulary and the CPU's
    kernels. With a trained vocabulary (different in every run) 3 of 22 runs failed at 260 steps and one more at 500;
    the module's vocabulary is now fixed (the env fixture), and NSP reaches 0.91 here with default and generic kernels."""
    cfg = replace(env["base"], out=str(env["root"] / "learn"), steps=500, batch_size=16, lr=3e-3, warmup=0.05,
                  log_every=10, eval_every=0, save_every=0, eval_max_instances=256, eval_fraction=0.1)
    res = _pretrain(cfg)
    assert res["status"] == "finished" and res["step"] == 500
    recs = runs.read_metrics(cfg.out)
    train = [r for r in recs if r["split"] == "train"]
    ev = [r for r in recs if r["split"] == "eval"]
    assert [r["step"] for r in train] == list(range(10, 501, 10)) and [r["step"] for r in ev] == [500]
    first, last = train[0], ev[-1]
    # the most-frequent-token baseline on the held-out data
    from engine.pretraining.prepare import build_pretraining_data
    tok = engine.Tokenizer.from_file(env["tok_dir"])
    cache = build_pretraining_data(engine.load_corpus(cfg.corpus), tok, seq_len=cfg.seq_len, seed=cfg.seed,
                                   cache_dir=cfg.cache_dir, eval_fraction=cfg.eval_fraction)
    toks = np.asarray(cache.eval.tokens, dtype=np.int64)
    toks = toks[~np.isin(toks, tok.special_ids)]
    baseline = np.bincount(toks).max() / len(toks)
    assert last["eval_mlm_loss"] < 0.5 * first["mlm_loss"], (first, last)
    assert last["eval_mlm_acc"] > baseline + 0.15, (baseline, last)
    assert last["eval_nsp_acc"] > 0.6, last
    # where the input is [MASK] the model cannot copy: context must have taught it to beat the most frequent token
    assert last["eval_mlm_mask_acc"] > last["eval_mlm_mask_baseline"] + 0.15, last
    assert last["eval_mlm_ppl"] == pytest.approx(np.exp(last["eval_mlm_loss"]), rel=1e-6)
    assert last["eval_instances"] > 20
    info = runs.read_run_json(cfg.out)
    assert info["kind"] == "pretrain" and info["status"] == "finished" and info["total_steps"] == 500
    assert info["config"]["lr"] == 3e-3 and info["versions"]["torch"] == torch.__version__
    assert [p.name for p in runs.list_checkpoints(cfg.out)] == ["step-500"]
    assert (Path(cfg.out) / "tokenizer" / "vocab.txt").is_file()


@pytest.mark.slow
def test_mlm_and_ltr_objectives_run_and_record_their_metrics(env):
    for objective, key in (("mlm", "mlm"), ("ltr", "lm")):
        cfg = replace(env["base"], out=str(env["root"] / f"obj-{objective}"), objective=objective, steps=4,
                      save_every=0, eval_every=0, log_every=2)
        res = _pretrain(cfg)
        rec = runs.read_metrics(cfg.out)
        assert res["status"] == "finished"
        assert {f"{key}_loss", f"{key}_acc", "loss", "lr", "tokens", "tokens_per_s"} <= set(rec[0])
        assert "nsp_acc" not in rec[0]
        assert {f"eval_{key}_loss", f"eval_{key}_acc", f"eval_{key}_ppl"} <= set(rec[-1])
        assert ("eval_mlm_mask_acc" in rec[-1]) == (objective == "mlm")  # a left-to-right model has no [MASK]
        b = engine.load(cfg.out)
        assert b.config.causal == (objective == "ltr") and b.info["missing_heads"] == ["nsp"]


def test_a_packed_run_trains_the_padded_runs_model(env):
    """`--packing` through the whole loop (batch thread, prediction slots, evaluation, checkpoint): the same
    training losses and held-out figures as the padded run, within float32 rounding, for MLM + NSP and for LTR."""
    for objective in ("mlm+nsp", "ltr"):
        recs = {}
        for packing in (False, True):
            cfg = replace(env["base"], out=str(env["root"] / f"pack-{objective}-{packing}"), objective=objective,
                          steps=4, save_every=0, eval_every=0, log_every=2, dropout=0.0, packing=packing, precision="fp32")
            assert _pretrain(cfg)["status"] == "finished"
            recs[packing] = runs.read_metrics(cfg.out)
        assert len(recs[True]) == len(recs[False]) >= 3  # two training records and the final held-out one
        compared = set()
        for a, b in zip(recs[False], recs[True]):
            assert a.keys() == b.keys() and a["step"] == b["step"]
            for k in ("loss", "eval_loss", "eval_lm_acc", "eval_mlm_acc", "eval_nsp_acc"):
                if k in a:
                    assert b[k] == pytest.approx(a[k], rel=1e-4, abs=1e-5), (objective, k)
                    compared.add(k)
        expected = {"loss", "eval_loss", "eval_lm_acc"} if objective == "ltr" else {"loss", "eval_loss", "eval_mlm_acc", "eval_nsp_acc"}
        assert compared == expected, (objective, compared)
        assert runs.read_run_json(cfg.out)["config"]["packing"] is True


# ------------------------------------------------------------------------------------------------ resume
@pytest.fixture(scope="module")
def resumed_pair(env):
    """The same 8 steps straight and as 4 + resume + 4 (grad accumulation and dropout on)."""
    base = replace(env["base"], grad_accum=2, steps=8)
    straight = replace(base, out=str(env["root"] / "straight"))
    split = replace(base, out=str(env["root"] / "split"))
    pretrain(straight)
    res = _pretrain(replace(split, stop_after=4))
    assert res["status"] == "cancelled" and res["step"] == 4
    assert runs.read_run_json(split.out)["status"] == "cancelled"
    # pretend the first process died after logging past its checkpoint: resume must cut these records off
    runs.append_metrics(split.out, {"step": 6, "split": "train", "loss": 123.0})
    pretrain(replace(split, resume=True))
    return Path(straight.out), Path(split.out)


@pytest.mark.slow
def test_resume_gives_the_same_weights_and_metrics(resumed_pair):
    a, b = resumed_pair
    wa, wb = _weights(a / "checkpoints" / "step-8"), _weights(b / "checkpoints" / "step-8")
    assert wa.keys() == wb.keys()
    for k in wa:
        torch.testing.assert_close(wa[k], wb[k], atol=1e-6, rtol=1e-5, msg=k)
    drop = ("tokens_per_s", "elapsed")
    ma = [{k: v for k, v in r.items() if k not in drop} for r in runs.read_metrics(a)]
    mb = [{k: v for k, v in r.items() if k not in drop} for r in runs.read_metrics(b)]
    assert [r["step"] for r in mb] == [2, 4, 4, 6, 8, 8]  # train 2, 4, eval 4, train 6, 8, eval 8: none doubled
    assert len(ma) == len(mb)
    for ra, rb in zip(ma, mb):
        assert ra.keys() == rb.keys()
        for k in ra:
            assert ra[k] == pytest.approx(rb[k], rel=1e-5, abs=1e-7), (k, ra, rb)
    info = runs.read_run_json(b)
    assert info["status"] == "finished" and info["starts"] == 2
    assert [p.name for p in runs.list_checkpoints(b)] == ["step-4", "step-8"]
    st = json.loads((b / "checkpoints" / "step-8" / "training_state.json").read_text())
    assert st["step"] == 8 and st["position"]["index"] > 0
    blob = torch.load(b / "checkpoints" / "step-8" / "training_state.pt", weights_only=True)
    assert blob["optimizer"]["state"] and blob["scheduler"]["total_steps"] == 8


@pytest.mark.slow
def test_an_old_corpus_run_resumes_against_the_corpus_fingerprint_it_recorded(resumed_pair, env, tmp_path):
    """A --corpus run started before the one data builder recorded the corpus's own fingerprint in run.json
    (engine.tokenizer.corpus_fingerprint of its documents), not its data folder's key as runs do now. On that
    compatibility path it still resumes, its data prepared again in one block into an empty cache: the same weights
    as the straight run; a corpus changed since is still refused."""
    import shutil
    from engine.pretraining.prepare import open_prepared
    from engine.tokenizer import corpus_fingerprint
    corpus = tmp_path / "corpus.txt"
    shutil.copy(env["corpus"], corpus)
    old = replace(env["base"], grad_accum=2, steps=8, corpus=str(corpus), out=str(tmp_path / "old"),
                  cache_dir=str(tmp_path / "cache"))
    assert _pretrain(replace(old, stop_after=4))["step"] == 4
    [folder] = (tmp_path / "cache").glob("prepared-*")
    info = runs.read_run_json(old.out)
    assert info["corpus_fingerprint"] == f"prepared-{open_prepared(folder).key}"  # a run now: its data's key

    def as_before(fingerprint):  # run.json as the in-memory builder's version wrote it
        (Path(old.out) / "run.json").write_text(json.dumps({**runs.read_run_json(old.out), "corpus_fingerprint": fingerprint}))

    as_before(corpus_fingerprint(engine.load_corpus(str(corpus))))
    shutil.rmtree(tmp_path / "cache")
    pretrain(replace(old, resume=True))
    wa, wb = _weights(resumed_pair[0] / "checkpoints" / "step-8"), _weights(Path(old.out) / "checkpoints" / "step-8")
    for k in wa:
        torch.testing.assert_close(wa[k], wb[k], atol=1e-6, rtol=1e-5, msg=k)
    as_before(corpus_fingerprint(engine.load_corpus(str(corpus))))
    corpus.write_text(corpus.read_text(encoding="utf-8") + "\nOne more document here. It is new.\n", encoding="utf-8")
    with pytest.raises(EngineError, match="changed since the run started"):
        pretrain(replace(old, resume=True, steps=10))


@pytest.mark.slow
def test_checkpoint_loads_in_transformers_with_the_same_logits(resumed_pair):
    from transformers import BertForPreTraining as HFBert
    ckpt = resumed_pair[0] / "checkpoints" / "step-8"
    ours = engine.load(ckpt)
    hf = HFBert.from_pretrained(str(ckpt)).eval()
    enc = ours.tokenizer.encode(" ".join(_synthetic_docs(1)[0][:2]), " ".join(_synthetic_docs(2)[1][:2]))
    ids, types = torch.tensor([enc.ids]), torch.tensor([enc.type_ids])
    with torch.no_grad():
        a = ours.model(ids, types)
        b = hf(input_ids=ids, token_type_ids=types)
    torch.testing.assert_close(a.mlm_logits, b.prediction_logits, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(a.nsp_logits, b.seq_relationship_logits, atol=1e-4, rtol=1e-4)


@pytest.mark.slow
def test_new_run_into_a_used_folder_is_refused_and_resume_needs_a_checkpoint(resumed_pair, env):
    a = resumed_pair[0]
    before = (a / "metrics.jsonl").read_bytes()
    with pytest.raises(EngineError, match="--resume"):
        pretrain(replace(env["base"], out=str(a)))
    with pytest.raises(EngineError, match="started with"):
        pretrain(replace(env["base"], out=str(a), resume=True, seq_len=32, steps=9))
    with pytest.raises(EngineError, match="cannot resume"):
        pretrain(replace(env["base"], out=str(env["root"] / "nothing-here"), resume=True))
    assert (a / "metrics.jsonl").read_bytes() == before
    assert not (env["root"] / "nothing-here").exists()
    # resuming a finished run changes nothing
    res = _pretrain(replace(env["base"], grad_accum=2, out=str(a), resume=True))
    assert res["status"] == "finished" and res["step"] == 8
    assert (a / "metrics.jsonl").read_bytes() == before


@pytest.mark.slow
def test_resume_of_a_run_killed_before_its_first_checkpoint_starts_again(env):
    import shutil
    cfg = replace(env["base"], out=str(env["root"] / "early-death"), steps=4, save_every=0, eval_every=0, log_every=1)
    pretrain(replace(cfg, stop_after=2))
    shutil.rmtree(Path(cfg.out) / "checkpoints")  # as if SIGKILLed after logging steps 1-2, before any save
    (Path(cfg.out) / "checkpoints" / "..tmp-step-2.x.tmp").mkdir(parents=True)  # and mid-way through one
    res = _pretrain(replace(cfg, resume=True))
    assert res["status"] == "finished"
    assert [r["step"] for r in runs.read_metrics(cfg.out)] == [1, 2, 3, 4, 4]
    assert sorted(p.name for p in (Path(cfg.out) / "checkpoints").iterdir()) == ["step-4"]


@pytest.mark.slow
def test_max_minutes_finishes_with_an_evaluation_and_a_checkpoint(env):
    """A time budget every step exceeds (a millionth of a second): the run finishes after its first step, evaluated
    and saved there, as finished (an equal-time study's fine-tunes read that checkpoint)."""
    cfg = replace(env["base"], out=str(env["root"] / "budget"), steps=8, max_minutes=1e-8)
    res = _pretrain(cfg)
    assert res["status"] == "finished" and res["step"] == 1
    assert runs.read_run_json(cfg.out)["status"] == "finished"
    recs = runs.read_metrics(cfg.out)
    assert [(r["step"], r["split"]) for r in recs] == [(1, "train"), (1, "eval")]
    assert sorted(p.name for p in (Path(cfg.out) / "checkpoints").iterdir()) == ["step-1"]
    with pytest.raises(EngineError, match="--max-minutes"):
        validate(replace(cfg, max_minutes=0))


@pytest.mark.slow
def test_failed_checkpoint_write_marks_the_run_failed_and_keeps_the_previous_one(env, monkeypatch):
    P = importlib.import_module("engine.pretraining.run_folder")  # where checkpoints are written
    calls = {"n": 0}
    real = P.atomic_save_with

    def flaky(path, fn):
        calls["n"] += 1
        if calls["n"] == 2:  # the second checkpoint's training state: disk full
            raise EngineError(f"could not write {path}: No space left on device; free disk space or fix permissions and retry")
        return real(path, fn)

    monkeypatch.setattr(P, "atomic_save_with", flaky)
    cfg = replace(env["base"], out=str(env["root"] / "diskfull"), steps=8, save_every=4, eval_every=0)
    with pytest.raises(EngineError, match="No space left"):
        pretrain(cfg)
    info = runs.read_run_json(cfg.out)
    assert info["status"] == "failed" and "No space left" in info["error"]
    assert [p.name for p in runs.list_checkpoints(cfg.out)] == ["step-4"]
    assert not list((Path(cfg.out) / "checkpoints").glob(".tmp-*"))
    engine.load(cfg.out)  # the previous checkpoint is intact


# ------------------------------------------------------------------------------------------------ CLI
def _cli(*args, env_extra=None):
    e = dict(os.environ, HF_HUB_OFFLINE="1", **(env_extra or {}))
    return subprocess.Popen([sys.executable, "-m", "engine", "pretrain", *args], cwd=REPO, env=e,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _common(env, out, *extra):
    b = env["base"]
    return ["--corpus", b.corpus, "--tokenizer", b.tokenizer, "--cache-dir", b.cache_dir, "--preset", "tiny",
            "--layers", "2", "--hidden", "64", "--heads", "2", "--max-positions", "64", "--seq-len", "64", "--phase2-seq-len", "0",
            "--batch-size", "8", "--num-threads", "1", "--quiet", "--out", str(out), *extra]


def _cli_inprocess(args, capsys):
    """The CLI entry point (`python -m engine ...` minus interpreter start-up): exit code and stderr lines."""
    from engine.__main__ import run
    capsys.readouterr()
    code = run(["pretrain", *args])
    out, err = capsys.readouterr()
    return code, out, [ln for ln in err.splitlines() if ln.strip()]


@pytest.mark.slow
def test_cli_bad_input_is_one_line_and_touches_nothing(env, tmp_path, capsys):
    one_doc = tmp_path / "one.txt"
    one_doc.write_text(" ".join(_synthetic_docs(1)[0]) + "\n", encoding="utf-8")
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n", encoding="utf-8")
    # the real command line once (a separate interpreter), in the background while the rest run in-process
    proc = _cli(*_common(env, tmp_path / "single-sub", "--corpus", str(one_doc)))
    used = tmp_path / "used"
    used.mkdir()
    (used / "notes.txt").write_text("mine")
    cases = {
        "single": (["--corpus", str(one_doc)], "single document"),
        "empty": (["--corpus", str(empty)], "empty"),
        "seqlen": (["--seq-len", "128"], "above the model's 64 positions"),
        "seqlen512": (["--seq-len", "1024", "--max-positions", "512"], "above the model's 512 positions"),
        "resume": (["--resume"], "cannot resume"),
        "ratios": (["--mask-ratios", "0.8,0.3,0.1"], "sum to"),
        "objective": (["--objective", "nsp"], "invalid choice"),
    }
    for k, (extra, expect) in cases.items():
        code, out, err = _cli_inprocess([*_common(env, tmp_path / k), *extra], capsys)
        assert code == 2 and len(err) == 1 and err[0].startswith("error: ") and expect in err[0], (k, err)
        assert out == "" and not (tmp_path / k).exists(), k  # no run folder left behind
    code, out, err = _cli_inprocess(_common(env, used), capsys)
    assert code == 2 and len(err) == 1 and "--resume" in err[0], err
    assert sorted(p.name for p in used.iterdir()) == ["notes.txt"] and (used / "notes.txt").read_text() == "mine"
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2 and out == "", err
    assert err.strip().count("\n") == 0 and err.startswith("error: ") and "single document" in err, err
    assert not (tmp_path / "single-sub").exists()


@pytest.mark.slow
def test_cli_second_run_into_a_live_folder_is_refused_then_sigterm_checkpoints(env, tmp_path, capsys):
    out = tmp_path / "live"
    first = _cli(*_common(env, out, "--steps", "100000", "--save-every", "0", "--eval-every", "0", "--log-every", "1"))
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not runs.read_metrics(out):
            assert first.poll() is None, first.communicate()
            time.sleep(0.1)
        assert runs.read_metrics(out), "the first run did not start training"
        info = runs.read_run_json(out)
        assert info["status"] == "running" and info["pid"] == first.pid
        for extra in ([], ["--resume"]):
            code, o, err = _cli_inprocess([*_common(env, out, "--steps", "10"), *extra], capsys)
            assert code == 2 and len(err) == 1 and err[0].startswith("error: ") and "in use by process" in err[0], err
        assert runs.read_run_json(out)["pid"] == first.pid and (out / "tokenizer" / "vocab.txt").is_file()
        first.send_signal(signal.SIGTERM)
        o, err = first.communicate(timeout=60)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode != 0
    info = runs.read_run_json(out)
    assert info["status"] == "cancelled" and "--resume" in info["error"]
    last = runs.read_metrics(out)[-1]["step"]
    ck = runs.latest_checkpoint(out)
    assert ck is not None and runs.checkpoint_step(ck) >= last
    summary = json.loads(o.strip().splitlines()[-1])
    assert summary["status"] == "cancelled" and summary["step"] == runs.checkpoint_step(ck)
    assert runs.lock_holder(out) is None


def test_a_two_phase_run_is_evaluated_at_the_length_it_trains(env, tmp_path, monkeypatch):
    """Held-out batches follow the phase: the first phase's evaluations score its short text, the second's (and
    the final one, what the studies' tables read) text of the final length, the length downstream tasks read."""
    import engine.pretraining.loop as P
    widths, real = [], P.eval_batches

    def recording(cache, cfg, batch_size):
        out = real(cache, cfg, batch_size)
        widths.append(max(b["input_ids"].shape[1] for b in out))
        return out

    monkeypatch.setattr(P, "eval_batches", recording)
    out = tmp_path / "two"
    pretrain(replace(env["base"], out=str(out), seq_len=32, phase2_seq_len=64, phase2_fraction=0.5, steps=6,
                     eval_every=2, save_every=0))
    evals = [r for r in runs.read_metrics(out) if r["split"] == "eval"]
    assert [(r["step"], r["eval_seq_len"]) for r in evals] == [(2, 32), (4, 64), (6, 64)]
    assert widths[0] <= 32 < widths[1] <= 64  # built once per phase, from that phase's held-out instances


@pytest.mark.slow
def test_cli_resume_with_only_out_continues_across_the_phase_boundary(env, tmp_path, capsys):
    """`--out X --resume` alone restores the run's settings; a stop inside phase 2 resumes on the phase-2 data."""
    flags = ["--steps", "6", "--seq-len", "32", "--phase2-seq-len", "64", "--phase2-fraction", "0.5",
             "--save-every", "0", "--eval-every", "0", "--log-every", "1"]
    code, out, err = _cli_inprocess([*_common(env, tmp_path / "straight"), *flags], capsys)
    assert code == 0, err
    code, out, err = _cli_inprocess([*_common(env, tmp_path / "split"), *flags, "--stop-after", "4"], capsys)
    assert code == 0 and json.loads(out.splitlines()[-1])["status"] == "cancelled", err
    code, out, err = _cli_inprocess(["--out", str(tmp_path / "split"), "--resume"], capsys)
    assert code == 0 and json.loads(out.splitlines()[-1])["status"] == "finished", err
    a, b = runs.read_metrics(tmp_path / "straight"), runs.read_metrics(tmp_path / "split")
    assert [(r["step"], r.get("phase")) for r in b if r["split"] == "train"] == [(1, 1), (2, 1), (3, 1), (4, 2), (5, 2), (6, 2)]
    assert len(a) == len(b) == 7
    for ra, rb in zip(a, b):
        assert ra.get("loss") == pytest.approx(rb.get("loss"), rel=1e-5) and ra.get("eval_loss") == pytest.approx(rb.get("eval_loss"), rel=1e-5)
    assert [c.name for c in runs.list_checkpoints(tmp_path / "split")] == ["step-4", "step-6"]  # --save-every 0 kept
    assert runs.read_run_json(tmp_path / "split")["config"]["phase2_seq_len"] == 64
    wa, wb = _weights(tmp_path / "straight" / "checkpoints" / "step-6"), _weights(tmp_path / "split" / "checkpoints" / "step-6")
    for k in wa:
        torch.testing.assert_close(wa[k], wb[k], atol=1e-6, rtol=1e-5, msg=k)


@pytest.mark.slow
def test_torchrun_two_processes_train_and_checkpoint(env, tmp_path, torchrun):
    out = tmp_path / "ddp"
    args = ["pretrain", *_common(env, out, "--steps", "4", "--save-every", "2", "--eval-every", "4", "--log-every", "2",
                                 "--grad-accum", "2", "--objective", "mlm")]  # no NSP: the unused pooler must not trip DDP
    e = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", TMPDIR=str(tmp_path))  # torchrun's log folder
    p = torchrun.run(2, args, cwd=REPO, env=e, timeout=240)
    assert p.returncode == 0, p.stderr[-3000:]
    summary = [json.loads(ln) for ln in p.stdout.splitlines() if ln.startswith("{")]
    assert len(summary) == 1 and summary[0]["status"] == "finished"  # rank 0 only
    info = runs.read_run_json(out)
    assert info["status"] == "finished" and info["world_size"] == 2
    assert [c.name for c in runs.list_checkpoints(out)] == ["step-2", "step-4"]
    recs = runs.read_metrics(out)
    assert [r["step"] for r in recs] == [2, 4, 4]
    # both ranks' tokens are counted: 4 steps x 8 sequences
    assert recs[1]["tokens"] > 0 and recs[-1]["eval_instances"] > 0
    b = engine.load(out)
    assert b.info["training_state"]["step"] == 4


TEARDOWN_SCRIPT = """
import os, sys, torch
from engine.distributed import Dist, setup, teardown
from engine.pretraining.loop import wrap_model
from engine.pretraining.run import PretrainConfig
def gloo_threads():
    return [t for t in os.listdir("/proc/self/task") if "gloo" in open(f"/proc/self/task/{t}/comm").read()]
dist = Dist(rank=0, world_size=2)  # enabled; the group itself is one process (WORLD_SIZE=1 in the environment)
setup(dist, torch.device("cpu"), 1)
model = wrap_model(torch.nn.Linear(4, 4), PretrainConfig.classroom(), dist, torch.device("cpu"))
model(torch.randn(2, 4)).sum().backward()
assert gloo_threads(), "the gloo group should be running"
del model
teardown(dist)
print(len(gloo_threads()))
"""


@pytest.mark.slow  # several seconds: processes, a real speed check or a full preparation
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts threads through /proc")
def test_teardown_stops_the_gloo_threads_of_a_run_wrapped_in_ddp(tmp_path, torchrun):
    """After teardown no gloo thread is left: a group that outlived destroy_process_group (held by
    torch.distributed.nn's default arguments) ran its threads into interpreter exit, where one could abort a
    finished rank (SIGABRT) and fail the whole torchrun job."""
    port = torchrun.free_port()
    e = dict(os.environ, RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
             OMP_NUM_THREADS="1")
    p = subprocess.run([sys.executable, "-c", TEARDOWN_SCRIPT], cwd=REPO, env=e, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.split()[-1] == "0", "gloo threads still run after teardown"


@pytest.mark.slow
def test_torchrun_sigterm_stops_every_rank_with_a_checkpoint_then_resumes(env, tmp_path, torchrun):
    """SIGTERM to torchrun reaches both ranks; they agree at the next log step, save one checkpoint and stop
    (status cancelled); --resume then finishes the run."""
    out = tmp_path / "ddp"
    args = _common(env, out, "--steps", "400", "--save-every", "0", "--eval-every", "0", "--log-every", "2", "--objective", "mlm")
    e = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", TMPDIR=str(tmp_path))  # torchrun's log folder
    for _ in range(torchrun.tries):  # a new port when another process took the picked one before torchrun bound it
        p = subprocess.Popen(torchrun.command(2, "pretrain", *args), cwd=REPO, env=e, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 180
        while time.time() < deadline and p.poll() is None:
            if (out / "metrics.jsonl").exists() and len((out / "metrics.jsonl").read_text().splitlines()) >= 3:
                break
            time.sleep(0.2)
        if p.poll() is None:
            break
        err = p.stderr.read()
        if not torchrun.port_taken(err):
            pytest.fail(f"torchrun ended before the signal: {err[-3000:]}")
    try:
        assert p.poll() is None, "torchrun could not bind a rendezvous port in three tries"
        p.send_signal(signal.SIGTERM)
        err = p.communicate(timeout=120)[1]
        assert "SIGABRT" not in err, err[-3000:]  # each rank stopped itself; none aborted at exit
    finally:
        if p.poll() is None:
            p.kill()
    info = runs.read_run_json(out)
    assert info["status"] == "cancelled" and "--resume" in info["error"], info
    cks = runs.list_checkpoints(out)
    assert len(cks) == 1 and int(cks[0].name.split("-")[1]) % 2 == 0  # saved at a log step, where the ranks agree
    step = engine.load(out).info["training_state"]["step"]
    assert 0 < step < 400
    cmd2 = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "engine", "pretrain",
            "--out", str(out), "--resume", "--steps", str(step + 4), "--quiet"]
    r = subprocess.run(cmd2, cwd=REPO, env=e, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    info = runs.read_run_json(out)
    assert info["status"] == "finished" and engine.load(out).info["training_state"]["step"] == step + 4


def _worker_pids(marker: str, rank: int) -> list:
    """The pids of the processes whose environment holds `marker` (set for one test's torchrun) and RANK=`rank`, on
    torchrun's first attempt (TORCHELASTIC_RESTART_COUNT=0)."""
    found = []
    for d in Path("/proc").iterdir():
        try:
            env = dict(kv.split(b"=", 1) for kv in (d / "environ").read_bytes().split(b"\0") if b"=" in kv)
        except (OSError, ValueError):
            continue
        if env.get(b"ELASTIC_TEST") == marker.encode() and env.get(b"RANK") == str(rank).encode() \
                and env.get(b"TORCHELASTIC_RESTART_COUNT") == b"0":
            found.append(int(d.name))
    return found


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/environ").is_file(), reason="finds the worker to kill through /proc")
def test_torchrun_restarts_a_killed_worker_and_the_run_continues_from_its_checkpoint(env, tmp_path, torchrun):
    """`torchrun --max-restarts 1`: SIGKILL to rank 1 mid-run makes torchrun stop the group and start it again; the
    same command (no --resume) continues from the last checkpoint, logs every step once and ends in the weights of
    an uninterrupted run (the same world size: each rank's slice and masking are those of the straight run)."""
    flags = ("--steps", "120", "--save-every", "20", "--eval-every", "0", "--log-every", "2", "--objective", "mlm")
    e = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", TMPDIR=str(tmp_path), ELASTIC_TEST=str(tmp_path))
    straight = torchrun.run(2, ["pretrain", *_common(env, tmp_path / "straight", *flags)], cwd=REPO, env=e, timeout=300)
    assert straight.returncode == 0, straight.stderr[-3000:]
    out = tmp_path / "elastic"
    for _ in range(torchrun.tries):  # a new port when another process took the picked one before torchrun bound it
        cmd = torchrun.command(2, "pretrain", *_common(env, out, *flags))
        cmd.insert(cmd.index("torch.distributed.run") + 1, "--max-restarts=1")
        p = subprocess.Popen(cmd, cwd=REPO, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 240
        while time.time() < deadline and p.poll() is None:  # past the checkpoint of step 20, before the end
            if max((r["step"] for r in runs.read_metrics(out)), default=0) >= 26:
                break
            time.sleep(0.05)
        if p.poll() is None:
            break
        err = p.stderr.read()
        if not torchrun.port_taken(err):
            pytest.fail(f"torchrun ended before the kill: {err[-3000:]}")
    try:
        [victim] = _worker_pids(str(tmp_path), 1)
        killed_at = max(r["step"] for r in runs.read_metrics(out))
        os.kill(victim, signal.SIGKILL)
        stdout, err = p.communicate(timeout=300)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, err[-3000:]
    assert "elastic restart 1" in err and json.loads(stdout.splitlines()[-1])["status"] == "finished"
    info = runs.read_run_json(out)
    assert info["status"] == "finished" and info["starts"] == 2 and info["resumed_from"].endswith("step-" + str(killed_at // 20 * 20))
    steps = [r["step"] for r in runs.read_metrics(out) if r["split"] == "train"]
    assert steps == list(range(2, 121, 2)) and killed_at < 120  # every step once, though some were trained twice
    assert [c.name for c in runs.list_checkpoints(out)] == [f"step-{k}" for k in range(20, 121, 20)]
    wa, wb = _weights(tmp_path / "straight" / "checkpoints" / "step-120"), _weights(out / "checkpoints" / "step-120")
    for k in wa:
        torch.testing.assert_close(wa[k], wb[k], atol=1e-6, rtol=1e-5, msg=k)


def test_restarts_on_several_nodes_over_torchruns_shared_store_are_one_line_naming_the_opt_out(monkeypatch):
    """torchrun's shared store keeps a dead attempt's keys, and the restart counts behind the per-attempt prefix differ
    between nodes: several nodes with --max-restarts need TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 (a store per attempt)."""
    from engine.distributed import Dist, attempt_store, restart_count
    monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", "True")
    monkeypatch.setenv("GROUP_WORLD_SIZE", "2")
    monkeypatch.setenv("TORCHELASTIC_MAX_RESTARTS", "3")
    with pytest.raises(EngineError, match="TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1"):
        attempt_store(Dist(rank=1, world_size=4))
    monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", "False")  # the opt-out: init_process_group's own store
    assert attempt_store(Dist(rank=1, world_size=4)) is None
    for value, count in (("2", 2), ("", 0), ("x", 0)):
        monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", value)
        assert restart_count() == count


@pytest.mark.slow
def test_precision_auto_follows_the_machine_and_bf16_trains_on_cpu(env, monkeypatch):
    from engine.device import default_precision, resolve_precision
    cpu = torch.device("cpu")
    assert resolve_precision("fp32", cpu) == "fp32" and resolve_precision("bf16", cpu) == "bf16"
    assert resolve_precision("auto", cpu) == default_precision(cpu)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False, raising=False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False, raising=False)
    assert resolve_precision("auto", cpu) == "fp32"  # no native bf16: emulated bf16 would be slower
    with pytest.raises(EngineError, match="--precision"):
        validate(replace(PretrainConfig.classroom(out="x"), precision="fp16"))
    cfg = replace(env["base"], out=str(env["root"] / "bf16"), steps=6, precision="bf16", eval_every=3, save_every=6)
    res = _pretrain(cfg)
    info = runs.read_run_json(cfg.out)
    assert res["status"] == "finished" and info["bf16"] is True and info["config"]["precision"] == "bf16"
    train = [m for m in runs.read_metrics(cfg.out) if m.get("split", "train") == "train"]
    assert all(math.isfinite(m["loss"]) for m in train)
    engine.load(cfg.out)  # the checkpoint is fp32 weights whatever the autocast
    assert all(v.dtype == torch.float32 for v in _weights(Path(runs.latest_checkpoint(cfg.out))).values())
