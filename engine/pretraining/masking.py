"""Masked-LM corruption (paper 3.1, Table 8): select positions, then replace them by [MASK], a random token or
themselves (80/10/10); whole-word masking; the held-out set masked once with a fixed seed.

Masking happens at batch time (`mask_tokens`, `mask_batch`; instances are stored unmasked, engine/pretraining/cache.py);
the held-out set is masked once with a fixed seed (`fixed_eval_masking`) with the paper's standard masking
(PAPER_RATE, PAPER_RATIOS) whatever a run's own, so runs compare.

Departures from the paper / released code, on purpose:
- Masking selects exactly max(1, round(rate * n)) positions per sequence (as the released code, not a
  Bernoulli draw per token), where n counts only real, non-special tokens (the released code counts
  [CLS]/[SEP] too). A step reads them at a fixed number of slots per sequence, google-research/bert's
  `max_predictions_per_seq` (engine/pretraining/step_inputs.py), which this count never exceeds, so none is
  dropped.
- RANDOM replacements are drawn uniformly from the non-special vocabulary (the released code draws from
  the whole vocabulary, [CLS]/[SEP]/[PAD]/[MASK] included).
- Whole-word masking takes whole words in random order while the selected pieces stay within the count,
  stopping at the first word that would overflow (the released code skips it and tries later words); the
  first word that fits is always taken, so at least one position is selected; words longer than the whole
  count ahead of it are skipped, and a row with no word that short takes its first word cut at the count, so
  a row never selects more than the count, and never more than its step's prediction slots.
- Masking is dynamic (a new draw per batch), as RoBERTa, by default; static masking (`static_seed`: each instance
  masked the same way every epoch, as the released code's dupe-factor copies, whose `dupe_factor` passes give
  differently cut copies here) is the setting RoBERTa's Table 1 compares it with.

Span masking (SpanBERT, Joshi et al. 2020, section 3.1; `span_selection`, `mask_tokens(..., spans=True)`): spans
of whole words whose length in words is drawn from a geometric distribution (p = SPAN_P = 0.2) truncated to at most
SPAN_MAX = 10 words and renormalised (mean 3.8), each starting at a uniformly drawn word, until the row's budget (the
same max(1, round(rate * n)) pieces) is reached; MASK / RANDOM / SAME is decided once per span, so a span is replaced
whole. Departures: a span stops at [SEP], padding and the end of the row; a span that would overlap one already
chosen is drawn again; a word that would take the row past its budget ends the row's spans, where SpanBERT's code cuts
the last span at the budget token by token; a span whose first word alone passes the budget is drawn again, and a
row none of whose words fits takes its first word cut at the budget. No row passes its budget.
"""
import bisect
import math
from typing import TYPE_CHECKING, Optional, Sequence

import numpy as np
import torch

from engine.errors import EngineError

if TYPE_CHECKING:  # (engine.pretraining.cache holds the data; masking needs only its collate)
    from engine.pretraining.cache import PretrainingData

from engine.vocab_loss import IGNORE_INDEX  # label of positions the MLM loss skips  # noqa: F401 (re-exported)
PAPER_RATE = 0.15  # the paper's share of tokens selected: the held-out masking and mask_tokens' default
PAPER_RATIOS = (0.8, 0.1, 0.1)  # MASK, RANDOM, SAME shares of the selected tokens (paper 3.1)
EVAL_MASK_SEED = 12345  # the held-out set is masked once with this seed (same positions in every run)
SPAN_P = 0.2  # SpanBERT's geometric distribution of span lengths (in words)
SPAN_MAX = 10  # SpanBERT's longest span, in words


def check_masking_args(rate: float, ratios) -> tuple:
    """(rate, ratios) as floats, or an EngineError naming the fix: ratios are three shares MASK,RANDOM,SAME that sum
    to 1, the rate is in (0, 1]."""
    try:
        ratios = tuple(float(r) for r in ratios)
        rate = float(rate)
    except (TypeError, ValueError):
        raise EngineError(f"masking rate {rate!r} and ratios {ratios!r} must be numbers; e.g. rate 0.15, ratios 0.8,0.1,0.1")
    if len(ratios) != 3:
        raise EngineError(f"masking ratios need 3 numbers MASK,RANDOM,SAME (got {len(ratios)}); e.g. 0.8,0.1,0.1")
    if not all(0.0 <= r <= 1.0 for r in ratios):
        raise EngineError(f"masking ratios {ratios} must each be between 0 and 1; e.g. 0.8,0.1,0.1")
    if abs(sum(ratios) - 1.0) > 1e-6:
        raise EngineError(f"masking ratios {ratios} sum to {sum(ratios):.6g}, not 1; MASK+RANDOM+SAME must add up to 1")
    if not (0.0 < rate <= 1.0) or math.isnan(rate):
        raise EngineError(f"masking rate {rate} must be in (0, 1]; the paper uses 0.15")
    return rate, ratios


def mask_tokens(input_ids: torch.Tensor, special_tokens_mask: torch.Tensor, vocab_size: int, mask_id: int,
                rate: float = PAPER_RATE, ratios=PAPER_RATIOS, generator: Optional[torch.Generator] = None,
                word_starts: Optional[torch.Tensor] = None, attention_mask: Optional[torch.Tensor] = None,
                special_ids: Optional[Sequence[int]] = None, spans: bool = False):
    """Masked-LM corruption (paper 3.1): select positions, then replace them by [MASK] / a random token /
    themselves with probabilities `ratios` = (MASK, RANDOM, SAME).

    input_ids (B, T) long; special_tokens_mask (B, T) bool/int, True at [CLS]/[SEP]/[PAD] (never selected);
    attention_mask (B, T), optional, 0 at padding (also never selected). Per row exactly
    max(1, round(rate * n)) of its n selectable positions are selected (0 when n == 0). With `word_starts`
    (B, T) bool (True where a word begins; a `##` piece continues the word before it), whole words are
    selected. RANDOM tokens are uniform over ids in [0, vocab_size) except `special_ids` and `mask_id`
    (`special_ids` defaults to the ids found at special positions of this batch; pass the tokenizer's
    `special_ids` to be exact). With `spans` (and `word_starts`), SpanBERT's spans of whole words (`span_selection`),
    each replaced whole. All randomness comes from `generator`.
    Returns (masked_ids (B, T) long, labels (B, T) long: the original id where selected, -100 elsewhere).
    """
    rate, (p_mask, p_rand, _p_same) = check_masking_args(rate, ratios)
    if input_ids.dim() != 2:
        raise EngineError(f"mask_tokens expects input_ids of shape (batch, length), got {tuple(input_ids.shape)}")
    if tuple(special_tokens_mask.shape) != tuple(input_ids.shape):
        raise EngineError(f"special_tokens_mask {tuple(special_tokens_mask.shape)} does not match input_ids {tuple(input_ids.shape)}")
    B, T = input_ids.shape
    device = input_ids.device
    input_ids = input_ids.long()
    selectable = ~special_tokens_mask.bool()  # (B, T)
    if attention_mask is not None:
        selectable &= attention_mask.bool()
    n_real = selectable.sum(dim=1)  # (B,)
    k = torch.clamp(torch.floor(n_real.double() * rate + 0.5).long(), min=1)
    k = torch.where(n_real > 0, torch.minimum(k, n_real), torch.zeros_like(k))  # (B,)

    span_of = None  # (B, T): the span each selected position belongs to, when masking spans
    if spans:
        if word_starts is None:
            raise EngineError("span masking needs word starts (a batch's word_starts); whole-word pieces make the spans")
        selected, span_of = span_selection(selectable, word_starts, k, generator)
    elif word_starts is None:
        selected = token_selection(selectable, k, generator)
    else:
        if tuple(word_starts.shape) != tuple(input_ids.shape):
            raise EngineError(f"word_starts {tuple(word_starts.shape)} does not match input_ids {tuple(input_ids.shape)}")
        selected = word_selection(selectable, word_starts, k, generator)

    labels = torch.where(selected, input_ids, torch.full_like(input_ids, IGNORE_INDEX))
    u = torch.rand(B, T, generator=generator, device=device)
    if span_of is not None:  # one draw per span: its first position's, shared by the whole span
        u = torch.gather(u, 1, span_of)
    to_mask = selected & (u < p_mask)
    to_rand = selected & (u >= p_mask) & (u < p_mask + p_rand)
    masked = input_ids.clone()
    masked[to_mask] = mask_id
    n_rand = int(to_rand.sum())
    if n_rand:
        if special_ids is None:
            special_ids = torch.unique(input_ids[~selectable]).tolist() if (~selectable).any() else []
        ok = torch.ones(vocab_size, dtype=torch.bool, device=device)
        banned = [int(i) for i in special_ids if 0 <= int(i) < vocab_size] + ([int(mask_id)] if 0 <= mask_id < vocab_size else [])
        ok[torch.tensor(banned, dtype=torch.long, device=device)] = False
        allowed = ok.nonzero().squeeze(1)  # ids RANDOM may draw
        if len(allowed) == 0:
            raise EngineError(f"the vocabulary of {vocab_size} ids has no non-special token to draw RANDOM replacements from; use a real vocabulary")
        pick = torch.randint(len(allowed), (n_rand,), generator=generator, device=device)
        masked[to_rand] = allowed[pick]
    return masked, labels


def token_selection(selectable: torch.Tensor, k: torch.Tensor, generator: Optional[torch.Generator] = None):
    """Exactly k[b] random selectable positions of each row b: (B, T) bool (rank random scores, keep the k smallest)."""
    B, T = selectable.shape
    device = selectable.device
    scores = torch.rand(B, T, generator=generator, device=device)
    scores = scores.masked_fill(~selectable, 2.0)
    order = scores.argsort(dim=1)  # (B, T)
    ranks = torch.empty_like(order)
    ranks.scatter_(1, order, torch.arange(T, device=device).expand(B, T))
    return (ranks < k[:, None]) & selectable


def word_selection(selectable: torch.Tensor, word_starts: torch.Tensor, k: torch.Tensor,
                   generator: Optional[torch.Generator] = None):
    """Whole words of each row in random order while the selected pieces stay within k[b]: (B, T) bool. The first
    word that fits is always taken (a word longer than k[b] is skipped); a row with no word that short takes the
    first k[b] pieces of its first word, so no row ever passes k[b] (a step's slots hold them, step_inputs.py).
    A word is a start position and the continuation pieces after it; every unselectable position is a
    word of its own, and a piece right after one starts a new word."""
    B, T = selectable.shape
    device = selectable.device
    prev_unsel = torch.cat([torch.ones(B, 1, dtype=torch.bool, device=device), ~selectable[:, :-1]], dim=1)
    starts = word_starts.bool() | ~selectable | prev_unsel  # (B, T)
    word = starts.long().cumsum(dim=1) - 1  # (B, T) word index per position, 0..W-1
    W = int(word.max()) + 1 if T > 0 else 0
    word_len = torch.zeros(B, W, dtype=torch.long, device=device).scatter_add_(1, word, torch.ones_like(word))
    word_ok = torch.zeros(B, W, dtype=torch.bool, device=device).scatter_(1, word, selectable)  # (B, W)
    scores = torch.rand(B, W, generator=generator, device=device).masked_fill(~word_ok, 2.0)
    order = scores.argsort(dim=1)  # words in random order, selectable ones first
    len_in_order = torch.gather(word_len * word_ok, 1, order)  # (B, W)
    # words longer than the whole budget, ahead of the first one that fits, are skipped (google-research/bert's
    # `continue`), so the count is never passed; the words from that one on are taken while they stay within it
    fits = (len_in_order > 0) & (len_in_order <= k[:, None])
    first = torch.where(fits.any(dim=1), fits.long().argmax(dim=1), torch.zeros_like(k))  # (B,)
    from_first = torch.arange(W, device=device)[None, :] >= first[:, None]
    kept = len_in_order * from_first
    take_in_order = (kept.cumsum(dim=1) <= k[:, None]) & (kept > 0)
    take_in_order.scatter_(1, first[:, None], (k > 0)[:, None])  # that word always (so at least one position)
    take_word = torch.zeros(B, W, dtype=torch.bool, device=device).scatter_(1, order, take_in_order) & word_ok
    sel = torch.gather(take_word, 1, word) & selectable
    # a row none of whose words fits takes the first word in its order cut at the budget, piece by piece
    return sel & (sel.long().cumsum(dim=1) <= k[:, None])


def _span_cdf() -> torch.Tensor:
    """The cumulative distribution of span lengths 1..SPAN_MAX (`span_lengths`), float64."""
    w = torch.tensor([SPAN_P * (1 - SPAN_P) ** (l - 1) for l in range(1, SPAN_MAX + 1)], dtype=torch.float64)
    return (w / w.sum()).cumsum(0)


SPAN_CDF = _span_cdf()
_SPAN_CDF_LIST = SPAN_CDF.tolist()  # the same float64 values, for one draw at a time without a tensor op


def span_lengths(n: int, generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """`n` span lengths in words: geometric with p = SPAN_P truncated to 1..SPAN_MAX and renormalised,
    P(l) = p (1 - p)^(l - 1) / sum over 1..SPAN_MAX (SpanBERT's distribution: mean 3.8 words)."""
    u = torch.rand(n, generator=generator, dtype=torch.float64)
    return torch.clamp(torch.searchsorted(SPAN_CDF, u, right=True), max=SPAN_MAX - 1) + 1


def _span_length(generator: Optional[torch.Generator]) -> int:
    """One `span_lengths` draw, from the same generator draw (the same length for the same generator state)."""
    u = torch.rand(1, generator=generator, dtype=torch.float64).item()
    return min(bisect.bisect_right(_SPAN_CDF_LIST, u), SPAN_MAX - 1) + 1


def span_selection(selectable: torch.Tensor, word_starts: torch.Tensor, k: torch.Tensor,
                   generator: Optional[torch.Generator] = None) -> tuple:
    """SpanBERT's selection (module docstring): (selected (B, T) bool, span_of (B, T) long, the first position of
    the span each selected position belongs to, its own position elsewhere). `selectable` (B, T) bool, `word_starts`
    (B, T) bool, `k` (B,) the pieces each row may select. A row draws spans until its budget is full or a word would
    pass it (`_row_spans`); all draws come from `generator`, so the same generator state selects the same spans."""
    device = selectable.device
    sel_np, k_np = selectable.cpu().numpy().astype(bool), k.cpu().numpy()
    B, T = sel_np.shape
    prev_unsel = np.concatenate([np.ones((B, 1), dtype=bool), ~sel_np[:, :-1]], axis=1)
    starts = (word_starts.cpu().numpy().astype(bool) | prev_unsel) & sel_np  # a selectable word begins here
    selected = np.zeros((B, T), dtype=bool)
    span_of = np.broadcast_to(np.arange(T), (B, T)).copy()
    for b in range(B):
        words = np.flatnonzero(starts[b]).tolist()  # word start positions, in order
        ends = [min(e, p) for e, p in zip(words[1:] + [T], _first_unselectable_after(sel_np[b], words))]
        for a, e, first in _row_spans(words, ends, int(k_np[b]), generator):
            selected[b, a:e] = True
            span_of[b, a:e] = first
    return torch.from_numpy(selected).to(device), torch.from_numpy(span_of).to(device)


def _row_spans(words: list, ends: list, budget: int, generator) -> list:
    """One row's spans as [(start, end, the span's first position)] of word pieces: `words` the word starts in
    order, `ends` where each word ends, `budget` the pieces the row may select; draws until the budget is full, a
    word would pass it, or 20 draws per word."""
    out, taken, draws = [], 0, 0
    used = [False] * len(words)
    while words and taken < budget and draws < 20 * len(words):
        length = _span_length(generator)
        first = int(torch.randint(len(words), (1,), generator=generator)[0])
        draws += 1
        last = first  # the span's words: consecutive ones, never across [SEP] or padding
        while last + 1 < len(words) and last + 1 < first + length and ends[last] == words[last + 1]:
            last += 1
        if any(used[first:last + 1]):
            continue  # overlaps a span already chosen: draw again
        for w in range(first, last + 1):
            size = ends[w] - words[w]
            if taken + size > budget:
                if taken > 0:
                    budget = taken  # the next word would pass the budget: the row is done
                break  # (a first word longer than the whole budget: nothing taken, a new span is drawn)
            used[w] = True
            out.append((words[w], ends[w], words[first]))
            taken += size
    if words and taken == 0 and budget > 0:  # no word of the row fits: its first word cut at the budget
        out.append((words[0], min(ends[0], words[0] + budget), words[0]))
    return out


def _first_unselectable_after(selectable_row: np.ndarray, words: list) -> list:
    """For each word start, the first position after it that is not selectable (T when none): where its word ends
    at the latest."""
    T = selectable_row.shape[0]
    bad = np.flatnonzero(~selectable_row).tolist() + [T]
    out, j = [], 0
    for w in words:
        while bad[j] <= w:
            j += 1
        out.append(bad[j])
    return out


def mask_batch(batch: dict, vocab_size: int, mask_id: int, special_ids=None, rate: float = PAPER_RATE,
               ratios=PAPER_RATIOS, generator: Optional[torch.Generator] = None, whole_word: bool = False,
               spans: bool = False, static_seed: Optional[int] = None) -> dict:
    """A batch from `PretrainingData.batches` with `input_ids` masked and `labels` (B, T) added (a new dict);
    `whole_word`: whole words; `spans`: SpanBERT's spans of whole words. `static_seed` (static masking, RoBERTa 4.1
    and google-research/bert): each instance masked from a generator of its own, seeded by (static_seed, its instance
    number `batch["index"]`), on its own length, so it gets the same mask every epoch and in every batch it lands in;
    None (dynamic, the default): the batch is masked from `generator`, a new draw every time."""
    kw = dict(rate=rate, ratios=ratios, spans=spans, special_ids=special_ids)
    if static_seed is None:
        masked, labels = mask_tokens(batch["input_ids"], batch["special_tokens_mask"], vocab_size, mask_id,
                                     generator=generator, word_starts=batch["word_starts"] if (whole_word or spans) else None,
                                     attention_mask=batch["attention_mask"], **kw)
    else:
        masked, labels = batch["input_ids"].long().clone(), torch.full_like(batch["input_ids"], IGNORE_INDEX).long()
        for b, index in enumerate(batch["index"].tolist()):
            n = int(batch["attention_mask"][b].sum())  # the row on its own length: the mask ignores the batch's padding
            g = torch.Generator().manual_seed(static_mask_seed(static_seed, int(index)))
            m, lab = mask_tokens(batch["input_ids"][b:b + 1, :n], batch["special_tokens_mask"][b:b + 1, :n], vocab_size,
                                 mask_id, generator=g, word_starts=batch["word_starts"][b:b + 1, :n] if (whole_word or spans) else None,
                                 **kw)
            masked[b, :n], labels[b, :n] = m[0], lab[0]
    out = dict(batch)
    out["input_ids"], out["labels"] = masked, labels
    return out


def static_mask_seed(seed: int, index: int) -> int:
    """The seed of instance `index`'s static mask (a 63-bit mix of the run's seed and the instance number)."""
    return (seed * 0x9E3779B97F4A7C15 + index * 0xBF58476D1CE4E5B9 + 0x94D049BB133111EB) % (1 << 63)



class MaskedEvalSet:
    """A split masked once with a fixed seed (so every run scores the same masked positions).

    `batches(batch_size, rank, world_size)` yields the instances in order as dicts like
    `PretrainingData.batches` plus `labels` (B, T), trimmed to each batch's longest instance.
    """

    def __init__(self, data: "PretrainingData", batch: dict):
        self.data = data
        self.batch = batch  # the whole split, padded to its longest instance
        self.lengths = batch["attention_mask"].sum(dim=1)  # (N,)

    @property
    def num_instances(self) -> int:
        return int(self.batch["input_ids"].shape[0])

    def batches(self, batch_size: int, rank: int = 0, world_size: int = 1):
        N = self.num_instances
        step = batch_size * world_size
        for start in range(0, N, step):
            chunk = list(range(start, min(start + step, N)))
            per_rank = math.ceil(len(chunk) / world_size)
            mine = chunk[rank * per_rank:(rank + 1) * per_rank]
            if not mine:
                continue
            rows = torch.tensor(mine)
            T = int(self.lengths[rows].max())
            yield {k: (v[rows, :T] if v.dim() == 2 else v[rows]) for k, v in self.batch.items()}


def held_out_sample(num_instances: int, n: int) -> np.ndarray:
    """The `n` held-out instances a run evaluates: all of them when there are no more, else `n` spread evenly over
    the split. Instances are stored document by document and the built-in mixes list one corpus's documents
    after another (`all`: BBC News first), so the first `n` would score one corpus alone (every one of the first
    512 of `all` at 128 tokens is a BBC pair); spread, each held-out document counts by its share of the
    instances."""
    if n >= num_instances:
        return np.arange(num_instances)
    return np.unique(np.linspace(0, num_instances - 1, n).round().astype(np.int64))


def fixed_eval_masking(data: "PretrainingData", vocab_size: int, mask_id: int, special_ids=None, rate: float = PAPER_RATE,
                       ratios=PAPER_RATIOS, seed: int = EVAL_MASK_SEED, whole_word: bool = False,
                       limit: Optional[int] = None) -> MaskedEvalSet:
    """Mask a (held-out) split once, deterministically from `seed`, independent of the batch size. `limit`: only
    `held_out_sample(limit)` of the instances, spread over the split, are collated and masked (what a run
    evaluates; the held-out split of a big prepared corpus is not held whole)."""
    if data is None or data.num_instances == 0:
        raise EngineError("there is no held-out data to evaluate on; hold some documents out (--eval-fraction 0.05)")
    full = data.collate(held_out_sample(data.num_instances, data.num_instances if limit is None else int(limit)))
    g = torch.Generator().manual_seed(int(seed))
    return MaskedEvalSet(data, mask_batch(full, vocab_size, mask_id, special_ids, rate, ratios, g, whole_word))
