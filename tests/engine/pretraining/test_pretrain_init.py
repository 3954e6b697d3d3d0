"""Continued pre-training (`pretrain --init`): from a run, a checkpoint, a Hugging Face folder without heads and
MiniLM; heads created as the paper's, encoder weights and outputs unchanged at step 0; LTR keeps the weights and
only adds the causal mask; resume of an init run; conflicting flags are one clear line; the recipe defaults."""
import random
import re
from dataclasses import replace
from pathlib import Path

import pytest
import torch

import engine
from engine import runs
from engine.errors import EngineError
from engine.pretraining.run import PretrainConfig, _pretrain, config_from_args, pretrain
from engine.pretraining.config import CONTINUED_PRETRAINING
from engine.pretraining.init import resolve_init
from engine.pretraining.loop import build_model


def _synthetic_docs(n_docs: int) -> list:
    """Documents of made-up words, one small topic vocabulary per document (6 topics, 8 words each)."""
    rng = random.Random(0)
    topics = [["".join(rng.choice("bdfgklmnprstvz") + rng.choice("aeiou") for _ in range(3)) for _ in range(8)]
              for _ in range(6)]
    return [[" ".join(rng.choice(topics[d % 6]) for _ in range(rng.randint(4, 7))).capitalize() + "."
             for _ in range(rng.randint(20, 30))] for d in range(n_docs)]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """A synthetic corpus, and a 4-step source run (2 layers, hidden 64, 64 positions) to start from."""
    root = tmp_path_factory.mktemp("init")
    corpus = root / "corpus.txt"
    corpus.write_text("\n\n".join(" ".join(d) for d in _synthetic_docs(60)) + "\n", encoding="utf-8")
    tok_dir = engine.train_tokenizer(engine.load_corpus(str(corpus)), vocab_size=200).save(root / "tok")
    common = dict(corpus=str(corpus), cache_dir=str(root / "cache"), seq_len=64, phase2_seq_len=None, batch_size=8, log_every=2,
                  eval_max_instances=32, quiet=True, num_threads=1)
    src = PretrainConfig.classroom(tokenizer=str(tok_dir), hidden=64, heads=2, layers=2, max_positions=64, steps=4, eval_every=4,
                         save_every=4, out=str(root / "src"), **common)
    pretrain(src)
    return {"root": root, "src": root / "src", "common": common}


def _init_cfg(env, init, **kw):
    return PretrainConfig.for_init(str(init), **{**env["common"], "steps": 4, "eval_every": 4, "save_every": 4, **kw})


def _step0(cfg):
    cfg = resolve_init(cfg)
    model, mcfg, state, blob, info = build_model(cfg, None, None, torch.device("cpu"))
    return model.eval(), mcfg, info


def _tied(model) -> bool:
    return model.mlm.word_embeddings[0].weight.data_ptr() == model.bert.embeddings.word.weight.data_ptr()


def _same_weights(model, source, prefix=""):
    src = source.state_dict()
    keys = [k for k in src if k.startswith(prefix)]
    assert keys
    for k in keys:
        torch.testing.assert_close(model.state_dict()[k], src[k], rtol=0, atol=0, msg=k)


def test_init_from_a_run_and_its_checkpoint_keeps_every_weight_and_the_vocabulary(env):
    source = engine.load(env["src"])
    for init, kind in ((env["src"], "run"), (env["src"] / "checkpoints" / "step-4", "checkpoint")):
        model, mcfg, info = _step0(_init_cfg(env, init))
        shape = lambda c: {k: v for k, v in c.to_dict().items() if not k.endswith("dropout")}  # dropout: the recipe's
        assert shape(mcfg) == shape(source.config)  # the source's shape; it had both heads
        _same_weights(model, source.model)  # heads included: it had them
        assert info["kind"] == kind and info["heads_from_init"] == ["mlm", "nsp"] and info["heads_new"] == []
        assert _tied(model)
    cfg = _init_cfg(env, env["src"], out=str(env["root"] / "from-run"))
    res = _pretrain(cfg)
    assert res["status"] == "finished" and res["step"] == 4
    info = runs.read_run_json(cfg.out)
    assert info["init"]["source"] == str(env["src"]) and info["init"]["path"].endswith("step-4")
    assert info["config"]["init"] == str(env["src"]) and info["config"]["lr"] == CONTINUED_PRETRAINING["lr"]
    assert (info["config"]["layers"], info["config"]["hidden"], info["config"]["max_positions"]) == (2, 64, 64)
    assert (Path(cfg.out) / "tokenizer" / "vocab.txt").read_text() == (env["src"] / "tokenizer" / "vocab.txt").read_text()
    trained = engine.load(cfg.out)
    assert shape(trained.config) == shape(source.config)
    assert not torch.equal(trained.model.bert.layers[0].attention.qkv.weight, source.model.bert.layers[0].attention.qkv.weight)


@pytest.fixture(scope="module")
def hf_encoder(env):
    """A Hugging Face BertModel folder (no pre-training heads), saved by transformers, with a cased vocab.txt."""
    from transformers import BertConfig as HFConfig
    from transformers import BertModel as HFBertModel
    tok = engine.Tokenizer.from_file(env["src"] / "tokenizer", lowercase=False)
    torch.manual_seed(7)
    hf = HFBertModel(HFConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                              intermediate_size=80, max_position_embeddings=48)).eval()
    out = env["root"] / "hf-encoder"
    hf.save_pretrained(out)
    tok.save(out)
    return out, hf


def test_init_from_a_hugging_face_folder_without_heads_creates_them_and_keeps_the_encoder(env, hf_encoder):
    folder, hf = hf_encoder
    model, mcfg, info = _step0(_init_cfg(env, folder, seq_len=48))
    assert info["kind"] == "huggingface" and info["heads_new"] == ["mlm", "nsp"] and info["heads_from_init"] == []
    assert (mcfg.num_layers, mcfg.hidden_size, mcfg.intermediate_size, mcfg.max_position_embeddings) == (2, 32, 80, 48)
    assert model.mlm is not None and model.nsp is not None and _tied(model)
    # the paper's initialisation of the new heads: N(0, 0.02) matrices, LayerNorm 1/0, zero biases
    assert torch.all(model.mlm.bias == 0) and torch.all(model.mlm.norm.weight == 1) and torch.all(model.nsp.bias == 0)
    assert 0.01 < model.mlm.dense.weight.std().item() < 0.03 and 0.01 < model.nsp.weight.std().item() < 0.03
    _same_weights(model, engine.load(folder).model, prefix="bert.")  # every encoder weight, pooler included
    ids = torch.tensor([[2, 17, 40, 33, 3, 51, 60, 3]])
    tt = torch.tensor([[0, 0, 0, 0, 0, 1, 1, 1]])
    with torch.no_grad():
        ours = model(ids, token_type_ids=tt)
        ref = hf(input_ids=ids, token_type_ids=tt)
    torch.testing.assert_close(ours.last_hidden_state, ref.last_hidden_state, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(ours.pooled_output, ref.pooler_output, atol=1e-5, rtol=1e-4)
    cfg = resolve_init(_init_cfg(env, folder, seq_len=48))
    assert cfg.cased is True and cfg.vocab_size == hf.config.vocab_size  # casing comes with the tokenizer


def test_init_from_minilm_heads_created_encoder_outputs_unchanged(env):
    minilm = engine.load("minilm")
    cfg = _init_cfg(env, "minilm")
    model, mcfg, info = _step0(cfg)
    assert info["kind"] == "minilm" and info["heads_new"] == ["mlm", "nsp"] and _tied(model)
    assert (mcfg.num_layers, mcfg.hidden_size, mcfg.num_heads, mcfg.vocab_size) == (6, 384, 12, 30522)
    _same_weights(model, minilm.model, prefix="bert.")
    enc = minilm.tokenizer.encode("the man went to the store .", "he bought milk .")
    ids, tt = torch.tensor([enc.ids]), torch.tensor([enc.type_ids])
    with torch.no_grad():
        torch.testing.assert_close(model(ids, token_type_ids=tt).last_hidden_state,
                                   minilm.model(ids, token_type_ids=tt).last_hidden_state, rtol=0, atol=0)
    assert model(ids, token_type_ids=tt).mlm_logits.shape == (1, len(enc.ids), 30522)


def test_init_with_ltr_keeps_the_weights_and_applies_the_causal_mask(env, hf_encoder):
    folder, hf = hf_encoder
    model, mcfg, info = _step0(_init_cfg(env, folder, seq_len=48, objective="ltr"))
    assert mcfg.causal and model.nsp is None and info["heads_new"] == ["mlm"]
    _same_weights(model, engine.load(folder).model, prefix="bert.")
    a = torch.tensor([[2, 17, 40, 33, 21, 3]])
    b = torch.tensor([[2, 17, 40, 33, 99, 3]])  # differs from position 4 on
    with torch.no_grad():
        ha, hb = model(a).last_hidden_state, model(b).last_hidden_state
        bidir = hf(input_ids=a).last_hidden_state
    torch.testing.assert_close(ha[:, :4], hb[:, :4], rtol=0, atol=1e-6)  # no position sees its right
    assert not torch.allclose(ha[:, 4], hb[:, 4])
    assert not torch.allclose(ha[:, :4], bidir[:, :4], atol=1e-4)  # the mask is the change
    res = _pretrain(_init_cfg(env, folder, seq_len=48, objective="ltr", out=str(env["root"] / "ltr")))
    assert res["status"] == "finished" and engine.load(env["root"] / "ltr").config.causal


ENCODER = ("bert.embeddings.", "bert.layers.")  # what a heads-first start freezes
HEADS = ("mlm.dense.", "mlm.norm.", "mlm.bias", "bert.pooler.", "nsp.")  # what it trains (the decoder is the word embeddings)


def test_heads_first_trains_only_the_heads_on_the_frozen_encoder_then_everything(env):
    cfg = _init_cfg(env, env["src"], out=str(env["root"] / "heads-first"), steps=6, heads_first=3, heads_first_lr=1e-2,
                    save_every=3, eval_every=3)
    assert cfg.heads_first_steps() == 3
    assert _pretrain(cfg)["status"] == "finished"
    src = engine.load(env["src"]).model.state_dict()
    at3 = engine.load(Path(cfg.out) / "checkpoints" / "step-3").model.state_dict()
    at6 = engine.load(Path(cfg.out) / "checkpoints" / "step-6").model.state_dict()
    assert src.keys() == at3.keys() == at6.keys()
    encoder = [k for k in src if k.startswith(ENCODER)]
    heads = [k for k in src if k.startswith(HEADS)]
    assert encoder and heads and not set(encoder) & set(heads)
    for k in encoder:  # untouched by the heads-first steps (no update, no weight decay)
        torch.testing.assert_close(at3[k], src[k], rtol=0, atol=0, msg=k)
    for k in heads:
        assert not torch.equal(at3[k], src[k]), k
    for k in encoder:  # then the whole model trains
        assert not torch.equal(at6[k], at3[k]), k
    lrs = {r["step"]: r["lr"] for r in runs.read_metrics(cfg.out) if r["split"] == "train"}
    from engine.optim import lr_at
    assert lrs == {s: pytest.approx(lr_at(s - 1, cfg)) for s in (2, 4, 6)}
    assert runs.read_run_json(cfg.out)["config"]["heads_first"] == 3


def test_heads_first_steps_have_their_own_schedule():
    from engine.optim import lr_at
    cfg = PretrainConfig.classroom(init="minilm", steps=100, heads_first=0.2, heads_first_lr=1e-3, lr=5e-4, warmup=8)
    assert cfg.heads_first_steps() == 20 and replace(cfg, heads_first=30).heads_first_steps() == 30
    assert PretrainConfig.for_init("minilm").heads_first_steps() == round(CONTINUED_PRETRAINING["heads_first"] * CONTINUED_PRETRAINING["steps"])
    lrs = [lr_at(s, cfg) for s in range(100)]
    assert lrs[0] == pytest.approx(0.5e-3) and lrs[1] == pytest.approx(1e-3)  # warmup over a tenth of the 20
    assert lrs[2] == lrs[1] and all(a > b for a, b in zip(lrs[2:19], lrs[3:20])) and lrs[19] == pytest.approx(1e-3 / 18)  # to 0 at step 20
    assert lrs[20] == pytest.approx(5e-4 / 8) and lrs[27] == pytest.approx(5e-4)  # --warmup restarts after them
    assert lrs[99] == pytest.approx(5e-4 / 72)
    off = replace(cfg, heads_first=0)
    assert [lr_at(s, off) for s in (0, 7, 99)] == pytest.approx([5e-4 / 8, 5e-4, 5e-4 / 92])


def test_heads_first_mistakes_are_one_line():
    from engine.pretraining.config import validate
    for cfg, message in ((PretrainConfig.classroom(heads_first=10), "--heads-first trains new heads .* needs --init"),
                         (PretrainConfig.classroom(init="minilm", steps=10, heads_first=10), "leaves none of the 10 steps"),
                         (PretrainConfig.classroom(init="minilm", heads_first=-1), "must be >= 0"),
                         (PretrainConfig.classroom(init="minilm", heads_first=0.1, heads_first_lr=0.0), "--heads-first-lr 0.0")):
        with pytest.raises(EngineError, match=message) as e:
            validate(cfg)
        assert "\n" not in str(e.value)


def test_resume_of_an_init_run_equals_the_straight_run(env):
    # resumed inside the heads-first steps, the resumed run freezes, unfreezes at step 4 and trains what the straight one did
    straight = _init_cfg(env, env["src"], out=str(env["root"] / "straight"), steps=6, heads_first=4, save_every=3, eval_every=3)
    split = replace(straight, out=str(env["root"] / "split"))
    pretrain(straight)
    assert _pretrain(replace(split, stop_after=3))["status"] == "cancelled"
    # the CLI's resume takes everything (init included) from run.json
    assert config_from_args({"out": split.out, "resume": True}) == replace(resolve_init(split), resume=True)
    assert _pretrain(config_from_args({"out": split.out, "resume": True}))["status"] == "finished"
    wa = engine.load(straight.out).model.state_dict()
    wb = engine.load(split.out).model.state_dict()
    for k in wa:
        torch.testing.assert_close(wa[k], wb[k], atol=1e-6, rtol=1e-5, msg=k)
    info = runs.read_run_json(split.out)
    assert info["starts"] == 2 and info["init"]["source"] == str(env["src"]) and info["resumed_from"].endswith("step-3")


def test_conflicting_flags_are_one_clear_line(env, tmp_path, capsys):
    from engine.__main__ import run
    src = str(env["src"])
    cases = [
        (["--vocab-size", "8000"], "--vocab-size 8000 conflicts with --init"),
        (["--layers", "3"], "--layers 3 conflicts with --init .* has layers 2"),
        (["--hidden", "128"], "--hidden 128 conflicts"),
        (["--heads", "4"], "--heads 4 conflicts"),
        (["--max-positions", "128"], "--max-positions 128 conflicts"),
        (["--seq-len", "128"], "--seq-len 128 is above the 64 positions of --init"),
        (["--seq-len", "64", "--phase2-seq-len", "512"], "--phase2-seq-len 512 is above the 64 positions"),
        (["--cased"], "--cased conflicts with --init .* uncased"),
        (["--preset", "mini"], "--preset conflicts with --init"),
        (["--tokenizer", src + "/tokenizer"], "--tokenizer conflicts with --init"),
        (["--classroom"], "--recipe classroom trains from scratch and --init .* drop --init, or use --recipe continued"),
    ]
    for flags, message in cases:
        out = tmp_path / "never"
        assert run(["pretrain", "--init", src, "--corpus", env["common"]["corpus"], "--out", str(out), *flags]) == 2
        err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
        assert len(err) == 1 and err[0].startswith("error: "), (flags, err)
        assert re.search(message, err[0]), (flags, err)
        assert not out.exists()
    assert run(["pretrain", "--init", str(tmp_path / "nope"), "--out", str(tmp_path / "never")]) == 2
    assert "error: --init" in capsys.readouterr().err
    # a notebook config: the same checks, from the values that differ from the init
    with pytest.raises(EngineError, match="--layers 3 conflicts"):
        _pretrain(_init_cfg(env, src, layers=3, out=str(tmp_path / "nb")))
    with pytest.raises(EngineError, match="--seq-len 128 is above the 64 positions"):
        _pretrain(_init_cfg(env, src, seq_len=128, out=str(tmp_path / "nb")))
    assert not (tmp_path / "nb").exists()


def test_init_alone_takes_the_continued_pretraining_recipe():
    cfg = config_from_args({"init": "minilm", "out": "somewhere"})
    assert cfg == PretrainConfig.for_init("minilm", out="somewhere")
    assert {k: getattr(cfg, k) for k in CONTINUED_PRETRAINING} == CONTINUED_PRETRAINING
    assert CONTINUED_PRETRAINING["corpus"] == "everyday" and CONTINUED_PRETRAINING["lr"] < PretrainConfig.classroom().lr  # gentler than from scratch
    given = config_from_args({"init": "minilm", "out": "somewhere", "steps": 50, "lr": 5e-5})
    assert given.steps == 50 and given.lr == 5e-5 and given.batch_size == CONTINUED_PRETRAINING["batch_size"]
    full = resolve_init(cfg)
    assert (full.vocab_size, full.layers, full.hidden, full.heads, full.max_positions, full.cased) == (30522, 6, 384, 12, 512, False)


@pytest.mark.slow  # two processes: torchrun's start-up
def test_heads_first_under_torchrun_freezes_then_trains_every_rank(env, tmp_path, torchrun):
    """DistributedDataParallel registers the parameters that need a gradient when it wraps the model: the loop wraps
    it again when the encoder freezes and unfreezes, so both changes train under torchrun (without that, the first
    frozen step fails waiting for the encoder's gradients)."""
    import os
    out = tmp_path / "ddp-heads-first"
    c = env["common"]
    args = ["pretrain", "--init", str(env["src"]), "--corpus", c["corpus"], "--cache-dir", c["cache_dir"], "--seq-len", "64",
            "--batch-size", "8", "--steps", "4", "--heads-first", "2", "--save-every", "2", "--eval-every", "4",
            "--log-every", "2", "--num-threads", "1", "--quiet", "--out", str(out)]
    e = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", TMPDIR=str(tmp_path))
    p = torchrun.run(2, args, cwd=Path(__file__).resolve().parents[3], env=e, timeout=240)
    assert p.returncode == 0, p.stderr[-3000:]
    assert runs.read_run_json(out)["status"] == "finished" and runs.read_run_json(out)["world_size"] == 2
    src = engine.load(env["src"]).model.state_dict()
    at2 = engine.load(out / "checkpoints" / "step-2").model.state_dict()
    at4 = engine.load(out / "checkpoints" / "step-4").model.state_dict()
    encoder = [k for k in src if k.startswith(ENCODER)]
    assert all(torch.equal(at2[k], src[k]) for k in encoder)
    assert all(not torch.equal(at4[k], at2[k]) for k in encoder)
    assert any(not torch.equal(at2[k], src[k]) for k in src if k.startswith(HEADS))
