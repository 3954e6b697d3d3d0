"""Hugging Face Hub ids through engine.load (engine/hub.py), offline: a hub cache in a temporary folder, laid out
as huggingface_hub writes it (models--org--name/{blobs,refs/main,snapshots/<commit>}), holding a tiny
transformers BertForPreTraining (and a tiny RoBERTa, read through engine.encoders); huggingface_hub's own lookup finds
it before the engine is asked."""
import hashlib
import json
import os
from pathlib import Path

import huggingface_hub  # transformers' own dependency
import pytest
import torch
import transformers

import engine
from engine import hub
from engine.errors import EngineError
from tests.helpers import put_in_cache
from tests.helpers import one_line


VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat", "dog", "ran", "a", "man",
         "went", "to", "store", ".", ",", "he", "bought", "milk", "she", "read", "book", "##s", "big", "red"]
TEXT = "the cat [MASK] on the mat ."


@pytest.fixture(scope="module")
def hf_model():
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=64, max_position_embeddings=64, initializer_range=0.3)
    return transformers.BertForPreTraining(cfg).eval()


def bert_files(model, tmp_path, legacy=False, model_type=True) -> dict:
    """save_pretrained's files plus vocab.txt. `legacy`: bert-base-uncased's older layout instead (LayerNorm
    gamma/beta names, the tied decoder stored, only pytorch_model.bin); "decoder-only": the tied pair stored under
    the decoder's name alone. `model_type=False`: config.json without it (as prajjwal1/bert-tiny's)."""
    out = tmp_path / ("saved-legacy" if legacy else "saved")
    model.save_pretrained(out)
    config = json.loads((out / "config.json").read_text())
    if not model_type:
        del config["model_type"]
    files = {"config.json": json.dumps(config).encode(), "vocab.txt": "\n".join(VOCAB).encode(),
             "tokenizer_config.json": json.dumps({"do_lower_case": True}).encode()}
    if not legacy:
        files["model.safetensors"] = (out / "model.safetensors").read_bytes()
        return files
    sd = {k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): v.clone()
          for k, v in model.state_dict().items() if k != "cls.predictions.decoder.bias"}
    if legacy == "decoder-only":
        del sd["bert.embeddings.word_embeddings.weight"]
    torch.save(sd, out / "pytorch_model.bin")
    files["pytorch_model.bin"] = (out / "pytorch_model.bin").read_bytes()
    return files


@pytest.fixture
def cache(offline_hub_cache):
    return offline_hub_cache


def test_is_hub_id_only_for_names_that_are_not_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "here" / "model").mkdir(parents=True)
    assert hub.is_hub_id("bert-base-uncased") and hub.is_hub_id("google-bert/bert-base-uncased") and hub.is_hub_id("prajjwal1/bert-tiny")
    for path in ("here/model", "./org/name", "../org/name", "/org/name", "~/org/name", "runs/x/checkpoints/step-3",
                 "org--name/x", "org/na..me", "", "org/", "a b", "minilm"):
        assert not hub.is_hub_id(path), path
    assert not hub.is_hub_id(tmp_path / "org")  # a Path object is a path
    assert not hub.is_hub_id("here/typo")  # a name under a folder that exists here is a path that is missing
    assert hub.is_hub_id("there/typo")  # no folder "there": an org on the Hub


@pytest.mark.parametrize("legacy", [False, True, "decoder-only"], ids=["safetensors", "legacy-bin-gamma-beta-tied-decoder",
                                                                       "tied-pair-saved-as-decoder"])
def test_cached_hub_bert_loads_offline_and_matches_transformers(cache, tmp_path, hf_model, legacy):
    commit = put_in_cache(cache, "org/tiny-bert", bert_files(hf_model, tmp_path, legacy))
    found = huggingface_hub.try_to_load_from_cache("org/tiny-bert", "config.json", cache_dir=str(cache))
    assert isinstance(found, str) and commit in found  # the layout is huggingface_hub's own
    b = engine.load("org/tiny-bert")
    assert b.info["source"] == "org/tiny-bert" and b.info["missing_heads"] == [] and commit in b.path
    assert (b.config.num_layers, b.config.hidden_size, b.config.vocab_size) == (2, 32, len(VOCAB))
    enc = b.tokenizer.encode("the cat [MASK] on the mat .", "he ran .")
    ids, tt = torch.tensor([enc.ids]), torch.tensor([enc.type_ids])
    with torch.no_grad():
        ours = b.model(ids, tt)
        ref = hf_model(input_ids=ids, token_type_ids=tt)
    assert float(ref.prediction_logits.abs().max()) > 0.5  # not a near-zero model that matches anything
    torch.testing.assert_close(ours.mlm_logits, ref.prediction_logits, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(ours.nsp_logits, ref.seq_relationship_logits, atol=1e-4, rtol=1e-4)
    mask = enc.ids.index(VOCAB.index("[MASK]"))
    top = engine.fill_mask(b, TEXT, top_k=1)[0][0][0]
    assert top == VOCAB[int(ref.prediction_logits[0, mask].argmax())]
    p = engine.next_sentence(b, "the cat sat on the mat .", "he ran .")
    assert 0.0 < float(p) < 1.0


def test_hub_cache_from_hf_home_alone(cache, tmp_path, hf_model, monkeypatch):
    put_in_cache(cache, "solo-bert", bert_files(hf_model, tmp_path, model_type=False))  # an upload without model_type
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "elsewhere"))  # read at import
    assert hub.cache_dir() == str(cache)
    assert engine.load("solo-bert").info["source"] == "solo-bert"


def test_uncached_id_offline_is_one_line_naming_the_offline_choices(cache):
    with pytest.raises(EngineError) as e:
        engine.load("org/not-downloaded")
    msg = one_line(e)
    assert "org/not-downloaded" in msg and "HF_HUB_OFFLINE" in msg and str(cache) in msg
    assert "'minilm'" in msg and "minilm-continued" in msg and "run folder" in msg
    with pytest.raises(EngineError, match="--init org/not-downloaded: .*minilm-continued"):
        from engine.pretraining.init import read_init_settings
        read_init_settings("org/not-downloaded")


def test_non_bert_hub_model_is_one_line_before_any_weight(cache):
    put_in_cache(cache, "openai-community/gpt2", {"config.json": json.dumps({"model_type": "gpt2", "n_layer": 12}).encode()})
    with pytest.raises(EngineError) as e:
        engine.load("openai-community/gpt2")
    msg = one_line(e)
    assert "'gpt2'" in msg and "not BERT" in msg  # not "no weights cached": config.json decided first


def test_untied_decoder_is_refused(cache, tmp_path, hf_model):
    files = bert_files(hf_model, tmp_path, legacy=True)
    sd = torch.load(tmp_path / "saved-legacy" / "pytorch_model.bin", weights_only=True)
    sd["cls.predictions.decoder.weight"] = sd["cls.predictions.decoder.weight"] + 1.0
    torch.save(sd, tmp_path / "untied.bin")
    files["pytorch_model.bin"] = (tmp_path / "untied.bin").read_bytes()
    put_in_cache(cache, "org/untied", files)
    with pytest.raises(EngineError) as e:
        engine.load("org/untied")
    assert "not tied" in one_line(e)


def test_paths_stay_paths(cache, tmp_path, hf_model, monkeypatch):
    put_in_cache(cache, "org/name", bert_files(hf_model, tmp_path))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(EngineError, match="does not exist"):
        engine.load("./org/name")  # written as a path: never the hub
    cfg = engine.BertConfig.preset("tiny", vocab_size=len(VOCAB), hidden_size=16, num_heads=2, max_position_embeddings=32)
    engine.save(engine.BertForPreTraining(cfg), tmp_path / "org" / "name", tokenizer=engine.Tokenizer.from_file(_vocab(tmp_path)))
    b = engine.load("org/name")  # a folder here wins over the cached id of the same name
    assert b.config.hidden_size == 16 and Path(b.path).resolve() == (tmp_path / "org" / "name").resolve()


def _vocab(tmp_path):
    (tmp_path / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    return tmp_path / "vocab.txt"


def test_offline_env_read_at_call_time_not_only_at_import(cache, tmp_path, hf_model, monkeypatch):
    """huggingface_hub's own flag says online (as if HF_HUB_OFFLINE was set after it was imported): the engine
    still asks for cached files only."""
    put_in_cache(cache, "org/tiny-bert", bert_files(hf_model, tmp_path))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    calls = []
    for name in ("hf_hub_download", "snapshot_download"):
        real = getattr(huggingface_hub, name)
        monkeypatch.setattr(huggingface_hub, name, lambda *a, _real=real, **kw: calls.append(kw["local_files_only"]) or _real(*a, **kw))
    assert engine.load("org/tiny-bert").config.num_layers == 2
    assert calls and all(calls)


def test_unreachable_hub_without_offline_flag_names_the_offline_choices(cache, monkeypatch):
    from huggingface_hub.errors import LocalEntryNotFoundError
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    seen = []

    def no_network(repo_id, filename, **kw):
        seen.append(kw["local_files_only"])
        raise LocalEntryNotFoundError("An error happened while trying to locate the file on the Hub")
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", no_network)
    with pytest.raises(EngineError) as e:
        engine.load("org/somewhere")
    msg = one_line(e)
    assert seen == [False] and "could not be reached" in msg and "'minilm'" in msg


def test_engine_never_sets_offline_mode(cache, tmp_path, hf_model, monkeypatch):
    put_in_cache(cache, "org/tiny-bert", bert_files(hf_model, tmp_path))
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # no network in tests all the same
    import engine.__main__ as cli_main
    import engine.checkpoint  # noqa: F401
    import engine.hub  # noqa: F401
    assert cli_main.run(["no-such-command"]) == 2
    engine.load("org/tiny-bert")
    assert "HF_HUB_OFFLINE" not in os.environ and "TRANSFORMERS_OFFLINE" not in os.environ


def test_mlm_bias_saved_as_decoder_bias_maps_too(hf_model):
    from engine.checkpoint import from_hf_state_dict
    cfg = engine.BertConfig.from_hf_dict(hf_model.config.to_dict())
    sd = {k: v for k, v in hf_model.state_dict().items() if k not in ("cls.predictions.bias", "cls.predictions.decoder.bias")}
    bias = torch.randn(len(VOCAB))
    assert torch.equal(from_hf_state_dict({**sd, "cls.predictions.decoder.bias": bias}, cfg, "t")["mlm.bias"], bias)
    assert torch.equal(from_hf_state_dict({**sd, "cls.predictions.bias": bias}, cfg, "t")["mlm.bias"], bias)
    with pytest.raises(EngineError, match="cls.predictions.bias"):
        from_hf_state_dict(sd, cfg, "t")


@pytest.mark.slow  # AppTest runs the whole page
def test_model_page_takes_a_hub_id(cache, tmp_path, hf_model):
    from streamlit.testing.v1 import AppTest
    put_in_cache(cache, "org/tiny-bert", bert_files(hf_model, tmp_path))
    at = AppTest.from_file(str(Path(__file__).resolve().parents[2] / "pages" / "1_Model.py"), default_timeout=60)
    at.session_state["runs_root"] = str(tmp_path / "runs")
    at.run()
    at.text_input(key="model_page_model_path").input("org/tiny-bert").run()
    assert not at.exception and not at.error
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Layers (L)"] == "2" and metrics["Hidden (H)"] == "32"
    at.text_input(key="model_page_model_path").input("org/not-downloaded").run()
    assert not at.exception and len(at.error) == 1 and "minilm-continued" in at.error[0].value


def test_cli_probe_takes_a_hub_id(cache, tmp_path, hf_model, capsys):
    from engine.__main__ import run
    put_in_cache(cache, "org/tiny-bert", bert_files(hf_model, tmp_path))
    assert run(["probe", "--model", "org/tiny-bert", "--fill", TEXT, "--top-k", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    b = engine.load("org/tiny-bert")
    enc = b.tokenizer.encode(TEXT)
    with torch.no_grad():
        ref = hf_model(input_ids=torch.tensor([enc.ids])).prediction_logits[0, enc.ids.index(VOCAB.index("[MASK]"))]
    assert out["model"] == "org/tiny-bert" and out["masks"][0][0]["token"] == VOCAB[int(ref.argmax())]
    assert run(["probe", "--model", "org/not-downloaded", "--fill", TEXT]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and "'minilm'" in err


def test_a_cached_hub_roberta_loads_offline_through_transformers(cache, tiny_encoder, capsys):
    folder = tiny_encoder("roberta")
    put_in_cache(cache, "org/tiny-roberta", {p.name: p.read_bytes() for p in folder.iterdir()})
    b = engine.load("org/tiny-roberta")
    assert b.kind == "auto" and b.info["hub_id"] == "org/tiny-roberta" and b.info["model_type"] == "roberta"
    assert engine.probes.model_name(b) == "org/tiny-roberta"
    local = engine.fill_mask(engine.load(str(folder)), TEXT, top_k=2)
    assert engine.fill_mask(b, TEXT, top_k=2) == local
    from engine.__main__ import run
    assert run(["probe", "--model", "org/tiny-roberta", "--fill", TEXT, "--top-k", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [m["token"] for m in out["masks"][0]] == [t for t, _ in local[0]]


def test_cached_finds_a_complete_model_in_the_hub_cache_without_the_network(cache, tmp_path, hf_model):
    """engine.hub.cached: None for a model not in the cache or cached without its weights, the snapshot folder once
    config.json and the weights are there (what the Probe and Attention pages ask before offering bert-base-uncased)."""
    assert hub.cached(hub.BERT_BASE) is None
    files = bert_files(hf_model, tmp_path)
    put_in_cache(cache, "org/no-weights", {k: v for k, v in files.items() if k != "model.safetensors"})
    assert hub.cached("org/no-weights") is None
    commit = put_in_cache(cache, hub.BERT_BASE, files)
    found = hub.cached(hub.BERT_BASE)
    assert found is not None and commit in str(found) and (found / "model.safetensors").is_file()
