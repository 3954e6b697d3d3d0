"""Pre-training data: documents -> tokenized, unmasked instances on disk -> batches -> masked batches.

Implements paper 3.1 and A.2 and the algorithm of google-research/bert `create_pretraining_data.py`
(re-implemented, not copied):

- `mlm+nsp` (BERT): per document, sentences are gathered into a chunk until it reaches a target length
  (`seq_len - 3`, or with probability `short_seq_prob` a random length in [2, seq_len - 3]). A random number
  of the chunk's leading sentences form segment A. With probability 0.5 segment B is the rest of the chunk
  (IsNext, label 0); otherwise B is a run of sentences from a random start in ANOTHER document (NotNext,
  label 1) and the chunk's unused sentences are put back for the next instance. The pair is truncated to
  the target, one token at a time from the longer side, from the front or the back at random (as the
  released code).
- `mlm` (No NSP) and `ltr` (LTR & No NSP): one segment per instance, `[CLS] text [SEP]`: each document's
  tokens are cut into consecutive windows of `seq_len - 2` tokens (or a short random target with
  probability `short_seq_prob`); no NSP label. The LTR next-token loss is the training loop's business.

Instances are stored UNMASKED (design convention 7, cramming) in a cache folder keyed by a hash of the
corpus contents, the tokenizer vocabulary, seq_len, objective, seeds, dupe factor, short_seq_prob and the
eval split; `config.json` beside the arrays says what they are. The folder is written under a temporary name
and renamed into place, so a half-written cache is never picked up; a later call with the same key
memory-maps the arrays (fast). Per split (`train/`, `eval/`, each one shard):
  tokens.npy   (N_tokens,) uint16 (int32 for vocabularies over 65,536): all instances back to back, with
               [CLS]/[SEP] included
  offsets.npy  (N+1,) int64: instance i is tokens[offsets[i]:offsets[i+1]]
  b_start.npy  (N,) int32: position where segment B starts (token_type 1 from there on); = length if none
  nsp_label.npy (N,) int8: 0 IsNext, 1 NotNext, -1 no NSP (mlm, ltr)
  source.npy   (N, 6) int32 provenance: a_doc, a_sent_start, a_sent_end, b_doc, b_sent_start, b_sent_end
               (indices into the documents as given; sentence ranges end-exclusive; -1 when no B)
and at the top `continuation.npy` (V,) bool: which vocabulary ids are `##` pieces (for whole-word masking).

Masking happens at batch time (`mask_tokens`, `mask_batch`); the held-out set is masked once with a fixed
seed (`fixed_eval_masking`) so runs compare. Held-out documents are chosen by `eval_seed` alone, so runs
with different training seeds evaluate on the same documents.

Departures from the paper / released code, on purpose:
- The short target (probability `short_seq_prob`) is drawn for each instance and the pair is truncated to
  it; the released code draws it once per document and truncates to the maximum, so with sentences that
  are long next to seq_len (BBC news at 64-128 tokens) its "short" instances came out full length.
- NotNext B always comes from another document (the released code tries 10 times and may keep the same one).
- The released code forces NotNext whenever a chunk holds a single sentence, which skews NSP labels towards
  NotNext; here, when the coin says IsNext and the chunk has one sentence, the chunk takes the document's
  next sentence as B, or, at the very end of a document, is paired with the sentence before it (that
  sentence then appears in two instances); a one-sentence document that draws IsNext gives no instance.
  (Forcing NotNext made NotNext about 55% of BBC news instances.)
- Masking selects exactly max(1, round(rate * n)) positions per sequence (as the released code, not a
  Bernoulli draw per token), where n counts only real, non-special tokens (the released code counts
  [CLS]/[SEP] too); there is no `max_predictions_per_seq` cap.
- RANDOM replacements are drawn uniformly from the non-special vocabulary (the released code draws from
  the whole vocabulary, [CLS]/[SEP]/[PAD]/[MASK] included).
- Whole-word masking takes whole words in random order while the selected pieces stay within the count,
  stopping at the first word that would overflow (the released code skips it and tries later words); the
  first word is always taken, so at least one position is selected.
- The No-NSP inputs are packed windows within a document and may start mid-sentence (the paper does not
  say how its No-NSP inputs were built; this follows RoBERTa's DOC-SENTENCES packing).
"""
import errno
import hashlib
import json
import math
import os
import random
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import torch

from engine.errors import EngineError
from engine.fileio import atomic_save_with, atomic_write_json
from engine.objectives import MLM_NSP, objective as get_objective
from engine.procs import pid_alive

FORMAT_VERSION = 1
IGNORE_INDEX = -100  # label of positions the MLM loss skips (PyTorch cross_entropy default)
# the fix a damaged data folder's error names
DAMAGED_FIX = "delete the data folder and build it again (prepared data: run the same prepare command again)"
DEFAULT_CACHE_DIR = Path(os.environ.get("BERT_STUDIO_CACHE", "~/.cache/bert_studio")).expanduser() / "pretraining_data"


# ================================================================ masking
def _check_masking_args(rate: float, ratios) -> tuple:
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
                rate: float = 0.15, ratios=(0.8, 0.1, 0.1), generator: Optional[torch.Generator] = None,
                word_starts: Optional[torch.Tensor] = None, attention_mask: Optional[torch.Tensor] = None,
                special_ids: Optional[Sequence[int]] = None):
    """Masked-LM corruption (paper 3.1): select positions, then replace them by [MASK] / a random token /
    themselves with probabilities `ratios` = (MASK, RANDOM, SAME).

    input_ids (B, T) long; special_tokens_mask (B, T) bool/int, True at [CLS]/[SEP]/[PAD] (never selected);
    attention_mask (B, T), optional, 0 at padding (also never selected). Per row exactly
    max(1, round(rate * n)) of its n selectable positions are selected (0 when n == 0). With `word_starts`
    (B, T) bool (True where a word begins; a `##` piece continues the word before it), whole words are
    selected. RANDOM tokens are uniform over ids in [0, vocab_size) except `special_ids` and `mask_id`
    (`special_ids` defaults to the ids found at special positions of this batch; pass the tokenizer's
    `special_ids` to be exact). All randomness comes from `generator`.
    Returns (masked_ids (B, T) long, labels (B, T) long: the original id where selected, -100 elsewhere).
    """
    rate, (p_mask, p_rand, _p_same) = _check_masking_args(rate, ratios)
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

    if word_starts is None:
        # exactly k random selectable positions per row: rank random scores, keep the k smallest
        scores = torch.rand(B, T, generator=generator, device=device)
        scores = scores.masked_fill(~selectable, 2.0)
        order = scores.argsort(dim=1)  # (B, T)
        ranks = torch.empty_like(order)
        ranks.scatter_(1, order, torch.arange(T, device=device).expand(B, T))
        selected = (ranks < k[:, None]) & selectable
    else:
        if tuple(word_starts.shape) != tuple(input_ids.shape):
            raise EngineError(f"word_starts {tuple(word_starts.shape)} does not match input_ids {tuple(input_ids.shape)}")
        # a word = a start position and the continuation pieces after it; every unselectable position is a
        # word of its own, and a piece right after one starts a new word
        prev_unsel = torch.cat([torch.ones(B, 1, dtype=torch.bool, device=device), ~selectable[:, :-1]], dim=1)
        starts = word_starts.bool() | ~selectable | prev_unsel  # (B, T)
        word = starts.long().cumsum(dim=1) - 1  # (B, T) word index per position, 0..W-1
        W = int(word.max()) + 1 if T > 0 else 0
        word_len = torch.zeros(B, W, dtype=torch.long, device=device).scatter_add_(1, word, torch.ones_like(word))
        word_ok = torch.zeros(B, W, dtype=torch.bool, device=device).scatter_(1, word, selectable)  # (B, W)
        scores = torch.rand(B, W, generator=generator, device=device).masked_fill(~word_ok, 2.0)
        order = scores.argsort(dim=1)  # words in random order, selectable ones first
        len_in_order = torch.gather(word_len * word_ok, 1, order)
        take_in_order = (len_in_order.cumsum(dim=1) <= k[:, None]) & (len_in_order > 0)
        take_in_order[:, 0] |= k > 0  # the first word always (so at least one position)
        take_word = torch.zeros(B, W, dtype=torch.bool, device=device).scatter_(1, order, take_in_order) & word_ok
        selected = torch.gather(take_word, 1, word) & selectable

    labels = torch.where(selected, input_ids, torch.full_like(input_ids, IGNORE_INDEX))
    u = torch.rand(B, T, generator=generator, device=device)
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


def mask_batch(batch: dict, vocab_size: int, mask_id: int, special_ids=None, rate: float = 0.15,
               ratios=(0.8, 0.1, 0.1), generator: Optional[torch.Generator] = None, whole_word: bool = False) -> dict:
    """A batch from `PretrainingData.batches` with `input_ids` masked and `labels` (B, T) added (a new dict)."""
    masked, labels = mask_tokens(batch["input_ids"], batch["special_tokens_mask"], vocab_size, mask_id, rate=rate,
                                 ratios=ratios, generator=generator,
                                 word_starts=batch["word_starts"] if whole_word else None,
                                 attention_mask=batch["attention_mask"], special_ids=special_ids)
    out = dict(batch)
    out["input_ids"], out["labels"] = masked, labels
    return out


# ================================================================ instances from documents
def _truncate_pair(a: list, b: list, max_tokens: int, rng: random.Random) -> None:
    """Trim the longer side one token at a time, from the front or the back at random, until they fit."""
    while len(a) + len(b) > max_tokens:
        side = a if len(a) > len(b) else b
        if rng.random() < 0.5:
            del side[0]
        else:
            side.pop()


def _nsp_instances(docs: list, d: int, seq_len: int, short_seq_prob: float, rng: random.Random) -> list:
    """Instances (tokens_a, tokens_b, is_random_next, source) from document `d` of `docs`.

    docs: list of documents, each a list of (sentence_index, token_ids) with non-empty token lists.
    """
    doc = docs[d]
    max_tokens = seq_len - 3  # [CLS] A [SEP] B [SEP]

    def draw_target():
        return rng.randint(2, max_tokens) if rng.random() < short_seq_prob else max_tokens

    target = draw_target()
    out = []
    chunk = []  # indices into doc
    length = 0
    i = 0
    while i < len(doc):
        chunk.append(i)
        length += len(doc[i][1])
        if i == len(doc) - 1 or length >= target:
            is_random_next = rng.random() < 0.5
            if not is_random_next and len(chunk) == 1:
                if i + 1 < len(doc):  # IsNext needs a B: take the next sentence of the document
                    i += 1
                    chunk.append(i)
                elif i > 0:  # a lone last sentence: pair it with the sentence before it (used once already)
                    chunk.insert(0, i - 1)
                else:  # a one-sentence document: no IsNext pair exists; drop rather than force NotNext
                    break
            a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
            tokens_a = [t for j in chunk[:a_end] for t in doc[j][1]]
            if is_random_next:
                r = rng.randrange(len(docs) - 1)
                r = r + 1 if r >= d else r  # any document but this one
                other = docs[r]
                start = rng.randrange(len(other))
                tokens_b, j = [], start
                while j < len(other):
                    tokens_b.extend(other[j][1])
                    j += 1
                    if len(tokens_b) >= target - len(tokens_a):
                        break
                b_src = (r, other[start][0], other[j - 1][0] + 1)
                i -= len(chunk) - a_end  # put the unused sentences back
            else:
                tokens_b = [t for j in chunk[a_end:] for t in doc[j][1]]
                b_src = (d, doc[chunk[a_end]][0], doc[chunk[-1]][0] + 1)
            _truncate_pair(tokens_a, tokens_b, target, rng)
            a_src = (d, doc[chunk[0]][0], doc[chunk[a_end - 1]][0] + 1)
            out.append((tokens_a, tokens_b, is_random_next, a_src + b_src))
            chunk, length = [], 0
            target = draw_target()
        i += 1
    return out


def _single_instances(doc: list, d: int, seq_len: int, short_seq_prob: float, rng: random.Random) -> list:
    """No-NSP instances: consecutive windows of the document's tokens, `[CLS] window [SEP]`."""
    max_tokens = seq_len - 2
    flat = [t for _, ids in doc for t in ids]
    sent_of = [s for s, ids in doc for _ in ids]  # sentence index of each token
    out, pos = [], 0
    while pos < len(flat):
        target = max_tokens
        if rng.random() < short_seq_prob:
            target = rng.randint(2, max_tokens)
        end = min(pos + target, len(flat))
        out.append((flat[pos:end], [], None, (d, sent_of[pos], sent_of[end - 1] + 1, -1, -1, -1)))
        pos = end
    return out


def _make_instances(docs: list, pairs: bool, seq_len: int, short_seq_prob: float, dupe_factor: int,
                    rng: random.Random) -> list:
    """docs: list of (doc_index, [(sentence_index, ids), ...]) -> instances (dupe_factor passes over docs):
    segment pairs with an IsNext/NotNext label when `pairs` (an objective with NSP), else single stretches."""
    inner = [sents for _, sents in docs]
    out = []
    for _ in range(dupe_factor):
        for n, (d, sents) in enumerate(docs):
            if pairs:
                made = _nsp_instances(inner, n, seq_len, short_seq_prob, rng)
                # map positions in `docs` back to the caller's document indices
                made = [(a, b, r, (d, s[1], s[2], docs[s[3]][0], s[4], s[5])) for a, b, r, s in made]
            else:
                made = _single_instances(sents, d, seq_len, short_seq_prob, rng)
            out.extend(made)
    return out


def _save_npy(path: Path, arr: np.ndarray) -> None:
    def write(tmp_name):
        with open(tmp_name, "wb") as f:  # a file object: np.save would append .npy to a bare name
            np.save(f, arr)
    atomic_save_with(path, write)


def _write_split(folder: Path, instances: list, cls_id: int, sep_id: int, dtype) -> dict:
    """The instances as the split's arrays in `folder`; returns `split_checks` of them."""
    n = len(instances)
    lengths = np.array([len(a) + len(b) + (3 if b else 2) for a, b, _, _ in instances], dtype=np.int64)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    tokens = np.empty(int(offsets[-1]), dtype=dtype)
    b_start = np.empty(n, dtype=np.int32)
    nsp = np.empty(n, dtype=np.int8)
    source = np.empty((n, 6), dtype=np.int32)
    for i, (a, b, is_random, src) in enumerate(instances):
        seq = [cls_id] + a + [sep_id] + (b + [sep_id] if b else [])
        tokens[offsets[i]:offsets[i + 1]] = seq
        b_start[i] = len(a) + 2 if b else len(seq)
        nsp[i] = -1 if is_random is None else int(is_random)
        source[i] = src
    folder.mkdir(parents=True, exist_ok=True)
    for name, arr in (("tokens", tokens), ("offsets", offsets), ("b_start", b_start), ("nsp_label", nsp), ("source", source)):
        _save_npy(folder / f"{name}.npy", arr)
    return split_checks(tokens, offsets)


def split_checks(tokens: np.ndarray, offsets: np.ndarray) -> dict:
    """What a split's arrays are checked against when opened: its largest token id and shortest instance
    (-1 and 0 when it has none)."""
    return {"max_token_id": int(tokens.max()) if len(tokens) else -1,
            "min_length": int(np.diff(offsets).min()) if len(offsets) > 1 else 0}


# ================================================================ the data a training loop reads
def _load_array(folder: Path, name: str) -> np.ndarray:
    """One array of a split folder, memory-mapped; a damaged or truncated file is one line naming it."""
    try:
        return np.load(folder / f"{name}.npy", mmap_mode="r")
    except (OSError, ValueError, EOFError) as e:
        raise EngineError(f"{folder / (name + '.npy')} is damaged or truncated ({e}); {DAMAGED_FIX}") from e


def _as_position(p) -> tuple:
    if p is None:
        return 0, 0
    if isinstance(p, dict):
        return int(p.get("epoch", 0)), int(p.get("index", 0))
    e, i = p
    return int(e), int(i)


class PretrainingData:
    """One split (train or eval) of stored instances, memory-mapped; one folder or many shard folders.

    `batches(...)` yields dicts of tensors: input_ids, token_type_ids, attention_mask (B, T) long;
    special_tokens_mask, word_starts (B, T) bool (padding counts as special); next_sentence_label (B,) long
    (mlm+nsp only: 0 IsNext, 1 NotNext); index (B,) the instance numbers; position {"epoch", "index"} to
    resume from after this batch. Batches are padded to their longest instance (dynamic padding).

    With several folders (the shards of `engine.prepare`), instance numbers run through the shards in order:
    instance i lives in the shard s with starts[s] <= i < starts[s + 1]. Each shard's tokens stay on disk,
    memory-mapped (at most `MAX_OPEN` at a time); its offsets, b_start and nsp_label are read when first
    needed (13 bytes per instance). `tokens`, `offsets` and `source` are the single folder's arrays (None
    with several shards).
    """
    MAX_OPEN = 256  # token memmaps held open at once (each holds a file descriptor)
    MIN_LENGTH = 3  # the shortest instance: [CLS], a token, [SEP]

    def __init__(self, folder, objective: str, pad_id: int, continuation: np.ndarray, seed: int = 0, counts=None,
                 vocab_size: Optional[int] = None, checks=None):
        """`vocab_size`: every token id must be below it; `checks`: per folder, the `split_checks` its writer
        recorded (or None), compared with the arrays (`_check`) when opened."""
        folders = [Path(folder)] if isinstance(folder, (str, Path)) else [Path(f) for f in folder]
        if not folders:
            raise EngineError("a pre-training data split needs at least one folder")
        self.folder = folders[0]
        self.folders = folders
        self.objective = objective
        self.pairs = get_objective(objective).nsp  # segment pairs with an IsNext/NotNext label
        self.pad_id = int(pad_id)
        self.seed = int(seed)
        self.continuation = continuation  # (V,) bool, True for ## pieces
        self._open = {}  # shard -> (tokens memmap, offsets, b_start, nsp_label), insertion order = LRU order
        if counts is None:
            counts = [len(np.load(f / "nsp_label.npy", mmap_mode="r")) for f in folders]
        self.starts = np.zeros(len(folders) + 1, dtype=np.int64)  # (S+1,) first instance of each shard
        np.cumsum(np.asarray(counts, dtype=np.int64), out=self.starts[1:])
        self.vocab_size = vocab_size
        for s in range(len(folders)):
            self._check(s, checks[s] if checks else None)
        self.b_start = np.concatenate([self._shard(s)[2] for s in range(len(folders))])  # (N,)
        self.nsp_label = np.concatenate([self._shard(s)[3] for s in range(len(folders))])  # (N,)
        if len(folders) == 1:
            self.tokens, self.offsets = self._shard(0)[:2]  # (N_tokens,), (N+1,)
            self.source = np.asarray(np.load(self.folder / "source.npy", mmap_mode="r"))  # (N, 6)
        else:
            self.tokens = self.offsets = self.source = None

    def _shard(self, s: int) -> tuple:
        """(tokens memmap, offsets, b_start, nsp_label) of shard s."""
        got = self._open.pop(s, None)
        if got is None:
            f = self.folders[s]
            got = (_load_array(f, "tokens"), np.asarray(_load_array(f, "offsets")), np.asarray(_load_array(f, "b_start")),
                   np.asarray(_load_array(f, "nsp_label")))
            if len(got[1]) - 1 != self.starts[s + 1] - self.starts[s]:
                raise EngineError(f"shard {f} holds {len(got[1]) - 1} instances, its manifest says {self.starts[s + 1] - self.starts[s]}; prepare the data again")
            while len(self._open) >= self.MAX_OPEN:
                self._open.pop(next(iter(self._open)))
        self._open[s] = got
        return got

    def _check(self, s: int, expect: Optional[dict]) -> None:
        """Shard s against what a sound shard holds, one pass over its tokens: offsets from 0 to its token count,
        every instance at least MIN_LENGTH long, every id in [0, vocab_size), and the `split_checks` its writer
        recorded (`expect`). A damaged shard is refused when opened, naming it, not mid-training."""
        tokens, offsets = self._shard(s)[:2]
        f = self.folders[s]
        fix = DAMAGED_FIX
        if len(offsets) == 0 or offsets[0] != 0 or offsets[-1] != len(tokens):
            raise EngineError(f"shard {f} is damaged: its offsets do not span its {len(tokens)} tokens; {fix}")
        got = split_checks(tokens, offsets)
        if len(offsets) > 1 and got["min_length"] < self.MIN_LENGTH:
            raise EngineError(f"shard {f} is damaged: an instance holds {got['min_length']} tokens (at least "
                              f"{self.MIN_LENGTH}: [CLS], a token, [SEP]); {fix}")
        low = int(tokens.min()) if len(tokens) and tokens.dtype.kind == "i" else 0
        if low < 0 or (self.vocab_size is not None and got["max_token_id"] >= self.vocab_size):
            bad = low if low < 0 else got["max_token_id"]
            raise EngineError(f"shard {f} is damaged: token id {bad} is outside the vocabulary of {self.vocab_size} ids; {fix}")
        for k, v in (expect or {}).items():
            if v is not None and got[k] != v:
                raise EngineError(f"shard {f} is damaged: its {k.replace('_', ' ')} is {got[k]}, its manifest recorded {v}; {fix}")

    def _locate(self, indices: np.ndarray) -> tuple:
        """Global instance numbers -> (shard numbers, numbers within the shard)."""
        s = np.searchsorted(self.starts, indices, side="right") - 1
        return s, indices - self.starts[s]

    @property
    def num_shards(self) -> int:
        return len(self.folders)

    @property
    def num_instances(self) -> int:
        return int(self.starts[-1])

    def __len__(self) -> int:
        return self.num_instances

    @property
    def lengths(self) -> np.ndarray:
        return np.concatenate([np.diff(self._shard(s)[1]) for s in range(self.num_shards)])

    @property
    def num_tokens(self) -> int:
        return int(sum(int(self._shard(s)[1][-1]) for s in range(self.num_shards)))

    def _ids(self, i: int) -> np.ndarray:
        s, j = self._locate(np.array([i]))
        tokens, offsets = self._shard(int(s[0]))[:2]
        return tokens[offsets[j[0]]:offsets[j[0] + 1]]

    def instance(self, i: int) -> dict:
        """One instance as numpy/python values (for inspection and tests)."""
        ids = np.asarray(self._ids(i), dtype=np.int64)
        s, j = self._locate(np.array([i]))
        src = np.load(self.folders[int(s[0])] / "source.npy", mmap_mode="r")[int(j[0])] if self.source is None else self.source[i]
        s = [int(x) for x in src]
        b = int(self.b_start[i])
        return {"input_ids": ids, "tokens_a": ids[1:(b - 1 if b < len(ids) else len(ids) - 1)],
                "tokens_b": ids[b:-1] if b < len(ids) else ids[:0], "b_start": b, "next_sentence_label": int(self.nsp_label[i]),
                "a_doc": s[0], "a_sentences": (s[1], s[2]), "b_doc": s[3], "b_sentences": (s[4], s[5])}

    def stats(self) -> dict:
        lab = self.nsp_label
        lengths = self.lengths
        out = {"instances": self.num_instances, "tokens": int(lengths.sum()), "shards": self.num_shards,
               "mean_length": float(lengths.mean()) if self.num_instances else 0.0}
        if self.pairs and self.num_instances:
            out["is_next_fraction"] = float((lab == 0).mean())
        return out

    def collate(self, indices) -> dict:
        """Instances -> a padded batch (dynamic padding to the longest one)."""
        indices = np.asarray(indices, dtype=np.int64)
        B = len(indices)
        shard, local = self._locate(indices)
        rows = []
        for r in range(B):
            tokens, offsets = self._shard(int(shard[r]))[:2]
            rows.append(tokens[offsets[local[r]]:offsets[local[r] + 1]])
        lens = np.array([len(x) for x in rows], dtype=np.int64)  # (B,)
        T = int(lens.max())
        ids = np.full((B, T), self.pad_id, dtype=np.int64)
        for r in range(B):
            ids[r, :lens[r]] = rows[r]
        pos = np.arange(T)[None, :]  # (1, T)
        real = pos < lens[:, None]  # (B, T)
        b = self.b_start[indices][:, None]
        token_type = (pos >= b) & real
        special = ~real | (pos == 0) | (pos == lens[:, None] - 1) | ((pos == b - 1) & (b < lens[:, None]))
        word_starts = ~self.continuation[np.minimum(ids, len(self.continuation) - 1)] | special
        out = {
            "input_ids": torch.from_numpy(ids),
            "token_type_ids": torch.from_numpy(token_type.astype(np.int64)),
            "attention_mask": torch.from_numpy(real.astype(np.int64)),
            "special_tokens_mask": torch.from_numpy(special),
            "word_starts": torch.from_numpy(word_starts),
            "index": torch.from_numpy(indices.copy()),
        }
        if self.pairs:
            out["next_sentence_label"] = torch.from_numpy(self.nsp_label[indices].astype(np.int64))
        return out

    def epoch_order(self, epoch: int, shuffle: bool = True, seed: Optional[int] = None) -> np.ndarray:
        """The instance order of an epoch: a permutation that depends only on (seed, epoch)."""
        if not shuffle:
            return np.arange(self.num_instances)
        seed = self.seed if seed is None else int(seed)
        g = torch.Generator().manual_seed((seed * 1_000_003 + epoch) % (2 ** 63))
        return torch.randperm(self.num_instances, generator=g).numpy()

    def batches(self, batch_size: int, generator: Optional[torch.Generator] = None, start_position=None,
                rank: int = 0, world_size: int = 1, shuffle: bool = True, drop_last: bool = True,
                epochs: Optional[int] = None):
        """Yield batches for this rank, epoch after epoch (forever when `epochs` is None).

        Each epoch visits the instances in `epoch_order(epoch)`; the seed is `generator.initial_seed()` when
        a generator is given, else the build seed, so the order needs no RNG state to be restored. A global
        step takes batch_size * world_size instances; rank r gets the r-th slice (disjoint across ranks).
        `position` = {"epoch": e, "index": instances of epoch e consumed so far (all ranks)}: pass it back as
        `start_position` to resume exactly (even with another batch size). `drop_last` drops an epoch's
        incomplete final step (keep it True under DDP so every rank takes the same number of steps).
        """
        if batch_size < 1 or world_size < 1 or not 0 <= rank < world_size:
            raise EngineError(f"bad batching: batch size {batch_size}, rank {rank} of {world_size}; batch size must be >= 1 and 0 <= rank < world size")
        step = batch_size * world_size
        n = self.num_instances
        if drop_last and n < step:
            raise EngineError(f"the data has {n} instances, fewer than one step of {batch_size} x {world_size}; lower the batch size or use a larger corpus")
        seed = generator.initial_seed() if generator is not None else None
        epoch, index = _as_position(start_position)
        while epochs is None or epoch < epochs:
            order = self.epoch_order(epoch, shuffle, seed)
            limit = (n // step) * step if drop_last else n
            while index < limit:
                chunk = order[index:index + step]
                per_rank = math.ceil(len(chunk) / world_size)
                mine = chunk[rank * per_rank:(rank + 1) * per_rank]
                index += len(chunk)
                position = {"epoch": epoch, "index": index} if index < limit else {"epoch": epoch + 1, "index": 0}
                if len(mine) == 0:
                    continue
                batch = self.collate(mine)
                batch["position"] = position
                yield batch
            epoch, index = epoch + 1, 0


@dataclass
class PretrainingCache:
    """What `build_pretraining_data` returns: the cache folder, its config and the train/eval splits."""
    path: Path
    key: str
    config: dict
    train: PretrainingData
    eval: Optional[PretrainingData]
    from_cache: bool  # True when the arrays were found on disk, not built now

    @property
    def vocab_size(self) -> int:
        return self.config["tokenizer"]["vocab_size"]

    @property
    def mask_id(self) -> int:
        return self.config["tokenizer"]["mask_id"]

    @property
    def special_ids(self) -> list:
        return self.config["tokenizer"]["special_ids"]


def open_pretraining_data(path) -> PretrainingCache:
    """Open a cache folder written by `build_pretraining_data`."""
    path = Path(path)
    conf_file = path / "config.json"
    if not conf_file.is_file():
        raise EngineError(f"{path} is not a pre-training data folder (no config.json); build it with build_pretraining_data")
    try:
        config = json.loads(conf_file.read_text(encoding="utf-8"))
        cont = np.load(path / "continuation.npy")
        t = config["tokenizer"]
        train = PretrainingData(path / "train", config["objective"], t["pad_id"], cont, config["seed"], vocab_size=t["vocab_size"])
        ev = (PretrainingData(path / "eval", config["objective"], t["pad_id"], cont, config["eval_seed"], vocab_size=t["vocab_size"])
              if config["has_eval"] else None)
    except (OSError, ValueError, KeyError) as e:
        raise EngineError(f"pre-training data in {path} is damaged ({e}); delete the folder and build it again")
    return PretrainingCache(path, config["key"], config, train, ev, from_cache=True)


# ================================================================ build (or load) the cache
def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _normalise_docs(docs) -> list:
    from engine.corpora import split_sentences

    out = []
    for d in docs:
        if isinstance(d, str):
            out.append(split_sentences(d))
        else:
            out.append([str(s) for s in d])
    return out


def corpus_fingerprint(docs) -> str:
    """sha256 of the documents' sentences (with document and sentence boundaries)."""
    h = hashlib.sha256()
    for d in docs:
        for s in d:
            h.update(s.encode("utf-8", errors="replace"))
            h.update(b"\x1f")
        h.update(b"\x1e")
    return h.hexdigest()


def _remove_stale_tmp(cache_dir: Path, name: str) -> None:
    """Remove half-written cache folders (`.tmp-<name>-<pid>-<random>`) whose writer process is gone."""
    for p in cache_dir.glob(f".tmp-{name}-*"):
        try:
            pid = int(p.name.split("-")[-2])
        except (ValueError, IndexError):
            continue
        if not pid_alive(pid):
            shutil.rmtree(p, ignore_errors=True)


# ================================================================ steps shared with the sharded builder (engine.prepare)
def tokenize_documents(docs: list, tokenizer, first_doc: int = 0) -> list:
    """Documents (lists of sentences) -> [(doc_index, [(sentence_index, ids), ...]), ...], with empty sentences
    and documents dropped and literal special tokens in the text read as [UNK] (so text never holds a [SEP]).
    Document indices count from `first_doc`. One batch encoding call for all the sentences."""
    flat = [s for d in docs for s in d]
    ids = tokenizer.tokenize_ids(flat) if flat else []
    specials = set(tokenizer.special_ids) - {tokenizer.unk_id}
    tokenized, k = [], 0
    for di, d in enumerate(docs):
        sents = []
        for si in range(len(d)):
            piece = ids[k + si]
            if specials.intersection(piece):
                piece = [tokenizer.unk_id if t in specials else t for t in piece]
            if piece:
                sents.append((si, piece))
        k += len(d)
        if sents:
            tokenized.append((first_doc + di, sents))
    return tokenized


def eval_count(n_docs: int, eval_fraction: float, need: int) -> int:
    """How many of `n_docs` documents are held out: round(fraction * n), at least `need` (0 when fraction is 0)."""
    return max(need, int(round(eval_fraction * n_docs))) if eval_fraction > 0 else 0


def hold_out(tokenized: list, n_eval: int, eval_seed: int) -> tuple:
    """(train documents, held-out documents): `n_eval` documents chosen by `eval_seed` alone, both in order."""
    order = list(range(len(tokenized)))
    random.Random(eval_seed).shuffle(order)
    return [tokenized[j] for j in sorted(order[n_eval:])], [tokenized[j] for j in sorted(order[:n_eval])]


def token_info(tokenizer) -> dict:
    """What a cache records about its tokenizer (the vocabulary's sha256 is part of the cache key)."""
    return {"vocab_sha256": _sha("\n".join(tokenizer.vocab())), "lowercase": bool(getattr(tokenizer, "lowercase", True)),
            "vocab_size": tokenizer.vocab_size, "pad_id": tokenizer.pad_id, "cls_id": tokenizer.cls_id,
            "sep_id": tokenizer.sep_id, "mask_id": tokenizer.mask_id, "unk_id": tokenizer.unk_id,
            "special_ids": [int(i) for i in tokenizer.special_ids]}


def continuation_ids(tokenizer) -> np.ndarray:
    """(V,) bool: which vocabulary ids are `##` pieces (whole-word masking reads it)."""
    return np.array([t.startswith("##") for t in tokenizer.vocab()], dtype=bool)


def token_dtype(vocab_size: int):
    return np.uint16 if vocab_size <= 65536 else np.int32


def _check_build_args(docs, seq_len, max_positions, short_seq_prob, dupe_factor, eval_fraction) -> None:
    """build_pretraining_data's settings, each refused with one line naming the fix."""
    if not isinstance(seq_len, (int, np.integer)) or seq_len < 8:
        raise EngineError(f"sequence length {seq_len} is too short; use at least 8 (the paper uses 128, then 512)")
    if max_positions is not None and seq_len > max_positions:
        raise EngineError(f"sequence length {seq_len} exceeds the model's {max_positions} positions; lower seq_len or use a model with more max_position_embeddings")
    if not 0.0 <= short_seq_prob <= 1.0:
        raise EngineError(f"short_seq_prob {short_seq_prob} must be between 0 and 1; the paper's code uses 0.1")
    if not isinstance(dupe_factor, (int, np.integer)) or dupe_factor < 1:
        raise EngineError(f"dupe factor {dupe_factor} must be a whole number >= 1")
    if not 0.0 <= eval_fraction < 1.0:
        raise EngineError(f"--eval-fraction {eval_fraction} must be in [0, 1); e.g. 0.05 holds out 5% of the documents")
    if docs is None or len(docs) == 0:
        raise EngineError("the corpus is empty; give at least one document with text")


def _publish(cache_dir: Path, folder_name: str, tokenizer, train_inst: list, eval_inst: list, config: dict) -> None:
    """Write the instances under a temporary name, config.json last, then rename the folder into place (atomic;
    when another process published the same key first, theirs is kept)."""
    final = cache_dir / folder_name
    cache_dir.mkdir(parents=True, exist_ok=True)
    _remove_stale_tmp(cache_dir, folder_name)
    if final.exists() and not (final / "config.json").is_file():
        shutil.rmtree(final, ignore_errors=True)  # not ours to trust: never published complete
    tmp = cache_dir / f".tmp-{folder_name}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    dtype = token_dtype(tokenizer.vocab_size)
    try:
        tmp.mkdir(parents=True)
        _write_split(tmp / "train", train_inst, tokenizer.cls_id, tokenizer.sep_id, dtype)
        if config["has_eval"]:
            _write_split(tmp / "eval", eval_inst, tokenizer.cls_id, tokenizer.sep_id, dtype)
        _save_npy(tmp / "continuation.npy", continuation_ids(tokenizer))
        atomic_write_json(tmp / "config.json", config)  # written last
        try:
            os.rename(tmp, final)  # atomic; fails if another process published the same key first
        except OSError as e:
            if e.errno not in (errno.ENOTEMPTY, errno.EEXIST) or not (final / "config.json").is_file():
                raise
    except OSError as e:
        raise EngineError(f"could not write pre-training data to {cache_dir}: {e.strerror or e}; free disk space or pick another cache folder")
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def build_pretraining_data(docs, tokenizer, seq_len: int = 128, objective: str = MLM_NSP.name, seed: int = 0,
                           cache_dir=None, short_seq_prob: float = 0.1, dupe_factor: int = 1,
                           eval_fraction: float = 0.05, eval_seed: int = 0, max_positions: Optional[int] = None,
                           corpus_name: Optional[str] = None) -> PretrainingCache:
    """Documents (lists of sentences, or strings) -> instances stored under `cache_dir`, or loaded from there
    when the same configuration was built before. Returns a `PretrainingCache` with `.train` and `.eval`.

    seq_len: tokens per instance including [CLS]/[SEP] (8 .. `max_positions`); objective: mlm+nsp, mlm or ltr;
    seed: instance sampling of the training documents; dupe_factor: passes over the training documents,
    each with a different random segmentation; eval_fraction: share of documents held out (0 for none), chosen
    by `eval_seed`, with their instances built from `eval_seed` too (same across training seeds).
    """
    obj = get_objective(objective)
    _check_build_args(docs, seq_len, max_positions, short_seq_prob, dupe_factor, eval_fraction)
    name = corpus_name or (getattr(docs, "info", None) or {}).get("name") or "custom"
    docs = _normalise_docs(docs)

    tok_info = token_info(tokenizer)
    keyed = {"format": FORMAT_VERSION, "corpus_sha256": corpus_fingerprint(docs), "vocab_sha256": tok_info["vocab_sha256"],
             "lowercase": tok_info["lowercase"], "seq_len": int(seq_len), "objective": objective, "seed": int(seed),
             "dupe_factor": int(dupe_factor), "short_seq_prob": float(short_seq_prob),
             "eval_fraction": float(eval_fraction), "eval_seed": int(eval_seed)}
    key = _sha(json.dumps(keyed, sort_keys=True))[:16]
    cache_dir = Path(cache_dir).expanduser() if cache_dir is not None else DEFAULT_CACHE_DIR
    folder_name = f"{objective.replace('+', '_')}-T{seq_len}-{key}"
    final = cache_dir / folder_name
    if (final / "config.json").is_file():
        return open_pretraining_data(final)

    tokenized = tokenize_documents(docs, tokenizer)
    if not tokenized:
        raise EngineError(f"the corpus '{name}' has no text the tokenizer can read; give documents with words in them")

    need = obj.min_documents
    if len(tokenized) < need:
        raise EngineError(f"{obj.name} needs at least 2 documents (NotNext takes B from another document); add documents (blank lines separate them) or use objective mlm")
    if obj.nsp and not any(len(s) >= 2 for _, s in tokenized):
        raise EngineError("no document has two sentences, so NSP would have no IsNext pairs; give documents of several sentences or use objective mlm")
    n_eval = eval_count(len(tokenized), eval_fraction, need)
    if eval_fraction > 0 and len(tokenized) - n_eval < need:
        raise EngineError(f"the corpus has {len(tokenized)} usable documents, too few to hold out {n_eval} for evaluation and keep {need} for training; add documents or hold out none (--eval-fraction 0)")
    train_docs, eval_docs = hold_out(tokenized, n_eval, eval_seed)

    train_inst = _make_instances(train_docs, obj.nsp, seq_len, short_seq_prob, dupe_factor, random.Random(seed))
    eval_inst = _make_instances(eval_docs, obj.nsp, seq_len, short_seq_prob, 1, random.Random(eval_seed)) if n_eval else []
    if not train_inst:
        raise EngineError("the documents are too short to make any pre-training instance; give longer documents or a lower seq_len")

    config = {**keyed, "key": key, "corpus_name": name, "tokenizer": tok_info, "has_eval": bool(n_eval),
              "documents": {"total": len(docs), "usable": len(tokenized), "train": len(train_docs), "eval": len(eval_docs)},
              "eval_documents": [d for d, _ in eval_docs],
              "instances": {"train": len(train_inst), "eval": len(eval_inst)},
              "token_dtype": np.dtype(token_dtype(tokenizer.vocab_size)).name}
    _publish(cache_dir, folder_name, tokenizer, train_inst, eval_inst, config)
    out = open_pretraining_data(final)
    out.from_cache = False
    return out


# ================================================================ fixed evaluation masking
class MaskedEvalSet:
    """A split masked once with a fixed seed (so every run scores the same masked positions).

    `batches(batch_size, rank, world_size)` yields the instances in order as dicts like
    `PretrainingData.batches` plus `labels` (B, T), trimmed to each batch's longest instance.
    """

    def __init__(self, data: PretrainingData, batch: dict):
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


def fixed_eval_masking(data: PretrainingData, vocab_size: int, mask_id: int, special_ids=None, rate: float = 0.15,
                       ratios=(0.8, 0.1, 0.1), seed: int = 12345, whole_word: bool = False,
                       limit: Optional[int] = None) -> MaskedEvalSet:
    """Mask a (held-out) split once, deterministically from `seed`, independent of the batch size. `limit`: only
    the first `limit` instances are collated and masked (the held-out split of a big prepared corpus is not
    held whole; the masks then differ from those of the whole split, which in-memory caches keep using)."""
    if data is None or data.num_instances == 0:
        raise EngineError("there is no held-out data to evaluate on; hold some documents out (--eval-fraction 0.05)")
    full = data.collate(np.arange(data.num_instances if limit is None else min(int(limit), data.num_instances)))
    g = torch.Generator().manual_seed(int(seed))
    return MaskedEvalSet(data, mask_batch(full, vocab_size, mask_id, special_ids, rate, ratios, g, whole_word))
