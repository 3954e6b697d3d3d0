"""engine.analysis: rollout, per-head statistics, word-level merge, value-weighted attention, head importance,
on cases whose answer can be worked out by hand."""
import math

import numpy as np
import pytest
import torch

import engine
from engine import analysis
from engine.errors import EngineError

SENTENCE = "the market rose , then fell ."


@pytest.fixture(scope="module")
def tiny(bbc_tokenizer):
    """A random tiny BERT (2 layers, 2 heads, hidden 32) with MLM and NSP heads."""
    torch.manual_seed(0)
    cfg = engine.BertConfig.preset("tiny", vocab_size=bbc_tokenizer.vocab_size, hidden_size=32, num_heads=2,
                                   intermediate_size=64, max_position_embeddings=64)
    model = engine.BertForPreTraining(cfg).eval()
    return engine.Bundle(model=model, tokenizer=bbc_tokenizer, config=cfg, path="tiny", info={})


def _uniform(bundle):
    """A copy of `bundle` whose queries and keys are 0: every score is 0, so every head attends uniformly."""
    cfg = bundle.config
    model = engine.BertForPreTraining(cfg).eval()
    model.load_state_dict(bundle.model.state_dict())
    H = cfg.hidden_size
    with torch.no_grad():
        for layer in model.bert.layers:
            layer.attention.qkv.weight[: 2 * H] = 0.0
            layer.attention.qkv.bias[: 2 * H] = 0.0
    return engine.Bundle(model=model, tokenizer=bundle.tokenizer, config=cfg, path="uniform", info={})


# ------------------------------------------------------------------ rollout
def test_rollout_of_identity_attention_is_identity():
    T = 5
    att = np.broadcast_to(np.eye(T), (3, 2, T, T))
    np.testing.assert_allclose(analysis.rollout(att), np.eye(T), atol=1e-12)


def test_rollout_by_hand_one_layer_and_two():
    # one layer, one head, every token looks at token 0: 0.5 * A + 0.5 * I
    A = np.zeros((1, 1, 3, 3))
    A[..., 0] = 1.0
    want = 0.5 * A[0, 0] + 0.5 * np.eye(3)
    np.testing.assert_allclose(analysis.rollout(A), want)
    # two such layers multiply: row 1 = 0.5 * e0 + 0.5 * (0.5 e0 + 0.5 e1) = (0.75, 0.25, 0)
    r = analysis.rollout(np.concatenate([A, A]))
    np.testing.assert_allclose(r[1], [0.75, 0.25, 0.0])
    np.testing.assert_allclose(r.sum(-1), 1.0)


def test_attention_rollout_on_a_model_rows_sum_to_one(tiny):
    tokens, _ = engine.attention(tiny, SENTENCE, "it fell .")
    r = engine.attention_rollout(tiny, SENTENCE, "it fell .")
    assert r.shape == (len(tokens), len(tokens))
    np.testing.assert_allclose(r.sum(-1), 1.0, atol=1e-6)


def test_uniform_attention_rollout_is_uniform(tiny):
    r = engine.attention_rollout(_uniform(tiny), SENTENCE)
    T = r.shape[0]
    # uniform U = 1/T everywhere: (0.5 U + 0.5 I) (0.5 U + 0.5 I) = 0.75 U + 0.25 I
    np.testing.assert_allclose(r, 0.75 / T + 0.25 * np.eye(T), atol=1e-6)


# ------------------------------------------------------------------ head statistics
def test_uniform_attention_statistics_are_one_over_T(tiny):
    uni = _uniform(tiny)
    tokens, _ = engine.attention(uni, SENTENCE)
    T = len(tokens)
    n_punct = sum(analysis.is_punctuation(t) for t in tokens if t not in ("[CLS]", "[SEP]"))
    assert n_punct == 2  # "," and "."
    df = engine.head_statistics(uni, [SENTENCE])
    assert len(df) == 2 * 2 and list(df.columns) == ["layer", "head", *analysis.STATISTICS]
    for col in ("cls", "sep", "self", "prev", "next"):
        np.testing.assert_allclose(df[col], 1.0 / T, rtol=1e-5)
    np.testing.assert_allclose(df["punct"], n_punct / T, rtol=1e-5)
    np.testing.assert_allclose(df["entropy"], math.log(T), rtol=1e-5)
    pair = engine.head_statistics(uni, [(SENTENCE, "it fell .")])  # two [SEP]s
    Tp = len(engine.attention(uni, SENTENCE, "it fell .")[0])
    np.testing.assert_allclose(pair["sep"], 2.0 / Tp, rtol=1e-5)


def test_statistics_of_a_previous_token_head_by_hand():
    T = 4
    prev = np.zeros((1, 1, T, T))
    prev[0, 0, 0, 0] = 1.0
    for i in range(1, T):
        prev[0, 0, i, i - 1] = 1.0
    df = analysis.head_statistics_from_attention([(["[CLS]", "a", "b", "[SEP]"], prev, [1, 0, 0, 1])])
    row = df.iloc[0]
    assert row["prev"] == 1.0 and row["next"] == 0.0 and row["entropy"] == 0.0
    assert row["self"] == 0.25 and row["cls"] == 0.5  # [CLS] attends to itself, "a" to [CLS]
    assert row["sep"] == 0.0


def test_head_statistics_rejects_no_texts(tiny):
    with pytest.raises(EngineError, match="no texts"):
        engine.head_statistics(tiny, ["  "])


# ------------------------------------------------------------------ word level
def test_word_level_merges_pieces_sum_to_mean_from():
    tokens = ["[CLS]", "play", "##ing", "ball", "[SEP]"]
    att = np.arange(25, dtype=float).reshape(5, 5)
    att = att / att.sum(-1, keepdims=True)
    words, w = analysis.word_level(tokens, att)
    assert words == ["[CLS]", "playing", "ball", "[SEP]"]
    # attention to "playing" = sum of columns 1 and 2; from "playing" = mean of rows 1 and 2
    assert w[0, 1] == pytest.approx(att[0, 1] + att[0, 2])
    assert w[1, 2] == pytest.approx((att[1, 3] + att[2, 3]) / 2)  # "playing" -> "ball" (piece 3)
    assert w[1, 1] == pytest.approx((att[1, 1] + att[1, 2] + att[2, 1] + att[2, 2]) / 2)
    np.testing.assert_allclose(w.sum(-1), 1.0)
    # works on (L, A, T, T) too
    words2, w4 = analysis.word_level(tokens, np.broadcast_to(att, (2, 3, 5, 5)))
    assert w4.shape == (2, 3, 4, 4)
    np.testing.assert_allclose(w4[1, 2], w)


# ------------------------------------------------------------------ value-weighted attention
def test_value_weighted_is_alpha_times_a_constant_when_values_are_constant(tiny):
    cfg = tiny.config
    model = engine.BertForPreTraining(cfg).eval()
    model.load_state_dict(tiny.model.state_dict())
    H, D = cfg.hidden_size, cfg.head_size
    with torch.no_grad():
        for layer in model.bert.layers:
            layer.attention.qkv.weight[2 * H:] = 0.0  # values = their bias, whatever the token
    b = engine.Bundle(model=model, tokenizer=tiny.tokenizer, config=cfg, path="constv", info={})
    tokens, vw, att = engine.value_weighted_attention(b, SENTENCE)
    for l, layer in enumerate(model.bert.layers):
        bv = layer.attention.qkv.bias[2 * H:].detach()
        wo = layer.attention.out.weight.detach()
        for h in range(cfg.num_heads):
            c = float((wo[:, h * D:(h + 1) * D] @ bv[h * D:(h + 1) * D]).norm())  # ||b_V^h W_O^h||
            np.testing.assert_allclose(vw[l, h], c * att[l, h], rtol=1e-4, atol=1e-7)


def test_value_weighted_matches_per_token_vectors(tiny):
    tokens, vw, att = engine.value_weighted_attention(tiny, SENTENCE)
    _, ref_att = engine.attention(tiny, SENTENCE)
    np.testing.assert_allclose(att, ref_att, atol=1e-6)
    # layer 1, head 2, query 1, key 3 by hand from the embeddings output
    enc = tiny.tokenizer.encode(SENTENCE)
    with torch.no_grad():
        out = tiny.model(torch.tensor([enc.ids]), output_hidden_states=True)
        x = out.hidden_states[0][0]  # input of layer 1
        a = tiny.model.bert.layers[0].attention
        H, D = tiny.config.hidden_size, tiny.config.head_size
        v = x @ a.qkv.weight[2 * H:].T + a.qkv.bias[2 * H:]  # (T, H)
        f = v[3, D:2 * D] @ a.out.weight[:, D:2 * D].T  # head 2 of token 3 through the output projection
    assert vw[0, 1, 1, 3] == pytest.approx(float(att[0, 1, 1, 3] * f.norm()), rel=1e-4)


# ------------------------------------------------------------------ head importance
@pytest.mark.slow
def test_masking_a_head_the_output_ignores_changes_nothing(tiny):
    cfg = tiny.config
    model = engine.BertForPreTraining(cfg).eval()
    model.load_state_dict(tiny.model.state_dict())
    D = cfg.head_size
    with torch.no_grad():
        model.bert.layers[1].attention.out.weight[:, 0:D] = 0.0  # layer 2, head 1 never reaches the output
    b = engine.Bundle(model=model, tokenizer=tiny.tokenizer, config=cfg, path="unused-head", info={})
    texts = [SENTENCE, "shares in the firm fell sharply .", "oil prices rose to a record high ."]
    before = {k: v.clone() for k, v in model.state_dict().items()}
    imp = engine.head_importance(b, texts)
    assert imp.shape == (cfg.num_layers, cfg.num_heads)
    assert imp[1, 0] == 0.0  # masking it changes nothing
    assert np.abs(imp).sum() > 0  # the other heads matter
    assert imp.base_loss > 0 and imp.n_positions >= len(texts)
    for k, v in model.state_dict().items():  # the weights are restored
        assert torch.equal(v, before[k]), k
    np.testing.assert_allclose(engine.head_importance(b, texts), imp)  # same positions every call


def test_head_importance_needs_an_mlm_head(tiny):
    cfg = tiny.config.replace(has_mlm_head=False)
    b = engine.Bundle(model=engine.BertForPreTraining(cfg), tokenizer=tiny.tokenizer, config=cfg, path="enc", info={})
    with pytest.raises(EngineError, match="no MLM head"):
        engine.head_importance(b, [SENTENCE])


def test_head_importance_restores_the_weights_when_a_masked_pass_fails(tiny, monkeypatch):
    before = {k: v.clone() for k, v in tiny.model.state_dict().items()}
    real, calls = analysis._mlm_loss, []

    def failing(*a, **k):
        calls.append(1)
        if len(calls) == 3:  # the second head's masked pass
            raise RuntimeError("out of memory")
        return real(*a, **k)

    monkeypatch.setattr(analysis, "_mlm_loss", failing)
    with pytest.raises(RuntimeError, match="out of memory"):
        engine.head_importance(tiny, [SENTENCE])
    for k, v in tiny.model.state_dict().items():
        assert torch.equal(v, before[k]), k  # head 2 of layer 1 was zeroed when it failed, and is back
