"""Feature-based use (engine.features): the paper's layer combinations checked against raw hidden states,
sentence and first-sub-token pooling, the logistic-regression and BiLSTM classifiers, files and the CLI."""
import json
import random

import numpy as np
import pytest
import torch

import engine
from engine.errors import EngineError
from engine.features import (COMBINES, FeaturesConfig, combination_layers, extract_features, main, run_features)

WORDS = "the a cat dog sat ran on under house tree big small red blue green walked jumped over near far old new".split()
TEXTS = ["the cat sat on the mat", "a dog ran", "big red house near the old green tree walked over"]


def _sent(rng, *keys):
    w = [rng.choice(WORDS) for _ in range(rng.randint(3, 8))]
    for k in keys:
        w.insert(rng.randrange(len(w) + 1), k)
    return " ".join(w)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    """A random 4-layer BERT (H = 32) on a tiny vocabulary, loaded back as a Bundle."""
    d = tmp_path_factory.mktemp("feat")
    tok = engine.train_tokenizer(TEXTS + WORDS + ["good bad john smith paris london mat"], vocab_size=120, min_frequency=1)
    cfg = engine.BertConfig.preset("tiny", vocab_size=tok.vocab_size, num_layers=4, hidden_size=32, num_heads=2,
                                   intermediate_size=64, max_position_embeddings=64)
    torch.manual_seed(0)
    engine.save(engine.BertForPreTraining(cfg), d / "ck", tokenizer=tok)
    b = engine.load(d / "ck")
    b.info["dir"] = d
    return b


def _raw(bundle, text):
    """hidden_states of one unpadded text: L+1 tensors (T, H)."""
    enc = bundle.tokenizer.encode(*text) if isinstance(text, tuple) else bundle.tokenizer.encode(text)
    ids = torch.tensor([enc.ids])
    with torch.no_grad():
        out = bundle.model(ids, torch.tensor([enc.type_ids]), torch.ones_like(ids), output_hidden_states=True)
    return [h[0].numpy() for h in out.hidden_states], enc


def test_combination_shapes(bundle):
    H, L = 32, 4
    dims = {"concat": 4 * H, "sum": H, "mean": H, "weighted": H, "all-weighted": H, "last": H, "second-to-last": H, "embeddings": H}
    assert set(dims) == set(COMBINES)
    for c in COMBINES:
        f = extract_features(bundle, TEXTS, combine=c)
        assert isinstance(f, np.ndarray) and f.dtype == np.float32 and f.shape == (3, dims[c]), c
    assert extract_features(bundle, TEXTS, layers=(-1, -2), combine="concat").shape == (3, 2 * H)
    assert combination_layers("all-weighted", num_layers=L) == [1, 2, 3, 4]
    assert combination_layers("concat", (-1, -2, -3, -4), L) == [4, 3, 2, 1]
    assert combination_layers("embeddings", num_layers=L) == [0] and combination_layers("second-to-last", num_layers=L) == [3]
    tok_level = extract_features(bundle, [t.split() for t in TEXTS], combine="concat", pooling="first-subtoken")
    assert [a.shape for a in tok_level] == [(len(t.split()), 4 * H) for t in TEXTS]


def test_values_match_raw_hidden_states(bundle):
    # batched with padding (texts of different lengths), compared with each text run alone without padding
    hs = [_raw(bundle, t)[0] for t in TEXTS]
    cat = extract_features(bundle, TEXTS, layers=(-1, -2, -3, -4), combine="concat", pooling="cls", batch_size=2)
    for i, h in enumerate(hs):
        np.testing.assert_allclose(cat[i], np.concatenate([h[-1][0], h[-2][0], h[-3][0], h[-4][0]]), atol=1e-5)
    mean = extract_features(bundle, TEXTS, combine="last", pooling="mean")
    emb = extract_features(bundle, TEXTS, combine="embeddings", pooling="cls")
    sec = extract_features(bundle, TEXTS, combine="second-to-last", pooling="cls")
    allw = extract_features(bundle, TEXTS, combine="all-weighted", pooling="cls")
    s = extract_features(bundle, TEXTS, layers=(-1, -2), combine="sum", pooling="cls")
    w = extract_features(bundle, TEXTS, layers=(-1, -2), combine="weighted", pooling="cls", weights=[0.25, 0.75])
    for i, h in enumerate(hs):
        np.testing.assert_allclose(mean[i], h[-1].mean(0), atol=1e-5)
        np.testing.assert_allclose(emb[i], h[0][0], atol=1e-5)
        np.testing.assert_allclose(sec[i], h[-2][0], atol=1e-5)
        np.testing.assert_allclose(allw[i], np.mean([h[k][0] for k in range(1, 5)], axis=0), atol=1e-5)  # uniform weights
        np.testing.assert_allclose(s[i], h[-1][0] + h[-2][0], atol=1e-5)
        np.testing.assert_allclose(w[i], 0.25 * h[-1][0] + 0.75 * h[-2][0], atol=1e-5)
    # a pair is encoded [CLS] A [SEP] B [SEP] with segment ids
    pair = ("the cat sat", "a dog ran")
    hp, _ = _raw(bundle, pair)
    np.testing.assert_allclose(extract_features(bundle, [pair], combine="last")[0], hp[-1][0], atol=1e-5)


def test_first_subtoken_values_and_truncation(bundle):
    words = ["the", "cats", "jumped", "overall", "paris"]  # some words split into several pieces
    feats = extract_features(bundle, [words, TEXTS[0].split()], combine="last", pooling="first-subtoken")
    enc = bundle.tokenizer.encode_words(words)
    with torch.no_grad():
        h = bundle.model(torch.tensor([enc.ids]), output_hidden_states=True).hidden_states[-1][0].numpy()
    first = {}
    for t, wi in enumerate(enc.word_ids):
        if wi is not None and wi not in first:
            first[wi] = t
    assert len(enc.ids) > len(words) + 2  # the test needs a word with several pieces
    for wi, t in first.items():
        np.testing.assert_allclose(feats[0][wi], h[t], atol=1e-5)
    long = ["tree"] * 100  # more pieces than max_seq_len: the words cut off get zero rows
    f = extract_features(bundle, [long], combine="last", pooling="first-subtoken", max_seq_len=16)[0]
    assert f.shape == (100, 32) and np.abs(f[:14]).sum(1).min() > 0 and np.abs(f[14:]).sum() == 0


def test_bad_layers_and_names(bundle):
    with pytest.raises(EngineError, match="layer 9 does not exist"):
        extract_features(bundle, TEXTS, layers=(9,))
    with pytest.raises(EngineError, match="unknown combination"):
        extract_features(bundle, TEXTS, combine="max")
    with pytest.raises(EngineError, match="unknown pooling"):
        extract_features(bundle, TEXTS, pooling="max")
    with pytest.raises(EngineError, match="feature-based use supports"):
        FeaturesConfig(task="squad")
    assert FeaturesConfig(combine="table7").combine == ("embeddings", "second-to-last", "last", "weighted", "concat", "all-weighted")


@pytest.mark.slow
def test_logreg_on_sentence_features_writes_eval_and_npy(bundle, tmp_path, capsys):
    rng = random.Random(0)
    rows = [(_sent(rng, "good" if i % 2 else "bad"), i % 2) for i in range(240)]
    (tmp_path / "train.tsv").write_text("sentence\tlabel\n" + "".join(f"{s}\t{l}\n" for s, l in rows[:180]))
    (tmp_path / "dev.tsv").write_text("sentence\tlabel\n" + "".join(f"{s}\t{l}\n" for s, l in rows[180:]))
    out = tmp_path / "out"
    ck = str(bundle.info["dir"] / "ck")
    rc = main(["--model", ck, "--task", "glue", "--train", str(tmp_path / "train.tsv"), "--dev", str(tmp_path / "dev.tsv"),
               "--layers", "-1,-2", "--combine", "concat,embeddings", "--pooling", "mean", "--num-threads", "1", "--out", str(out)])
    assert rc == 0
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert line["metric"] == "accuracy" and set(line["results"]) == {"concat", "embeddings"}
    ev = json.loads((out / "eval.json").read_text())
    assert ev["kind"] == "features" and ev["status"] == "finished" and ev["model"] == ck and ev["task_kind"] == "classification"
    assert ev["classifier"] == "logreg" and ev["pooling"] == "mean"
    by = {r["combine"]: r for r in ev["results"]}
    assert by["concat"]["dims"] == 64 and by["concat"]["layers"] == [4, 3] and by["embeddings"]["layers"] == [0]
    assert by["embeddings"]["score"] >= 0.9  # a keyword task: mean-pooled embeddings separate it linearly
    assert ev["score"] == max(r["score"] for r in ev["results"]) and ev["combine"] in by
    x = np.load(out / "features" / "concat" / "dev.npy")
    idx = [json.loads(l) for l in (out / "features" / "concat" / "dev.index.jsonl").read_text().splitlines()]
    assert x.shape == (60, 64) and len(idx) == 60 and idx[0]["label"] in ("0", "1") and idx[0]["guid"] == "dev.tsv:2"
    run = json.loads((out / "run.json").read_text())
    assert run["kind"] == "features"
    from engine import records  # the fields written are the fields engine.records defines
    assert set(ev) == set(records.FEATURES_EVAL_FIELDS) and set(run) == set(records.RUN_FIELDS + records.FEATURES_RUN_FIELDS)
    assert ev["data"]["parsed"]["type"] == "classification" and ev["data"]["parsed"]["n_labels"] == 2  # what was read


@pytest.mark.slow
def test_bilstm_tagger_on_token_features(bundle, tmp_path):
    rng = random.Random(1)
    sents = []
    for _ in range(60):
        words = [rng.choice(WORDS) for _ in range(rng.randint(3, 7))]
        tags = ["O"] * len(words)
        p = rng.randrange(len(words) + 1)
        words[p:p] = ["john", "smith"]
        tags[p:p] = ["B-PER", "I-PER"]
        sents.append("\n".join(f"{w}\t{t}" for w, t in zip(words, tags)))
    (tmp_path / "train.bio").write_text("\n\n".join(sents[:45]) + "\n")
    (tmp_path / "dev.bio").write_text("\n\n".join(sents[45:]) + "\n")
    cfg = FeaturesConfig(model=str(bundle.info["dir"] / "ck"), task="tagging", train=str(tmp_path / "train.bio"),
                         dev=str(tmp_path / "dev.bio"), combine=("weighted", "concat"), hidden=16, epochs=2, num_threads=1,
                         out=str(tmp_path / "out"))
    ev = run_features(cfg)
    assert ev["classifier"] == "bilstm" and ev["pooling"] == "first-subtoken" and ev["metric"] == "f1"
    w = next(r for r in ev["results"] if r["combine"] == "weighted")
    assert len(w["mix_weights"]) == 4 and sum(w["mix_weights"]) == pytest.approx(1.0)  # learned scalar mix
    assert w["dims"] == 32 and 1 <= w["best_epoch"] <= 2 and w["score"] == w["dev"]["f1"]
    # per dev sentence its [tp, fp, fn]: summed they give the combination's F1 (what a study's bootstrap resamples)
    per = np.array(w["dev"]["per_example"])
    assert per.shape == (15, 3)
    tp, fp, fn = per.sum(0)
    assert w["score"] == pytest.approx(2 * tp / (2 * tp + fp + fn) if tp else 0.0)
    p, r = w["dev"]["precision"], w["dev"]["recall"]
    assert w["score"] == pytest.approx(2 * p * r / (p + r) if p + r else 0.0)  # F1 is the harmonic mean
    x = np.load(tmp_path / "out" / "features" / "concat" / "dev.npy")
    idx = [json.loads(l) for l in (tmp_path / "out" / "features" / "concat" / "dev.index.jsonl").read_text().splitlines()]
    assert x.shape[1] == 128 and x.shape[0] == sum(r["n"] for r in idx) and idx[-1]["start"] + idx[-1]["n"] == x.shape[0]
    assert all(("warning" in r) == (r["score"] == 0) for r in ev["results"])
    with pytest.raises(EngineError, match="tagging tasks use --classifier bilstm"):
        run_features(FeaturesConfig(**{**cfg.__dict__, "classifier": "logreg", "out": str(tmp_path / "o2")}))
    # a tagger that finds no entity says so and names the fix (a dev set without entities makes F1 0 on any machine)
    (tmp_path / "dev_o.bio").write_text("\n\n".join("\n".join(f"{w}\tO" for w in rng.sample(WORDS, 4)) for _ in range(5)) + "\n")
    stuck = run_features(FeaturesConfig(**{**cfg.__dict__, "dev": str(tmp_path / "dev_o.bio"), "combine": ("last",), "epochs": 1,
                                           "out": str(tmp_path / "o3")}))
    assert stuck["results"][0]["score"] == 0 and "raise --epochs" in stuck["results"][0]["warning"]


def test_cls_pooling_of_a_causal_model_takes_the_last_real_token(bundle, tmp_path):
    """Under causal attention [CLS] sees only itself; "cls" pooling then uses the last real token."""
    engine.save(engine.BertForPreTraining(bundle.config.replace(causal=True)), tmp_path / "ltr", tokenizer=bundle.tokenizer)
    ltr = engine.load(tmp_path / "ltr")
    texts = [TEXTS[0], TEXTS[1] + " " + TEXTS[2]]  # different lengths: padding in the batch
    got = engine.extract_features(ltr, texts, layers=(-1,), combine="last", pooling="cls")
    for row, text in zip(got, texts):
        hs, enc = _raw(ltr, text)
        np.testing.assert_allclose(row, hs[-1][len(enc.ids) - 1], atol=1e-5)
