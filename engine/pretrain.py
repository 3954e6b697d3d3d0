"""Pre-training loop: MLM + NSP (BERT), MLM only (No NSP) and LTR (left-to-right LM), paper 3.1, A.2, 5.1.

`pretrain(PretrainConfig(...)) -> run_dir` and `python -m engine pretrain ...` (same settings as flags).

What it does, per optimizer step:
- `grad_accum` micro-batches from `engine.pretraining_data` (instances stored unmasked, masked here at batch
  time with `mask_batch`; the masking generator is seeded from (seed, step, micro-batch, rank), so it needs
  no saved state); the MLM head is evaluated only at the selected positions (`mlm_positions`);
  loss = mean MLM cross-entropy + mean NSP cross-entropy (`mlm+nsp`), MLM only (`mlm`), or, for `ltr`, a causal
  model (`config.causal=True`) predicting the next token at every real position (labels = inputs shifted left,
  no masking, no NSP head).
- AdamW (beta 0.9/0.999, eps 1e-6 as google-research/bert, weight decay 0.01 except LayerNorm weights and
  biases; fused on CUDA), gradient clipping, linear warmup then linear decay to 0, dropout 0.1.
- Optionally a second phase at a longer sequence length for the last `phase2_fraction` of the steps (paper:
  90% of steps at 128, the last 10% at 512, to learn the position embeddings), on data built at that length.
- `--device auto`: CUDA when present, else CPU. `--precision auto`: bf16 autocast (weights and optimizer stay
  fp32) on CUDA and on CPUs with native bf16 units, where it is faster; fp32 on other CPUs. Under `torchrun` (env RANK,
  WORLD_SIZE, LOCAL_RANK) DistributedDataParallel (gloo on CPU, NCCL on GPU), each rank its own slice of every
  global batch; gradients are all-reduced once per optimizer step (`no_sync` on the other micro-batches);
  rank 0 writes run.json, metrics and checkpoints, with barriers around saves.

The run folder (see engine/runs.py):
- `run.json`: kind "pretrain", the full config, status, pid, times, versions, total_steps, tokenizer, error.
- `metrics.jsonl`: training records every `log_every` steps, `"split": "train"`: step, tokens (real tokens seen,
  all ranks), loss, mlm_loss, mlm_acc (for `ltr`: lm_loss, lm_acc, next-token), nsp_loss, nsp_acc (mlm+nsp
  only), lr, grad_norm, tokens_per_s, elapsed (seconds of training, summed over restarts); every window's
  numbers are means over the steps since the previous record. Held-out records every `eval_every` steps and at
  the end, `"split": "eval"` with keys prefixed `eval_`: eval_mlm_loss, eval_mlm_acc, eval_mlm_ppl,
  eval_nsp_loss, eval_nsp_acc (ltr: eval_lm_loss, eval_lm_acc, eval_lm_ppl), eval_loss, eval_instances.
  The held-out documents are chosen by a fixed seed and masked once with a fixed seed using the standard
  BERT masking (15%, 80/10/10) whatever the run's own masking, so every run is scored on the same positions.
- `tokenizer/`: the WordPiece vocabulary (trained on the corpus unless `--tokenizer` is given), reused on resume.
- `checkpoints/step-N/`: Hugging Face layout (config.json, model.safetensors, vocab.txt) + training_state.json
  (step, phase, data position, tokens, elapsed) + training_state.pt (optimizer, scheduler, RNG states, the
  open metrics window), read back with `torch.load(weights_only=True)`. Written into a temporary folder and
  published with a COMPLETE marker, every `save_every` steps, at the end, and on SIGTERM / Ctrl-C.
`resume=True` continues from the last complete checkpoint: same weights, optimizer, data order and RNG, so N
straight steps and N/2 + resume + N/2 end in the same weights and the same metrics (metrics.jsonl is cut back to
the checkpoint's step first).

Departures from the paper, on purpose:
- Learning rate: the paper's 1e-4 with 10,000 warmup steps is for 1M steps of batch 256 x 512 on BERT-BASE.
  The classroom default (tiny BERT, 2,000 steps of batch 16 x 128) uses 1e-3 with 6% warmup: tiny models
  tolerate and need a larger rate to learn anything in minutes (3e-3 and 5e-3 stalled on the unigram plateau
  longer in our trials). At equal tokens, batch 16 learned faster than batch 32 (more updates); 64-token
  instances in batches of 32 learned faster still, and `--seq-len 64 --batch-size 32 --steps 3000
  --phase2-seq-len 128` (the paper's short-then-long schedule, scaled down) is the better 7-minute run
  (BENCHMARKS.md); the default stays single-phase. Warmup is given in steps (>= 1) or as a fraction of the
  steps (< 1).
- The vocabulary is 8,000 WordPieces trained on the corpus (paper: 30,000 on BooksCorpus + Wikipedia), on all
  of its documents, held-out ones included.
- Masking is dynamic (a new draw per batch), as RoBERTa, instead of the released code's static dupe-factor
  copies; `dupe_factor` still controls how many segmentations of each document are built.
- For `mlm` and `ltr` the model has no NSP head (the paper's No-NSP models were not trained with one), so
  their checkpoints load in `transformers` with a freshly initialised `cls.seq_relationship`; their pooler,
  which nothing trains without NSP, is frozen at its initialisation.
- `batch_size` is the global batch (sequences per optimizer step over all ranks and accumulation steps), so
  the same command means the same training under torchrun; it must divide by world size x grad_accum.
"""
import argparse
import contextlib
import json
import math
import os
import random
import shutil
import signal
import sys
import threading
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Optional

import numpy as np
import torch
import torch.nn.functional as F

from engine import runs
from engine.checkpoint import load as load_checkpoint
from engine.checkpoint import save as save_checkpoint_weights
from engine.config import PRESETS, BertConfig
from engine.errors import EngineError
from engine.fileio import atomic_save_with
from engine.model import PRECISIONS, BertForPreTraining, amp, check_precision, resolve_precision, to_device
from engine.pretraining_data import (IGNORE_INDEX, OBJECTIVES, _check_masking_args, build_pretraining_data,
                                     fixed_eval_masking, mask_batch)
from engine.tokenizer import Tokenizer, train_tokenizer_cached

EVAL_MASK_SEED = 12345  # the held-out set is masked once with this seed (same positions in every run)
EVAL_SPLIT_SEED = 0  # which documents are held out
STATE_FORMAT = 1


@dataclass
class PretrainConfig:
    """All settings of a pre-training run. The defaults are the classroom default: a tiny BERT (2 layers,
    hidden 128) pre-trained on BBC News with MLM+NSP in under 10 minutes on a 2-core CPU."""
    # --- data
    corpus: str = "bbc"  # "bbc", "wiki", or a path (.txt with blank lines between documents, folder of .txt, .jsonl)
    objective: str = "mlm+nsp"  # "mlm+nsp" (BERT), "mlm" (No NSP), "ltr" (LTR & No NSP)
    seq_len: int = 128  # tokens per instance, [CLS]/[SEP] included (paper: 128, then 512)
    mask_rate: float = 0.15  # share of the real tokens selected for MLM
    mask_ratios: tuple = (0.8, 0.1, 0.1)  # selected tokens -> [MASK] / random token / unchanged (paper Table 8)
    whole_word_mask: bool = False  # select whole words (all their ## pieces) instead of single pieces
    short_seq_prob: float = 0.1  # chance of a shorter target length (the released code's short_seq_prob)
    dupe_factor: int = 1  # passes over the documents, each a different segmentation into instances
    eval_fraction: float = 0.05  # share of documents held out for evaluation (chosen by a fixed seed)
    eval_max_instances: int = 512  # evaluate on at most this many held-out instances (the first ones)
    phase2_seq_len: Optional[int] = None  # e.g. 512: the last phase2_fraction of the steps at this length
    phase2_fraction: float = 0.1  # paper: 10% of the steps at 512
    cache_dir: Optional[str] = None  # pre-training data cache (default $BERT_STUDIO_CACHE or ~/.cache/bert_studio)
    # --- tokenizer
    vocab_size: int = 8000  # WordPiece vocabulary trained on the corpus (paper: 30,000)
    tokenizer: Optional[str] = None  # a tokenizer folder or vocab.txt to use instead of training one
    cased: bool = False  # keep case when training the tokenizer
    # --- model
    preset: str = "tiny"  # tiny 2/128, mini 4/256, small 4/512, medium 8/512, base 12/768, large 24/1024
    layers: Optional[int] = None  # override the preset's L
    hidden: Optional[int] = None  # override H (feed-forward 4H; heads H/64 unless given)
    heads: Optional[int] = None  # override A
    max_positions: int = 512  # learned position embeddings; the longest sequence the model accepts
    dropout: float = 0.1  # hidden and attention dropout
    # --- optimisation
    steps: int = 2000  # optimizer steps
    batch_size: int = 16  # sequences per optimizer step, all ranks and accumulation steps together
    grad_accum: int = 1  # micro-batches per optimizer step
    lr: float = 1e-3  # peak learning rate (paper 1e-4 for BERT-BASE over 1M steps; tiny models want more)
    warmup: float = 0.06  # warmup steps (>= 1) or fraction of the steps (< 1); paper: 10,000 of 1M
    weight_decay: float = 0.01  # AdamW, not on LayerNorm weights and biases
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_eps: float = 1e-6
    max_grad_norm: float = 1.0  # gradient clipping (0 = off)
    # --- bookkeeping
    log_every: int = 10  # training metrics every N steps
    eval_every: int = 200  # held-out evaluation every M steps (0 = only at the end)
    save_every: int = 400  # checkpoint every K steps (0 = only at the end / on cancel)
    keep: int = 0  # keep only the newest N checkpoints (0 = all; the training-steps ablation needs them)
    seed: int = 0  # model init, data instances and order, masking, dropout
    device: str = "auto"  # auto (CUDA + bf16 if present, else CPU), cpu, cuda
    precision: str = "auto"  # auto: bf16 autocast on CUDA and on CPUs with native bf16 (faster there), else fp32
    num_threads: Optional[int] = None  # CPU threads per process (default: torch's, divided among local ranks)
    compile: bool = False  # torch.compile the model
    out: str = ""  # the run folder (a bare name goes under the runs root, $BERT_STUDIO_RUNS or ./runs)
    name: Optional[str] = None  # run name under the runs root when `out` is not given
    resume: bool = False  # continue the run in `out` from its last complete checkpoint
    stop_after: Optional[int] = None  # stop cleanly (checkpoint, status cancelled) after this step; resume later
    quiet: bool = False  # no progress bar


# settings that may differ between the first start and a resume without changing what is trained
RUNTIME_FIELDS = {"out", "name", "resume", "stop_after", "quiet", "device", "precision", "num_threads", "compile", "cache_dir",
                  "log_every", "eval_every", "save_every", "keep", "steps"}


def _config_dict(cfg: PretrainConfig) -> dict:
    d = asdict(cfg)
    d["mask_ratios"] = [float(r) for r in cfg.mask_ratios]
    return d


# ================================================================ validation and pieces
def validate(cfg: PretrainConfig) -> None:
    """Check the settings that need no data; raise EngineError with a one-line fix."""
    if cfg.objective not in OBJECTIVES:
        raise EngineError(f"unknown objective '{cfg.objective}'; choose one of {', '.join(OBJECTIVES)}")
    if cfg.preset not in PRESETS:
        raise EngineError(f"unknown preset '{cfg.preset}'; choose one of {', '.join(PRESETS)}")
    _check_masking_args(cfg.mask_rate, cfg.mask_ratios)
    check_precision(cfg.precision)
    for name in ("steps", "batch_size", "grad_accum", "log_every", "max_positions", "eval_max_instances"):
        if int(getattr(cfg, name)) < 1:
            raise EngineError(f"--{name.replace('_', '-')} must be at least 1 (got {getattr(cfg, name)})")
    for name in ("eval_every", "save_every", "keep"):
        if int(getattr(cfg, name)) < 0:
            raise EngineError(f"--{name.replace('_', '-')} must be 0 or more (got {getattr(cfg, name)})")
    for name in ("layers", "hidden", "heads"):
        v = getattr(cfg, name)
        if v is not None and int(v) < 1:
            raise EngineError(f"--{name} must be at least 1 (got {v})")
    if cfg.seq_len < 8:
        raise EngineError(f"--seq-len {cfg.seq_len} is too short; use at least 8 (the paper uses 128, then 512)")
    for flag, T in (("--seq-len", cfg.seq_len), ("--phase2-seq-len", cfg.phase2_seq_len)):
        if T is not None and T > cfg.max_positions:
            raise EngineError(f"{flag} {T} is above the model's {cfg.max_positions} positions; lower {flag} or raise --max-positions")
    if cfg.phase2_seq_len is not None:
        if cfg.phase2_seq_len < 8:
            raise EngineError(f"--phase2-seq-len {cfg.phase2_seq_len} is too short; use e.g. 512")
        if not 0.0 < cfg.phase2_fraction < 1.0:
            raise EngineError(f"--phase2-fraction {cfg.phase2_fraction} must be between 0 and 1; the paper uses 0.1")
    if not cfg.lr > 0 or not math.isfinite(cfg.lr):
        raise EngineError(f"--lr {cfg.lr} must be a positive number; e.g. 1e-3 for tiny models, 1e-4 for BERT-BASE")
    if cfg.warmup < 0:
        raise EngineError(f"--warmup {cfg.warmup} must be >= 0 (steps, or a fraction of the steps below 1)")
    if not 0.0 <= cfg.dropout < 1.0:
        raise EngineError(f"--dropout {cfg.dropout} must be in [0, 1); the paper uses 0.1")
    if cfg.weight_decay < 0 or cfg.max_grad_norm < 0:
        raise EngineError("--weight-decay and --max-grad-norm must be >= 0")
    if cfg.tokenizer is None and cfg.vocab_size < 100:
        raise EngineError(f"--vocab-size {cfg.vocab_size} is too small; use at least a few hundred (the classroom uses 8000)")
    if cfg.device not in ("auto", "cpu", "cuda") and not str(cfg.device).startswith("cuda:"):
        raise EngineError(f"unknown device '{cfg.device}'; choose auto, cpu or cuda")
    if cfg.stop_after is not None and cfg.stop_after < 1:
        raise EngineError(f"--stop-after {cfg.stop_after} must be at least 1")
    model_config(cfg, vocab_size=1000)  # L/H/A consistency


def model_config(cfg: PretrainConfig, vocab_size: int) -> BertConfig:
    """The BertConfig a run trains: the preset, custom L/H/A, heads for the objective, causal for LTR."""
    over = {}
    if cfg.layers is not None:
        over["num_layers"] = int(cfg.layers)
    if cfg.hidden is not None:
        over["hidden_size"] = int(cfg.hidden)
        if cfg.heads is None:
            over["num_heads"] = max(1, int(cfg.hidden) // 64)  # paper: A = H / 64
    if cfg.heads is not None:
        over["num_heads"] = int(cfg.heads)
    return BertConfig.preset(cfg.preset, vocab_size=vocab_size, max_position_embeddings=cfg.max_positions,
                             hidden_dropout=cfg.dropout, attention_dropout=cfg.dropout,
                             causal=cfg.objective == "ltr", has_mlm_head=True,
                             has_nsp_head=cfg.objective == "mlm+nsp", **over)


def warmup_steps(cfg: PretrainConfig) -> int:
    return int(round(cfg.warmup * cfg.steps)) if cfg.warmup < 1 else int(cfg.warmup)


def lr_at(step: int, cfg: PretrainConfig) -> float:
    """Learning rate of optimizer step `step` (0-based): linear warmup, then linear decay to 0 at cfg.steps."""
    w = warmup_steps(cfg)
    if step < w:
        return cfg.lr * (step + 1) / w
    return cfg.lr * max(0.0, (cfg.steps - step) / max(1, cfg.steps - w))


def param_groups(model: torch.nn.Module, weight_decay: float) -> list:
    """AdamW groups: decay on matrices (Linear weights, embeddings), none on LayerNorm weights and biases."""
    decay, no_decay = [], []
    for _, p in model.named_parameters():
        if p.requires_grad:
            (decay if p.dim() >= 2 else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def ltr_labels(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Next-token targets: labels[:, t] = input_ids[:, t+1] where position t+1 is real, else -100. (B, T)"""
    labels = torch.full_like(input_ids, IGNORE_INDEX)
    nxt_real = attention_mask[:, 1:].bool() & attention_mask[:, :-1].bool()
    labels[:, :-1] = torch.where(nxt_real, input_ids[:, 1:], torch.full_like(input_ids[:, 1:], IGNORE_INDEX))
    return labels


def _mix_seed(*parts) -> int:
    h = 0x9E3779B97F4A7C15
    for p in parts:
        h = (h ^ (int(p) + 0x9E3779B97F4A7C15 + (h << 6) + (h >> 2))) & 0x7FFFFFFFFFFFFFFF
    return h


# ================================================================ distributed
@dataclass
class Dist:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def main(self) -> bool:
        return self.rank == 0

    def barrier(self):
        if self.enabled:
            torch.distributed.barrier()


def _dist_from_env() -> Dist:
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ and int(os.environ["WORLD_SIZE"]) > 1:
        return Dist(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ.get("LOCAL_RANK", 0)),
                    int(os.environ.get("LOCAL_WORLD_SIZE", os.environ["WORLD_SIZE"])))
    return Dist()


def resolve_device(name: str, dist: Dist) -> torch.device:
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise EngineError("--device cuda was asked for but no CUDA GPU is available; use --device cpu or auto")
        return torch.device("cuda", dist.local_rank if dist.enabled else (torch.device(name).index or 0))
    return torch.device("cpu")


# ================================================================ one step's loss
def _forward_loss(model, batch: dict, objective: str, device, amp_ctx):
    """(loss, stats) for a micro-batch. stats (9,) float64: loss, mlm_loss_sum, mlm_correct, mlm_n,
    nsp_loss_sum, nsp_correct, nsp_n, real tokens, 1."""
    input_ids = to_device(batch["input_ids"], device)  # (B, T)
    token_type = to_device(batch["token_type_ids"], device)
    attn = to_device(batch["attention_mask"], device)
    labels = to_device(batch["labels"], device)  # (B, T), -100 where not predicted
    sel = labels != IGNORE_INDEX  # (B, T)
    with amp_ctx:
        out = model(input_ids, token_type, attn, mlm_positions=sel)
    logits = out.mlm_logits.float()  # (N, V)
    target = labels[sel]  # (N,)
    mlm_sum = F.cross_entropy(logits, target, reduction="sum")
    n = target.numel()
    loss = mlm_sum / max(n, 1)
    stats = torch.zeros(9, dtype=torch.float64, device=device)
    stats[1] = mlm_sum.detach().double()
    stats[2] = (logits.detach().argmax(-1) == target).sum().double()
    stats[3] = n
    if objective == "mlm+nsp":
        nsp_logits = out.nsp_logits.float()  # (B, 2)
        nsp_target = to_device(batch["next_sentence_label"], device)
        nsp_loss = F.cross_entropy(nsp_logits, nsp_target)
        loss = loss + nsp_loss
        stats[4] = nsp_loss.detach().double() * len(nsp_target)
        stats[5] = (nsp_logits.detach().argmax(-1) == nsp_target).sum().double()
        stats[6] = len(nsp_target)
    stats[0] = loss.detach().double()
    stats[7] = attn.sum().double()
    stats[8] = 1.0
    return loss, stats


def _window_record(acc: torch.Tensor, objective: str) -> dict:
    a = acc.tolist()
    tok = "lm" if objective == "ltr" else "mlm"
    rec = {"loss": a[0] / max(a[8], 1), f"{tok}_loss": a[1] / max(a[3], 1), f"{tok}_acc": a[2] / max(a[3], 1)}
    if objective == "mlm+nsp":
        rec["nsp_loss"] = a[4] / max(a[6], 1)
        rec["nsp_acc"] = a[5] / max(a[6], 1)
    return rec


# ================================================================ evaluation
def _eval_batches(cache, cfg: PretrainConfig, batch_size: int) -> list:
    """The fixed held-out batches (a list, reused at every evaluation); [] when there is no held-out data."""
    if cache.eval is None or cache.eval.num_instances == 0:
        return []
    n = min(cache.eval.num_instances, cfg.eval_max_instances)
    if cfg.objective == "ltr":
        out = []
        for s in range(0, n, batch_size):
            b = cache.eval.collate(np.arange(s, min(s + batch_size, n)))
            b["labels"] = ltr_labels(b["input_ids"], b["attention_mask"])
            out.append(b)
        return out
    masked = fixed_eval_masking(cache.eval, cache.vocab_size, cache.mask_id, cache.special_ids,
                                rate=0.15, ratios=(0.8, 0.1, 0.1), seed=EVAL_MASK_SEED)
    out, seen = [], 0
    for b in masked.batches(batch_size):
        if seen >= n:
            break
        take = min(len(b["input_ids"]), n - seen)
        out.append({k: v[:take] for k, v in b.items()})
        seen += take
    return out


@torch.no_grad()
def evaluate(model, batches: list, objective: str, device, amp_ctx_fn=contextlib.nullcontext) -> dict:
    """Held-out metrics (eval_* keys) of `model` on fixed batches."""
    was_training = model.training
    model.eval()
    acc = torch.zeros(9, dtype=torch.float64, device=device)
    n_inst = 0
    for b in batches:
        _, stats = _forward_loss(model, b, objective, device, amp_ctx_fn())
        acc += stats
        n_inst += len(b["input_ids"])
    model.train(was_training)
    rec = {f"eval_{k}": v for k, v in _window_record(acc, objective).items()}
    tok = "lm" if objective == "ltr" else "mlm"
    rec[f"eval_{tok}_ppl"] = math.exp(min(rec[f"eval_{tok}_loss"], 50.0))
    rec["eval_loss"] = rec[f"eval_{tok}_loss"] + rec.get("eval_nsp_loss", 0.0)
    rec["eval_instances"] = n_inst
    return rec


# ================================================================ checkpoints
def _rng_state() -> dict:
    np_state = np.random.get_state()
    py = random.getstate()
    st = {"torch": torch.get_rng_state(), "python": list(py[1]), "python_version": py[0], "python_gauss": py[2],
          "numpy": torch.from_numpy(np.asarray(np_state[1], dtype=np.int64)), "numpy_pos": int(np_state[2]),
          "numpy_gauss": [int(np_state[3]), float(np_state[4])]}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        st["cuda"] = torch.cuda.get_rng_state()
    return st


def _set_rng_state(st: dict) -> None:
    torch.set_rng_state(st["torch"])
    random.setstate((st["python_version"], tuple(int(x) for x in st["python"]), st.get("python_gauss")))
    np.random.set_state(("MT19937", st["numpy"].numpy().astype(np.uint32), st["numpy_pos"],
                         st["numpy_gauss"][0], st["numpy_gauss"][1]))
    if "cuda" in st and torch.cuda.is_available():
        torch.cuda.set_rng_state(st["cuda"])


def save_checkpoint(run_dir: Path, model, tokenizer: Tokenizer, optimizer, state: dict, acc: torch.Tensor,
                    cfg: PretrainConfig) -> Path:
    """Write checkpoints/step-N (HF layout + training state) atomically; returns its path."""
    step = int(state["step"])
    tmp = runs.new_checkpoint_dir(run_dir, step)
    try:
        save_checkpoint_weights(model, tmp, tokenizer=tokenizer, extra_files={"training_state.json": state})
        blob = {"format": STATE_FORMAT, "step": step, "optimizer": optimizer.state_dict(),
                "scheduler": {"kind": "linear_warmup_linear_decay", "warmup_steps": warmup_steps(cfg),
                              "total_steps": int(cfg.steps), "peak_lr": float(cfg.lr), "last_step": step},
                "rng": _rng_state(), "metrics_window": acc.detach().cpu().clone(),
                "state_json": json.dumps(state)}
        atomic_save_with(tmp / "training_state.pt", lambda p: torch.save(blob, p))
        final = runs.publish_checkpoint(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if cfg.keep:
        runs.prune_checkpoints(run_dir, cfg.keep)
    return final


def load_training_state(ckpt: Path) -> dict:
    path = Path(ckpt) / "training_state.pt"
    if not path.is_file():
        raise EngineError(f"{ckpt} has no training_state.pt, so the run cannot continue exactly from it; resume from another checkpoint or start a new run")
    try:
        blob = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as e:
        raise EngineError(f"{path} could not be read ({type(e).__name__}); the checkpoint is damaged, delete it to resume from the one before") from e
    if not isinstance(blob, dict) or blob.get("format") != STATE_FORMAT:
        raise EngineError(f"{path} is not a training state this version can read; start a new run")
    blob["state"] = json.loads(blob["state_json"])
    return blob


# ================================================================ run folder checks
_IGNORED_ENTRIES = {runs.LOCK_FILE, ".run.json.lock", "job.log"}  # the launcher writes job.log before we start


def _run_entries(run_dir: Path) -> list:
    """What in `run_dir` a new run would collide with: anything but lock files and the launcher's job.log
    (and a tokenizer/ left by a start that died before it wrote run.json)."""
    try:
        names = [p.name for p in run_dir.iterdir() if p.name not in _IGNORED_ENTRIES]
    except FileNotFoundError:
        return []
    except NotADirectoryError:
        raise EngineError(f"--out {run_dir} is a file; give a folder for the run")
    if runs.RUN_JSON not in names:
        names = [n for n in names if n != "tokenizer"]
    return names


def resolve_out(cfg: PretrainConfig) -> Path:
    if cfg.out:
        return runs.run_dir_for(cfg.out)
    if cfg.name:
        return runs.resolve_run_dir(runs.runs_root(), cfg.name)
    raise EngineError("no run folder given; pass --out DIR (or --name NAME for runs/NAME)")


def _preflight(cfg: PretrainConfig, run_dir: Path):
    """Refuse what would overwrite or collide, before any work. Returns (checkpoint to resume from or None,
    restart): restart is True for `--resume` of a run that died before its first checkpoint (it starts again
    from step 0 with its own settings; nothing resumable is lost)."""
    holder = runs.lock_holder(run_dir) if run_dir.is_dir() else None
    if holder is not None:
        raise EngineError(f"run {run_dir} is in use by process {holder.get('pid', '?')} (started {holder.get('started', '?')}); wait for it or cancel it, or choose another --out")
    if not cfg.resume:
        if _run_entries(run_dir):
            raise EngineError(f"run folder {run_dir} already holds a run; continue it with --resume, or choose another --out")
        return None, False
    info = runs.read_run_json(run_dir) if run_dir.is_dir() else {}
    ck = runs.latest_checkpoint(run_dir)
    if ck is None and not info:
        where = "does not exist" if not run_dir.exists() else "holds no run (no run.json, no checkpoint)"
        raise EngineError(f"cannot resume: {run_dir} {where}; start a new run without --resume (into an empty or new --out)")
    if info.get("kind") not in (None, "pretrain"):
        raise EngineError(f"{run_dir} is a {info.get('kind')} run, not a pre-training run; choose another --out")
    saved = info.get("config") or {}
    mine = _config_dict(cfg)
    for k, v in saved.items():
        if k in RUNTIME_FIELDS or k not in mine:
            continue
        if mine[k] != v:
            raise EngineError(f"the run was started with {k}={v!r} but this resume asks for {mine[k]!r}; --resume continues with the run's own settings, drop that flag or use another --out")
    return ck, ck is None


# ================================================================ the loop
class _StopFlag:
    """SIGTERM / Ctrl-C set a flag; the loop checkpoints at the end of the current step and stops.
    A second signal while stopping raises KeyboardInterrupt at once."""

    def __init__(self):
        self.signal = None
        self.old = {}

    def install(self):
        if threading.current_thread() is not threading.main_thread():
            return self
        for sig in (signal.SIGTERM, signal.SIGINT):
            self.old[sig] = signal.signal(sig, self._on)
        return self

    def _on(self, signum, frame):
        if self.signal is not None:
            raise KeyboardInterrupt(f"second {signal.Signals(signum).name}")
        self.signal = signum

    def restore(self):
        for sig, h in self.old.items():
            signal.signal(sig, h)
        self.old = {}


def _log(msg: str, cfg: PretrainConfig, dist: Dist) -> None:
    if dist.main and not cfg.quiet:
        print(msg, file=sys.stderr, flush=True)


def _prepare(cfg: PretrainConfig, docs, run_dir: Path, dist: Dist, resuming: bool):
    """Tokenizer (saved to run_dir/tokenizer) -> cached instances (rank 0 builds, the others open)."""
    tok_dir = run_dir / "tokenizer"
    if resuming:
        if not (tok_dir / "vocab.txt").is_file():
            raise EngineError(f"{tok_dir} is missing, so the run cannot continue with its own vocabulary; restore it or start a new run")
    elif dist.main:  # rank 0 makes the run's tokenizer (under the run lock), the other ranks read it
        if cfg.tokenizer:
            tok = Tokenizer.from_file(cfg.tokenizer)
        else:
            _log(f"training a {cfg.vocab_size}-token WordPiece vocabulary on {len(docs)} documents ...", cfg, dist)
            # cached by corpus and settings: WordPiece training is not reproducible across processes
            # (tokenizers issue 1794), and runs with the same settings should share one vocabulary
            tok_cache = Path(cfg.cache_dir).expanduser() / "tokenizers" if cfg.cache_dir else None
            tok = train_tokenizer_cached(docs, vocab_size=cfg.vocab_size, lowercase=not cfg.cased, cache_dir=tok_cache)
        if tok_dir.exists():
            shutil.rmtree(tok_dir)  # left by a start that died before run.json (see _run_entries)
        tok.save(tok_dir)
    dist.barrier()
    if resuming or not dist.main:
        tok = Tokenizer.from_file(tok_dir)
    caches = []
    lengths = [cfg.seq_len] + ([cfg.phase2_seq_len] if cfg.phase2_seq_len else [])
    for T in lengths:
        kw = dict(seq_len=T, objective=cfg.objective, seed=cfg.seed, cache_dir=cfg.cache_dir,
                  short_seq_prob=cfg.short_seq_prob, dupe_factor=cfg.dupe_factor, eval_fraction=cfg.eval_fraction,
                  eval_seed=EVAL_SPLIT_SEED, max_positions=cfg.max_positions,
                  corpus_name=str(cfg.corpus))
        if dist.main:
            c = build_pretraining_data(docs, tok, **kw)
            if not c.from_cache:
                _log(f"built pre-training data at length {T}: {c.train.num_instances} training, "
                     f"{c.eval.num_instances if c.eval else 0} held-out instances ({c.path})", cfg, dist)
        dist.barrier()
        if not dist.main:
            c = build_pretraining_data(docs, tok, **kw)  # opens the cache rank 0 wrote
        caches.append(c)
    return tok, caches


def pretrain(cfg: PretrainConfig) -> Path:
    """Pre-train into `cfg.out` (see the module docstring); returns the run folder."""
    return _pretrain(cfg)["run_dir"]


def _pretrain(cfg: PretrainConfig) -> dict:
    from engine.corpora import load_corpus

    validate(cfg)
    dist = _dist_from_env()
    run_dir = resolve_out(cfg)
    ckpt, restart, lock = None, False, None
    if dist.main:
        ckpt, restart = _preflight(cfg, run_dir)  # read-only checks: collisions, resume
    docs = load_corpus(cfg.corpus)  # EngineError when missing or empty
    if cfg.objective == "mlm+nsp" and len(docs) < 2:
        raise EngineError(f"corpus '{cfg.corpus}' has a single document; mlm+nsp needs at least 2 (NotNext takes B from another document): add documents (blank lines separate them in a .txt) or use --objective mlm")
    created_dir = not run_dir.exists()
    if dist.main:
        lock = runs.RunLock(run_dir).acquire()  # refuses a second live writer
    fresh = ckpt is None and not restart
    try:
        if dist.main and fresh and _run_entries(run_dir):  # another start slipped in before our lock
            raise EngineError(f"run folder {run_dir} already holds a run; continue it with --resume, or choose another --out")
        device = resolve_device(cfg.device, dist)
        if dist.enabled and not torch.distributed.is_initialized():
            torch.distributed.init_process_group("nccl" if device.type == "cuda" else "gloo")
        if device.type == "cuda":
            torch.cuda.set_device(device)
        if cfg.num_threads:
            torch.set_num_threads(int(cfg.num_threads))
        elif device.type == "cpu" and dist.local_world_size > 1:
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // dist.local_world_size))
        if dist.enabled:  # every rank learns whether rank 0 resumes
            obj = [str(ckpt) if ckpt else None, restart]
            torch.distributed.broadcast_object_list(obj, src=0)
            ckpt, restart = (Path(obj[0]) if obj[0] else None), bool(obj[1])
            fresh = ckpt is None and not restart
        micro = cfg.batch_size // (dist.world_size * cfg.grad_accum)
        if micro * dist.world_size * cfg.grad_accum != cfg.batch_size:
            raise EngineError(f"--batch-size {cfg.batch_size} does not divide into {dist.world_size} process(es) x {cfg.grad_accum} accumulation steps; use a multiple of {dist.world_size * cfg.grad_accum}")
        if restart:
            _log(f"{run_dir} has no complete checkpoint yet: starting it again from step 0 with its own settings", cfg, dist)
        reuse_tok = ckpt is not None or (restart and (run_dir / "tokenizer" / "vocab.txt").is_file())
        tok, caches = _prepare(cfg, docs, run_dir, dist, resuming=reuse_tok)
        for c in caches:
            if c.train.num_instances < micro * dist.world_size:
                raise EngineError(f"the corpus gives only {c.train.num_instances} training instances, fewer than one batch of {micro * dist.world_size}; lower --batch-size or use a larger corpus")
        return _train(cfg, dist, device, run_dir, ckpt, tok, caches, micro, restart)
    except BaseException:
        # a new run that failed before it wrote run.json leaves nothing behind
        if dist.main and fresh and not (run_dir / runs.RUN_JSON).exists():
            if lock is not None:
                lock.release()
            shutil.rmtree(run_dir if created_dir else run_dir / "tokenizer", ignore_errors=True)
        raise
    finally:
        if lock is not None:
            lock.release()
        if dist.enabled and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()


def _train(cfg, dist: Dist, device, run_dir: Path, ckpt, tok: Tokenizer, caches: list, micro: int, restart: bool = False) -> dict:
    # ---- model, optimizer, state
    mcfg = model_config(cfg, tok.vocab_size)
    torch.manual_seed(cfg.seed)
    model = BertForPreTraining(mcfg)
    state = {"step": 0, "phase": 1, "position": None, "tokens": 0, "elapsed": 0.0}
    blob = None
    if ckpt is not None:
        bundle = load_checkpoint(ckpt, tokenizer=tok)
        if bundle.config.to_dict() != mcfg.to_dict():
            raise EngineError(f"checkpoint {ckpt} holds a different model than the run's settings; resume with the run's own settings")
        model.load_state_dict(bundle.model.state_dict())
        blob = load_training_state(ckpt)
        state.update(blob["state"])
    if not mcfg.has_nsp_head:  # without NSP nothing trains the pooler: freeze it (DDP then sees no unused parameter)
        for p in model.bert.pooler.parameters():
            p.requires_grad_(False)
    model.to(device).train()
    raw_model = model
    optimizer = torch.optim.AdamW(param_groups(model, cfg.weight_decay), lr=cfg.lr, betas=(cfg.adam_beta1, cfg.adam_beta2),
                                  eps=cfg.adam_eps, **({"fused": True} if device.type == "cuda" else {}))
    acc = torch.zeros(9, dtype=torch.float64, device=device)  # the open metrics window
    if blob is not None:
        optimizer.load_state_dict(blob["optimizer"])
        _set_rng_state(blob["rng"])
        if dist.main:
            acc += blob["metrics_window"].to(device)
    if cfg.compile:
        model = torch.compile(model)
    if dist.enabled:
        from torch.nn.parallel import DistributedDataParallel as DDP
        model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    precision = resolve_precision(cfg.precision, device)
    use_bf16 = precision == "bf16"
    amp_ctx_fn = lambda: amp(device, precision)  # noqa: E731

    phase2_steps = int(round(cfg.steps * cfg.phase2_fraction)) if cfg.phase2_seq_len else 0
    phase1_end = cfg.steps - phase2_steps
    eval_batches = _eval_batches(caches[0], cfg, micro) if dist.main else []
    stop_at = min(cfg.steps, cfg.stop_after) if cfg.stop_after else cfg.steps

    status = {"value": "running", "error": None}
    last_eval, last_train = {}, {}
    step = int(state["step"])
    if dist.main:
        runs.start_run(run_dir, "pretrain", config=_config_dict(cfg), total_steps=int(cfg.steps),
                       tokenizer=str(run_dir / "tokenizer"), objective=cfg.objective, world_size=dist.world_size,
                       device=str(device), bf16=use_bf16, model=mcfg.to_dict(), parameters=raw_model.num_parameters(),
                       resumed_from=str(ckpt) if ckpt else None)
    stop = _StopFlag().install()
    try:
        if dist.main:
            if ckpt is not None or restart:
                runs.truncate_metrics(run_dir, step)  # drop what was logged after the checkpoint (restart: all)
                _remove_partial_checkpoints(run_dir)
        if dist.main and step >= cfg.steps:
            status["value"] = "finished"
            _log(f"run {run_dir} already finished at step {step}; pass a larger --steps to train on", cfg, dist)
            return _summary(run_dir, "finished", step, cfg, last_train, runs_last_eval(run_dir))

        def data_iter(phase: int, position):
            c = caches[0] if phase == 1 else caches[-1]
            return c, c.train.batches(micro, start_position=position, rank=dist.rank, world_size=dist.world_size)

        if state["phase"] == 1 and step >= phase1_end and phase2_steps:
            state["phase"], state["position"] = 2, None
        cache, it = data_iter(state["phase"], state["position"])
        pbar = None
        if dist.main and not cfg.quiet and sys.stderr.isatty():
            from tqdm import tqdm
            pbar = tqdm(total=cfg.steps, initial=step, file=sys.stderr, desc="pretrain", dynamic_ncols=True)
        window_time, tokens_window_start = 0.0, state["tokens"]  # training time only (no eval / saving)
        while step < stop_at:
            t_step = time.time()
            if state["phase"] == 1 and step >= phase1_end and phase2_steps:
                state["phase"], state["position"] = 2, None
                cache, it = data_iter(2, None)
                _log(f"step {step}: phase 2 at sequence length {cfg.phase2_seq_len}", cfg, dist)
            lr = lr_at(step, cfg)
            for group in optimizer.param_groups:
                group["lr"] = lr
            torch.manual_seed(_mix_seed(cfg.seed, step, dist.rank, 1))  # dropout: reproducible on resume
            for m in range(cfg.grad_accum):
                batch = next(it)
                state["position"] = batch["position"]
                if cfg.objective == "ltr":
                    batch["labels"] = ltr_labels(batch["input_ids"], batch["attention_mask"])
                else:
                    g = torch.Generator().manual_seed(_mix_seed(cfg.seed, step, m, dist.rank, 2))
                    batch = mask_batch(batch, cache.vocab_size, cache.mask_id, cache.special_ids, rate=cfg.mask_rate,
                                       ratios=cfg.mask_ratios, generator=g, whole_word=cfg.whole_word_mask)
                sync = contextlib.nullcontext()
                if dist.enabled and m < cfg.grad_accum - 1:
                    sync = model.no_sync()
                with sync:
                    loss, stats = _forward_loss(model, batch, cfg.objective, device, amp_ctx_fn())
                    (loss / cfg.grad_accum).backward()
                acc += stats
            if cfg.max_grad_norm > 0:
                grad_norm = torch.nn.utils.clip_grad_norm_(raw_model.parameters(), cfg.max_grad_norm)
            else:
                grad_norm = torch.zeros(())
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            state["step"] = step
            if device.type == "cuda" and (step % cfg.log_every == 0 or step == stop_at):
                torch.cuda.synchronize()
            dt = time.time() - t_step
            state["elapsed"] = float(state["elapsed"]) + dt
            window_time += dt

            # ---- metrics (all ranks reduce at the same steps)
            if step % cfg.log_every == 0 or step == stop_at:
                if dist.enabled:
                    torch.distributed.all_reduce(acc)
                state["tokens"] = int(state["tokens"]) + int(acc[7].item())
                rec = {"step": step, "split": "train", "tokens": state["tokens"], **_window_record(acc, cfg.objective),
                       "lr": lr, "grad_norm": float(grad_norm), "phase": state["phase"],
                       "tokens_per_s": (state["tokens"] - tokens_window_start) / max(window_time, 1e-9),
                       "elapsed": round(state["elapsed"], 3)}
                acc.zero_()
                window_time, tokens_window_start = 0.0, state["tokens"]
                last_train = rec
                if dist.main:
                    runs.append_metrics(run_dir, rec)
                    if pbar is not None:
                        key = "lm_loss" if cfg.objective == "ltr" else "mlm_loss"
                        pbar.set_postfix(loss=f"{rec['loss']:.3f}", **{key: f"{rec[key]:.3f}"})
            if pbar is not None:
                pbar.update(1)

            # ---- stop requests (signal on any rank, or --stop-after)
            stop_now = stop.signal is not None
            if dist.enabled:  # every rank must agree; the all-reduce syncs the GPU, so only at log steps
                if step % cfg.log_every == 0 or step == stop_at:
                    flag = torch.tensor([1.0 if stop_now else 0.0], device=device)
                    torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
                    stop_now = bool(flag.item())
                else:
                    stop_now = False

            # ---- held-out evaluation (rank 0 on the unwrapped model)
            if (cfg.eval_every and step % cfg.eval_every == 0) or step == cfg.steps:
                if dist.main and eval_batches:
                    last_eval = {"step": step, "split": "eval", **evaluate(raw_model, eval_batches, cfg.objective, device, amp_ctx_fn),
                                 "tokens": state["tokens"]}
                    runs.append_metrics(run_dir, last_eval)
                dist.barrier()

            # ---- checkpoint
            if (cfg.save_every and step % cfg.save_every == 0) or step == stop_at or stop_now:
                _checkpoint(run_dir, raw_model, tok, optimizer, state, acc, cfg, dist)
            if stop_now:
                status["value"] = "cancelled"
                status["error"] = f"cancelled by {signal.Signals(stop.signal).name if stop.signal else 'another rank'} at step {step}; continue with --resume"
                break
        if pbar is not None:
            pbar.close()
        if status["value"] == "running":
            if step >= cfg.steps:
                status["value"] = "finished"
            else:
                status["value"] = "cancelled"
                status["error"] = f"stopped after step {step} as asked (--stop-after); continue with --resume"
    except KeyboardInterrupt:
        status["value"], status["error"] = "cancelled", "cancelled by the user (interrupted while saving?); continue with --resume"
        raise
    except EngineError as e:
        status["value"], status["error"] = "failed", str(e)
        raise
    except Exception as e:
        status["value"], status["error"] = "failed", f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
        raise
    finally:
        stop.restore()
        if dist.main and status["value"] != "running":
            try:
                runs.set_status(run_dir, status["value"], error=status["error"])
            except Exception:
                pass  # the disk may be full; the lock release below still tells the studio the process is gone
    return _summary(run_dir, status["value"], step, cfg, last_train, last_eval)


def _checkpoint(run_dir, raw_model, tok, optimizer, state, acc, cfg, dist: Dist) -> None:
    if dist.enabled:  # the open metrics window, summed over ranks, travels in rank 0's checkpoint
        torch.distributed.all_reduce(acc)
        if not dist.main:
            acc.zero_()
    dist.barrier()
    if dist.main:
        existing = run_dir / runs.CHECKPOINTS / f"step-{int(state['step'])}"
        if not (existing / runs.COMPLETE).is_file():
            save_checkpoint(run_dir, raw_model, tok, optimizer, dict(state), acc, cfg)
    dist.barrier()


def _remove_partial_checkpoints(run_dir: Path) -> None:
    """Delete the temporary folders a killed save left in checkpoints/ (all dot-named; we hold the run lock)."""
    ckdir = run_dir / runs.CHECKPOINTS
    if ckdir.is_dir():
        for p in ckdir.iterdir():
            if p.name.startswith(".") and p.is_dir():
                shutil.rmtree(p, ignore_errors=True)


def runs_last_eval(run_dir) -> dict:
    recs = [r for r in runs.read_metrics(run_dir) if r.get("split") == "eval"]
    return recs[-1] if recs else {}


def _summary(run_dir, status, step, cfg, last_train, last_eval) -> dict:
    return {"run_dir": run_dir, "status": status, "step": step, "steps": cfg.steps,
            "train": {k: v for k, v in last_train.items() if k not in ("split",)},
            "eval": {k: v for k, v in last_eval.items() if k not in ("split",)}}


# ================================================================ CLI
def _ratios(text: str) -> tuple:
    try:
        parts = tuple(float(x) for x in text.replace("/", ",").split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not three numbers like 0.8,0.1,0.1")
    if len(parts) != 3:
        raise argparse.ArgumentTypeError(f"'{text}' needs exactly three numbers MASK,RANDOM,SAME like 0.8,0.1,0.1")
    return parts


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line through the engine's error path instead of usage + exit 2
        raise EngineError(f"{message}; see python -m engine pretrain --help")


def build_parser() -> argparse.ArgumentParser:
    d = PretrainConfig()
    S = argparse.SUPPRESS
    ap = _Parser(prog="python -m engine pretrain", argument_default=S,
                 description="Pre-train BERT (MLM+NSP, MLM only, or LTR) into a run folder. Every flag left out takes "
                             "the classroom default shown here: a tiny BERT on BBC News in under 10 minutes on 2 CPU cores. "
                             "--resume continues a run with its own saved settings.")
    g = ap.add_argument_group("data")
    g.add_argument("--corpus", help=f"bbc, wiki, or a path (.txt with blank lines between documents, a folder of .txt, a .jsonl) (default {d.corpus})")
    g.add_argument("--objective", choices=OBJECTIVES, help=f"mlm+nsp (BERT), mlm (No NSP), ltr (left-to-right, No NSP) (default {d.objective})")
    g.add_argument("--seq-len", type=int, help=f"tokens per instance incl. [CLS]/[SEP] (default {d.seq_len})")
    g.add_argument("--mask-rate", type=float, help=f"share of tokens selected for MLM (default {d.mask_rate})")
    g.add_argument("--mask-ratios", type=_ratios, help="MASK,RANDOM,SAME shares of the selected tokens (default 0.8,0.1,0.1)")
    g.add_argument("--whole-word-mask", action="store_true", help="mask whole words")
    g.add_argument("--short-seq-prob", type=float, help=f"chance of a shorter instance (default {d.short_seq_prob})")
    g.add_argument("--dupe-factor", type=int, help=f"segmentations per document (default {d.dupe_factor})")
    g.add_argument("--eval-fraction", type=float, help=f"share of documents held out (default {d.eval_fraction})")
    g.add_argument("--eval-max-instances", type=int, help=f"held-out instances evaluated (default {d.eval_max_instances})")
    g.add_argument("--phase2-seq-len", type=int, help="length of the second phase, e.g. 512 (default: no second phase)")
    g.add_argument("--phase2-fraction", type=float, help=f"share of the steps in the second phase (default {d.phase2_fraction})")
    g.add_argument("--cache-dir", help="pre-training data cache (default $BERT_STUDIO_CACHE or ~/.cache/bert_studio)")
    g = ap.add_argument_group("tokenizer")
    x = g.add_mutually_exclusive_group()
    x.add_argument("--vocab-size", type=int, help=f"train a WordPiece vocabulary of this size on the corpus (default {d.vocab_size})")
    x.add_argument("--tokenizer", help="use this tokenizer folder / vocab.txt instead")
    g.add_argument("--cased", action="store_true", help="keep case when training the tokenizer")
    g = ap.add_argument_group("model")
    g.add_argument("--preset", choices=list(PRESETS), help=f"tiny 2/128, mini 4/256, small 4/512, medium 8/512, base 12/768, large 24/1024 (default {d.preset})")
    g.add_argument("--layers", type=int, help="L (overrides the preset)")
    g.add_argument("--hidden", type=int, help="H (overrides the preset; heads H/64 unless --heads)")
    g.add_argument("--heads", type=int, help="A (overrides the preset)")
    g.add_argument("--max-positions", type=int, help=f"position embeddings (default {d.max_positions})")
    g.add_argument("--dropout", type=float, help=f"dropout (default {d.dropout})")
    g = ap.add_argument_group("optimisation")
    g.add_argument("--steps", type=int, help=f"optimizer steps (default {d.steps})")
    g.add_argument("--batch-size", type=int, help=f"sequences per step, all processes together (default {d.batch_size})")
    g.add_argument("--grad-accum", type=int, help=f"micro-batches per step (default {d.grad_accum})")
    g.add_argument("--lr", type=float, help=f"peak learning rate (default {d.lr}; the paper's 1e-4 is for BERT-BASE over 1M steps)")
    g.add_argument("--warmup", type=float, help=f"warmup steps, or a fraction of the steps if < 1 (default {d.warmup})")
    g.add_argument("--weight-decay", type=float, help=f"AdamW weight decay (default {d.weight_decay})")
    g.add_argument("--max-grad-norm", type=float, help=f"gradient clipping, 0 = off (default {d.max_grad_norm})")
    g = ap.add_argument_group("run")
    g.add_argument("--out", help="the run folder (a bare name goes under $BERT_STUDIO_RUNS or ./runs)")
    g.add_argument("--name", help="run name under the runs folder, when --out is not given")
    g.add_argument("--resume", action="store_true", help="continue the run in --out from its last complete checkpoint")
    g.add_argument("--classroom", action="store_true", help="the classroom default for every flag not given (the same values as leaving them out)")
    g.add_argument("--log-every", type=int, help=f"training metrics every N steps (default {d.log_every})")
    g.add_argument("--eval-every", type=int, help=f"held-out evaluation every M steps, 0 = at the end only (default {d.eval_every})")
    g.add_argument("--save-every", type=int, help=f"checkpoint every K steps, 0 = at the end only (default {d.save_every})")
    g.add_argument("--keep", type=int, help="keep the newest N checkpoints, 0 = all (default 0)")
    g.add_argument("--stop-after", type=int, help="stop cleanly after this step (checkpoint saved; resume later)")
    g.add_argument("--seed", type=int, help=f"random seed (default {d.seed})")
    g.add_argument("--device", help="auto, cpu or cuda (default auto)")
    g.add_argument("--precision", choices=PRECISIONS, help="auto (default): bf16 autocast on CUDA and on CPUs with native bf16, else fp32")
    g.add_argument("--num-threads", type=int, help="CPU threads per process")
    g.add_argument("--compile", action="store_true", help="torch.compile the model")
    g.add_argument("--quiet", action="store_true", help="no progress bar")
    return ap


def config_from_args(given: dict) -> PretrainConfig:
    """A PretrainConfig from the flags actually given; with --resume, the rest comes from the run's run.json."""
    given = dict(given)
    given.pop("classroom", None)
    known = {f.name for f in fields(PretrainConfig)}
    base = {}
    if given.get("resume"):
        probe = PretrainConfig(**{k: v for k, v in given.items() if k in ("out", "name")})
        run_dir = resolve_out(probe)
        saved = (runs.read_run_json(run_dir).get("config") or {}) if run_dir.is_dir() else {}
        # the run's own settings (runtime ones too: checkpoint cadence, cache, device...) unless given again
        base = {k: v for k, v in saved.items() if k in known and k not in ("out", "name", "resume", "stop_after")}
        if "mask_ratios" in base:
            base["mask_ratios"] = tuple(base["mask_ratios"])
    return PretrainConfig(**{**base, **given})


def main(argv) -> int:
    args = vars(build_parser().parse_args(argv))
    cfg = config_from_args(args)
    t0 = time.time()
    result = _pretrain(cfg)
    if _dist_from_env().main:
        out = dict(result, run_dir=str(result["run_dir"]), seconds=round(time.time() - t0, 1))
        print(json.dumps(out, default=float), flush=True)
    return 0 if result["status"] in ("finished",) or (result["status"] == "cancelled" and cfg.stop_after) else 130
