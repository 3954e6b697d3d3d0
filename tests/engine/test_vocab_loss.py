"""The blocked vocabulary cross-entropy (engine.vocab_loss) against the plain F.linear + F.cross_entropy it replaces
in pre-training: loss, argmax and all three gradients, in fp32 and under bf16 autocast, for block sizes that do and
do not divide the rows; and the model's `mlm_targets` path against its logits."""
import pytest
import torch
import torch.nn.functional as F

from engine.config import BertConfig
from engine.model import BertForPreTraining
from engine.vocab_loss import block_rows, vocab_cross_entropy


def _inputs(N=300, H=16, V=97, seed=0):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(N, H, generator=g)
    w = torch.randn(V, H, generator=g) * 0.3
    b = torch.randn(V, generator=g) * 0.1
    t = torch.randint(0, V, (N,), generator=g)
    return h, w, b, t


def _run(fn, h, w, b, t, autocast):
    h, w, b = (x.clone().requires_grad_() for x in (h, w, b))
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        y = torch.tanh(h)  # something before the head, so the gradient flows through an op
        loss, pred = fn(y, w, b, t)
    (loss / len(t)).backward()
    return loss.detach(), pred, h.grad, w.grad, b.grad


def _plain(y, w, b, t):
    logits = F.linear(y, w, b).float()
    return F.cross_entropy(logits, t, reduction="sum"), logits.argmax(-1)


@pytest.mark.parametrize("rows", [1, 7, 64, 300, 1000])
def test_matches_the_plain_form_in_fp32(rows):
    h, w, b, t = _inputs()
    ref = _run(_plain, h, w, b, t, False)
    got = _run(lambda *a: vocab_cross_entropy(*a, rows=rows), h, w, b, t, False)
    assert torch.allclose(got[0], ref[0], rtol=1e-5)
    assert torch.equal(got[1], ref[1])
    for a, r in zip(got[2:], ref[2:]):
        assert torch.allclose(a, r, rtol=1e-4, atol=1e-6)


def test_matches_the_plain_form_under_bf16_autocast():
    h, w, b, t = _inputs(N=513, H=32, V=301)
    ref = _run(_plain, h, w, b, t, True)
    got = _run(lambda *a: vocab_cross_entropy(*a, rows=100), h, w, b, t, True)
    assert abs(got[0].item() - ref[0].item()) <= 1e-4 * abs(ref[0].item())  # the same bf16 logits, fp32 loss
    assert (got[1] == ref[1]).float().mean() > 0.99
    for a, r in zip(got[2:], ref[2:]):  # the plain form rounds the gradients of its bf16 multiplies too
        assert a.dtype == r.dtype == torch.float32
        assert (a - r).norm() / r.norm() < 1e-2


def test_the_loss_is_minus_log_softmax_at_the_target():
    h, w, b, t = _inputs(N=5, H=4, V=11)
    loss, pred = vocab_cross_entropy(h, w, b, t, rows=2)
    logits = h @ w.t() + b
    expect = -(logits.log_softmax(-1)[torch.arange(5), t]).sum()
    assert torch.allclose(loss, expect, rtol=1e-5)
    assert torch.equal(pred, logits.argmax(-1))


def test_no_rows_and_no_bias():
    h, w, _, t = _inputs(N=0)
    loss, pred = vocab_cross_entropy(h.requires_grad_(), w, None, t)
    assert loss.item() == 0.0 and pred.shape == (0,)
    h, w, _, t = _inputs(N=9)
    ref = _run(lambda y, w, b, t: _plain(y, w, None, t), h, w, torch.zeros(1), t, False)
    got = _run(lambda y, w, b, t: vocab_cross_entropy(y, w, None, t, rows=4), h, w, torch.zeros(1), t, False)
    assert torch.allclose(got[0], ref[0], rtol=1e-5) and torch.allclose(got[3], ref[3], rtol=1e-4, atol=1e-6)


def test_block_rows_keep_a_block_of_logits_bounded():
    cpu = torch.device("cpu")
    assert block_rows(cpu, 8000) * 8000 <= 1 << 21 and block_rows(cpu, 30522) >= 16
    assert block_rows(torch.device("cuda"), 30522) > block_rows(cpu, 30522)


def test_one_block_keeps_its_gradient_and_matches_the_plain_form_with_ignored_rows_and_no_bias():
    h, w, _, t = _inputs(N=40, H=16, V=97)
    t = t.clone()
    t[::3] = -100  # unused prediction slots
    plain = lambda y, w, b, t: (F.cross_entropy(F.linear(y, w).float(), t, reduction="sum"), F.linear(y, w).argmax(-1))
    for autocast in (False, True):
        ref = _run(plain, h, w, torch.zeros(1), t, autocast)
        got = _run(lambda y, w, b, t: vocab_cross_entropy(y, w, None, t), h, w, torch.zeros(1), t, autocast)
        assert block_rows(torch.device("cpu"), 97, 40) == 40  # one block: the kept path
        assert abs(got[0].item() - ref[0].item()) <= 1e-4 * abs(ref[0].item())
        for a, r in ((got[2], ref[2]), (got[3], ref[3])):
            assert a.dtype == r.dtype == torch.float32 and (a - r).norm() / r.norm() < (1e-2 if autocast else 1e-5)


def test_block_rows_keep_one_block_only_where_it_was_measured_faster():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert block_rows(cpu, 30522, 320) == 320  # MiniLM's MLM predictions at 16 x 128
    assert block_rows(cpu, 8000, 2048) == block_rows(cpu, 8000) < 2048  # the classroom's phase 2: blocks
    assert block_rows(cuda, 30522, 320) == block_rows(cuda, 30522)  # unmeasured on a GPU: blocks


def test_the_model_returns_the_loss_of_its_logits():
    cfg = BertConfig(vocab_size=50, hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32,
                     max_position_embeddings=16, hidden_dropout=0.0, attention_dropout=0.0)
    torch.manual_seed(0)
    model = BertForPreTraining(cfg)
    ids = torch.randint(5, 50, (3, 8))
    sel = torch.rand(3, 8, generator=torch.Generator().manual_seed(1)) < 0.5
    target = torch.randint(5, 50, (int(sel.sum()),))
    out = model(ids, torch.zeros_like(ids), torch.ones_like(ids), mlm_positions=sel)
    ref = F.cross_entropy(out.mlm_logits.float(), target, reduction="sum")
    ref.backward()
    ref_grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
    model.zero_grad(set_to_none=True)
    got = model(ids, torch.zeros_like(ids), torch.ones_like(ids), mlm_positions=sel, mlm_targets=target)
    assert got.mlm_logits is None
    assert torch.allclose(got.mlm_loss_sum, ref, rtol=1e-5)
    assert torch.equal(got.mlm_predictions, out.mlm_logits.argmax(-1))
    got.mlm_loss_sum.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert len(grads) == len(ref_grads)
    for a, r in zip(grads, ref_grads):
        assert torch.allclose(a, r, rtol=1e-4, atol=1e-6)
