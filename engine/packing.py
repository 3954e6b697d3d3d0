"""Packed batches: several sequences share one row of the batch, with no padding between them.

A batch of short sequences padded to one length spends most of its compute on padding (a classroom fine-tuning
batch, a pre-training batch of google-research/bert's 10% short instances). Packing lays the sequences end to end
in rows of `row_len` tokens (first-fit decreasing, as Krell et al. 2021 and NVIDIA's MLPerf BERT pack), and the model
keeps them apart:

- attention stays inside each sequence: a block-diagonal mask (`attention_mask`), causal inside a block for LTR;
- position ids restart at 0 at each sequence's first token and segment ids are each sequence's own, so every token
  gets exactly the embeddings it gets alone;
- heads read their own positions: NSP and classifiers the [CLS] of each sequence (`starts`), MLM the masked
  positions mapped into the rows (`locate`).

So a packed batch gives the same losses and gradients as the same sequences unpacked, within floating-point
rounding (tests/engine/test_packing.py). Departure from the paper's batches: a step's rows no longer hold one instance each,
so a step of R rows holds more than R instances; the instances themselves (the NSP pairs, the short sequences) are
google-research/bert's, unchanged.
"""
from dataclasses import dataclass

import torch


@dataclass
class PackedBatch:
    input_ids: torch.Tensor  # (B, T) long, pad_id after the last sequence of a row
    token_type_ids: torch.Tensor  # (B, T) long, each sequence's own segment ids; 0 at padding
    position_ids: torch.Tensor  # (B, T) long, 0 at each sequence's first token; 0 at padding
    sequence_ids: torch.Tensor  # (B, T) long, which sequence of its row a token belongs to (0, 1, ...); -1 at padding
    starts: torch.Tensor  # (S, 2) long, (row, column) of each sequence's first token, in the order given to `pack`
    lengths: torch.Tensor  # (S,) long, each sequence's length

    @property
    def padding_fraction(self) -> float:
        return float((self.sequence_ids < 0).float().mean())

    def locate(self, sequence: torch.Tensor, position: torch.Tensor) -> tuple:
        """(rows, columns) in the batch of the given (sequence index, position in that sequence) pairs, e.g. the
        masked positions an MLM head reads: (N,), (N,) -> (N,), (N,)."""
        return self.starts[sequence, 0], self.starts[sequence, 1] + position

    def attention_mask(self, causal: bool = False) -> torch.Tensor:
        """(B, 1, T, T) bool, True where a query may attend to a key: the same sequence of the same row (padding
        attends only to padding, so no row of the softmax is empty); and for a causal model not a later key."""
        s = self.sequence_ids
        mask = (s[:, :, None] == s[:, None, :])[:, None]  # (B, 1, T, T)
        if causal:
            T = s.shape[1]
            mask = mask & torch.ones(T, T, dtype=torch.bool, device=s.device).tril()[None, None]
        return mask


def pack(sequences: list, row_len: int, pad_id: int = 0, segments: list = None) -> PackedBatch:
    """Pack `sequences` (lists of token ids, each at most `row_len` long; `segments` their segment ids, default 0)
    into as few rows of `row_len` as first-fit decreasing finds. `starts[i]` is where sequences[i] begins."""
    if any(len(s) > row_len for s in sequences):
        raise ValueError(f"a sequence is longer than the row ({row_len} tokens)")
    order = sorted(range(len(sequences)), key=lambda i: -len(sequences[i]))
    rows, free = [], []  # rows: [sequence indices]; free: tokens left in each row
    for i in order:
        n = len(sequences[i])
        r = next((r for r, f in enumerate(free) if f >= n), None)
        if r is None:
            rows.append([]), free.append(row_len)
            r = len(rows) - 1
        rows[r].append(i)
        free[r] -= n
    B = len(rows)
    ids = torch.full((B, row_len), pad_id, dtype=torch.long)
    seg = torch.zeros(B, row_len, dtype=torch.long)
    pos = torch.zeros(B, row_len, dtype=torch.long)
    sid = torch.full((B, row_len), -1, dtype=torch.long)
    starts = torch.zeros(len(sequences), 2, dtype=torch.long)
    for r, members in enumerate(rows):
        col = 0
        for k, i in enumerate(members):
            n = len(sequences[i])
            ids[r, col:col + n] = torch.tensor(sequences[i], dtype=torch.long)
            if segments is not None:
                seg[r, col:col + n] = torch.tensor(segments[i], dtype=torch.long)
            pos[r, col:col + n] = torch.arange(n)
            sid[r, col:col + n] = k
            starts[i] = torch.tensor([r, col])
            col += n
    lengths = torch.tensor([len(s) for s in sequences], dtype=torch.long)
    return PackedBatch(ids, seg, pos, sid, starts, lengths)
