"""Each fast path of engine/kernels/ (and the bench's training step) against the plain path of engine/model.py it replaces."""
import pytest
import torch
import torch.nn.functional as F

import engine
import engine.kernels.linear as fl
import engine.model as em
from engine import kernels
from engine.kernels import attention as ka, dropout as kd, unpad as ku
from engine.device import default_precision, resolve_compile
from engine.errors import EngineError
from engine.bench.scenarios import make_optimizer
from engine.config import BertConfig
from engine.model import BertForPreTraining

V = 300


def _model(seed=0, dropout=0.0, **kw):
    torch.manual_seed(seed)
    cfg = BertConfig.preset("tiny", vocab_size=V, hidden_size=64, num_heads=4, max_position_embeddings=64,
                            hidden_dropout=dropout, attention_dropout=dropout, **kw)
    m = BertForPreTraining(cfg)
    with torch.no_grad():  # LayerNorms at 1/0 and zero biases would hide mistakes; perturb every tensor
        for n, p in m.named_parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    return m


def _batch(B=5, T=24, lengths=(24, 9, 17, 2, 12), seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, V, (B, T), generator=g)
    ids[:, 0] = 2
    lens = torch.tensor(lengths)
    am = (torch.arange(T)[None] < lens[:, None]).long()  # right padding
    tt = (torch.arange(T)[None] >= (lens[:, None] // 2)).long() * am
    return ids, tt, am


def _grads(m, ids, tt, am, **kw):
    m.zero_grad(set_to_none=True)
    real = am.bool()
    sel = real & (torch.arange(ids.shape[1])[None] % 3 == 1)
    out = m(ids, tt, am, mlm_positions=sel, **kw)
    loss = F.cross_entropy(out.mlm_logits, ids[sel]) + F.cross_entropy(out.nsp_logits, torch.tensor([0, 1, 1, 0, 1][: ids.shape[0]]))
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None}


def _assert_grads_close(a, b, tol=1e-5):
    assert a.keys() == b.keys()
    for n in a:
        torch.testing.assert_close(a[n], b[n], atol=tol, rtol=tol, msg=n)


# ------------------------------------------------------------------ oneDNN linear on CPU
needs_onednn = pytest.mark.skipif(not fl.onednn_available(), reason="this torch build has no oneDNN linear")


@pytest.fixture
def force_onednn(monkeypatch):
    """Route every linear layer through oneDNN, however small."""
    monkeypatch.setattr(fl, "FAST_CPU_LINEAR", True)
    monkeypatch.setattr(fl, "ONEDNN_MIN_MACS", 0)
    monkeypatch.setattr(fl, "ONEDNN_MIN_MACS_GELU", 0)


@needs_onednn
@pytest.mark.parametrize("shape", [(7, 33), (2, 5, 64), "strided"])
@pytest.mark.parametrize("bias", [True, False])
def test_onednn_linear_matches_f_linear_forward_and_backward(force_onednn, shape, bias):
    g = torch.Generator().manual_seed(1)
    if shape == "strided":  # e.g. the pooler's x[:, 0]
        x = torch.randn(6, 5, 40, generator=g)[:, 0].requires_grad_()
        shape = x.shape
    else:
        x = torch.randn(*shape, generator=g, requires_grad=True)
    w = torch.randn(48, shape[-1], generator=g, requires_grad=True)
    b = torch.randn(48, generator=g, requires_grad=True) if bias else None
    for gelu in (False, True):
        ref = F.linear(x, w, b)
        ref = F.gelu(ref) if gelu else ref
        y = fl.linear(x, w, b, gelu=gelu)
        torch.testing.assert_close(y, ref, atol=1e-5, rtol=1e-5)
        gy = torch.randn(ref.shape, generator=g)
        ref_grads = torch.autograd.grad(ref, [t for t in (x, w, b) if t is not None], gy)
        grads = torch.autograd.grad(y, [t for t in (x, w, b) if t is not None], gy)
        for a, r in zip(grads, ref_grads):
            torch.testing.assert_close(a, r, atol=1e-4, rtol=1e-5)
        assert "_OneDNNLinearBackward" in _graph_nodes(y)  # the fast path really ran
        with torch.no_grad():  # the inference path, GELU fused into the oneDNN call
            torch.testing.assert_close(fl.linear(x, w, b, gelu=gelu), ref, atol=1e-5, rtol=1e-5)


def _graph_nodes(t) -> set:
    seen, todo = set(), [t.grad_fn]
    while todo:
        f = todo.pop()
        if f is not None and type(f).__name__ not in seen:
            seen.add(type(f).__name__)
            todo.extend(n for n, _ in f.next_functions)
    return seen


@pytest.mark.slow
@needs_onednn
def test_onednn_model_equals_reference_model(force_onednn, monkeypatch):
    m = _model()
    ids, tt, am = _batch()
    real = am.bool()
    m.eval()
    with torch.no_grad():
        fast = m(ids, tt, am, output_hidden_states=True)
        monkeypatch.setattr(fl, "FAST_CPU_LINEAR", False)
        ref = m(ids, tt, am, output_hidden_states=True)
    for a, r in zip(fast.hidden_states, ref.hidden_states):
        torch.testing.assert_close(a[real], r[real], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(fast.mlm_logits[real], ref.mlm_logits[real], atol=1e-5, rtol=1e-5)
    m.train()  # dropout 0: training mode is deterministic
    monkeypatch.setattr(fl, "FAST_CPU_LINEAR", True)
    lf, gf = _grads(m, ids, tt, am)
    monkeypatch.setattr(fl, "FAST_CPU_LINEAR", False)
    lr, gr = _grads(m, ids, tt, am)
    torch.testing.assert_close(lf, lr, atol=1e-5, rtol=1e-5)
    _assert_grads_close(gf, gr, tol=1e-4)


def test_linear_keeps_f_linear_under_autocast_and_for_small_products(monkeypatch):
    calls = []
    monkeypatch.setattr(fl, "_onednn_linear", lambda *a, **k: calls.append(1) or F.linear(a[0], a[1], a[2]))
    monkeypatch.setattr(fl, "ONEDNN_MIN_MACS", 0)
    x, w = torch.randn(4, 8), torch.randn(6, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = fl.linear(x, w)
    assert y.dtype == torch.bfloat16 and not calls  # autocast's own bf16 kernel, not the fp32 oneDNN call
    monkeypatch.setattr(fl, "ONEDNN_MIN_MACS", 10 ** 9)
    fl.linear(x, w)
    assert not calls
    if fl.onednn_available():
        monkeypatch.setattr(fl, "ONEDNN_MIN_MACS", 0)
        monkeypatch.setattr(fl, "FAST_CPU_LINEAR", True)
        fl.linear(x, w)
        assert calls


@pytest.mark.parametrize("capability, width, onednn", [("AVX512", 384, True), ("AVX512", 1024, True),
                                                       ("AVX2", 128, True), ("AVX2", 256, True), ("AVX2", 384, False),
                                                       ("DEFAULT", 128, False)])
def test_the_cpu_and_the_width_decide_between_onednn_and_mkl_unless_forced(monkeypatch, capability, width, onednn):
    calls = []
    monkeypatch.setattr(fl, "_onednn_linear", lambda *a, **k: calls.append(1) or F.linear(a[0], a[1], a[2]))
    monkeypatch.setattr(fl, "onednn_available", lambda: True)
    monkeypatch.setattr(fl, "ONEDNN_MIN_MACS", 0)
    monkeypatch.setattr(fl, "FAST_CPU_LINEAR", None)
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability)
    for x, w in ((torch.randn(4, width), torch.randn(4 * width, width)),   # (M, H) -> (M, 4H): the smaller side is K
                 (torch.randn(4, 4 * width), torch.randn(width, 4 * width))):  # (M, 4H) -> (M, H): the smaller is N
        calls.clear()
        torch.testing.assert_close(fl.linear(x, w), F.linear(x, w))
        assert fl.onednn_chosen(width) is onednn and bool(calls) is onednn
    for forced in (True, False):
        monkeypatch.setattr(fl, "FAST_CPU_LINEAR", forced)
        assert fl.onednn_chosen(width) is forced


# ------------------------------------------------------------------ attention, MLM positions
@pytest.mark.slow
def test_sdpa_path_equals_explicit_softmax_path_with_padding_and_causal():
    for causal in (False, True):
        m = _model(causal=causal).eval()
        ids, tt, am = _batch()
        real = am.bool()
        with torch.no_grad():
            fast = m(ids, tt, am, output_hidden_states=True)
            ref = m(ids, tt, am, output_hidden_states=True, output_attentions=True)
        assert fast.attentions is None and len(ref.attentions) == 2
        for a, r in zip(fast.hidden_states, ref.hidden_states):
            torch.testing.assert_close(a[real], r[real], atol=1e-5, rtol=1e-5)
        # padded keys get no attention; causal: nothing to the right
        probs = ref.attentions[0]  # (B, A, T, T)
        assert float(probs[1, :, :, 9:].abs().max()) == 0.0
        if causal:
            assert float(probs[0].triu(1).abs().max()) == 0.0


@pytest.mark.parametrize("mask_kind", ["none", "padding", "blocks"])
def test_softmax_attention_equals_the_plain_formula_with_the_same_dropout_mask(mask_kind):
    g = torch.Generator().manual_seed(1)
    N, A, T, D = 3, 4, 10, 8
    q, k, v = (torch.randn(N, A, T, D, generator=g, requires_grad=True) for _ in range(3))
    mask = {"none": None,
            "padding": (torch.arange(T)[None] < torch.tensor([10, 4, 7])[:, None])[:, None, None, :],  # (N, 1, 1, T)
            "blocks": (torch.arange(T)[:, None] // 5 == torch.arange(T)[None] // 5)[None, None].expand(N, 1, T, T)}[mask_kind]
    gy = torch.randn(N, A, T, D, generator=g)
    for p, training in ((0.0, True), (0.3, False), (0.3, True)):
        torch.manual_seed(7)
        y, probs = ka.fast_softmax_attention(q, k, v, mask, p, training)
        gq, gk, gv = torch.autograd.grad(y, (q, k, v), gy)
        torch.manual_seed(7)  # the same draws for the plain formula
        scores = q @ k.transpose(-2, -1) / D ** 0.5
        if mask is not None:
            scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        ref_probs = scores.softmax(-1)
        dropped = ref_probs
        if training and p > 0:
            keep, scale = kd.cpu_dropout_mask(ref_probs.shape, p, ref_probs.dtype)
            assert float(keep.mean()) < 0.85  # the draws do drop
            dropped = torch.where(keep.bool(), ref_probs * scale, 0.0)
        ref = dropped @ v
        rq, rk, rv = torch.autograd.grad(ref, (q, k, v), gy)
        torch.testing.assert_close(probs, ref_probs, atol=1e-6, rtol=1e-5)
        for a, r in ((y, ref), (gq, rq), (gk, rk), (gv, rv)):
            torch.testing.assert_close(a, r, atol=1e-5, rtol=1e-5)


@pytest.mark.slow
def test_mlm_head_at_selected_positions_equals_full_projection():
    m = _model().eval()
    ids, tt, am = _batch()
    sel = am.bool() & (torch.arange(24)[None] % 4 == 1)
    with torch.no_grad():
        full = m(ids, tt, am).mlm_logits  # (B, T, V)
        part = m(ids, tt, am, mlm_positions=sel).mlm_logits  # (N, V)
    assert part.shape == (int(sel.sum()), V)
    torch.testing.assert_close(part, full[sel], atol=1e-5, rtol=1e-5)


# ------------------------------------------------------------------ unpadding
@pytest.mark.parametrize("causal", [False, True])
def test_unpad_equals_padded_at_real_positions_and_is_zero_at_padding(causal):
    m = _model(causal=causal).eval()
    ids, tt, am = _batch(T=30, lengths=(26, 9, 17, 2, 12))  # last real column 25: the batch is cut there
    real = am.bool()
    with torch.no_grad():
        ref = m(ids, tt, am, output_hidden_states=True)
        out = m(ids, tt, am, output_hidden_states=True, unpad=True)
    assert out.last_hidden_state.shape == ref.last_hidden_state.shape == (5, 30, 64)
    assert len(out.hidden_states) == len(ref.hidden_states) == 3
    for a, r in zip(out.hidden_states, ref.hidden_states):
        torch.testing.assert_close(a[real], r[real], atol=1e-5, rtol=1e-5)
        assert float(a[~real].abs().max()) == 0.0
    torch.testing.assert_close(out.pooled_output, ref.pooled_output, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out.nsp_logits, ref.nsp_logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out.mlm_logits[real], ref.mlm_logits[real], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("rows_multiple", [1, 64])  # 66 real tokens: no extra rows, or 62 of them
def test_unpad_gradients_equal_padded_gradients(rows_multiple, monkeypatch):
    monkeypatch.setattr(ku, "unpad_multiple", lambda device, hidden_size: rows_multiple)
    m = _model().train()  # dropout 0
    ids, tt, am = _batch(T=30, lengths=(26, 9, 17, 2, 12))
    lp, gp = _grads(m, ids, tt, am)
    lu, gu = _grads(m, ids, tt, am, unpad=True)
    torch.testing.assert_close(lu, lp, atol=1e-5, rtol=1e-5)
    _assert_grads_close(gu, gp)


def test_unpadded_rows_round_the_real_tokens_up_with_a_padded_slot():
    real = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]], dtype=torch.bool)
    index = real.reshape(-1).nonzero().squeeze(1)  # (4,): 0, 1, 2, 4
    assert ku.unpadded_rows(index, real).tolist() == [0, 1, 2, 4] + [3] * (ku.UNPAD_ROWS - 4)
    full = torch.ones(2, ku.UNPAD_ROWS // 2 + 1, dtype=torch.bool)
    full[1, -1] = False  # one padded slot, the last
    idx = full.reshape(-1).nonzero().squeeze(1)  # UNPAD_ROWS + 1 real tokens: the rows round up to 2 x UNPAD_ROWS
    rows = ku.unpadded_rows(idx, full)
    assert rows.numel() == 2 * ku.UNPAD_ROWS and rows[:idx.numel()].equal(idx)
    assert set(rows[idx.numel():].tolist()) == {full.numel() - 1}
    assert ku.unpadded_rows(idx[:ku.UNPAD_ROWS], full).equal(idx[:ku.UNPAD_ROWS])  # a multiple already: as it is
    assert ku.unpadded_rows(idx, full, 1).equal(idx)  # multiple 1: the real tokens alone


def test_rows_are_rounded_only_where_onednn_runs_the_linear_layers(monkeypatch):
    cpu = torch.device("cpu")
    asked = []
    monkeypatch.setattr(ku, "onednn_chosen", lambda width: asked.append(width) or width <= 256)
    assert ku.unpad_multiple(cpu, 384) == 1 and asked == [384]  # fp32 on MKL: no per-shape kernel builds
    assert ku.unpad_multiple(cpu, 256) == ku.UNPAD_ROWS  # fp32 on oneDNN at this width
    with torch.autocast("cpu", dtype=torch.bfloat16):  # bf16 runs on oneDNN
        assert ku.unpad_multiple(cpu, 384) == ku.UNPAD_ROWS
    assert ku.unpad_multiple(torch.device("meta"), 384) == ku.UNPAD_ROWS


@pytest.mark.slow
def test_unpad_with_little_padding_falls_back_and_still_zeroes_padding():
    m = _model().eval()
    ids, tt, am = _batch(T=24, lengths=(24, 24, 23, 24, 24))  # 1/120 padding: under UNPAD_MIN_PADDING
    real = am.bool()
    with torch.no_grad():
        ref = m(ids, tt, am)
        out = m(ids, tt, am, unpad=True)
        none_tt = m(ids, None, am, unpad=True)
        ref_none_tt = m(ids, None, am)
    torch.testing.assert_close(out.last_hidden_state[real], ref.last_hidden_state[real], atol=1e-5, rtol=1e-5)
    assert float(out.last_hidden_state[~real].abs().max()) == 0.0
    torch.testing.assert_close(none_tt.last_hidden_state[real], ref_none_tt.last_hidden_state[real], atol=1e-5, rtol=1e-5)
    # no attention mask, or attention maps asked for: unpad does not apply, the padded path runs
    with torch.no_grad():
        a = m(ids, tt, None, unpad=True)
        b = m(ids, tt, None)
        c = m(ids, tt, am, unpad=True, output_attentions=True)
    torch.testing.assert_close(a.last_hidden_state, b.last_hidden_state)
    assert c.attentions is not None


@pytest.mark.slow
def test_unpad_without_token_types_and_with_dropout_trains():
    m = _model(dropout=0.1).train()
    ids, tt, am = _batch()
    out = m(ids, None, am, unpad=True, mlm_positions=am.bool())
    loss = F.cross_entropy(out.mlm_logits, ids[am.bool()])
    loss.backward()
    assert torch.isfinite(loss) and m.bert.layers[0].attention.qkv.weight.grad.abs().sum() > 0


# ------------------------------------------------------------------ precision and optimizer
def test_bf16_autocast_is_close_to_fp32():
    m = _model().eval()
    ids, tt, am = _batch()
    real = am.bool()
    with torch.no_grad():
        ref = m(ids, tt, am).last_hidden_state
        with torch.autocast("cpu", dtype=torch.bfloat16):
            low = m(ids, tt, am).last_hidden_state
    assert low.dtype == torch.float32  # autocast runs LayerNorm in fp32, and every layer ends in one
    err = (low.float()[real] - ref[real]).abs().max()
    assert 0 < err < 0.1  # bf16 rounding is visible but small after the LayerNorms


def test_default_precision_is_bf16_only_with_native_bf16_units(monkeypatch):
    for amx, avx512_bf16, expected in ((False, False, "fp32"), (True, False, "bf16"), (False, True, "bf16")):
        monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx, raising=False)
        monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16, raising=False)
        assert default_precision("cpu") == expected
    if not torch.cuda.is_available():
        assert default_precision("cuda") == "fp32"


def test_compile_auto_compiles_on_cuda_with_triton_only(monkeypatch):
    import importlib.util
    from engine.distributed import Dist
    from engine.pretraining.config import PretrainConfig
    from engine.pretraining.loop import wrap_model
    real_find_spec = importlib.util.find_spec
    for has_triton in (True, False):
        monkeypatch.setattr(importlib.util, "find_spec",
                            lambda name, *a: (object() if has_triton else None) if name == "triton" else real_find_spec(name, *a))
        assert resolve_compile("auto", "cuda") is has_triton
        assert resolve_compile("auto", "cpu") is False
    assert resolve_compile("on", "cpu") is True and resolve_compile("off", "cuda") is False
    with pytest.raises(EngineError, match="--compile 'yes'.*auto, on, off"):
        resolve_compile("yes", "cpu")
    model = _model(seed=0)
    assert wrap_model(model, PretrainConfig.classroom(), Dist(), torch.device("cpu")) is model  # the default on a CPU: eager
    assert wrap_model(model, PretrainConfig.classroom(compile="on"), Dist(), torch.device("cpu")) is not model


def test_to_device_pins_host_tensors_only():
    """A host tensor goes to CUDA through pinned memory; one already on the GPU (the benchmark moves its batches
    once) is passed on as it is: pinning it raises."""
    from engine.device import to_device
    calls = []

    class Fake:
        def __init__(self, where):
            self.device = torch.device(where)

        def pin_memory(self):
            if self.device.type != "cpu":
                raise RuntimeError("cannot pin 'torch.cuda.LongTensor' only dense CPU tensors can be pinned")
            calls.append("pin")
            return self

        def to(self, device, non_blocking=False):
            calls.append(("to", str(device), non_blocking))
            return self

    to_device(Fake("cuda"), "cuda")
    assert calls == [("to", "cuda", False)]
    calls.clear()
    to_device(Fake("cpu"), "cuda")
    assert calls == ["pin", ("to", "cuda", True)]
    calls.clear()
    to_device(Fake("cpu"), "cpu")
    assert calls == [("to", "cpu", False)]


@pytest.mark.slow
def test_fused_adamw_step_equals_foreach_step():
    m1, m2 = _model(seed=3), _model(seed=3)
    o1 = make_optimizer(m1, 1e-3, torch.device("cpu"))
    o2 = torch.optim.AdamW([{"params": g["params"], "weight_decay": g["weight_decay"]} for g in
                            [{"params": [p for p in m2.parameters() if p.dim() >= 2], "weight_decay": 0.01},
                             {"params": [p for p in m2.parameters() if p.dim() < 2], "weight_decay": 0.0}]],
                           lr=1e-3, betas=(0.9, 0.999), eps=1e-6, foreach=True)
    ids, tt, am = _batch()
    for m, o in ((m1, o1), (m2, o2)):
        m.train()
        for _ in range(2):
            _grads(m, ids, tt, am)
            o.step()
    for (n, a), (_, b) in zip(m1.named_parameters(), m2.named_parameters()):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5, msg=n)
    # fused exactly where this torch has a fused AdamW for the device (CPU: torch >= 2.4), the plain one elsewhere
    try:
        torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))], fused=True)
        fused_here = True
    except (RuntimeError, TypeError, ValueError):
        fused_here = False
    assert bool(o1.defaults.get("fused")) is fused_here
    assert [g["weight_decay"] for g in o1.param_groups] == [0.01, 0.0]  # no decay on LayerNorm weights and biases


def test_engine_public_api_still_exported():
    assert engine.BertForPreTraining is BertForPreTraining and engine.BertModel is em.BertModel


def test_cpu_dropout_rate_scale_and_gradient():
    """Dropout's CPU mask (engine.kernels.dropout.cpu_dropout_mask): the drop rate is p to within sampling error, the kept
    elements are scaled so the mean is kept, the backward passes the gradient through the same mask with the same
    scale, and torch.manual_seed repeats the draws."""
    DROP_LEVELS, _dropout = kd.DROP_LEVELS, kd.dropout
    n = 400_000
    for p in (0.1, 0.5, 0.9):
        x = torch.ones(n, dtype=torch.float64, requires_grad=True)
        torch.manual_seed(1)
        y = _dropout(x, p, True)
        rate = float((y == 0).double().mean())
        q = round(p * DROP_LEVELS) / DROP_LEVELS
        assert abs(rate - q) < 5 * (q * (1 - q) / n) ** 0.5, (p, rate)
        kept = y[y != 0]
        assert torch.allclose(kept, torch.full_like(kept, 1 / (1 - q)))
        assert abs(float(y.detach().mean()) - 1) < 0.02
        y.backward(torch.full_like(y, 2.0))
        assert torch.equal(x.grad, 2.0 * y.detach())  # same mask, same scale
        torch.manual_seed(1)
        assert torch.equal(_dropout(x.detach(), p, True), y.detach())
    x = torch.randn(3, 5, 7)
    assert _dropout(x, 0.1, False) is x and _dropout(x, 0.0, True) is x
    assert torch.equal(_dropout(x, 1.0, True), torch.zeros_like(x))
    odd = _dropout(torch.ones(3, 5, 7), 0.3, True)  # a size not a multiple of four words
    assert odd.shape == (3, 5, 7) and 0 < float((odd == 0).float().mean()) < 1


def test_cpu_dropout_applies_the_keep_mask_as_numbers_with_the_same_values():
    """The mask as a 0/1 tensor of the activations' dtype (engine.kernels.dropout.cpu_dropout_mask) gives what
    torch.where(keep, x * scale, 0) gives with the same draws, value for value, forward and backward, in bf16 and
    fp32, for rates whose threshold is 0 (nothing dropped) and near 2^15."""
    DROP_LEVELS, _drop_bits, _dropout, cpu_dropout_mask = kd.DROP_LEVELS, kd.drop_bits, kd.dropout, kd.cpu_dropout_mask
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        for p in (0.1, 1e-6, 0.99):
            x = torch.randn(4, 6, 33, 17).to(dtype).requires_grad_(True)
            torch.manual_seed(3)
            y = _dropout(x, p, True)
            torch.manual_seed(3)
            bits, drop = _drop_bits(x.numel(), p)  # the draws; kept where at or over the threshold
            keep, scale = (bits >= drop).view(x.shape), DROP_LEVELS / (DROP_LEVELS - drop)
            assert y.dtype == dtype and torch.equal(y, torch.where(keep, x.detach() * scale, 0)), (dtype, p)
            g = torch.randn_like(y)
            y.backward(g)
            assert torch.equal(x.grad, torch.where(keep, g * scale, 0)), (dtype, p)
            torch.manual_seed(3)
            mask, s2 = cpu_dropout_mask(x.shape, p, dtype)
            assert mask.dtype == dtype and s2 == scale and torch.equal(mask.bool(), keep)
            assert set(mask.unique().tolist()) <= {0.0, 1.0}
    torch.manual_seed(0)
    assert bool(cpu_dropout_mask((1000,), 1e-6, torch.float32)[0].all())  # threshold 0: every element kept


def test_cpu_dropout_draws_are_independent_within_a_word():
    """The four 15-bit values cut from one 64-bit draw are independent: neighbours are dropped together at
    about p squared, not more."""
    cpu_dropout_mask = kd.cpu_dropout_mask
    torch.manual_seed(0)
    mask, _ = cpu_dropout_mask((1_000_000,), 0.5, torch.float32)
    drop = (mask == 0).view(-1, 4)
    for i in range(3):
        both = float((drop[:, i] & drop[:, i + 1]).float().mean())
        assert abs(both - 0.25) < 0.005, (i, both)


def _word_grad(m, ids, tt, am, plain: bool, monkeypatch, **kw):
    """The word embeddings' gradient of a loss on the encoder's output (and the MLM head's, tied, when there is one);
    `plain`: with F.embedding, the path word_embedding replaces on a CPU."""
    if plain:
        monkeypatch.setattr(em, "word_embedding", lambda i, w, pad, kept: F.embedding(i, w, pad))
    m.zero_grad(set_to_none=True)
    out = m(ids, tt, am, mlm_positions=am.bool() if m.mlm is not None else None, **kw)
    loss = out.last_hidden_state.pow(2).mean() + (out.mlm_logits.logsumexp(-1).mean() if m.mlm is not None else 0)
    loss.backward()
    monkeypatch.undo()
    return m.bert.embeddings.word.weight.grad.clone()


@pytest.mark.parametrize("unpad", [False, True])
def test_kept_word_embedding_gradient_equals_f_embedding(monkeypatch, unpad):
    """Value for value, with padding (the padding row stays 0), tied to the MLM decoder or not, padded or unpadded."""
    ids, tt, am = _batch()
    ids[am == 0] = 0  # the padding id, as real batches carry it
    for m in (_model(), _model(has_mlm_head=False)):
        got = _word_grad(m, ids, tt, am, False, monkeypatch, unpad=unpad)
        ref = _word_grad(m, ids, tt, am, True, monkeypatch, unpad=unpad)
        assert torch.equal(got, ref) and got.abs().sum() > 0
        if m.mlm is None:
            assert not got[0].any()


def test_kept_word_embedding_gradient_memory_is_reused_only_when_nobody_holds_it():
    emb = _model().bert.embeddings
    w = emb.word.weight
    ids = torch.tensor([[3, 7, 7, 0], [5, 3, 0, 0]])

    def backward(scale=1.0):
        (emb(ids) * scale).sum().backward()
        return w.grad

    first = backward()
    expected = first.clone()
    ptr = first.data_ptr()
    assert ptr == emb.word_grad.memory.data_ptr()  # autograd took the kept memory as .grad, no copy
    del first
    w.grad = None  # zero_grad(set_to_none=True)
    assert backward().data_ptr() == ptr  # nothing held it: the next step accumulates into the same memory
    assert torch.equal(w.grad, expected)
    held = w.grad  # a caller keeps the old gradient: the next backward must not overwrite it
    w.grad = None
    backward(2.0)
    assert w.grad.data_ptr() != held.data_ptr() and torch.equal(held, expected)
    assert torch.allclose(w.grad, 2 * expected)
    view, held = w.grad[3], None  # a view of it is enough to keep it
    w.grad = None
    backward()
    assert torch.equal(view, 2 * expected[3])
    backward()  # .grad kept (accumulation over micro-batches): the sum
    assert torch.allclose(w.grad, 2 * expected)
    emb.eval()
    assert emb.word_grad.memory is None  # evaluation keeps no gradient memory


# ------------------------------------------------------------------ the last layer at [CLS] only (pooled_only)
def _pooled_and_grads(bert, fwd):
    bert.zero_grad(set_to_none=True)
    c = fwd()
    (c * torch.linspace(-1, 1, c.shape[-1])).sum().backward()
    return c.detach(), {n: p.grad.clone() for n, p in bert.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("mode", ["padded", "unpad", "unpad-fallback", "packed", "packed-causal", "padded-causal"])
def test_pooled_only_gives_the_full_paths_pooled_output_and_gradients(mode):
    from engine.packing import pack_padded
    bert = _model(causal=mode.endswith("causal")).bert.train()  # dropout 0; the explicit-softmax training path
    lengths = (24, 24, 23, 24, 24) if mode == "unpad-fallback" else (26, 9, 17, 2, 12)
    ids, tt, am = _batch(T=30, lengths=lengths)
    kw = {"unpad": mode.startswith("unpad")}
    if mode.startswith("packed"):
        p = pack_padded(ids, tt, am)
        assert p.input_ids.shape[0] < ids.shape[0]
        args, kw = (p.input_ids, p.token_type_ids), {"packing": p}
    else:
        args = (ids, tt, am)
    ref, gref = _pooled_and_grads(bert, lambda: bert(*args, **kw).pooled_output)
    out = bert(*args, **kw, pooled_only=True)
    assert out.last_hidden_state is None and out.pooled_output.shape == ref.shape
    c, g = _pooled_and_grads(bert, lambda: bert(*args, **kw, pooled_only=True).pooled_output)
    torch.testing.assert_close(c, ref, atol=1e-5, rtol=1e-5)
    _assert_grads_close(g, gref)
    with torch.no_grad():  # evaluation: the SDPA path
        torch.testing.assert_close(bert.eval()(*args, **kw, pooled_only=True).pooled_output,
                                   bert(*args, **kw).pooled_output, atol=1e-5, rtol=1e-5)


def test_pooled_only_refuses_hidden_states_and_attention_maps():
    bert = _model().bert.eval()
    ids, tt, am = _batch()
    for kw in ({"output_hidden_states": True}, {"output_attentions": True}):
        with pytest.raises(EngineError, match="pooled_only"):
            bert(ids, tt, am, pooled_only=True, **kw)


@pytest.mark.parametrize("kind,bilstm,causal,only_c", [("classification", False, False, True),
                                                       ("multiple_choice", False, False, True),
                                                       ("classification", True, False, False),
                                                       ("classification", False, True, False),
                                                       ("tagging", False, False, False)])
def test_a_head_runs_the_last_layer_at_cls_only_when_it_reads_only_c(kind, bilstm, causal, only_c, monkeypatch):
    from engine.heads import TaskModel
    model = TaskModel(_model(causal=causal).bert, kind, num_labels=3, bilstm=bilstm, dropout=0.0).train()
    seen = []
    forward = type(model.bert).forward
    monkeypatch.setattr(type(model.bert), "forward", lambda self, *a, **kw: seen.append(kw.get("pooled_only")) or forward(self, *a, **kw))
    ids, tt, am = _batch()
    if kind == "multiple_choice":
        ids, tt, am = (x[:4].view(2, 2, -1) for x in (ids, tt, am))
    logits = model(ids, tt, am)
    assert seen == [only_c] and model.reads_only_c == only_c
    logits.float().pow(2).sum().backward()
    assert torch.isfinite(logits).all()


# ------------------------------------------------------------------ the kernels' one switch
@pytest.mark.parametrize("causal", [False, True])
def test_the_switch_runs_the_plain_path_with_the_same_values(causal, monkeypatch):
    """engine.kernels.use(False): the model's loss and every gradient equal the kernels' (dropout 0, so the paths are
    comparable value for value), padded and with unpad asked for, and the attention maps equal too."""
    ids, tt, am = _batch(T=30, lengths=(26, 9, 17, 2, 12))
    m = _model(causal=causal).train()
    for unpad in (False, True):
        fast_loss, fast = _grads(m, ids, tt, am, unpad=unpad)
        with kernels.use(False):
            plain_loss, plain = _grads(m, ids, tt, am, unpad=unpad)
        torch.testing.assert_close(fast_loss, plain_loss, atol=1e-5, rtol=1e-5)
        _assert_grads_close(fast, plain)
    m.eval()
    with torch.no_grad():
        a = m(ids, tt, am, output_attentions=True).attentions
        with kernels.use(False):
            b = m(ids, tt, am, output_attentions=True).attentions
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y, atol=1e-6, rtol=1e-5)
    assert kernels.enabled()  # the block put the switch back


def test_the_switch_calls_no_kernel(monkeypatch):
    """With the switch off, a training step on a CPU reaches none of the fast paths: no CPU dropout mask, no kept
    gradient, no fast explicit attention, no unpadded rows, no oneDNN call."""
    def forbidden(*a, **k):
        raise AssertionError("a kernel ran with the switch off")

    for mod, name in ((kd, "cpu_dropout_mask"), (ka, "fast_softmax_attention"), (ku, "unpadded_rows"),
                      (fl, "_onednn_linear")):
        monkeypatch.setattr(mod, name, forbidden)
    monkeypatch.setattr(em, "fast_softmax_attention", forbidden)
    monkeypatch.setattr(em, "forward_unpadded", forbidden)
    monkeypatch.setattr(fl, "FAST_CPU_LINEAR", True)
    monkeypatch.setattr(fl, "ONEDNN_MIN_MACS", 0)
    m = _model(dropout=0.1).train()
    ids, tt, am = _batch()
    with kernels.use(False):
        loss, grads = _grads(m, ids, tt, am, unpad=True)
        assert m.bert.embeddings.word_grad.memory is None  # F.embedding's own gradient, not the kept memory
        assert torch.isfinite(loss) and grads
    with pytest.raises(AssertionError, match="a kernel ran"):
        _grads(m, ids, tt, am)  # and with it on, they do run


def test_plain_softmax_attention_is_the_formula():
    """engine.model.softmax_attention, the reference the fast attention is checked against, is the textbook formula;
    a query with every key masked attends evenly (the fast path's behaviour), never NaN."""
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(2, 3, 5, 4, generator=g) for _ in range(3))
    mask = torch.ones(2, 1, 5, 5, dtype=torch.bool)
    mask[1, :, 2] = False
    y, probs = em.softmax_attention(q, k, v, mask, 0.0, False)
    s = (q @ k.transpose(-2, -1) / 2.0).masked_fill(~mask, float("-inf"))
    s[1, :, 2] = 0.0  # every key masked: even weights
    torch.testing.assert_close(probs, s.softmax(-1))
    torch.testing.assert_close(y, s.softmax(-1) @ v)
    fy, fp = ka.fast_softmax_attention(q, k, v, mask, 0.0, False)
    torch.testing.assert_close(fp, probs)
    torch.testing.assert_close(fy, y)
