"""What a pre-training step reads, made in the batch thread before the step (engine/pretraining/loop.py): the
predicted positions as a fixed number of slots per sequence, and, with packing, the sequences laid end to end.

Fixed prediction slots (google-research/bert's `max_predictions_per_seq`): masking selects exactly
max(1, round(rate * n)) of a sequence's n real tokens (engine/pretraining/masking.py), so no sequence of a batch
T tokens wide selects more than `max_predictions(T, rate)`, which rounds that bound up to a multiple of 4 (20 at
128 tokens and 80 at 512 for the paper's 15%, the released code's values). Every sequence gets that many slots:
the selected positions in column order, then unused slots (target IGNORE_INDEX, reading position 0) that add
nothing to the loss. The MLM head then gathers a (B * P) block whose shape depends only on the batch's shape, and
the step has no boolean indexing or `.item()` on the device: the counts the loss divides by are host numbers
made here. Nothing is dropped (the released code caps at its max_predictions_per_seq; here the cap is never
reached). A causal objective (LTR) predicts at every position: its slots are the T columns.

Packing (`pack_batch`, engine/packing.py): the batch's sequences share rows of the batch's width, first-fit
decreasing; a step still takes `batch_size` instances (google-research/bert's instances, NSP pairs and short
sequences unchanged), in fewer rows, so the same step gives the same losses and gradients as unpacked, within
floating-point rounding (tests/engine/test_packing.py). Departure from the paper's batches: a row of the batch
holds more than one instance.
"""
import torch

from engine.packing import pack_padded
from engine.vocab_loss import IGNORE_INDEX

SLOT_MULTIPLE = 4  # slots per sequence are rounded up to this (20 at 128 tokens, 80 at 512 for 15%)


def max_predictions(seq_len: int, rate: float, causal: bool = False) -> int:
    """Prediction slots per sequence of `seq_len` tokens: the most a sequence can select at `rate` (its n <= seq_len
    - 2 real tokens, masking.mask_tokens' count) rounded up to SLOT_MULTIPLE, at most seq_len; every position for
    a causal objective."""
    if causal:
        return int(seq_len)
    most = max(1, int(max(0, seq_len - 2) * float(rate) + 0.5))
    return min(int(seq_len), -(-most // SLOT_MULTIPLE) * SLOT_MULTIPLE)


def add_prediction_slots(batch: dict, slots: int) -> dict:
    """`batch` (with `labels` (B, T), IGNORE_INDEX where not predicted) plus the slots the MLM head reads:
    mlm_rows, mlm_cols, mlm_targets (B * P,) long, mlm_valid (B * P,) bool, mlm_n (an int: the predictions),
    padded (a bool: the batch has padding), real_tokens (an int).
    A new dict; the positions keep each row's column order (row-major over the batch)."""
    labels = batch["labels"]  # (B, T)
    B, T = labels.shape
    P = min(int(slots), T)
    sel = labels != IGNORE_INDEX  # (B, T)
    counts = sel.sum(1)  # (B,)
    most = int(counts.max()) if B else 0
    if most > P:
        raise ValueError(f"a sequence has {most} predicted positions, more than its {P} slots")
    cols = torch.argsort((~sel).to(torch.int8), dim=1, stable=True)[:, :P]  # (B, P): selected columns first, in order
    valid = sel.gather(1, cols)  # (B, P)
    cols = cols.masked_fill(~valid, 0)
    out = dict(batch)
    out["mlm_rows"] = torch.arange(B)[:, None].expand(B, P).reshape(-1)
    out["mlm_cols"] = cols.reshape(-1)
    out["mlm_targets"] = labels.gather(1, cols).masked_fill(~valid, IGNORE_INDEX).reshape(-1)
    out["mlm_valid"] = valid.reshape(-1)
    out["mlm_n"] = int(counts.sum())
    out["padded"] = not bool(batch["attention_mask"].bool().all())  # False: the step passes no attention mask
    out["real_tokens"] = int(batch["attention_mask"].sum())
    return out


def pack_batch(batch: dict) -> dict:
    """A batch with prediction slots (`add_prediction_slots`) with its sequences packed into rows of its width:
    input_ids, token_type_ids (B', T) with B' <= B, `packing` (engine.packing.PackedBatch), the slots moved to
    the packed rows and columns; attention_mask becomes None (the packing keeps the sequences apart); per-sequence
    fields (next_sentence_label, index) stay in the instances' order, which is the order the NSP logits come in."""
    # a row's tail after its last sequence gets id 0: no sequence attends to it and no head reads it
    packed = pack_padded(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
    rows, cols = packed.locate(batch["mlm_rows"], batch["mlm_cols"])
    out = dict(batch)
    out.update(input_ids=packed.input_ids, token_type_ids=packed.token_type_ids, attention_mask=None, packing=packed,
               mlm_rows=rows, mlm_cols=cols)
    for key in ("labels", "special_tokens_mask", "word_starts", "mask_input"):
        out.pop(key, None)  # (B, T) fields of the unpacked layout
    return out
