"""engine.probe_baselines: chance and the unigram baseline of the probe set, and the reading of a score."""
import pytest
import torch

import engine
from engine import probe_baselines as PB

PROBE_SET = {"cloze": [("the [MASK] sat .", ("cat",)), ("a [MASK] ran .", ("dog", "the")), ("x [MASK] .", ("zzzq",))],
             "nsp": [("a .", "b .", True), ("c .", "d .", True), ("e .", "f .", False)]}


@pytest.fixture(scope="module")
def bundle(bbc_tokenizer):
    cfg = engine.BertConfig.preset("tiny", vocab_size=bbc_tokenizer.vocab_size, hidden_size=32, num_heads=2)
    torch.manual_seed(0)
    return engine.Bundle(model=engine.BertForPreTraining(cfg), tokenizer=bbc_tokenizer, config=cfg, path="", info={})


def test_baselines_by_hand(bundle, tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("The cat saw the dog. The dog saw the cat.\n\nThe end came.\n")
    b = PB.probe_set_baselines(bundle, top_k=2, corpus=str(corpus), probe_set=PROBE_SET)
    # counts: the 5, cat 2, saw 2, dog 2, . 3 -> most frequent in the vocabulary: "the", then "."
    assert b["unigram_words"] == ["the", "."]
    # "zzzq" is not a token, so two items count; only "a [MASK] ran" accepts "the"
    assert b["unigram_top1"] == pytest.approx(1 / 2) and b["unigram_topk"] == pytest.approx(1 / 2)
    assert b["chance_top1"] == pytest.approx(1 / bundle.tokenizer.vocab_size) and b["chance_topk"] == pytest.approx(2 / bundle.tokenizer.vocab_size)
    assert b["nsp_chance"] == 0.5 and b["nsp_majority"] == pytest.approx(2 / 3)


def test_reading_says_plateau_chance_or_learned():
    base = {"unigram_top1": 0.0, "unigram_words": ["the", ".", ","]}
    r = PB.reading({"cloze_top1": 0.0, "nsp_acc": 0.5}, base)
    assert "at the unigram baseline" in r[0] and "'the'" in r[0] and "at chance" in r[1]
    r = PB.reading({"cloze_top1": 0.4, "nsp_acc": 0.9}, base)
    assert "above the unigram baseline" in r[0] and "above chance" in r[1]
    assert "below chance" in PB.reading({"cloze_top1": None, "nsp_acc": 0.2}, base)[0]


def test_training_corpus_read_from_the_run(tmp_path, bundle):
    run = tmp_path / "run"
    (run / "checkpoints" / "step-5").mkdir(parents=True)
    (run / "run.json").write_text('{"config": {"corpus": "wiki"}}')
    b = engine.Bundle(model=bundle.model, tokenizer=bundle.tokenizer, config=bundle.config,
                      path=str(run / "checkpoints" / "step-5"), info={})
    assert PB.training_corpus(b) == "wiki" and PB.training_corpus(bundle) == "bbc"
