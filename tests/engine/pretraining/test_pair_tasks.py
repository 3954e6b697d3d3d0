"""The other pair task on a run's held-out pairs: SOP pairs rebuilt from an NSP run's IsNext pairs (in order exactly
when labelled 0, swapped exactly when labelled 1), NSP pairs rebuilt from an SOP run's pairs (IsNext in order,
NotNext with another pair's B), and the accuracy read from the pair head under its own key (eval_cross_<other task>_acc), not the run's own task's."""
import contextlib
from types import SimpleNamespace

import torch

from engine.pretraining.pair_tasks import (collate_pairs, next_pairs, order_pairs, other_task, other_task_accuracy,
                                           split_rows, truncate_pair)

CLS, SEP = 2, 3


def held_out_batch(pairs: list) -> dict:
    """A held-out batch as eval_batches makes it: [CLS] A [SEP] B [SEP] rows with their pair labels."""
    return collate_pairs(pairs, CLS, SEP)


def test_rows_split_back_into_their_segments():
    pairs = [([10, 11], [12], 0), ([20], [21, 22, 23], 1)]
    rows = split_rows(held_out_batch(pairs))
    assert [(a, b, label) for _, a, _, b, label in rows] == pairs
    assert {r[0] for r in rows} == {CLS} and {r[2] for r in rows} == {SEP}


def test_order_pairs_keep_only_isnext_and_swap_exactly_the_label_1_ones():
    nsp = [([1], [2], 0), ([3], [99], 1), ([4], [5], 0), ([6], [7], 0), ([8], [98], 1), ([9], [10], 0)]
    sop = order_pairs(split_rows(held_out_batch(nsp)))
    assert len(sop) == 4  # the IsNext pairs only: a NotNext B is from another document, not A's continuation
    originals = {(a[0], b[0]) for a, b, label in nsp if label == 0}
    for a, b, label in sop:
        assert ((a[0], b[0]) in originals) == (label == 0)  # in order exactly when labelled so
        assert ((b[0], a[0]) in originals) == (label == 1)  # swapped exactly when labelled so
    assert [label for _, _, label in sop] == [0, 1, 0, 1]


def test_next_pairs_put_sop_pairs_back_in_order_and_take_notnext_b_from_another_pair():
    sop = [([1], [2], 0), ([4], [3], 1), ([5], [6], 0), ([8], [7], 1)]
    nsp = next_pairs(split_rows(held_out_batch(sop)))
    assert [label for _, _, label in nsp] == [0, 1, 0, 1]
    in_order = [(1, 2), (3, 4), (5, 6), (7, 8)]
    for i, (a, b, label) in enumerate(nsp):
        assert a[0] == in_order[i][0]
        assert (b[0] == in_order[i][1]) == (label == 0)  # IsNext: A's own continuation; NotNext: another pair's B
    assert other_task("nsp") == "sop" and other_task("sop") == "nsp"


class AlwaysCoherent(torch.nn.Module):
    """A pair head that answers class 0 (IsNext / in order) for every pair."""

    def forward(self, input_ids, token_type_ids, attention_mask, mlm_positions=None):
        return SimpleNamespace(nsp_logits=torch.tensor([[1.0, 0.0]]).repeat(len(input_ids), 1))


def test_the_accuracy_is_reported_under_the_other_tasks_key():
    nsp = [([i], [i + 1], 0) for i in range(0, 40, 2)] + [([i], [i + 50], 1) for i in range(10)]
    batches = [held_out_batch(nsp[:16]), held_out_batch(nsp[16:])]
    rec = other_task_accuracy(AlwaysCoherent(), batches, "nsp", "cpu", contextlib.nullcontext)
    assert rec == {"eval_cross_sop_acc": 0.5}  # balanced SOP pairs, one class always: chance
    rec = other_task_accuracy(AlwaysCoherent(), batches, "sop", "cpu", contextlib.nullcontext)
    assert set(rec) == {"eval_cross_nsp_acc"} and rec["eval_cross_nsp_acc"] == 0.5
    assert other_task_accuracy(AlwaysCoherent(), [], "nsp", "cpu", contextlib.nullcontext) == {}


def test_a_rebuilt_pair_is_cut_to_the_longest_held_out_row():
    a, b = truncate_pair(list(range(5)), list(range(10, 30)), 16)
    assert len(a) + len(b) + 3 == 16 and a == list(range(5)) and b == list(range(10, 18))
    assert truncate_pair([1], [2], 16) == ([1], [2])
