"""Every setting of a pre-training run (`PretrainConfig`), its checks (`validate`) and the model it trains
(`model_config`). The training itself is in engine/pretrain.py (entry point) and engine/pretrain_loop.py.
"""
import math
from dataclasses import asdict, dataclass
from typing import Optional

from engine.config import PRESETS, BertConfig
from engine.device import check_device, check_precision
from engine.errors import EngineError
from engine.pretraining_data import OBJECTIVES, _check_masking_args


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


def config_dict(cfg: PretrainConfig) -> dict:
    """The config as run.json stores it (JSON types)."""
    d = asdict(cfg)
    d["mask_ratios"] = [float(r) for r in cfg.mask_ratios]
    return d


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
    check_device(cfg.device)
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


