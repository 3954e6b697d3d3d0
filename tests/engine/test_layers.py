"""Probes per layer (engine/layers.py, engine/layer_tasks.py): a probe finds the layer an answer is planted in, the
control task keeps each word type's label and the real task's label distribution, the expected layer of information
held in one layer is that layer, the hidden states are computed once, and the command prints one JSON object (tiny
model, tiny data)."""
import json
import random
from collections import Counter

import numpy as np
import pytest

from engine.errors import EngineError
from engine.layer_tasks import (LENGTH_BINS, SENTENCE, TOKEN, ProbeTask, content_items, content_words, control_task,
                                load_probe_task, sentence_task)
from engine.layers import ProbeSettings, expected_layer, layer_scores


def planted(n: int, layers: int, hidden: int, classes: int, at: int, seed: int):
    """States (n, layers, hidden) of noise, where layer `at` also holds a direction per label."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n)
    x = rng.normal(size=(n, layers, hidden)).astype(np.float32)
    x[:, at] += 3.0 * np.eye(classes, hidden, dtype=np.float32)[y]
    return x.astype(np.float16), y


def test_a_probe_finds_the_layer_its_answer_is_planted_in():
    tr, ytr = planted(512, 5, 16, 3, at=3, seed=0)
    dv, ydv = planted(256, 5, 16, 3, at=3, seed=1)
    for probe in ("linear", "mlp"):
        rows = layer_scores(tr, ytr, dv, ydv, 3, ProbeSettings(probe=probe, epochs=8, lr=2e-2, hidden=32, batch_size=128))
        acc = [r["accuracy"] for r in rows]
        assert int(np.argmax(acc)) == 3 and acc[3] > 0.9, (probe, acc)
        assert max(acc[:3] + acc[4:]) < 0.5, (probe, acc)  # chance is 1/3
        assert [r["name"] for r in rows] == ["embeddings", "layer 1", "layer 2", "layer 3", "layer 4"]


def test_the_control_scores_and_selectivity_come_with_each_layer():
    tr, ytr = planted(400, 3, 8, 2, at=2, seed=2)
    dv, ydv = planted(200, 3, 8, 2, at=2, seed=3)
    ctr = (np.random.default_rng(4).integers(0, 2, 400), np.random.default_rng(5).integers(0, 2, 200))
    rows = layer_scores(tr, ytr, dv, ydv, 2, ProbeSettings(epochs=5, lr=1e-2), control=ctr)
    for r in rows:
        assert r["selectivity"] == pytest.approx(r["accuracy"] - r["control_accuracy"])
    assert rows[2]["selectivity"] > 0.3  # random control labels cannot be read from the states


def test_expected_layer_of_information_held_in_one_layer_is_that_layer():
    for k in range(1, 6):
        scores = [0.4] * 7
        scores[k] = 0.9  # only layer k holds it: later layers fall back to the floor
        assert expected_layer(scores) == pytest.approx(k)
        assert expected_layer([0.4] * k + [0.9] * (7 - k)) == pytest.approx(k)  # kept from layer k on
    assert expected_layer([0.0, 0.5, 1.0]) == pytest.approx(1.5)  # half the gain at 1, half at 2
    assert expected_layer([0.6, 0.5, 0.6]) is None  # nothing gained on the embeddings
    assert expected_layer([0.6, 0.5, 0.6], floor=0.3) == 0.0  # ... which know it already, above the majority floor
    assert expected_layer([0.3, 0.3], floor=0.3) is None  # ... or nothing is known anywhere


def words_task(n_sentences=400, n_types=300, seed=0) -> ProbeTask:
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(n_types)]
    labels = ["O"] * 7 + ["B-X"] * 2 + ["I-X"]  # 70 / 20 / 10 over words

    def sentence():
        words = [rng.choice(vocab) for _ in range(rng.randint(3, 9))]
        words = [w.upper() if rng.random() < 0.2 else w for w in words]  # a type in two cases is one type
        return words, [rng.choice(labels) for _ in words]
    return ProbeTask("toy", TOKEN, ["O", "B-X", "I-X"], [sentence() for _ in range(n_sentences)],
                     [sentence() for _ in range(n_sentences // 4)])


def test_the_control_task_keeps_each_word_type_s_label_fixed_and_the_label_distribution():
    task = words_task()
    control = control_task(task, seed=0)
    assert [w for w, _ in control.train] == [w for w, _ in task.train] and control.labels == task.labels
    of_type = {}
    for words, labels in control.train + control.dev:
        for w, l in zip(words, labels):
            assert of_type.setdefault(w.lower(), l) == l  # every occurrence of a type, either split, any case
    real = Counter(l for _, labels in task.train for l in labels)
    types = Counter(of_type.values())
    n = len(of_type)
    for label, count in real.items():  # the types' labels follow the real distribution, up to rounding
        assert abs(types[label] - count / sum(real.values()) * n) <= 1, (label, types, real)
    assert control_task(task, seed=0).train == control.train and control_task(task, seed=1).train != control.train


def test_sentence_tasks_are_made_from_a_corpus_without_annotation():
    rng = random.Random(0)
    words = [f"word{i}" for i in range(300)]
    docs = [[" ".join(rng.choice(words) for _ in range(rng.randint(3, 30))) for _ in range(6)] for _ in range(40)]
    length = sentence_task("sentence-length", docs)
    assert length.level == SENTENCE and set(length.labels) <= {f"{a}-{b}" for a, b in LENGTH_BINS}
    for text, label in length.train:
        lo, hi = map(int, label.split("-"))
        assert lo <= len(text.split()) <= hi
    shift = sentence_task("bigram-shift", docs)
    assert set(shift.labels) == {"original", "inverted"}
    nxt = sentence_task("next-sentence", docs)
    assert all(isinstance(t, tuple) and len(t) == 2 for t, _ in nxt.train) and set(nxt.labels) == {"IsNext", "NotNext"}
    firsts = {s: d[i + 1] for d in docs for i, s in enumerate(d[:-1])}
    assert all((firsts.get(a) == b) == (l == "IsNext") for (a, b), l in nxt.train)
    wc = content_words(docs)
    for text, label in content_items(docs, rng, wc):
        assert [w for w in text.lower().split() if w in wc] and {w for w in text.lower().split() if w in wc} == {label}
    assert not {t for t, _ in length.train} & {t for t, _ in length.dev}  # split by document


def test_a_word_label_file_that_is_not_bio_is_read_too(tmp_path):
    t = tmp_path / "train.txt"
    t.write_text("the\tDET\ncat\tNOUN\nsat\tVERB\n\na\tDET\ndog\tNOUN\n")
    task = load_probe_task("tagging", str(t), str(t))
    assert task.level == TOKEN and task.train[0] == (["the", "cat", "sat"], ["DET", "NOUN", "VERB"])
    assert set(task.labels) == {"DET", "NOUN", "VERB"}
    with pytest.raises(EngineError, match="needs --train FILE and --dev FILE"):
        load_probe_task("tagging")


def tagging_files(tmp_path, n=24):
    rng = random.Random(0)
    nouns, verbs = ["cat", "dog", "bank", "school", "market"], ["runs", "sat", "fell", "opened"]
    lines = []
    for _ in range(n):
        lines += [f"the\tO\n{rng.choice(nouns)}\tB-THING\n{rng.choice(verbs)}\tO\n", "\n"]
    train, dev = tmp_path / "train.bio", tmp_path / "dev.bio"
    train.write_text("".join(lines))
    dev.write_text("".join(lines[: n // 2]))
    return train, dev


def test_the_command_prints_one_json_object(tmp_path, tiny_checkpoint, engine_cli, monkeypatch):
    monkeypatch.setenv("BERT_STUDIO_CACHE", str(tmp_path / "cache"))
    train, dev = tagging_files(tmp_path)
    code, out, err = engine_cli(["layers", "--model", tiny_checkpoint, "--task", "tagging", "--train", train, "--dev", dev,
                                 "--epochs", "3", "--json"])
    assert code == 0, err
    result = json.loads(out)
    assert result["task"] == "train" and len(result["layers"]) == 3  # embeddings + 2 layers
    for r in result["layers"]:
        assert set(r) == {"layer", "name", "accuracy", "control_accuracy", "selectivity"}
        assert r["selectivity"] == pytest.approx(r["accuracy"] - r["control_accuracy"])
    assert result["expected_layer"] is None or 0 <= result["expected_layer"] <= 2
    assert result["tasks"][0]["n_train"] == 24 and result["tasks"][0]["control"] is True
    assert list((tmp_path / "cache" / "hidden_states").glob("*.npy"))  # cached on disk
    code, out, err = engine_cli(["layers", "--model", tiny_checkpoint, "--task", "tagging", "--train", train, "--dev", dev,
                                 "--epochs", "3"])
    assert code == 0 and "expected layer" in out and "embeddings" in out


def test_hidden_states_are_computed_once_per_model_and_data(tmp_path, tiny_checkpoint, monkeypatch):
    import engine
    from engine import layers
    bundle = engine.load(tiny_checkpoint)
    calls = []
    real = layers.extract_states
    monkeypatch.setattr(layers, "extract_states", lambda *a, **k: calls.append(1) or real(*a, **k))
    texts = [["the", "cat", "sat"], ["a", "dog"]]
    a = layers.hidden_states(bundle, texts, TOKEN, cache_dir=tmp_path)
    layers._MEMORY.clear()  # a new process: read back from disk
    b = layers.hidden_states(bundle, texts, TOKEN, cache_dir=tmp_path)
    assert a.shape == (5, 3, 64) and a.dtype == np.float16 and np.array_equal(a, b) and len(calls) == 1
    layers.hidden_states(bundle, texts + [["more"]], TOKEN, cache_dir=tmp_path)
    assert len(calls) == 2  # other data, other key


def test_checkpoints_of_a_run_and_a_run_folder_for_the_studio(tmp_path, tiny_run, tiny_run_steps, engine_cli):
    import engine
    from engine.records import read_eval
    from engine.runs import read_run_json
    corpus = tmp_path / "corpus.txt"
    rng = random.Random(1)
    words = "the a market bank fell rose share price government said on monday".split()
    corpus.write_text("\n\n".join("\n".join(" ".join(rng.choice(words) for _ in range(rng.randint(5, 12))) + " ."
                                            for _ in range(5)) for _ in range(20)))
    df = engine.layer_probes(tiny_run, ["bigram-shift", "sentence-length"], corpus=str(corpus), checkpoints="all",
                             epochs=2, no_cache=True)
    assert sorted(set(df["step"])) == list(tiny_run_steps) and set(df["task"]) == {"bigram-shift", "sentence-length"}
    assert len(df) == 2 * len(tiny_run_steps) * 3 and df["control_accuracy"].isna().all()  # sentence tasks: no control
    out = tmp_path / "runs" / "ly"
    code, _, err = engine_cli(["layers", "--model", tiny_run, "--checkpoints", "3,12", "--task", "bigram-shift",
                               "--corpus", corpus, "--epochs", "2", "--no-cache", "--out", out])
    assert code == 0, err
    ev = read_eval(out)
    assert read_run_json(out)["kind"] == "layers" and ev["status"] == "finished" and ev["checkpoints"] == [3, 12]
    assert [s["step"] for s in ev["tasks"][0]["steps"]] == [3, 12]


def test_bad_requests_are_one_line(engine_cli, one_line_error, tiny_checkpoint):
    code, _, err = engine_cli(["layers", "--task", "pos"])
    one_line_error(code, err, "is not a probing task")
    code, _, err = engine_cli(["layers", "--model", tiny_checkpoint, "--checkpoints", "all"])
    one_line_error(code, err, "has no complete checkpoints")
    code, _, err = engine_cli(["layers", "--model", tiny_checkpoint, "--task", "wnut16", "--train", "x.txt"])
    one_line_error(code, err, "takes no --train / --dev files")


def test_the_disk_cache_keeps_its_newest_files_within_its_size(tmp_path):
    import os
    from engine.layers import prune
    for i in range(5):
        p = tmp_path / f"{i}.npy"
        p.write_bytes(b"x" * 100)
        os.utime(p, (1000 + i, 1000 + i))
    prune(tmp_path, 250)
    assert sorted(p.name for p in tmp_path.glob("*.npy")) == ["3.npy", "4.npy"]
