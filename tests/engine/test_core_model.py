"""Parity of the engine's BERT with transformers on copied weights, checkpoints in both directions, causal mode."""
import json

import pytest
import torch
import transformers

import engine
from engine.checkpoint import minilm_path


def _hf_tiny(tmp_path, vocab_size, seed=0):
    torch.manual_seed(seed)
    cfg = transformers.BertConfig(vocab_size=vocab_size, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=256, max_position_embeddings=64, attn_implementation="eager")
    hf = transformers.BertForPreTraining(cfg).eval()
    # random init leaves LayerNorms at 1/0 and biases at 0; perturb them so the test sees every tensor
    with torch.no_grad():
        for n, p in hf.named_parameters():
            if "LayerNorm" in n or n.endswith("bias"):
                p.add_(0.1 * torch.randn_like(p))
    d = tmp_path / "hf"
    hf.save_pretrained(d)
    return hf, d


def _batch(vocab, B=3, T=24, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab, (B, T), generator=g)
    ids[:, 0] = 2
    tt = torch.zeros_like(ids)
    tt[:, T // 2:] = 1
    am = torch.ones_like(ids)
    am[1, T - 7:] = 0
    if B > 2:
        am[2, T - 2:] = 0
    return ids, tt, am


@pytest.mark.slow
def test_parity_with_transformers_pretraining_model(tmp_path, bbc_tokenizer):
    hf, d = _hf_tiny(tmp_path, bbc_tokenizer.vocab_size)
    bbc_tokenizer.save(d)
    b = engine.load(d)
    assert b.info["missing_heads"] == []
    ids, tt, am = _batch(bbc_tokenizer.vocab_size)
    with torch.no_grad():
        ref = hf(input_ids=ids, token_type_ids=tt, attention_mask=am, output_hidden_states=True, output_attentions=True)
        out = b.model(ids, tt, am, output_attentions=True, output_hidden_states=True)
    assert out.mlm_logits.shape == ref.prediction_logits.shape
    real = am.bool()
    torch.testing.assert_close(out.mlm_logits[real], ref.prediction_logits[real], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out.nsp_logits, ref.seq_relationship_logits, atol=1e-5, rtol=1e-5)
    assert len(out.hidden_states) == len(ref.hidden_states) == 3
    for a, r in zip(out.hidden_states, ref.hidden_states):
        torch.testing.assert_close(a[real], r[real], atol=1e-5, rtol=1e-5)
    assert len(out.attentions) == 2
    for a, r in zip(out.attentions, ref.attentions):
        assert a.shape == (3, 4, 24, 24)
        torch.testing.assert_close(a, r, atol=1e-5, rtol=1e-5)
    # the SDPA path (no attention maps asked for) gives the same hidden states as the explicit path
    with torch.no_grad():
        fast = b.model(ids, tt, am)
    torch.testing.assert_close(fast.last_hidden_state[real], out.last_hidden_state[real], atol=1e-5, rtol=1e-5)
    # MLM evaluated only at selected positions equals the full projection there
    sel = torch.zeros_like(am, dtype=torch.bool)
    sel[0, 3] = sel[1, 5] = sel[2, 10] = True
    with torch.no_grad():
        part = b.model(ids, tt, am, mlm_positions=sel)
    torch.testing.assert_close(part.mlm_logits, out.mlm_logits[sel], atol=1e-5, rtol=1e-5)


def test_training_gradients_match_transformers(tmp_path, bbc_tokenizer):
    """One pre-training step's loss (MLM at the selected positions + NSP) and every parameter's gradient equal
    transformers' on copied weights: the engine trains the model transformers would."""
    import torch.nn.functional as F
    from engine.checkpoint import from_hf_state_dict

    hf, d = _hf_tiny(tmp_path, bbc_tokenizer.vocab_size)
    bbc_tokenizer.save(d)
    ours = engine.load(d).model
    ids, tt, am = _batch(bbc_tokenizer.vocab_size, B=4, T=32, seed=1)
    g = torch.Generator().manual_seed(2)
    sel = (torch.rand(ids.shape, generator=g) < 0.25) & am.bool()  # (B, T) the positions predicted
    labels = ids[sel]
    ids = ids.masked_fill(sel, 3)  # their input: a [MASK]-like id
    nsp = torch.tensor([0, 1, 1, 0])
    hf.eval()  # no dropout (gradients flow the same in eval mode)
    ours.eval()
    ref = hf(input_ids=ids, token_type_ids=tt, attention_mask=am)
    out = ours(ids, tt, am, mlm_positions=sel)
    loss_ref = F.cross_entropy(ref.prediction_logits[sel], labels) + F.cross_entropy(ref.seq_relationship_logits, nsp)
    loss = F.cross_entropy(out.mlm_logits, labels) + F.cross_entropy(out.nsp_logits, nsp)
    loss_ref.backward()
    loss.backward()
    torch.testing.assert_close(loss, loss_ref, atol=1e-5, rtol=1e-5)
    grads = {k: p.grad if p.grad is not None else torch.zeros_like(p) for k, p in hf.named_parameters()}
    want = from_hf_state_dict({**dict(hf.state_dict()), **grads}, ours.config, "gradients")
    for name, p in ours.named_parameters():
        torch.testing.assert_close(p.grad, want[name], atol=1e-6, rtol=1e-4, msg=lambda m: f"{name}: {m}")


def test_engine_save_loads_in_transformers(tmp_path, bbc_tokenizer):
    cfg = engine.BertConfig.preset("tiny", vocab_size=bbc_tokenizer.vocab_size, max_position_embeddings=64)
    torch.manual_seed(3)
    model = engine.BertForPreTraining(cfg).eval()
    out_dir = engine.save(model, tmp_path / "ck", tokenizer=bbc_tokenizer)
    assert {"config.json", "model.safetensors", "vocab.txt"} <= {p.name for p in out_dir.iterdir()}
    hf, info = transformers.BertForPreTraining.from_pretrained(out_dir, output_loading_info=True, attn_implementation="eager")
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    hf.eval()
    ids, tt, am = _batch(bbc_tokenizer.vocab_size, seed=1)
    with torch.no_grad():
        ref = hf(input_ids=ids, token_type_ids=tt, attention_mask=am)
        ours = model(ids, tt, am)
    real = am.bool()
    torch.testing.assert_close(ours.mlm_logits[real], ref.prediction_logits[real], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ours.nsp_logits, ref.seq_relationship_logits, atol=1e-5, rtol=1e-5)
    # and back: engine.load of our own folder gives the same outputs
    again = engine.load(out_dir)
    with torch.no_grad():
        o2 = again.model(ids, tt, am)
    torch.testing.assert_close(o2.mlm_logits, ours.mlm_logits)
    assert json.loads((out_dir / "config.json").read_text())["num_hidden_layers"] == 2


@pytest.mark.slow
def test_minilm_real_weights_match_transformers():
    b = engine.load("minilm")
    assert (b.config.num_layers, b.config.hidden_size, b.config.num_heads) == (6, 384, 12)
    assert b.info["missing_heads"] == ["mlm", "nsp"]
    assert b.model.mlm is None and b.model.nsp is None
    ref = transformers.BertModel.from_pretrained(str(minilm_path()), attn_implementation="eager").eval()
    enc = b.tokenizer.encode_batch([("The cat sat on the mat.", "It was happy."), ("Stocks fell sharply in London today.", "Nobody knows why.")])
    T = max(len(e.ids) for e in enc)
    ids = torch.tensor([e.ids + [0] * (T - len(e.ids)) for e in enc])
    tt = torch.tensor([e.type_ids + [0] * (T - len(e.ids)) for e in enc])
    am = torch.tensor([[1] * len(e.ids) + [0] * (T - len(e.ids)) for e in enc])
    with torch.no_grad():
        r = ref(input_ids=ids, token_type_ids=tt, attention_mask=am, output_hidden_states=True, output_attentions=True)
        o = b.model(ids, tt, am, output_hidden_states=True, output_attentions=True)
    real = am.bool()
    for a, c in zip(o.hidden_states, r.hidden_states):
        torch.testing.assert_close(a[real], c[real], atol=1e-4, rtol=1e-4)
    for a, c in zip(o.attentions, r.attentions):
        torch.testing.assert_close(a, c, atol=1e-4, rtol=1e-4)
    assert o.mlm_logits is None and o.nsp_logits is None


def test_hf_folder_without_heads_reports_missing(tmp_path, bbc_tokenizer):
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=bbc_tokenizer.vocab_size, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)
    transformers.BertModel(cfg).save_pretrained(tmp_path / "enc")
    bbc_tokenizer.save(tmp_path / "enc")
    b = engine.load(tmp_path / "enc")
    assert b.info["missing_heads"] == ["mlm", "nsp"]
    assert b.model(torch.tensor([[2, 10, 3]])).mlm_logits is None


@pytest.mark.slow
def test_causal_mode_has_no_right_context_leak_and_survives_save(tmp_path, bbc_tokenizer):
    cfg = engine.BertConfig.preset("tiny", vocab_size=bbc_tokenizer.vocab_size, causal=True, max_position_embeddings=64)
    torch.manual_seed(0)
    m = engine.BertForPreTraining(cfg).eval()
    ids, tt, am = _batch(bbc_tokenizer.vocab_size, B=2, T=20, seed=4)
    am[:] = 1
    t = 9
    changed = ids.clone()
    changed[:, t + 1:] = torch.randint(5, bbc_tokenizer.vocab_size, changed[:, t + 1:].shape)
    with torch.no_grad():
        for attn in (False, True):
            a = m(ids, tt, am, output_attentions=attn, output_hidden_states=True)
            b = m(changed, tt, am, output_attentions=attn, output_hidden_states=True)
            for x, y in zip(a.hidden_states, b.hidden_states):
                torch.testing.assert_close(x[:, : t + 1], y[:, : t + 1])
            assert not torch.allclose(a.last_hidden_state[:, t + 1:], b.last_hidden_state[:, t + 1:])
    engine.save(m, tmp_path / "ltr", tokenizer=bbc_tokenizer)
    assert engine.load(tmp_path / "ltr").config.causal is True


def test_presets_and_parameter_count():
    base = engine.BertConfig.preset("base")
    assert (base.num_layers, base.hidden_size, base.num_heads, base.intermediate_size) == (12, 768, 12, 3072)
    m = engine.BertForPreTraining(engine.BertConfig.preset("tiny", vocab_size=1000))
    assert m.num_parameters() == m.config.num_parameters()
    # BERT-BASE is about 110M parameters with the 30,522-token vocabulary (the paper's count)
    assert 105e6 < base.num_parameters(with_heads=False) < 115e6
    large = engine.BertConfig.preset("large")
    assert (large.num_layers, large.hidden_size, large.num_heads) == (24, 1024, 16)
    assert 330e6 < large.num_parameters(with_heads=False) < 345e6
    custom = engine.BertConfig.preset("tiny", num_layers=3, hidden_size=256, num_heads=4)
    assert custom.intermediate_size == 1024
    with pytest.raises(engine.EngineError, match="unknown preset"):
        engine.BertConfig.preset("huge")
    with pytest.raises(engine.EngineError, match="divisible"):
        engine.BertConfig.preset("tiny", num_heads=3)


def test_sequence_longer_than_positions_is_a_clear_error(bbc_tokenizer):
    m = engine.BertForPreTraining(engine.BertConfig.preset("tiny", vocab_size=bbc_tokenizer.vocab_size, max_position_embeddings=16))
    with pytest.raises(engine.EngineError, match="longer than the model's 16 positions"):
        m(torch.zeros(1, 17, dtype=torch.long))
