"""engine.probes.predictions: fill-mask and next-sentence probability against the model's own heads, a model without
heads, truncation that says so, a left-to-right model reading a [MASK] from the position before."""
import numpy as np
import pytest
import torch

import engine
from engine.errors import EngineError
from engine.probes.attention_maps import attention
from engine.probes.predictions import fill_mask, next_sentence
from engine.probes.scoring import probe_set_accuracy
from tests.helpers import forward

LONG = " ".join(["the market rose again"] * 40)


def test_fill_mask_several_masks_normalised_and_matches_model(bundle):
    text = "the prime [MASK] said the [mask] would cut taxes ."
    preds = fill_mask(bundle, text, top_k=7)
    assert len(preds) == 2 and all(len(m) == 7 for m in preds)
    assert preds.tokens.count("[MASK]") == 2 and preds.truncated is False
    for m in preds:
        ps = [p for _, p in m]
        assert ps == sorted(ps, reverse=True) and all(0 < p < 1 for p in ps)
    np.testing.assert_allclose(preds.probs.sum(-1), 1.0, atol=1e-5)
    enc, out = forward(bundle, text.replace("[mask]", "[MASK]"))
    pos = [i for i, t in enumerate(enc.ids) if t == bundle.tokenizer.mask_id]
    assert pos == preds.mask_positions
    for k, i in enumerate(pos):
        p = out.mlm_logits[0, i].softmax(-1)
        top = p.topk(7)
        assert [bundle.tokenizer.id_to_token(int(j)) for j in top.indices] == [t for t, _ in preds[k]]
        np.testing.assert_allclose(top.values.numpy(), [q for _, q in preds[k]], rtol=1e-5)


def test_fill_mask_in_pair_and_errors(bundle):
    preds = fill_mask(bundle, "oil prices rose .", top_k=3, text_pair="the [MASK] fell .")
    assert len(preds) == 1 and len(preds[0]) == 3
    with pytest.raises(EngineError, match="no \\[MASK\\]"):
        fill_mask(bundle, "no mask here")
    with pytest.raises(EngineError, match="empty"):
        fill_mask(bundle, "   ")


def test_next_sentence_probability_matches_nsp_head(bundle):
    a, b = "the man went to the store .", "he bought a gallon of milk ."
    p = next_sentence(bundle, a, b)
    assert not p.truncated
    _, out = forward(bundle, a, b)
    assert float(p) == pytest.approx(out.nsp_logits[0].softmax(-1)[0].item(), abs=1e-6)
    with pytest.raises(EngineError, match="sentence B is empty"):
        next_sentence(bundle, a, " ")


def test_minilm_has_no_heads_but_gives_attention(minilm):
    with pytest.raises(EngineError, match="MiniLM has no MLM head.*mlm or mlm\\+nsp"):
        fill_mask(minilm, "the man went to the [MASK] .")
    with pytest.raises(EngineError, match="MiniLM has no NSP head"):
        next_sentence(minilm, "a b .", "c d .")
    with pytest.raises(EngineError, match="no MLM head and no NSP head"):
        probe_set_accuracy(minilm)
    tokens, att = attention(minilm, "the cat sat on the mat .")
    assert att.shape == (6, 12, len(tokens), len(tokens))
    np.testing.assert_allclose(att.sum(-1), 1.0, atol=1e-5)


def test_long_input_is_truncated_and_says_so(bundle, tiny_run_max_pos):
    preds = fill_mask(bundle, "the [MASK] " + LONG)
    assert preds.truncated and len(preds.tokens) == tiny_run_max_pos and "truncated" in preds.notes[0]
    tokens, att = attention(bundle, LONG, "and then it fell .")
    assert tokens.truncated and att.shape[-1] == tiny_run_max_pos and tokens[-1] == "[SEP]"
    tokens, att = attention(bundle, LONG, max_length=20)
    assert tokens.truncated and att.shape[-1] == 20
    p = next_sentence(bundle, LONG, LONG)
    assert p.truncated and len(p.tokens) == tiny_run_max_pos
    with pytest.raises(EngineError, match="cut off by truncation"):
        fill_mask(bundle, LONG + " [MASK]")
    short = fill_mask(bundle, "the [MASK] rose .")
    assert not short.truncated and short.notes == []


def test_ltr_model_reads_a_mask_from_the_position_before(bundle):
    from engine.checkpoint import Bundle
    cfg = bundle.config.replace(causal=True)
    model = engine.BertForPreTraining(cfg)
    model.load_state_dict(bundle.model.state_dict())
    ltr = Bundle(model=model.eval(), tokenizer=bundle.tokenizer, config=cfg, path=bundle.path, info=dict(bundle.info))
    a = fill_mask(ltr, "the prime [MASK] said the government would cut taxes .", top_k=5)
    b = fill_mask(ltr, "the prime [MASK] went home early .", top_k=5)
    assert [t for t, _ in a[0]] == [t for t, _ in b[0]]  # only the left context matters
    assert [p for _, p in a[0]] == pytest.approx([p for _, p in b[0]], rel=1e-4)
    assert any("left-to-right" in n for n in a.notes)
    enc, out = forward(ltr, "the prime [MASK] went home early .")
    p = enc.ids.index(bundle.tokenizer.mask_id)
    expect = out.mlm_logits[0, p - 1].softmax(-1).topk(5)
    assert [t for t, _ in b[0]] == [bundle.tokenizer.id_to_token(int(i)) for i in expect.indices]
    r = probe_set_accuracy(ltr)
    it = [i for i in r["items"] if i["kind"] == "cloze"][0]
    assert it["predicted"] == fill_mask(ltr, it["input"], top_k=1)[0][0][0]
