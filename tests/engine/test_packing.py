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
