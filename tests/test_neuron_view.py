"""The neuron view: engine.analysis.queries_and_keys against transformers' BertModel on the same weights (q = W_q h
+ b_q of each layer's input h, split into heads), softmax(q k / sqrt(D)) equal to the attention maps, and the
offline view's HTML (studio.neuron_view): the chosen head's numbers, no URL, tokens as data only."""
import json

import numpy as np
import pytest
import torch
import transformers

import engine
from engine import analysis


def _hf_bert(tmp_path, tokenizer, seed=0):
    torch.manual_seed(seed)
    cfg = transformers.BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=128, max_position_embeddings=64, attn_implementation="eager")
    hf = transformers.BertForPreTraining(cfg).eval()
    with torch.no_grad():  # random init leaves biases at 0; perturb them so the test sees b_q and b_k
        for n, p in hf.named_parameters():
            if "LayerNorm" in n or n.endswith("bias"):
                p.add_(0.1 * torch.randn_like(p))
    d = tmp_path / "hf"
    hf.save_pretrained(d)
    tokenizer.save(d)
    return hf, d


@pytest.mark.slow
def test_queries_and_keys_match_transformers_bert(tmp_path, bbc_tokenizer):
    hf, d = _hf_bert(tmp_path, bbc_tokenizer)
    bundle = engine.load(d)
    tokens, q, k, att = analysis.queries_and_keys(bundle, "the cat sat on the mat .", "it was happy .")
    T, L, A, D = len(tokens), 2, 4, 16
    assert q.shape == k.shape == (L, A, T, D) and att.shape == (L, A, T, T)
    # transformers' own query / key projections, captured by hooks during its forward pass
    seen = {}
    hooks = [m.register_forward_hook(lambda mod, inp, out, key=(l, name): seen.__setitem__(key, out[0].detach()))
             for l, layer in enumerate(hf.bert.encoder.layer) for name, m in (("q", layer.attention.self.query), ("k", layer.attention.self.key))]
    ids = torch.tensor([bundle.tokenizer.encode("the cat sat on the mat .", "it was happy .").ids])
    tt = torch.tensor([bundle.tokenizer.encode("the cat sat on the mat .", "it was happy .").type_ids])
    with torch.no_grad():
        ref = hf.bert(input_ids=ids, token_type_ids=tt, output_attentions=True)
    for h in hooks:
        h.remove()
    for l in range(L):
        hf_q = seen[(l, "q")].view(T, A, D).transpose(0, 1).numpy()  # (A, T, D)
        hf_k = seen[(l, "k")].view(T, A, D).transpose(0, 1).numpy()
        np.testing.assert_allclose(q[l], hf_q, atol=1e-5, rtol=1e-5)
        np.testing.assert_allclose(k[l], hf_k, atol=1e-5, rtol=1e-5)
        np.testing.assert_allclose(att[l], ref.attentions[l][0].numpy(), atol=1e-5)
    # the attention is softmax(q . k / sqrt(D)) of these vectors
    s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(D)
    p = np.exp(s - s.max(-1, keepdims=True))
    np.testing.assert_allclose(p / p.sum(-1, keepdims=True), att, atol=1e-5)
