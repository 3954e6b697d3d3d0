"""Fine-tuning (engine.finetune, engine.heads): a tiny model learns an easy task in one epoch, every task kind
runs end to end on tiny fixture files, restarts/grid/eval.json, LTR causality kept, the BiLSTM head, CLI errors."""
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import engine
from engine.errors import EngineError
from engine.finetune import FinetuneConfig, finetune, length_batches, load_finetuned, main
from engine.heads import TaskModel

REPO = Path(__file__).resolve().parents[2]
FILL = "the a cat dog sat ran on under house tree big small red blue green walked jumped over near far old new".split()
QUICK = dict(lr=(3e-3,), batch_size=(8,), epochs=(1,), precision="fp32")  # fp32: exact re-evaluation on any CPU


def _sent(rng, *keys, lo=4, hi=10):
    w = [rng.choice(FILL) for _ in range(rng.randint(lo, hi))]
    for k in keys:
        w.insert(rng.randrange(len(w) + 1), k)
    return " ".join(w)


def _squad(rng, n, v2=False):
    """SQuAD JSON with one article: contexts of filler text holding 'the city is X .', questions 'which city ?'."""
    paras = []
    for i in range(n):
        city = rng.choice(["paris", "london", "rome"])
        ctx = f"{_sent(rng, lo=8, hi=14)} . the city is {city} . {_sent(rng, lo=8, hi=14)} ."
        start = ctx.index(f"is {city}") + 3
        impossible = v2 and i % 3 == 0
        qa = {"id": f"q{i}", "question": "which city is it ?" if not impossible else "which dog barked ?",
              "answers": [] if impossible else [{"text": city, "answer_start": start}]}
        if v2:
            qa["is_impossible"] = impossible
        paras.append({"context": ctx, "qas": [qa]})
    return {"version": "v2.0" if v2 else "1.1", "data": [{"title": "t", "paragraphs": paras}]}


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    """A tiny vocabulary and random tiny BERTs (bidirectional and causal) plus fixture files of every format."""
    d = tmp_path_factory.mktemp("ft")
    rng = random.Random(0)
    f = {}
    rows = [(_sent(rng, "good" if i % 2 else "bad"), i % 2) for i in range(800)]
    f["cls_train"], f["cls_dev"] = d / "train.tsv", d / "dev.tsv"
    f["cls_train"].write_text("sentence\tlabel\n" + "".join(f"{s}\t{l}\n" for s, l in rows[:640]))
    f["cls_dev"].write_text("sentence\tlabel\n" + "".join(f"{s}\t{l}\n" for s, l in rows[640:]))
    pairs = []
    for i in range(120):
        a, b = rng.choice(["good", "bad"]), rng.choice(["good", "bad"])
        pairs.append((_sent(rng, a), _sent(rng, b), "same" if a == b else "different"))
    f["pair_train"], f["pair_dev"] = d / "pair_train.tsv", d / "pair_dev.tsv"
    f["pair_train"].write_text("index\tsentence1\tsentence2\tlabel\n" + "".join(f"{i}\t{a}\t{b}\t{l}\n" for i, (a, b, l) in enumerate(pairs[:90])))
    f["pair_dev"].write_text("index\tsentence1\tsentence2\tlabel\n" + "".join(f"{i}\t{a}\t{b}\t{l}\n" for i, (a, b, l) in enumerate(pairs[90:])))
    reg = []
    for i in range(100):
        k = rng.randint(0, 3)
        reg.append((_sent(rng, *["good"] * k), k + 0.5))
    f["reg_train"], f["reg_dev"] = d / "reg_train.csv", d / "reg_dev.csv"
    f["reg_train"].write_text("sentence,score\n" + "".join(f"{s},{y}\n" for s, y in reg[:80]))
    f["reg_dev"].write_text("sentence,score\n" + "".join(f"{s},{y}\n" for s, y in reg[80:]))
    bio = []
    for i in range(80):
        words = [rng.choice(FILL) for _ in range(rng.randint(4, 9))]
        tags = ["O"] * len(words)
        p = rng.randrange(len(words))
        words[p:p] = ["john", "smith"]
        tags[p:p] = ["B-PER", "I-PER"]
        q = rng.randrange(len(words) + 1)
        words.insert(q, rng.choice(["paris", "london"]))
        tags.insert(q, "B-LOC")
        bio.append("\n".join(f"{w}\t{t}" for w, t in zip(words, tags)))
    f["bio_train"], f["bio_dev"] = d / "train.bio", d / "dev.bio"
    f["bio_train"].write_text("\n\n".join(bio[:60]) + "\n")
    f["bio_dev"].write_text("\n\n".join(bio[60:]) + "\n")
    for v2 in (False, True):
        tag = "squad2" if v2 else "squad1"
        f[f"{tag}_train"], f[f"{tag}_dev"] = d / f"{tag}_train.json", d / f"{tag}_dev.json"
        f[f"{tag}_train"].write_text(json.dumps(_squad(rng, 40, v2)))
        f[f"{tag}_dev"].write_text(json.dumps(_squad(rng, 12, v2)))
    mc = []
    for i in range(60):
        ends = [_sent(rng, "bad", lo=2, hi=4) for _ in range(4)]
        lab = rng.randrange(4)
        ends[lab] = _sent(rng, "good", lo=2, hi=4)
        mc.append([_sent(rng)] + ends + [lab])
    f["swag_train"], f["swag_dev"] = d / "swag_train.csv", d / "swag_dev.csv"
    head = "sent1,ending0,ending1,ending2,ending3,label\n"
    f["swag_train"].write_text(head + "".join(",".join(map(str, r)) + "\n" for r in mc[:45]))
    f["swag_dev"].write_text(head + "".join(",".join(map(str, r)) + "\n" for r in mc[45:]))

    texts = [s for s, _ in rows] + FILL + ["john smith paris london rome which city is it dog barked good bad same different"]
    tok = engine.train_tokenizer(texts, vocab_size=200, lowercase=True, min_frequency=1)
    cfg = engine.BertConfig.preset("tiny", vocab_size=tok.vocab_size, hidden_size=32, num_heads=2, intermediate_size=64,
                                   max_position_embeddings=64)
    torch.manual_seed(7)
    engine.save(engine.BertForPreTraining(cfg), d / "ck", tokenizer=tok)
    torch.manual_seed(7)
    engine.save(engine.BertForPreTraining(cfg.replace(causal=True)), d / "ck_ltr", tokenizer=tok)
    f["ck"], f["ck_ltr"], f["dir"] = d / "ck", d / "ck_ltr", d
    return f


def _cfg(synth, tmp_path, task, files, **kw):
    args = dict(model=str(synth["ck"]), task=task, out=str(tmp_path / "out"), max_seq_len=64, num_threads=1, **QUICK)
    if files:
        args.update(train=str(synth[f"{files}_train"]), dev=str(synth[f"{files}_dev"]))
    args.update(kw)
    return FinetuneConfig(**args)


@pytest.mark.slow
def test_one_epoch_tiny_finetune_learns(synth, tmp_path, capsys):
    out = tmp_path / "out"
    rc = main(["--model", str(synth["ck"]), "--task", "glue", "--train", str(synth["cls_train"]), "--dev", str(synth["cls_dev"]),
               "--lr", "3e-3", "--batch-size", "8", "--epochs", "1", "--max-seq-len", "64", "--num-threads", "1", "--out", str(out)])
    assert rc == 0
    captured = capsys.readouterr()
    line = json.loads(captured.out.strip().splitlines()[-1])  # one JSON line on stdout
    assert line["metric"] == "accuracy" and line["score"] >= 0.85, line  # chance is 0.5
    # what the files were read as, printed before training and kept in eval.json
    assert "task glue (classification): 640 train / 160 dev examples" in captured.err
    assert "columns: text_a = sentence, label = label" in captured.err and "labels in train: 0 (320), 1 (320)" in captured.err
    assert line["lr"] == 3e-3 and line["batch_size"] == 8 and line["epochs"] == 1
    ev = json.loads((out / "eval.json").read_text())
    assert ev["kind"] == "finetune" and ev["status"] == "finished" and ev["score"] == line["score"]
    assert ev["dev"]["accuracy"] == line["score"] and len(ev["trials"]) == 1
    assert ev["data"]["parsed"]["labels"] == {"0": 320, "1": 320} and ev["data"]["parsed"]["columns"]["label"] == "label"
    assert set(ev["dev"]) >= {"accuracy", "f1", "f1_macro", "mcc"}  # every applicable metric kept
    run = json.loads((out / "run.json").read_text())
    assert run["kind"] == "finetune" and run["status"] == "finished" and run["total_steps"] == 80
    from engine import records  # the fields written are the fields engine.records defines (no --save-best, no SQuAD v2)
    assert set(ev) == set(records.FINETUNE_EVAL_FIELDS) - {"saved_trial", "best_model", "threshold_curve"}
    assert set(run) == set(records.RUN_FIELDS + records.FINETUNE_RUN_FIELDS)
    recs = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()]
    assert any("loss" in r for r in recs)
    dev = [r for r in recs if "score" in r]
    assert dev and dev[-1]["trial"] == 0 and dev[-1]["epoch"] == 1 and dev[-1]["dev_accuracy"] == line["score"]
    assert recs[-1]["step"] == 80
    elapsed = [r["elapsed"] for r in recs]  # every record: seconds since the fine-tune began (Compare's wall time)
    assert all(e >= 0 for e in elapsed) and elapsed == sorted(elapsed)


def test_packed_and_padded_finetuning_train_the_same_model(synth, tmp_path):
    """Packing (--packing) only lays each batch's examples in fewer rows: with dropout off, the same training losses
    and dev score as the padded default, in fp32."""
    got = {}
    for packing in (True, False):
        cfg = _cfg(synth, tmp_path, "glue", "cls", lr=(3e-3,), batch_size=(8,), epochs=(1,), dropout=0.0, precision="fp32",
                   max_train=96, packing=packing, out=str(tmp_path / f"out-{packing}"))
        res = finetune(cfg)
        recs = [json.loads(l) for l in (tmp_path / f"out-{packing}" / "metrics.jsonl").read_text().splitlines()]
        got[packing] = ([r["loss"] for r in recs if "loss" in r], res["score"])
    assert FinetuneConfig().packing is False
    assert got[True][0] == pytest.approx(got[False][0], rel=1e-4, abs=1e-5) and got[True][1] == got[False][1]


@pytest.mark.slow
def test_bf16_autocast_finetune_learns_and_says_so(synth, tmp_path, capsys):
    """--precision bf16 trains under bf16 autocast (fp32 weights) on the CPU too, and still learns."""
    out = tmp_path / "out"
    rc = main(["--model", str(synth["ck"]), "--task", "glue", "--train", str(synth["cls_train"]), "--dev", str(synth["cls_dev"]),
               "--lr", "3e-3", "--batch-size", "8", "--epochs", "1", "--max-seq-len", "64", "--num-threads", "1",
               "--precision", "bf16", "--out", str(out)])
    assert rc == 0
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert line["score"] >= 0.85, line
    ev = json.loads((out / "eval.json").read_text())
    assert ev["precision"] == "bf16" and ev["config"]["precision"] == "bf16"
    with pytest.raises(EngineError, match="unknown --precision 'fp8'"):
        FinetuneConfig(precision="fp8")


@pytest.mark.parametrize("task,files,metric", [
    ("glue", "pair", "accuracy"), ("glue", "reg", "pearson"), ("tagging", "bio", "f1"),
    ("squad", "squad1", "f1"), ("squad", "squad2", "f1"), ("swag", "swag", "accuracy")])
def test_every_task_kind_runs_end_to_end(synth, tmp_path, task, files, metric):
    extra = {"doc_stride": 8, "max_seq_len": 32} if task == "squad" else {}
    res = finetune(_cfg(synth, tmp_path, task, files, **extra))
    ev = json.loads((tmp_path / "out" / "eval.json").read_text())
    assert ev["status"] == "finished" and ev["metric"] == metric and ev["score"] == res["score"]
    assert set(ev) <= set(engine.records.FINETUNE_EVAL_FIELDS)
    # the score is the best trial's dev metric at its best epoch
    assert ev["score"] == ev["dev"][metric] == ev["best"]["score"] == max(e["score"] for e in ev["trials"][0]["epochs_log"])
    kind = {"pair": "classification", "reg": "regression", "bio": "tagging", "squad1": "span", "squad2": "span", "swag": "multiple_choice"}[files]
    assert ev["task_kind"] == kind
    if files == "reg":
        assert "spearman" in ev["dev"]
    if files == "bio":
        assert {"precision", "recall", "f1"} <= set(ev["dev"])
    if task == "squad":
        assert "exact" in ev["dev"] and ev["data"]["dev_features"] > 12  # passages longer than a window: several windows
    if files == "squad2":
        curve = ev["threshold_curve"]
        assert len(curve) >= 2 and ev["dev"]["f1"] == pytest.approx(max(c["f1"] for c in curve))
        assert "tau" in ev["dev"] and "f1_tau0" in ev["dev"]
        assert ev["dev"]["f1"] >= ev["dev"]["f1_tau0"] - 1e-9  # the swept tau is at least as good as tau = 0
        assert "has_ans_f1" in ev["dev"] and "no_ans_f1_tau0" in ev["dev"]  # the breakdown at the chosen tau and at 0
        assert "chosen on the dev set" in ev["data"]["tau"]


def test_a_registered_builtin_task_finetunes_through_the_same_path(synth, tmp_path, monkeypatch):
    """A new built-in task is its loader plus one registration: the --task choices, the features command and the
    fine-tuning loop all pick it up (registered here in-process, with data built in memory)."""
    from engine.finetune import build_parser
    from engine.tasks import registry
    from engine.tasks.glue import Example, TextTask

    def polarity_task():  # the same sentences as the fixture's glue files (the tokenizer knows their words)
        rng = random.Random(0)
        rows = [Example(_sent(rng, "good" if i % 2 else "bad"), None, "good" if i % 2 else "bad", f"toy:{i}") for i in range(800)]
        return TextTask("toy-polarity", "classification", ["bad", "good"], rows[:640], rows[640:], ("accuracy",), {"source": "memory"})

    monkeypatch.setattr(registry, "BUILTINS", dict(registry.BUILTINS))  # the registration ends with the test
    assert "toy-polarity" not in registry.task_names()
    with pytest.raises(EngineError, match="unknown task"):
        FinetuneConfig(task="toy-polarity")
    registry.register_builtin(registry.BuiltinTask("toy-polarity", "good vs bad sentences", polarity_task, "glue"))
    assert "toy-polarity" in registry.feature_task_names()
    assert build_parser().parse_args(["--model", "m", "--task", "toy-polarity", "--out", "o"]).task == "toy-polarity"
    res = finetune(_cfg(synth, tmp_path, "toy-polarity", None))
    assert res["task"] == "toy-polarity" and res["task_kind"] == "classification" and res["metric"] == "accuracy"
    assert res["data"]["train_examples"] == 640 and res["score"] >= 0.85  # chance is 0.5
    with pytest.raises(EngineError, match="takes no files or column options"):
        finetune(_cfg(synth, tmp_path, "toy-polarity", None, label_col="label", out=str(tmp_path / "other")))
    with pytest.raises(EngineError, match="would hide the file format"):
        registry.register_builtin(registry.BuiltinTask("glue", "a clash", polarity_task, "glue"))


@pytest.mark.slow
def test_restarts_differ_best_kept_and_grid_summary(synth, tmp_path):
    res = finetune(_cfg(synth, tmp_path, "glue", "pair", lr=(1e-3, 3e-3), restarts=2, epochs=(1, 2)))
    trials = res["trials"]
    assert len(trials) == 2 * 2 * 2
    assert [t["seed"] for t in trials[:2]] == [0, 1]
    # restarts: same checkpoint and hyper-parameters, different shuffle and head init -> different training
    a, b = trials[0], trials[1]
    assert (a["lr"], a["epochs"]) == (b["lr"], b["epochs"]) and a["restart"] != b["restart"]
    assert a["epochs_log"][0]["train_loss"] != b["epochs_log"][0]["train_loss"]
    # the best trial is the max over trials, and each trial kept its best epoch
    assert res["score"] == max(t["score"] for t in trials)
    assert res["best"]["trial"] == max(trials, key=lambda t: t["score"])["trial"]
    for t in trials:
        assert len(t["epochs_log"]) == t["epochs"]
        assert t["score"] == max(e["score"] for e in t["epochs_log"])
    grid = res["grid"]
    assert len(grid) == 4 and all(g["n"] == 2 for g in grid)
    g0 = next(g for g in grid if (g["lr"], g["epochs"]) == (a["lr"], a["epochs"]))
    assert g0["mean"] == pytest.approx((a["score"] + b["score"]) / 2)
    assert g0["std"] == pytest.approx(abs(a["score"] - b["score"]) / 2 ** 0.5)  # the sample std of two scores
    ev = json.loads((tmp_path / "out" / "eval.json").read_text())
    assert len(ev["trials"]) == 8 and ev["best"]["trial"] == res["best"]["trial"]
    # the same seed reproduces a trial exactly
    again = finetune(_cfg(synth, tmp_path, "glue", "pair", lr=(1e-3,), epochs=(1,), out=str(tmp_path / "again")))
    assert again["trials"][0]["epochs_log"][0]["train_loss"] == pytest.approx(a["epochs_log"][0]["train_loss"], rel=1e-6)


def _tagging_logits(model, ids):
    with torch.no_grad():
        return model(ids, torch.zeros_like(ids), torch.ones_like(ids))  # (1, T, K)


def test_ltr_checkpoint_stays_causal_when_finetuned(synth, tmp_path):
    res = finetune(_cfg(synth, tmp_path, "tagging", "bio", model=str(synth["ck_ltr"]), save_best=True))
    assert res["causal"] is True
    model, tok, meta = load_finetuned(tmp_path / "out" / "best")
    assert model.config.causal and meta["kind"] == "tagging" and meta["labels"] == res["data"]["labels"]
    ids = torch.tensor([tok.encode("john smith sat in paris").ids])
    changed = ids.clone()
    changed[0, -2] = tok.token_to_id("london")
    a, b = _tagging_logits(model, ids), _tagging_logits(model, changed)
    assert torch.allclose(a[0, :-2], b[0, :-2], atol=1e-5)  # left context only: earlier positions do not see the change
    assert not torch.allclose(a[0, -2], b[0, -2])
    # the saved model reproduces the dev score it was selected for
    from engine.finetune import load_task, prepare
    cfg = _cfg(synth, tmp_path, "tagging", "bio")
    data = prepare(load_task(cfg), tok, cfg, 64)
    assert data.evaluate(model, "cpu", 16)["f1"] == pytest.approx(res["score"])
    bi = TaskModel(engine.load(synth["ck"]).model.bert, "tagging", 5).eval()
    assert not torch.allclose(_tagging_logits(bi, ids)[0, 0], _tagging_logits(bi, changed)[0, 0])  # bidirectional does


def test_bilstm_head_and_generator_init(synth):
    bert = engine.load(synth["ck_ltr"]).model.bert
    g = lambda s: torch.Generator().manual_seed(s)
    m1 = TaskModel(bert, "tagging", 3, bilstm=True, generator=g(1)).eval()
    m2 = TaskModel(bert, "tagging", 3, bilstm=True, generator=g(1)).eval()
    m3 = TaskModel(bert, "tagging", 3, bilstm=True, generator=g(2)).eval()
    assert torch.equal(m1.head.weight, m2.head.weight) and not torch.equal(m1.head.weight, m3.head.weight)
    assert torch.equal(m1.bilstm.lstm.weight_hh_l0, m2.bilstm.lstm.weight_hh_l0)
    ids = torch.randint(5, bert.config.vocab_size, (2, 7))
    other = ids.clone()
    other[:, -1] = 5 if int(ids[0, -1]) != 5 else 6
    a, b = _tagging_logits(m1, ids), _tagging_logits(m1, other)
    assert a.shape == (2, 7, 3)
    assert not torch.allclose(a[:, 0], b[:, 0])  # the BiLSTM gives a causal encoder right context (Table 5 "+ BiLSTM")
    mask = torch.ones_like(ids)
    mask[1, 4:] = 0
    for kind, shape in (("classification", (2, 4)), ("regression", (2,)), ("span", (2, 7, 2))):
        m = TaskModel(bert, kind, 4, bilstm=True, generator=g(0)).eval()
        assert m(ids, None, mask).shape == shape
    mc = TaskModel(bert, "multiple_choice", 1, bilstm=True, generator=g(0)).eval()
    assert mc(ids[None].expand(3, 2, 7), None, None).shape == (3, 2)


def test_length_batches_cover_everything_and_eval_in_length_order():
    lengths = [random.Random(i).randint(1, 100) for i in range(500)]
    b1 = length_batches(lengths, 16, torch.Generator().manual_seed(0))
    b2 = length_batches(lengths, 16, torch.Generator().manual_seed(1))
    assert sorted(i for b in b1 for i in b) == list(range(500)) and b1 != b2
    ev = length_batches(lengths, 16)
    assert [lengths[i] for b in ev for i in b] == sorted(lengths)


def test_training_batches_of_a_small_epoch_are_not_length_bands():
    """With fewer batches than a sorting chunk, the old bucketing made every batch one length band of the
    whole epoch, so the same examples met in the same batch epoch after epoch. Training batches are now sorted
    only inside small windows drawn afresh each epoch: batch mates rarely meet again, batches come in random
    order, and they still pad far less than fully random batches."""
    rng = random.Random(0)
    lengths = [rng.randint(20, 128) for _ in range(2000)]  # 63 batches of 32: fewer than the old chunk of 50
    g = torch.Generator().manual_seed(0)
    first, second = length_batches(lengths, 32, g), length_batches(lengths, 32, g)
    for batches in (first, second):
        assert sorted(i for b in batches for i in b) == list(range(2000))
    pairs = lambda bs: {(a, b) for batch in bs for a in batch for b in batch if a < b}
    assert len(pairs(first) & pairs(second)) / len(pairs(first)) < 0.1  # length bands: ~0.3; random: ~0.015
    tops = [max(lengths[i] for i in b) for b in first]
    assert tops != sorted(tops) and tops != sorted(tops, reverse=True)  # not one sorted run
    pad = lambda bs: sum(len(b) * max(lengths[i] for i in b) - sum(lengths[i] for i in b) for b in bs)
    perm = torch.randperm(2000, generator=torch.Generator().manual_seed(0)).tolist()
    assert pad(first) < 0.5 * pad([perm[i:i + 32] for i in range(0, 2000, 32)])
    # a label that follows the length is not segregated across the epoch: each batch spans its window only
    labels = [int(n >= 74) for n in lengths]
    assert 0.2 < sum(all(labels[i] == labels[b[0]] for i in b) for b in first) / len(first) < 0.8


def test_config_and_task_errors(synth, tmp_path):
    with pytest.raises(EngineError, match="unknown task"):
        FinetuneConfig(task="mnli")
    with pytest.raises(EngineError, match="learning rates"):
        FinetuneConfig(lr=(0.0,))
    with pytest.raises(EngineError, match="needs --train"):
        finetune(FinetuneConfig(model=str(synth["ck"]), task="glue", out=str(tmp_path / "o")))
    run = json.loads((tmp_path / "o" / "run.json").read_text())
    assert run["status"] == "failed" and "needs --train" in run["error"]  # a page polling run.json sees why


def _cli(*args):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "engine", "finetune", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_cli_bad_inputs_give_one_line_errors(synth, tmp_path):
    bad_dev = tmp_path / "dev.tsv"
    bad_dev.write_text("sentence\tlabel\nthe cat sat\tmaybe\n")
    r = _cli("--model", str(synth["ck"]), "--task", "glue", "--train", str(synth["cls_train"]), "--dev", str(bad_dev),
             "--epochs", "1", "--out", str(tmp_path / "o1"))
    err = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(err) == 1 and err[0].startswith("error:"), r.stderr
    assert "dev.tsv" in err[0] and "'maybe'" in err[0] and "Traceback" not in r.stderr
    # the same path in-process (the CLI prints an EngineError as its one line): a wrong column names file and columns
    with pytest.raises(EngineError) as e:
        main(["--model", str(synth["ck"]), "--task", "glue", "--train", str(synth["cls_train"]), "--dev", str(synth["cls_dev"]),
              "--label-col", "nope", "--out", str(tmp_path / "o2")])
    msg = str(e.value)
    assert "\n" not in msg and "nope" in msg and "train.tsv" in msg and "sentence, label" in msg
    with pytest.raises(EngineError, match="--lr 'x' must be comma-separated numbers"):
        main(["--model", str(synth["ck"]), "--task", "bbc-topic", "--lr", "x", "--out", str(tmp_path / "o3")])


def test_random_init_baseline_reinitialises_the_encoder(synth, tmp_path):
    pre = finetune(_cfg(synth, tmp_path, "glue", "pair", out=str(tmp_path / "a")))
    rnd = finetune(_cfg(synth, tmp_path, "glue", "pair", out=str(tmp_path / "b"), random_init=True, save_best=True))
    assert rnd["random_init"] is True and pre["random_init"] is False
    assert rnd["trials"][0]["epochs_log"][0]["train_loss"] != pre["trials"][0]["epochs_log"][0]["train_loss"]
    saved = engine.load(tmp_path / "b" / "best")
    orig = engine.load(synth["ck"])
    assert saved.config.vocab_size == orig.config.vocab_size and saved.config.num_layers == orig.config.num_layers
    assert not torch.allclose(saved.model.bert.embeddings.word.weight, orig.model.bert.embeddings.word.weight, atol=1e-2)


def test_ltr_plus_bilstm_finetunes_and_reloads(synth, tmp_path):
    res = finetune(_cfg(synth, tmp_path, "squad", "squad1", model=str(synth["ck_ltr"]), bilstm=True, save_best=True,
                        max_seq_len=32, doc_stride=8))
    assert res["causal"] is True and res["config"]["bilstm"] is True and res["task_kind"] == "span"
    model, tok, meta = load_finetuned(tmp_path / "out" / "best")
    assert meta["bilstm"] is True and model.bilstm is not None and model.config.causal
    ids = torch.tensor([tok.encode("which city is it ?", "the city is paris .").ids])
    with torch.no_grad():
        assert model(ids, None, torch.ones_like(ids)).shape == (1, ids.shape[1], 2)


def test_causal_sequence_vector_is_the_last_real_token(synth):
    """A left-to-right model classifies from its last real token: [CLS] under causal attention sees only itself."""
    bert = engine.load(synth["ck_ltr"]).model.bert
    m = TaskModel(bert, "classification", 3, generator=torch.Generator().manual_seed(0)).eval()
    ids = torch.randint(5, bert.config.vocab_size, (2, 7))
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0  # row 1: 5 real tokens
    with torch.no_grad():
        h, c = m.encode(ids, None, mask)
        assert torch.equal(c[0], h[0, 6]) and torch.equal(c[1], h[1, 4])
        other = ids.clone()
        other[:, 3] = 5 if int(ids[0, 3]) != 5 else 6  # a change in the middle reaches the last token, not [CLS]
        assert not torch.allclose(m(ids, None, mask), m(other, None, mask))
        assert torch.allclose(m.bert(ids, None, mask).last_hidden_state[:, 0], m.bert(other, None, mask).last_hidden_state[:, 0])
    bi = TaskModel(engine.load(synth["ck"]).model.bert, "classification", 3).eval()
    with torch.no_grad():
        h, c = bi.encode(ids, None, mask)
        assert torch.allclose(c, bi.bert(ids, None, mask).pooled_output)  # a bidirectional model keeps the pooled C


@pytest.mark.parametrize("ck", ["ck", "ck_ltr"])
def test_padded_batches_give_each_row_its_own_result(synth, ck):
    """Fine-tuning runs the encoder unpadded; a padded row's logits equal the row run alone (no padding)."""
    bert = engine.load(synth[ck]).model.bert
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, bert.config.vocab_size, (3, 12), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0
    mask[2, 9:] = 0  # about 30% padding: the unpadded path is taken
    for kind in ("classification", "tagging", "span"):
        m = TaskModel(bert, kind, 3, generator=torch.Generator().manual_seed(1)).eval()
        with torch.no_grad():
            batch = m(ids, None, mask)
            for r in range(3):
                n = int(mask[r].sum())
                alone = m(ids[r:r + 1, :n], None, mask[r:r + 1, :n])
                got = batch[r] if kind == "classification" else batch[r, :n]
                torch.testing.assert_close(got, alone[0], atol=1e-5, rtol=1e-4)


def test_load_finetuned_with_a_damaged_head_json_is_one_error_line(tmp_path):
    (tmp_path / "head.json").write_text("{not json", encoding="utf-8")
    (tmp_path / "head.safetensors").write_bytes(b"")
    with pytest.raises(EngineError, match="head.json is unreadable"):
        load_finetuned(tmp_path)
