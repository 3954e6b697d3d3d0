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

    def _map(self, fn) -> "PackedBatch":
        return PackedBatch(*(fn(getattr(self, f)) for f in
                             ("input_ids", "token_type_ids", "position_ids", "sequence_ids", "starts", "lengths")))

    def to(self, device) -> "PackedBatch":
        """The same batch with its tensors on `device`."""
        return self._map(lambda t: t.to(device, non_blocking=True))

    def pin_memory(self) -> "PackedBatch":
        """The same batch in pinned host memory (copies to a GPU that do not wait)."""
        return self._map(lambda t: t.pin_memory())

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


def pack_padded(input_ids: torch.Tensor, token_type_ids: torch.Tensor, attention_mask: torch.Tensor,
                row_len: int = None, pad_id: int = 0) -> PackedBatch:
    """Pack the rows of a padded batch ((B, T) each; attention_mask 1 on real tokens) into rows of `row_len`
    (default T); `starts[b]` is where row b's sequence begins."""
    lengths = attention_mask.sum(1).tolist()  # (B,)
    seqs = [input_ids[b, :n].tolist() for b, n in enumerate(lengths)]
    segs = [token_type_ids[b, :n].tolist() for b, n in enumerate(lengths)] if token_type_ids is not None else None
    return pack(seqs, row_len or input_ids.shape[1], pad_id=pad_id, segments=segs)


def unpack(h: torch.Tensor, packing: PackedBatch, T: int) -> torch.Tensor:
    """Packed states (B', row_len, H) back in the padded layout (S, T, H): sequence s's tokens at columns
    0..len_s - 1 of row s, zeros after them (what every task head reads)."""
    S = packing.lengths.shape[0]
    cols = torch.arange(T, device=h.device)  # (T,)
    real = cols[None, :] < packing.lengths.to(h.device)[:, None]  # (S, T)
    rows = packing.starts[:, 0].to(h.device)[:, None].expand(S, T)
    at = (packing.starts[:, 1].to(h.device)[:, None] + cols[None, :]).clamp(max=h.shape[1] - 1)  # (S, T)
    return h[rows, at] * real[..., None].to(h.dtype)  # (S, T, H)
