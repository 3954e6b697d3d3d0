"""Packing is exact (engine/packing.py): a packed batch gives the same losses and gradients as the same sequences
run one by one without padding, for MLM + NSP and for a causal (left-to-right) model; position and segment ids
restart per sequence; no token attends across sequences."""
import random

import pytest
import torch
import torch.nn.functional as F

from engine.config import BertConfig
from engine.model import BertForPreTraining
from engine.packing import pack


def _model(causal=False, seed=0):
    torch.manual_seed(seed)
    cfg = BertConfig.preset("tiny", vocab_size=97, hidden_dropout=0.0, attention_dropout=0.0, causal=causal,
                            max_position_embeddings=64)
    return BertForPreTraining(cfg).double()


def _sequences(n=7, seed=0, vocab=97):
    rng = random.Random(seed)
    seqs, segs, masked = [], [], []
    for _ in range(n):
        L = rng.randint(4, 30)
        cut = rng.randint(2, L - 1)
        seqs.append([rng.randrange(5, vocab) for _ in range(L)])
        segs.append([0] * cut + [1] * (L - cut))
        masked.append(sorted(rng.sample(range(1, L), k=max(1, L // 5))))
    return seqs, segs, masked


def _loss(out_mlm, out_nsp, targets, nsp_labels):
    return F.cross_entropy(out_mlm, targets, reduction="sum") + F.cross_entropy(out_nsp, nsp_labels, reduction="sum")


def _one_by_one(model, seqs, segs, masked, nsp_labels):
    total = 0.0
    for i, (ids, seg, pos) in enumerate(zip(seqs, segs, masked)):
        out = model(torch.tensor([ids]), torch.tensor([seg]))
        logits = model.mlm(out.last_hidden_state[0, pos])
        total = total + _loss(logits, out.nsp_logits, torch.tensor([ids[p] for p in pos]), nsp_labels[i:i + 1])
    return total


def _packed(model, seqs, segs, masked, nsp_labels, row_len=40):
    batch = pack(seqs, row_len, segments=segs)
    seq = torch.tensor([i for i, pos in enumerate(masked) for _ in pos])
    where = torch.tensor([p for pos in masked for p in pos])
    rows, cols = batch.locate(seq, where)
    out = model(batch.input_ids, batch.token_type_ids, packing=batch, mlm_positions=(rows, cols))
    targets = torch.tensor([seqs[i][p] for i, pos in enumerate(masked) for p in pos])
    return _loss(out.mlm_logits, out.nsp_logits, targets, nsp_labels), batch


@pytest.mark.parametrize("causal", [False, True])
def test_a_packed_batch_gives_the_unpacked_losses_and_gradients(causal):
    seqs, segs, masked = _sequences()
    nsp = torch.tensor([i % 2 for i in range(len(seqs))])
    model = _model(causal)
    alone = _one_by_one(model, seqs, segs, masked, nsp)
    grads_alone = torch.autograd.grad(alone, list(model.parameters()), allow_unused=True)
    packed, batch = _packed(model, seqs, segs, masked, nsp)
    grads_packed = torch.autograd.grad(packed, list(model.parameters()), allow_unused=True)
    assert batch.input_ids.shape[0] < len(seqs)  # several sequences did share a row
    assert packed.item() == pytest.approx(alone.item(), rel=1e-10)
    for (name, _), a, b in zip(model.named_parameters(), grads_alone, grads_packed):
        if a is None:
            assert b is None or torch.count_nonzero(b) == 0, name
            continue
        torch.testing.assert_close(b, a, rtol=1e-9, atol=1e-11, msg=name)


def test_positions_and_segments_restart_per_sequence_and_attention_stays_inside():
    seqs, segs, _ = _sequences(n=5, seed=3)
    b = pack(seqs, 40, segments=segs)
    for i, (ids, seg) in enumerate(zip(seqs, segs)):
        r, c = b.starts[i].tolist()
        n = len(ids)
        assert b.input_ids[r, c:c + n].tolist() == ids and b.token_type_ids[r, c:c + n].tolist() == seg
        assert b.position_ids[r, c:c + n].tolist() == list(range(n))
    mask = b.attention_mask()[:, 0]  # (B, T, T)
    for i, ids in enumerate(seqs):
        r, c = b.starts[i].tolist()
        inside = torch.zeros(b.input_ids.shape[1], dtype=torch.bool)
        inside[c:c + len(ids)] = True
        assert torch.equal(mask[r, c], inside)  # the [CLS] sees its own sequence, nothing else
    assert 0.0 <= b.padding_fraction < 0.5
    # changing one sequence's tokens leaves every other sequence's outputs unchanged
    model = _model()
    out = model.bert(b.input_ids, b.token_type_ids, packing=b).last_hidden_state
    changed = b.input_ids.clone()
    r, c = b.starts[0].tolist()
    changed[r, c + 1:c + len(seqs[0])] = 7
    out2 = model.bert(changed, b.token_type_ids, packing=b).last_hidden_state
    for i in range(1, len(seqs)):
        r, c = b.starts[i].tolist()
        torch.testing.assert_close(out2[r, c:c + len(seqs[i])], out[r, c:c + len(seqs[i])])


def test_first_fit_decreasing_fills_rows_and_refuses_a_sequence_longer_than_a_row():
    b = pack([[1] * 30, [2] * 10, [3] * 25, [4] * 15], 40)
    assert b.input_ids.shape == (2, 40) and b.padding_fraction == pytest.approx(0.0)
    with pytest.raises(ValueError, match="longer than the row"):
        pack([[1] * 41], 40)


# ---------------------------------------------------------------- the pre-training step (engine/pretraining/step_inputs.py)
def _pretraining_batch(lengths, T, vocab=97, seed=0):
    """A padded MLM + NSP batch of the given real lengths, masked as pre-training masks it, with its slots."""
    from engine.pretraining.masking import mask_batch
    from engine.pretraining.step_inputs import add_prediction_slots, max_predictions
    g = torch.Generator().manual_seed(seed)
    B = len(lengths)
    ids = torch.zeros(B, T, dtype=torch.long)
    am, tt = torch.zeros_like(ids), torch.zeros_like(ids)
    for r, n in enumerate(lengths):
        ids[r, :n] = torch.randint(5, vocab, (n,), generator=g)
        ids[r, 0], ids[r, n - 1] = 2, 3
        am[r, :n], tt[r, n // 2:n] = 1, 1
    special = (am == 0) | (ids == 2) | (ids == 3)
    batch = {"input_ids": ids, "token_type_ids": tt, "attention_mask": am, "special_tokens_mask": special,
             "index": torch.arange(B), "next_sentence_label": torch.randint(0, 2, (B,), generator=g)}
    batch = mask_batch(batch, vocab, 4, [0, 1, 2, 3, 4], rate=0.3, generator=g)
    return add_prediction_slots(batch, max_predictions(T, 0.3))


def _step(model, batch):
    import contextlib
    from engine.objectives import objective
    from engine.pretraining.loss import forward_loss
    model.zero_grad(set_to_none=True)
    loss, sums = forward_loss(model, batch, objective("mlm+nsp"), torch.device("cpu"), contextlib.nullcontext())
    loss.backward()
    return loss.detach(), sums, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_a_packed_pretraining_step_gives_the_padded_steps_loss_sums_and_gradients():
    from engine.pretraining.step_inputs import pack_batch
    model = _model()
    batch = _pretraining_batch([30, 7, 12, 30, 5, 9, 16, 3], T=30)
    packed = pack_batch(batch)
    assert packed["input_ids"].shape[0] < batch["input_ids"].shape[0]  # fewer rows: the short instances share
    l1, s1, g1 = _step(model, batch)
    l2, s2, g2 = _step(model, packed)
    assert torch.allclose(l1, l2, atol=1e-10) and torch.allclose(s1, s2, atol=1e-8)
    assert g1.keys() == g2.keys() and all(torch.allclose(g1[k], g2[k], atol=1e-9) for k in g1)


def test_prediction_slots_are_fixed_per_sequence_and_hold_every_selected_position_in_order():
    from engine.pretraining.step_inputs import add_prediction_slots, max_predictions
    assert (max_predictions(128, 0.15), max_predictions(512, 0.15)) == (20, 80)  # google-research/bert's values
    assert max_predictions(32, 0.25) == 8 and max_predictions(16, 1.0) == 16 and max_predictions(9, 0.5, causal=True) == 9
    batch = _pretraining_batch([30, 7, 12], T=30)
    P = max_predictions(30, 0.3)
    assert batch["mlm_rows"].shape == batch["mlm_cols"].shape == batch["mlm_targets"].shape == (3 * P,)
    sel = batch["labels"] != -100
    assert batch["mlm_n"] == int(sel.sum())
    v = batch["mlm_valid"]
    assert torch.equal(batch["mlm_rows"][v] * 30 + batch["mlm_cols"][v], sel.reshape(-1).nonzero().squeeze(1))
    assert torch.equal(batch["mlm_targets"][v], batch["labels"][sel]) and bool((batch["mlm_targets"][~v] == -100).all())
    with pytest.raises(ValueError, match="slots"):
        add_prediction_slots(batch, 1)


def test_ignored_slots_add_nothing_to_the_vocabulary_loss_or_its_gradients():
    from engine.vocab_loss import vocab_cross_entropy
    g = torch.Generator().manual_seed(0)
    h = torch.randn(10, 8, dtype=torch.double, generator=g, requires_grad=True)
    w = torch.randn(50, 8, dtype=torch.double, generator=g, requires_grad=True)
    target = torch.randint(0, 50, (10,), generator=g)
    target[[1, 4, 9]] = -100
    loss, _ = vocab_cross_entropy(h, w, None, target, rows=3)
    loss.backward()
    h2, w2 = h.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    ref = F.cross_entropy(h2 @ w2.t(), target, reduction="sum", ignore_index=-100)
    ref.backward()
    close = lambda a, b: torch.allclose(a, b, rtol=1e-5, atol=1e-5)  # the loss runs its softmax in fp32
    assert close(loss.double(), ref) and close(h.grad, h2.grad) and close(w.grad, w2.grad)
    assert bool((h.grad[[1, 4, 9]] == 0).all())


# ---------------------------------------------------------------- fine-tuning (engine.heads.TaskModel)
@pytest.mark.parametrize("kind", ["classification", "tagging", "span", "multiple_choice"])
def test_a_packed_finetuning_batch_gives_the_unpacked_logits_and_gradients(kind):
    from engine.heads import TaskModel, pack_inputs
    torch.manual_seed(0)
    bert = _model().bert
    model = TaskModel(bert, kind, num_labels=3, dropout=0.0).double()
    g = torch.Generator().manual_seed(1)
    lengths = [12, 5, 9, 3, 12, 7] if kind != "multiple_choice" else [12, 5, 9, 3, 12, 7, 8, 4]
    T = max(lengths)
    ids = torch.zeros(len(lengths), T, dtype=torch.long)
    am = torch.zeros_like(ids)
    for r, n in enumerate(lengths):
        ids[r, :n] = torch.randint(5, 97, (n,), generator=g)
        am[r, :n] = 1
    tt = (torch.arange(T)[None, :] >= 3).long() * am
    if kind == "multiple_choice":
        ids, tt, am = (x.view(2, 4, T) for x in (ids, tt, am))
    batch = {"input_ids": ids, "token_type_ids": tt, "attention_mask": am}
    packing = pack_inputs(batch)
    assert packing.input_ids.shape[0] < len(lengths)
    outs, grads = [], []
    for p in (None, packing):
        model.zero_grad(set_to_none=True)
        logits = model(ids, tt, am, packing=p)
        real = am.bool() if kind in ("tagging", "span") else None  # per-token heads: padded positions are not read
        (logits[real] if real is not None else logits).pow(2).sum().backward()
        outs.append(logits[real] if real is not None else logits)
        grads.append({n: q.grad.clone() for n, q in model.named_parameters() if q.grad is not None})
    assert torch.allclose(outs[0], outs[1], atol=1e-10)
    assert all(torch.allclose(grads[0][k], grads[1][k], atol=1e-9) for k in grads[0])
