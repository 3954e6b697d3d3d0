"""Encoders other than BERT through engine.load (engine/encoders.py), offline: tiny random RoBERTa, XLM-RoBERTa,
DistilBERT, ALBERT, ELECTRA, DeBERTa-v2 and ModernBERT checkpoints saved in the test (conftest `tiny_encoder`) load
through transformers' Auto classes with their own tokenizers; hidden states, attention maps and fill-mask match
transformers' own forward pass; a checkpoint without an MLM head is one line for fill-mask; the layer probes and head
roles run on them; training refuses them in one line."""
import json
import shutil

import numpy as np
import pytest
import torch
import transformers

import engine
from engine.errors import EngineError
from tests.helpers import one_line

KINDS = ["roberta", "xlm-roberta", "distilbert", "albert", "electra", "deberta-v2", "modernbert"]
TEXT = "the cat [MASK] on the mat ."


def reference(folder, head=True):
    """transformers' own model of the folder (eager attention, so the weights come back)."""
    auto = transformers.AutoModelForMaskedLM if head else transformers.AutoModel
    return auto.from_pretrained(str(folder), attn_implementation="eager").eval()


@pytest.mark.parametrize("kind", KINDS)
def test_each_encoder_gives_every_layer_every_head_and_its_mlm_head(tiny_encoder, kind):
    folder = tiny_encoder(kind)
    b = engine.load(str(folder))
    hf_tok = transformers.AutoTokenizer.from_pretrained(str(folder))
    assert b.kind == "auto" and b.info["model_type"] == kind and b.info["missing_heads"] == ["nsp"]
    assert (b.config.num_layers, b.config.num_heads, b.config.hidden_size) == (2, 2, 32)
    assert b.tokenizer.mask_id == hf_tok.mask_token_id  # the checkpoint's own mask token (RoBERTa's <mask>)
    enc = b.tokenizer.encode(TEXT)
    assert enc.tokens[0] == "[CLS]" and enc.tokens[-1] == "[SEP]" and enc.tokens.count("[MASK]") == 1
    assert enc.ids == hf_tok(TEXT.replace("[MASK]", hf_tok.mask_token))["input_ids"]
    ids = torch.tensor([enc.ids])
    with torch.no_grad():
        ours = b.model(ids, output_attentions=True, output_hidden_states=True)
        ref = reference(folder)(input_ids=ids, output_attentions=True, output_hidden_states=True)
    T = len(enc.ids)
    assert len(ours.hidden_states) == 3 and all(h.shape == (1, T, 32) for h in ours.hidden_states)
    for mine, theirs in zip(ours.hidden_states + ours.attentions, ref.hidden_states + ref.attentions):
        torch.testing.assert_close(mine, theirs)
    V = len(hf_tok)
    assert ours.mlm_logits.shape == (1, T, V)  # rows beyond the tokenizer's (DeBERTa-v3, ModernBERT) never predicted
    torch.testing.assert_close(ours.mlm_logits, ref.logits[..., :V])
    tokens, att = engine.attention(b, "the cat sat on the mat .", "he bought milk .")
    assert att.shape == (2, 2, len(tokens), len(tokens)) and np.allclose(att.sum(-1), 1.0, atol=1e-5)
    preds = engine.fill_mask(b, TEXT, top_k=3)
    at = enc.tokens.index("[MASK]")
    best = ref.logits[0, at, :V].argsort(descending=True)[:3].tolist()
    assert [t for t, _ in preds[0]] == [b.tokenizer.id_to_token(i) for i in best]
    assert b.tokenizer.token_to_id(preds[0][0][0]) == best[0]


def test_tokens_are_shown_in_bert_notation_beside_the_checkpoint_pieces(tiny_encoder):
    b = engine.load(str(tiny_encoder("roberta")))
    tok = b.tokenizer
    enc = tok.encode("the cat sat", "paris")
    assert enc.tokens[:4] == ["[CLS]", "the", "cat", "sat"] and enc.pieces[:3] == ["<s>", "the", "Ġcat"]
    assert enc.tokens[-1] == "[SEP]" and enc.pieces[-1] == "</s>"
    cat = tok.hf.token_to_id("Ġcat")
    assert tok.id_to_token(cat) == "cat" and tok.token_to_id("cat") == cat  # the word-start piece is the word
    pieces = tok.encode("catsat")
    assert len(pieces.tokens) > 3 and not pieces.tokens[1].startswith("##")
    assert all(t.startswith("##") for t in pieces.tokens[2:-1])  # each later piece continues the word
    words = tok.encode_words(["the", "catsat", "."])
    assert [w for w in words.word_ids if w is not None][:1] == [0] and set(w for w in words.word_ids if w is not None) == {0, 1, 2}
    from engine import model_view
    rows = model_view.tokenize_table(b, "the cat")["rows"]
    assert [r["piece"] for r in rows] == ["<s>", "the", "Ġcat", "</s>"] and "<s> as [CLS]" in b.info["about"]


@pytest.mark.parametrize("kind,saved", [("roberta", {"head": False}), ("electra", {"model_class": "ElectraForPreTraining"})],
                         ids=["roberta-encoder-only", "electra-discriminator"])
def test_an_encoder_without_an_mlm_head_looks_inside_and_says_so_for_fill_mask(tiny_encoder, kind, saved):
    folder = tiny_encoder(kind, **saved)
    b = engine.load(str(folder))
    assert b.info["missing_heads"] == ["mlm", "nsp"] and engine.probes.heads(b) == ()
    assert engine.probes.heads_on_disk(str(folder)) == () and engine.probes.heads_on_disk(str(tiny_encoder(kind))) == ("mlm",)
    tokens, att = engine.attention(b, "the cat sat .")
    assert att.shape == (2, 2, len(tokens), len(tokens))
    with torch.no_grad():
        ours = b.model(torch.tensor([b.tokenizer.encode("the cat sat .").ids]), output_hidden_states=True)
    assert ours.mlm_logits is None and len(ours.hidden_states) == 3
    with pytest.raises(EngineError) as e:
        engine.fill_mask(b, TEXT)
    assert "has no MLM head" in one_line(e) and ("discriminator" in str(e.value)) == (kind == "electra")
    with pytest.raises(EngineError, match="NSP head"):
        engine.next_sentence(b, "the cat sat .", "it ran .")


def test_deberta_v3_head_names_load_as_its_own(tiny_encoder):
    folder = tiny_encoder("deberta-v2", legacy=False)  # DeBERTa-v3's lm_predictions.* names
    b = engine.load(str(folder))
    assert b.config.has_mlm_head
    enc = b.tokenizer.encode(TEXT)
    with torch.no_grad():
        ref = reference(folder)(input_ids=torch.tensor([enc.ids])).logits[..., :b.tokenizer.vocab_size]
    torch.testing.assert_close(b.model(torch.tensor([enc.ids])).mlm_logits, ref)


def test_features_layer_probes_and_head_roles_run_on_an_encoder(tiny_encoder, tmp_path, engine_cli):
    folder = str(tiny_encoder("roberta"))
    b = engine.load(folder)
    feats = engine.extract_features(b, ["the cat sat .", ("a dog ran .", "he read .")], layers=(-1, -2), pooling="mean")
    assert feats.shape == (2, 64)
    corpus = tmp_path / "corpus.txt"
    sentences = ["the cat sat on the mat .", "the dog ran to the store .", "she read a big red book .",
                 "he bought milk and bread at the market .", "the man went to the store ."]
    corpus.write_text("\n\n".join("\n".join(sentences[(i + j) % 5] for j in range(4)) for i in range(20)))
    df = engine.layer_probes(folder, "bigram-shift", corpus=str(corpus), epochs=2, no_cache=True)
    assert sorted(df["layer"]) == [0, 1, 2] and df["accuracy"].between(0, 1).all()
    roles = engine.head_role_table(folder)
    assert len(roles) == 4 and set(roles["layer"]) == {1, 2}
    train = tmp_path / "train.txt"
    train.write_text("".join(f"the\tO\n{w}\tB-THING\nsat\tO\n\n" for w in ("cat", "dog", "mat", "store") * 4))
    code, out, err = engine_cli(["layers", "--model", folder, "--task", "tagging", "--train", train, "--dev", train,
                                 "--epochs", "2", "--no-cache", "--json"])
    assert code == 0, err
    assert len(json.loads(out)["layers"]) == 3


def test_training_and_bert_only_analyses_refuse_another_encoder_in_one_line(tiny_encoder, tmp_path):
    from engine import analysis
    from engine.checkpoint import check_model
    from engine.pretraining.init import load_init, read_init_settings
    folder = str(tiny_encoder("roberta"))
    b = engine.load(folder)
    with pytest.raises(EngineError) as e:
        engine.finetune(engine.FinetuneConfig(model=folder, task="bbc-topic", out=str(tmp_path / "ft")))
    assert "RoBERTa" in one_line(e) and "BERT checkpoints only" in str(e.value)
    for refuse in (read_init_settings, load_init, check_model):
        with pytest.raises(EngineError, match="BERT") as e:
            refuse(folder)
        one_line(e)
    check_model(folder, any_encoder=True)  # the layer probes' job takes it
    for analyse in (analysis.queries_and_keys, analysis.value_weighted_attention):
        with pytest.raises(EngineError, match="BERT checkpoints only"):
            analyse(b, "the cat sat .")
    with pytest.raises(EngineError, match="BERT checkpoints only"):
        analysis.head_importance(b, ["the cat sat on the mat ."])
    assert analysis.head_statistics(b, ["the cat sat on the mat ."]).shape[0] == 4  # attention alone: works


def test_weights_are_read_safely_and_checked_against_config(tiny_encoder, tmp_path, monkeypatch):
    src = tiny_encoder("roberta")
    legacy = tmp_path / "legacy"
    shutil.copytree(src, legacy)
    from safetensors.torch import load_file
    torch.save(load_file(str(legacy / "model.safetensors")), legacy / "pytorch_model.bin")
    (legacy / "model.safetensors").unlink()
    calls = []
    real = torch.load
    monkeypatch.setattr(torch, "load", lambda *a, **k: calls.append(k.get("weights_only")) or real(*a, **k))
    b = engine.load(str(legacy))
    assert calls and all(calls) and b.config.has_mlm_head  # every pickle read with weights_only=True
    crafted = tmp_path / "crafted"
    shutil.copytree(src, crafted)
    cfg = json.loads((crafted / "config.json").read_text())
    cfg.update(hidden_size=4096, intermediate_size=16384, num_attention_heads=32, num_hidden_layers=48)
    (crafted / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(EngineError, match="does not match the weights") as e:
        engine.load(str(crafted))
    one_line(e)
    other = tmp_path / "gpt2"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(EngineError, match="'gpt2'.*RoBERTa") as e:
        engine.load(str(other))
    one_line(e)
