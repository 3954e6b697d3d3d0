"""The notebook API the design card fixes: every name is reachable as `engine.<name>` and is the real thing."""
import importlib

import pytest

import engine


def test_design_api_names_are_the_functions_and_classes():
    pre = importlib.import_module("engine.pretraining.run")
    fin = importlib.import_module("engine.finetune")
    feat = importlib.import_module("engine.features")
    assert engine.pretrain is pre.pretrain and engine.PretrainConfig is pre.PretrainConfig  # (run.py imports it)
    assert engine.finetune is fin.finetune and engine.FinetuneConfig is fin.FinetuneConfig
    assert engine.extract_features is feat.extract_features
    for name in ("BertConfig", "load_corpus", "train_tokenizer", "Tokenizer", "load", "save", "mask_tokens",
                 "fill_mask", "next_sentence", "attention", "EngineError"):
        assert callable(getattr(engine, name)), name
    # the modules stay importable by name for `from engine.pretraining.run import ...`
    from engine.pretraining.run import main as pretrain_main
    from engine.finetune import main as finetune_main
    assert callable(pretrain_main) and callable(finetune_main)


@pytest.mark.slow
def test_api_pretrain_then_finetune_from_python(tmp_path, bbc_docs, monkeypatch):
    monkeypatch.setenv("BERT_STUDIO_CACHE", str(tmp_path / "cache"))
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n\n".join(" ".join(d) for d in bbc_docs[::50]), encoding="utf-8")
    run_dir = engine.pretrain(engine.PretrainConfig.classroom(corpus=str(corpus), vocab_size=600, hidden=32, heads=2, layers=1,
                                                    seq_len=32, batch_size=8, steps=3, eval_every=0, save_every=0,
                                                    num_threads=1, quiet=True, out=str(tmp_path / "pre")))
    from engine import records, runs  # run.json holds the fields engine.records defines for a pre-training
    assert set(runs.read_run_json(run_dir)) == set(records.RUN_FIELDS + records.PRETRAIN_RUN_FIELDS)
    assert engine.load(run_dir).config.num_layers == 1
    res = engine.finetune(engine.FinetuneConfig(model=str(run_dir), task="bbc-topic", lr=(1e-3,), batch_size=(8,),
                                                epochs=(1,), max_train=16, max_dev=16, max_seq_len=32, num_threads=1,
                                                out=str(tmp_path / "ft")))
    assert res["metric"] == "accuracy" and len(res["trials"]) == 1
    n_dev = res["data"]["dev_examples"]
    assert n_dev == 16 and res["score"] == res["dev"]["accuracy"]
    assert res["score"] * n_dev == pytest.approx(round(res["score"] * n_dev))  # k correct of 16 dev articles
