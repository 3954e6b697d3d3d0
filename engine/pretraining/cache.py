"""The pre-training data store: instances on disk, memory-mapped; batches from it.

Instances (engine/pretraining/instances.py) are stored UNMASKED (design convention 7, cramming; masking is
engine/pretraining/masking.py, at batch time), split by split (`train/`, `eval/`), one folder per shard:
  tokens.npy   (N_tokens,) uint16 (int32 for vocabularies over 65,536): all instances back to back, with
               [CLS]/[SEP] included
  offsets.npy  (N+1,) int64: instance i is tokens[offsets[i]:offsets[i+1]]
  b_start.npy  (N,) int32: position where segment B starts (token_type 1 from there on); = length if none
  nsp_label.npy (N,) int8: 0 IsNext, 1 NotNext, -1 no NSP (mlm, ltr)
  source.npy   (N, 6) int32 provenance: a_doc, a_sent_start, a_sent_end, b_doc, b_sent_start, b_sent_end
               (indices into the documents as given; sentence ranges end-exclusive; -1 when no B; a FULL-SENTENCES
               row that crosses documents: its first document's stretch, then its last document's)
and `continuation.npy` (V,) bool: which vocabulary ids are `##` pieces (for whole-word masking). When opened, each
shard is checked against a sound shard and the counts its writer recorded (`split_checks`): a damaged or truncated
shard is one line naming the fix (DAMAGED_FIX).

Every such store is written by the one builder, engine/pretraining/prepare.py: `python -m engine prepare` (a corpus
of any size, in blocks) and `build_pretraining_data` (`pretrain --corpus`: the corpus in one block, under
DEFAULT_CACHE_DIR), opened there as one `PretrainingCache` (`open_prepared`). `open_pretraining_data` still opens
the single-folder layout the in-memory builder wrote before (config.json beside train/ and eval/); nothing writes
it now.

The input format (engine/pretraining/input_formats.py, RoBERTa 4.2) is recorded with the data; opened data follow
it: the [SEP] a FULL-SENTENCES row holds between documents is a special token (never masked), and DOC-SENTENCES and
SENTENCE-PAIR data are batched by tokens (`PretrainingData.batches`).
"""
import hashlib
import json
import math
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from engine.errors import EngineError
from engine.fileio import atomic_save_with
from engine.objectives import objective as get_objective
from engine.pretraining.input_formats import input_format
from engine.procs import pid_alive

FORMAT_VERSION = 1
# the fix a damaged data folder's error names
DAMAGED_FIX = "delete the data folder and build it again (prepared data: run the same prepare command again)"
DEFAULT_CACHE_DIR = Path(os.environ.get("BERT_STUDIO_CACHE", "~/.cache/bert_studio")).expanduser() / "pretraining_data"


def save_npy(path: Path, arr: np.ndarray) -> None:
    """Write one array as `path` (.npy), atomically: a reader sees the old file or the whole new one."""
    def write(tmp_name):
        with open(tmp_name, "wb") as f:  # a file object: np.save would append .npy to a bare name
            np.save(f, arr)
    atomic_save_with(path, write)


def write_split(folder: Path, instances: list, cls_id: int, sep_id: int, dtype) -> dict:
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
        save_npy(folder / f"{name}.npy", arr)
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

    `separator_id`: a token id that is special wherever it stands (the [SEP] between documents of FULL-SENTENCES rows);
    `row_tokens`: batch by tokens (DOC-SENTENCES, SENTENCE-PAIR): a step of batch_size sequences takes instances while
    they fit in batch_size x row_tokens tokens (`step_end`).
    """
    MAX_OPEN = 256  # token memmaps held open at once (each holds a file descriptor)
    MIN_LENGTH = 3  # the shortest instance: [CLS], a token, [SEP]

    def __init__(self, folder, objective: str, pad_id: int, continuation: np.ndarray, seed: int = 0, counts=None,
                 vocab_size: Optional[int] = None, checks=None, separator_id: Optional[int] = None,
                 row_tokens: Optional[int] = None):
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
        self.separator_id = separator_id  # special wherever it stands (FULL-SENTENCES' document separator), or None
        self.row_tokens = row_tokens  # batch by tokens: a full row's tokens (the data's seq_len), or None
        self._lengths = None  # (N,) instance lengths, read once when batching by tokens
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
        if self.separator_id is not None:
            special |= ids == self.separator_id
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

    def step_end(self, order: np.ndarray, index: int, budget: int, drop_last: bool = True):
        """Batching by tokens: the end (exclusive, in `order`) of the step that starts at `index`: the instances, in
        order, that fit in `budget` tokens (at least one); None when the epoch's instances run out before the next one
        would not fit and `drop_last` (an incomplete step). Depends on `index` alone, so a resume from any step's
        position makes the same steps."""
        if self._lengths is None:
            self._lengths = self.lengths
        window = order[index:index + budget // self.MIN_LENGTH + 1]  # more tokens than the budget, or the epoch's rest
        fits = int(np.searchsorted(np.cumsum(self._lengths[window]), budget, side="right"))
        end = index + max(1, fits)
        if end >= len(order):
            return None if drop_last else len(order)
        return end

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
        incomplete final step (keep it True under DDP so every rank takes the same number of steps). Batching by tokens
        (`row_tokens`), a step takes the instances that fit in batch_size x world_size x row_tokens tokens (`step_end`),
        split among the ranks by count; a position is still a count of instances, so a resume is as exact.
        """
        if batch_size < 1 or world_size < 1 or not 0 <= rank < world_size:
            raise EngineError(f"bad batching: batch size {batch_size}, rank {rank} of {world_size}; batch size must be >= 1 and 0 <= rank < world size")
        step = batch_size * world_size
        n = self.num_instances
        budget = step * self.row_tokens if self.row_tokens else None
        if drop_last and budget is None and n < step:
            raise EngineError(f"the data has {n} instances, fewer than one step of {batch_size} x {world_size}; lower the batch size or use a larger corpus")
        if drop_last and budget is not None and self.num_tokens <= budget:
            raise EngineError(f"the data has {self.num_tokens} tokens, not more than one step of {batch_size} x {world_size} "
                              f"rows of {self.row_tokens} (batched by tokens); lower the batch size or use a larger corpus")
        seed = generator.initial_seed() if generator is not None else None
        epoch, index = _as_position(start_position)
        while epochs is None or epoch < epochs:
            order = self.epoch_order(epoch, shuffle, seed)
            limit = (n // step) * step if drop_last and budget is None else n
            while index < limit:
                end = index + step if budget is None else self.step_end(order, index, budget, drop_last)
                if end is None:
                    break  # by tokens: the epoch's instances ran out before the step was full (drop_last)
                chunk = order[index:end]
                per_rank = math.ceil(len(chunk) / world_size)
                mine = chunk[rank * per_rank:(rank + 1) * per_rank]
                index += len(chunk)
                done = index >= limit or (budget is not None and self.step_end(order, index, budget, drop_last) is None)
                position = {"epoch": epoch + 1, "index": 0} if done else {"epoch": epoch, "index": index}
                if len(mine) == 0:
                    continue
                batch = self.collate(mine)
                batch["position"] = position
                yield batch
            epoch, index = epoch + 1, 0


@dataclass
class PretrainingCache:
    """What `engine.pretraining.prepare.open_prepared` returns: the data folder, its config and the train/eval splits."""
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
    """Open a data folder of the single-folder layout the in-memory builder wrote before the one builder
    (engine/pretraining/prepare.py writes every store now): config.json beside train/ and eval/."""
    path = Path(path)
    conf_file = path / "config.json"
    if not conf_file.is_file():
        raise EngineError(f"{path} is not a pre-training data folder (no config.json); prepare the data again (python -m engine prepare, or pretrain --corpus)")
    try:
        config = json.loads(conf_file.read_text(encoding="utf-8"))
        cont = np.load(path / "continuation.npy")
        t = config["tokenizer"]
        fmt = input_format(config.get("input_format"))  # none recorded: the data of an older version, SEGMENT-PAIR's
        sep = t["sep_id"] if fmt.crosses_documents else None
        train = PretrainingData(path / "train", config["objective"], t["pad_id"], cont, config["seed"], vocab_size=t["vocab_size"],
                                separator_id=sep, row_tokens=config["seq_len"] if fmt.batch_by_tokens else None)
        ev = (PretrainingData(path / "eval", config["objective"], t["pad_id"], cont, config["eval_seed"], vocab_size=t["vocab_size"],
                              separator_id=sep) if config["has_eval"] else None)
        key = config["key"]
    except (OSError, ValueError, KeyError, TypeError) as e:  # TypeError: a config.json that is not an object
        raise EngineError(f"pre-training data in {path} is damaged ({e}); delete the folder and build it again")
    return PretrainingCache(path, key, config, train, ev, from_cache=True)


# ================================================================ half-written folders
def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def remove_stale_tmp(cache_dir: Path, name: str) -> None:
    """Remove half-written cache folders (`.tmp-<name>-<pid>-<random>`) whose writer process is gone."""
    for p in cache_dir.glob(f".tmp-{name}-*"):
        try:
            pid = int(p.name.split("-")[-2])
        except (ValueError, IndexError):
            continue
        if not pid_alive(pid):
            shutil.rmtree(p, ignore_errors=True)


# ================================================================ what a store records about its tokenizer
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
