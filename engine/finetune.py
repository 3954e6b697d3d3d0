"""Fine-tuning: one loop for every downstream task, over a hyper-parameter grid with random restarts
(paper 3.2, 4.1-4.4, 5.1 and appendix A.3).

For every trial (learning rate x batch size x epochs x restart) the same checkpoint is loaded fresh, a new head
is put on it (`engine.heads.TaskModel`) and ALL parameters are trained with AdamW (weight decay 0.01, not on
biases and LayerNorm), linear warmup over the first 10% of the steps then linear decay to zero, dropout 0.1,
gradient clipping at 1.0. The dev set is evaluated after every epoch and the trial keeps its best epoch; the
trial with the best dev score wins. Restarts differ in the data shuffle and the head initialisation (a
`torch.Generator` seeded with `seed + restart`) and share the checkpoint, as the paper did for small data sets.
Selection metric: `metric` (the CLI's --metric, one the task computes), else the task's first: accuracy,
Matthews correlation for CoLA's layout, F1 for MRPC/QQP, Pearson for regression, entity F1 for tagging, F1 for
SQuAD (v2.0: F1 at the threshold tau swept on dev, the curve kept), accuracy for multiple choice. Before
training, what the task files were read as (`engine.tasks.describe`) goes to eval.json's data.parsed (the CLI
prints it), with its warnings.

Output folder (`cfg.out`): `run.json` (kind "finetune", status), `metrics.jsonl` (training loss every few
steps and dev metrics every epoch, tagged with the trial, so a page can poll), `eval.json` (every trial's dev
metrics, the spread per grid point across restarts, the best trial; rewritten atomically after each trial) and,
with `save_best`, `best/` (the fine-tuned encoder in the Hugging Face layout plus `head.safetensors` and
`head.json`; `load_finetuned` reads it back).

Speed on CPU: training batches are length-sorted only inside small random windows drawn afresh each epoch
(`length_batches` says why not more), each batch padded to its longest with the encoder keeping the padding off its
linear layers (`unpad`), or with `--packing` its examples packed into as few rows as they fit (engine/packing.py:
exact, not measured faster), and evaluation runs in length order.
`precision="auto"` trains and evaluates under bf16 autocast (fp32 weights, optimizer and losses) on CUDA and on
CPUs with native bf16 units; on the 2-core Zen 4 a training step measured 1.25x (tiny) to 1.55x (small) faster
than fp32 and MiniLM fine-tuning 1.25x end to end (BENCHMARKS.md). Elsewhere fp32.
Departures from the paper: `max_train` subsamples the training set (a fixed sample, the same in every trial);
the "keep the best epoch" selection evaluates on dev after each epoch of one schedule instead of training a
separate model per epoch count (the grid still covers the epoch counts, each with its own decay schedule).
"""
import copy
import json
import math
import os
import random
import shutil
import sys
import time
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Callable, ClassVar, Optional

import numpy as np
import torch
import torch.nn as nn

from engine import cli, records
from engine.cli import setting
from engine.commands import FINETUNE, kind_of
from engine.device import PRECISIONS, amp, check_device, check_precision, resolve_device, resolve_precision, to_device
from engine.progress import Progress
from engine.errors import EngineError
from engine.fileio import atomic_save_with
from engine.heads import TaskModel, pack_inputs
from engine.optim import fused, linear_schedule, param_groups
from engine.tasks.batching import Prepared, length_batches
from engine.tasks.describe import describe, describe_lines
from engine.tasks.glue import TASK_TYPES
from engine.tasks.registry import task_names
from engine.trackers import HELP as TRACKERS_HELP, check_trackers, open_trackers, report_to
from engine.status import FINISHED, RUNNING, status_of

HEADER_CHOICES = {"auto": None, "yes": True, "no": False}  # --header -> load_glue(header=...)


@dataclass
class FinetuneConfig:
    """Every setting of a fine-tuning run, each also a flag of `python -m engine finetune` (engine/cli.py)."""
    command: ClassVar[str] = "finetune"  # python -m engine finetune
    model: str = setting("minilm", "RUN_DIR | CHECKPOINT_DIR | HF_DIR | minilm (required unless --resume)")
    task: str = setting("bbc-topic", "a built-in task or a file format (required unless --resume)", choices=task_names)
    train: Optional[str] = setting(None, "train file (glue: TSV/CSV/JSONL, tagging: BIO, squad: JSON, swag: CSV/JSONL)")
    dev: Optional[str] = setting(None, "dev file (selects the best trial)")
    text_cols: Optional[str] = setting(None, "text column(s): A or A,B (names or 0-based indexes; swag: the context)")
    label_col: Optional[str] = setting(None, "label column (name or 0-based index); tagging: the tag column (default: the last)")
    token_col: Optional[str] = setting(None, "tagging: the word column (name or 0-based index; default: the first)")
    header: str = setting("auto", "glue: does the first row name the columns? yes | no | auto (default: detect by names "
                          "and content)", choices=tuple(HEADER_CHOICES))
    task_type: Optional[str] = setting(None, "glue: force classification or regression (default: detect)",
                                       choices=TASK_TYPES)
    max_task_file_mb: Optional[int] = setting(None, "the most text (MB, once decompressed) a task file may hold before "
                                              "it is refused (default: engine.tasks.tables.MAX_TASK_FILE_MB)")
    max_line_bytes: Optional[int] = setting(None, "the longest line (bytes) a TSV/CSV/JSONL/tagging task file may hold, and "
                                            "the longest SQuAD passage, before the file is refused (default: "
                                            "engine.tasks.tables.MAX_LINE_BYTES, 1 MB); each text is cut to what "
                                            "--max-seq-len can use anyway")
    metric: Optional[str] = setting(None, "the selection metric: accuracy | f1 | f1_macro | mcc (classification), pearson | "
                                    "spearman (regression), f1 | precision | recall (tagging), f1 | exact (squad); "
                                    "default: the task's")
    lr: tuple = setting((5e-5, 3e-5, 2e-5), "learning rates (the paper's grid, A.3)", parse=cli.floats)
    batch_size: tuple = setting((16, 32), "batch sizes", parse=cli.ints)
    epochs: tuple = setting((2, 3, 4), "epoch counts", parse=cli.ints)
    restarts: int = setting(1, "random restarts per grid point: different shuffle and head init, same checkpoint",
                            limits=(1, 20, 1))
    max_train: Optional[int] = setting(None, "use a fixed random sample of N training examples",
                                       limits=(0, 10_000_000, 500))
    max_dev: Optional[int] = setting(None, "evaluate on a fixed random sample of N dev examples (scores are then on the sample)")
    max_seq_len: int = setting(128, "max tokens per input, longer ones are truncated (SQuAD: the window length)")
    doc_stride: int = setting(128, "SQuAD: stride between passage windows")
    max_query_len: int = setting(64, "SQuAD: question pieces kept")
    max_answer_len: int = setting(30, "SQuAD: longest answer in pieces")
    seed: int = setting(0, "random seed", limits=(0, 1_000_000, 1))
    device: str = setting("auto", "auto | cpu | cuda")
    precision: str = setting("auto", "auto (default): bf16 autocast on CUDA and on CPUs with native bf16 (measured faster), "
                             "else fp32", choices=PRECISIONS)
    out: str = setting("runs/finetune", "output folder: run.json, metrics.jsonl, eval.json", required=True)
    packing: bool = setting(False, "pack each training batch's examples into as few rows as they fit instead of padding "
                            "them to the longest (the same losses and gradients, engine/packing.py; off by default: no clear "
                            "gain end to end on RTE, BENCHMARKS.md)")
    bilstm: bool = setting(False, "add a randomly initialised BiLSTM between encoder and head (Table 5, LTR + BiLSTM)")
    warmup: float = setting(0.1, "fraction of the steps with a linear warmup")
    weight_decay: float = setting(0.01, "AdamW weight decay")
    dropout: float = setting(0.1, "every dropout of the encoder and the head")
    max_grad_norm: float = setting(1.0, "gradient clipping")
    eval_batch_size: int = setting(64, "dev batch size")
    log_every: int = setting(10, "steps between training-loss records in metrics.jsonl")
    save_best: bool = setting(False, "save the best trial's model to OUT/best")
    random_init: bool = setting(False, "re-initialise the encoder (same shape and vocabulary): the no-pre-training baseline")
    num_threads: Optional[int] = setting(None, "CPU threads for torch")
    resume: bool = setting(False, "continue the run in --out with its own settings: finished trials are kept, the "
                           "interrupted one starts again")
    report_to: Optional[str] = setting(None, TRACKERS_HELP, parse=report_to)  # engine/trackers.py

    def __post_init__(self):
        for name in ("lr", "batch_size", "epochs"):
            v = getattr(self, name)
            if isinstance(v, (int, float)):
                setattr(self, name, (v,))
            else:
                setattr(self, name, tuple(v))
        from engine.config import check_numbers
        check_numbers(self)
        if self.task not in task_names():
            raise EngineError(f"unknown task '{self.task}'; choose one of {', '.join(task_names())}")
        if self.header not in HEADER_CHOICES:
            raise EngineError(f"--header {self.header} is not known; use yes, no or auto")
        if not self.lr or any(not (0 < x < 1) for x in self.lr):
            raise EngineError(f"learning rates {self.lr} must be between 0 and 1, e.g. --lr 5e-5,3e-5,2e-5")
        if not self.batch_size or any(int(b) != b or b < 1 for b in self.batch_size):
            raise EngineError(f"batch sizes {self.batch_size} must be positive integers, e.g. --batch-size 16,32")
        if not self.epochs or any(int(e) != e or e < 1 for e in self.epochs):
            raise EngineError(f"epoch counts {self.epochs} must be positive integers, e.g. --epochs 2,3,4")
        if self.restarts < 1:
            raise EngineError(f"--restarts {self.restarts} must be at least 1")
        if self.max_seq_len < 8:
            raise EngineError(f"--max-seq-len {self.max_seq_len} is too short; use at least 8 (the paper uses 128 to 512)")
        if self.max_train is not None and self.max_train < 1:
            raise EngineError(f"--max-train {self.max_train} must be at least 1")
        if self.max_dev is not None and self.max_dev < 1:
            raise EngineError(f"--max-dev {self.max_dev} must be at least 1")
        if self.max_task_file_mb is not None and self.max_task_file_mb < 1:
            raise EngineError(f"--max-task-file-mb {self.max_task_file_mb} must be at least 1 (MB)")
        if self.max_line_bytes is not None and self.max_line_bytes < 1:
            raise EngineError(f"--max-line-bytes {self.max_line_bytes} must be at least 1 (bytes)")
        check_device(self.device)
        check_precision(self.precision)
        if not 0 <= self.warmup < 1:
            raise EngineError(f"warmup {self.warmup} must be a fraction in [0, 1)")
        if self.doc_stride < 1:
            raise EngineError(f"--doc-stride {self.doc_stride} must be at least 1")

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("resume")
        for k in ("lr", "batch_size", "epochs"):
            d[k] = list(d[k])
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "FinetuneConfig":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})


# settings that may differ between the first start and a resume without changing what is trained
RUNTIME_FIELDS = ("out", "device", "precision", "num_threads", "eval_batch_size", "log_every", "max_task_file_mb",
                  "max_line_bytes", "packing", "report_to")


# ------------------------------------------------------------------ small helpers
def set_dropout(module: nn.Module, p: float) -> None:
    """Set every dropout rate of a module (nn.Dropout layers and the SDPA attention dropout)."""
    for m in module.modules():
        if isinstance(m, nn.Dropout):
            m.p = p
        if hasattr(m, "dropout_p"):
            m.dropout_p = p


def subsample(items: list, n: Optional[int], seed: int = 0) -> list:
    """A fixed random sample of `n` items in their original order (all items when n is None or larger)."""
    if n is None or n >= len(items):
        return list(items)
    idx = sorted(random.Random(seed).sample(range(len(items)), n))
    return [items[i] for i in idx]


def _to(batch: dict, device) -> dict:
    return {k: to_device(v, device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


def _scalars(d: dict, prefix: str = "") -> dict:
    """The plain-number entries of a metrics dict (for metrics.jsonl and the one-line summary)."""
    return {prefix + k: v for k, v in d.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


# ------------------------------------------------------------------ tasks -> training data
def load_task(cfg: FinetuneConfig):
    """The task object of engine.tasks for a FinetuneConfig (built-in name or file format + files), its files read
    under the `max_task_file_mb` and `max_line_bytes` caps."""
    from engine.tasks.registry import load_task_files
    from engine.tasks.tables import text_cap
    with text_cap(cfg.max_task_file_mb, cfg.max_line_bytes):
        return load_task_files(cfg.task, cfg.train, cfg.dev, cfg.text_cols, cfg.label_col, cfg.task_type,
                               token_col=cfg.token_col, header=HEADER_CHOICES[cfg.header], metric=cfg.metric)


def prepare(task, tok, cfg: FinetuneConfig, max_len: int) -> Prepared:
    """The task's items, lengths, collate function and dev evaluator for the loop, on the max_train / max_dev
    samples (the task object's own `prepare` does the work for its kind)."""
    train = subsample(task.train, cfg.max_train)
    dev = subsample(task.dev, cfg.max_dev)
    if not train:
        raise EngineError(f"task {task.name} has no training examples; check --train")
    if not dev:
        raise EngineError(f"task {task.name} has no dev examples; give --dev FILE (the dev set selects the best trial)")
    metric = cfg.metric or task.metrics[0]
    if metric not in task.metrics:
        raise EngineError(f"--metric {metric} does not apply to task {task.name}; it computes {', '.join(task.metrics)}")
    data = replace(task, train=train, dev=dev).prepare(tok, max_len, cfg)
    info = {"task": task.name, "train_examples": len(train), "dev_examples": len(dev), **data.info,
            "parsed": describe(task, train, dev)}  # what the files were read as: printed, shown, kept in eval.json
    return replace(data, metric=metric, info=info)


# ------------------------------------------------------------------ one trial
def make_optimizer(model: nn.Module, lr: float, weight_decay: float, total_steps: int, warmup: float):
    """AdamW (no decay on biases and LayerNorm weights; fused, engine.optim.fused) and a warmup + linear decay
    schedule (engine.optim); warmup is a fraction of the steps, floored."""
    device = next(model.parameters()).device
    opt = torch.optim.AdamW(param_groups(model, weight_decay), lr=lr, betas=(0.9, 0.999), eps=1e-6, **fused(device))
    warm = int(warmup * total_steps)
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda step: linear_schedule(step, total_steps, warm))


def better(a: float, b: Optional[float]) -> bool:
    return b is None or (a is not None and not math.isnan(a) and a > b)


# ------------------------------------------------------------------ the grid
def _trial_grid(cfg: FinetuneConfig) -> list:
    grid = []
    for lr in cfg.lr:
        for bs in cfg.batch_size:
            for ep in cfg.epochs:
                for r in range(cfg.restarts):
                    grid.append({"lr": float(lr), "batch_size": int(bs), "epochs": int(ep), "restart": r, "seed": cfg.seed + r})
    return grid


def grid_summary(trials: list) -> list:
    """Mean, std, min, max and n of the score per grid point, across restarts (the spread across seeds)."""
    groups = {}
    for t in trials:
        if t.get("score") is None:
            continue
        groups.setdefault((t["lr"], t["batch_size"], t["epochs"]), []).append(t["score"])
    rows = []
    for (lr, bs, ep), scores in groups.items():
        a = np.asarray(scores, dtype=np.float64)
        rows.append({"lr": lr, "batch_size": bs, "epochs": ep, "n": len(a), "mean": float(a.mean()),
                     "std": float(a.std(ddof=1)) if len(a) > 1 else 0.0, "min": float(a.min()), "max": float(a.max())})
    return rows


def finetune(cfg: FinetuneConfig, progress: Callable = None, progress_bar: bool = False) -> dict:
    """Fine-tune `cfg.model` on `cfg.task` over the grid; returns the content of <out>/eval.json:
    {"metric", "score", "dev" (best dev metrics), "best" (the best trial), "trials", "grid", ...}.
    `progress(info)` is called after every step ({"step", "total_steps", "trial", "n_trials", "epoch", "loss"})
    and after every dev evaluation (the same keys plus "dev")."""
    from engine.runs import Run, check_run_folder, truncate_metrics

    out = Path(cfg.out)
    check_trackers(cfg.report_to)  # --report-to a tracker that is not installed: the pip command, before anything
    again = _failed_before_training(out)  # nothing to keep: started again in place, with these settings
    if not again:
        check_run_folder(out, FINETUNE.name, cfg.to_dict(), cfg.resume, RUNTIME_FIELDS)  # before anything is written
    if cfg.num_threads:
        torch.set_num_threads(int(cfg.num_threads))
    device = resolve_device(cfg.device)
    precision = resolve_precision(cfg.precision, device)
    grid = _trial_grid(cfg)
    done = _finished_trials(out, len(grid)) if cfg.resume and not again else []
    out.mkdir(parents=True, exist_ok=True)
    if again:
        _set_aside_failed_start(out)
    t_start = time.time()
    with Run(out, kind=FINETUNE.name, config=cfg.to_dict(), task=cfg.task, model=cfg.model,
             evaluation_version=records.EVALUATION_VERSION,
             trackers=open_trackers(cfg.report_to, out, cfg.to_dict(), {"kind": FINETUNE.name})) as run:
        bundle, base = _load_encoder(cfg)
        max_len = min(cfg.max_seq_len, bundle.config.max_position_embeddings)
        data = prepare(load_task(cfg), bundle.tokenizer, cfg, max_len)
        if progress_bar:  # the CLI: say what the files were read as before any training
            notes = [f"note: {data.info['tau']}"] if data.info.get("tau") else []  # SQuAD v2.0: where tau comes from
            print("\n".join(describe_lines(data.info["parsed"]) + notes), file=sys.stderr, flush=True)
        steps = [math.ceil(len(data.train) / t["batch_size"]) * t["epochs"] for t in grid]
        ctx = TrialContext(cfg, data, device, precision, run, len(grid), sum(steps), t_start,
                           step=sum(steps[:len(done)]), progress=progress)  # resuming: the finished trials' steps are done
        run.set(total_steps=ctx.total_steps, n_trials=len(grid))
        truncate_metrics(out, after_step=ctx.step)  # drop the interrupted trial's records (or an empty log)
        result = _first_result(cfg, bundle, data, max_len, device, precision)
        if done:
            _resume_result(result, done, records.read_eval(out))
            print(f"resuming {out}: {len(done)} of {len(grid)} trials finished, starting at trial {len(done) + 1}",
                  file=sys.stderr, flush=True)
        records.write_eval(out, _eval_json(result))  # a polling page sees the task and the data at once
        if progress_bar:  # the CLI: a bar on a terminal, a plain line a minute in a log (engine.progress)
            ctx.bar = Progress(ctx.total_steps, "finetune", "step", initial=ctx.step)
        try:
            for ti in range(len(done), len(grid)):
                rec, best_state = _run_trial(ctx, base, ti, grid[ti], steps[ti], result["score"])
                _add_trial(result, rec)
                result["seconds"] = round(time.time() - t_start, 2)
                if best_state is not None:  # saved per trial, so a resume keeps it
                    save_finetuned(out / "best", best_state, bundle, data, cfg)
                    result["saved_trial"], result["best_model"] = ti, str(out / "best")
                records.write_eval(out, _eval_json(result))
        finally:
            if ctx.bar is not None:
                ctx.bar.close()
        result["warnings"] = list(data.info["parsed"]["warnings"])
        if (result.get("dev") or {}).get("collapse"):
            result["warnings"].append(f"best trial: {result['dev']['collapse']}")
        result["status"] = FINISHED.name
        result["seconds"] = round(time.time() - t_start, 2)
        records.write_eval(out, _eval_json(result))
        run.set(best_score=result["score"], metric=data.metric)
    return result


def _load_encoder(cfg: FinetuneConfig) -> tuple:
    """(the checkpoint's Bundle, the encoder every trial copies): the pre-trained BertModel, or with
    `random_init` the same architecture and vocabulary from random weights (BERT's init, seeded)."""
    from engine.checkpoint import load
    from engine.encoders import require_bert
    from engine.model import BertForPreTraining
    bundle = load(cfg.model, device="cpu")
    require_bert(bundle, "fine-tuning")
    if not cfg.random_init:
        return bundle, bundle.model.bert
    torch.manual_seed(cfg.seed)
    return bundle, BertForPreTraining(bundle.config).bert


def _first_result(cfg: FinetuneConfig, bundle, data: Prepared, max_len: int, device, precision: str) -> dict:
    """eval.json before any trial ends (fields: engine.records.FINETUNE_EVAL_FIELDS)."""
    return {
        "kind": FINETUNE.name, "status": RUNNING.name, "model": cfg.model, "model_path": bundle.path, "random_init": cfg.random_init,
        "causal": bool(bundle.config.causal), "task": data.info["task"], "task_source": cfg.task, "task_kind": data.kind,
        "metric": data.metric, "score": None, "dev": None, "best": None, "trials": [], "grid": [],
        "data": {**data.info, "max_seq_len": max_len}, "device": str(device), "precision": precision,
        "config": cfg.to_dict(),
    }


def _resume_result(result: dict, done: list, prev: dict) -> None:
    """Resuming: the finished trials count as they did, and the model they saved stays the saved one."""
    for rec in done:
        _add_trial(result, rec)
    if prev.get("saved_trial") is not None:
        result["saved_trial"], result["best_model"] = prev["saved_trial"], prev.get("best_model")


def _add_trial(result: dict, rec: dict) -> None:
    """Record a finished trial: the trial list, the best trial so far and the spread per grid point."""
    result["trials"].append(rec)
    if better(rec["score"], result["score"]):
        result.update(score=rec["score"], dev=rec["dev"], best={k: v for k, v in rec.items() if k != "epochs_log"})
    result["grid"] = grid_summary(result["trials"])


@dataclass
class TrialContext:
    """What the trials of one `finetune` call share: settings, data, device, the run's log and the progress
    outputs. `step` counts optimizer steps over all trials (the x axis of metrics.jsonl)."""
    cfg: FinetuneConfig
    data: Prepared
    device: torch.device
    precision: str  # resolved: "bf16" or "fp32"
    run: object  # the engine.runs.Run being written
    n_trials: int
    total_steps: int
    t_start: float  # time.time() at the start of the call (records' "elapsed")
    step: int = 0
    bar: object = None  # the CLI's tqdm bar
    progress: Callable = None  # progress(info) of the caller

    def elapsed(self) -> float:
        return round(time.time() - self.t_start, 3)

    def report(self, info: dict) -> None:
        if self.progress is not None:
            self.progress({"step": self.step, "total_steps": self.total_steps, "n_trials": self.n_trials, **info})


def _run_trial(ctx: TrialContext, base: nn.Module, ti: int, trial: dict, steps: int, best_score) -> tuple:
    """Train one grid point from a fresh copy of `base` with a new head, evaluating on dev after every epoch.
    Returns (the trial's record, the state dict of its best epoch when --save-best is on and it beats
    `best_score`, the best score of the earlier trials; else None)."""
    cfg, data = ctx.cfg, ctx.data
    g = torch.Generator().manual_seed(trial["seed"])  # shuffling and the head's initialisation
    torch.manual_seed(trial["seed"])  # dropout masks
    model = TaskModel(copy.deepcopy(base), data.kind, data.num_labels, bilstm=cfg.bilstm, dropout=cfg.dropout, generator=g)
    set_dropout(model, cfg.dropout)
    model.to(ctx.device)
    opt, sched = make_optimizer(model, trial["lr"], cfg.weight_decay, steps, cfg.warmup)
    rec = {"trial": ti, **trial, "best_epoch": None, "score": None, "dev": None, "epochs_log": [], "seconds": None}
    best_state = None
    t0 = time.time()
    for epoch in range(1, trial["epochs"] + 1):
        loss = float(np.mean(_train_epoch(ctx, model, opt, sched, g, ti, trial, epoch)))
        with amp(ctx.device, ctx.precision):
            dev = data.evaluate(model, ctx.device, cfg.eval_batch_size)
        score = dev.get(data.metric)
        rec["epochs_log"].append({"epoch": epoch, "train_loss": loss, "score": score, **_scalars(dev)})
        ctx.run.log({"step": ctx.step, "trial": ti, "epoch": epoch, "elapsed": ctx.elapsed(), "train_loss": loss, "score": score,
                     **_scalars(dev, "dev_")})
        ctx.report({"trial": ti, "epoch": epoch, "loss": loss, "dev": _scalars(dev)})
        if better(score, rec["score"]):
            rec.update(best_epoch=epoch, score=score, dev=dev)
            if cfg.save_best and better(score, best_score):
                best_state = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
    rec["seconds"] = round(time.time() - t0, 2)
    return rec, best_state


def _train_epoch(ctx: TrialContext, model: TaskModel, opt, sched, g: torch.Generator, ti: int, trial: dict, epoch: int) -> list:
    """One pass over the training items in random batches (drawn from `g`); returns the losses of its steps."""
    cfg, data = ctx.cfg, ctx.data
    model.train()
    losses = []
    for idx in length_batches(data.train_lengths, trial["batch_size"], g):
        batch = _to(data.collate([data.train[i] for i in idx]), ctx.device)
        packing = pack_inputs(batch) if cfg.packing else None
        with amp(ctx.device, ctx.precision):
            logits = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"], packing=packing)
        loss = model.loss(logits, batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.max_grad_norm:
            nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
        opt.step()
        sched.step()
        ctx.step += 1
        losses.append(loss.item())
        if not math.isfinite(losses[-1]):  # diverged: stop before a NaN model is evaluated or saved
            raise EngineError(f"loss became NaN or inf at step {ctx.step} (trial {ti}, lr {trial['lr']:g}); lower --lr "
                              f"(finished trials are kept: fix the grid and fine-tune into a new --out)")
        if ctx.bar is not None:
            ctx.bar.update(1)
            ctx.bar.note(trial=f"{ti + 1}/{ctx.n_trials}", epoch=epoch, loss=f"{losses[-1]:.3f}")
        if ctx.step % cfg.log_every == 0:
            ctx.run.log({"step": ctx.step, "trial": ti, "epoch": epoch, "elapsed": ctx.elapsed(),
                         "loss": float(np.mean(losses[-cfg.log_every:])), "lr": sched.get_last_lr()[0]})
        ctx.report({"trial": ti, "epoch": epoch, "loss": losses[-1]})
    return losses


STARTS_ASIDE = ".failed-start"  # where a start that trained nothing keeps its records when the run begins again


def _failed_before_training(out: Path) -> bool:
    """True if `out` holds a fine-tune run that stopped (failed, cancelled or dead) before any trial finished: no
    trial in eval.json and no saved model. It holds no result, so the command may begin it again in place with
    new settings (the fix of a missing --dev, a bad file or a wrong --model), with or without --resume."""
    from engine.runs import effective_status, read_run_json
    info = read_run_json(out) if (out / records.RUN_JSON).is_file() else {}
    if kind_of(info.get("kind")) is not FINETUNE or not status_of(effective_status(out, info)).resumable:
        return False
    if (out / "best").exists() or (out / "checkpoints").exists():
        return False
    if not (out / records.EVAL_JSON).exists():
        return True
    trials = records.read_eval(out).get("trials")  # {} when unreadable: then it is kept, not judged
    return isinstance(trials, list) and not trials


def _set_aside_failed_start(out: Path) -> None:
    """Move a failed start's run.json, metrics.jsonl and eval.json into <out>/.failed-start (replacing an older
    one), so the folder holds no run and the new start begins clean; the old error is printed."""
    from engine.runs import read_run_json
    error = read_run_json(out).get("error")
    aside = out / STARTS_ASIDE
    shutil.rmtree(aside, ignore_errors=True)
    aside.mkdir()
    for name in (records.RUN_JSON, records.METRICS, records.EVAL_JSON):
        if (out / name).exists():
            os.replace(out / name, aside / name)
    print(f"starting {out} again: its last start ended before any trial finished ({error or 'no error recorded'}); "
          f"its records are in {aside}", file=sys.stderr, flush=True)


def _finished_trials(out: Path, n_trials: int) -> list:
    """The finished trials' records from <out>/eval.json when resuming (EngineError when it cannot be read)."""
    path = out / records.EVAL_JSON
    prev, trials = records.read_eval_to_resume(out, "trials", "the trials")
    if any(not isinstance(t, dict) or t.get("trial") != i for i, t in enumerate(trials)) or len(trials) > n_trials:
        raise EngineError(f"cannot resume: {path} does not list the trials of this grid in order; move it away to start the trials again")
    best = (prev.get("best") or {}).get("trial")
    if prev.get("threshold_curve") and best is not None and best < len(trials) and trials[best].get("dev"):
        # SQuAD v2.0: eval.json keeps the threshold curve of the best trial only, at the top level
        trials[best]["dev"]["threshold_curve"] = [(c["tau"], c["exact"], c["f1"]) for c in prev["threshold_curve"]]
    return trials


def _eval_json(result: dict) -> dict:
    """eval.json: the SQuAD v2.0 threshold curve only for the best trial (the others keep their tau)."""
    r = copy.deepcopy(result)
    curve = None
    for t in r["trials"]:
        if t.get("dev") and "threshold_curve" in t["dev"]:
            c = t["dev"].pop("threshold_curve")
            if r.get("best") and t["trial"] == r["best"]["trial"]:
                curve = c
    if r.get("best") and r["best"].get("dev"):
        r["best"]["dev"].pop("threshold_curve", None)
    if r.get("dev"):
        r["dev"].pop("threshold_curve", None)
    if curve is not None:
        r["threshold_curve"] = [{"tau": a, "exact": b, "f1": c} for a, b, c in curve]
    return r


# ------------------------------------------------------------------ saving and loading the best model
def save_finetuned(path, state: dict, bundle, data: Prepared, cfg: FinetuneConfig) -> Path:
    """The encoder in the Hugging Face layout (engine.save) plus head.safetensors and head.json beside it."""
    from safetensors.torch import save_file

    from engine.checkpoint import save
    from engine.model import BertForPreTraining
    enc_cfg = bundle.config.replace(has_mlm_head=False, has_nsp_head=False)
    enc = BertForPreTraining(enc_cfg)
    enc.bert.load_state_dict({k[len("bert."):]: v for k, v in state.items() if k.startswith("bert.")})
    head = {k: v.contiguous() for k, v in state.items() if not k.startswith("bert.")}
    meta = {"kind": data.kind, "num_labels": data.num_labels, "labels": data.info.get("labels"), "bilstm": cfg.bilstm,
            "task": data.info["task"], "metric": data.metric, "max_seq_len": min(cfg.max_seq_len, bundle.config.max_position_embeddings),
            "base_model": cfg.model}
    extra = {"head.json": meta}
    path = save(enc, path, tokenizer=bundle.tokenizer, extra_files=extra)
    atomic_save_with(Path(path) / "head.safetensors", lambda p: save_file(head, p))
    return Path(path)


def load_finetuned(path, device="cpu"):
    """(TaskModel, tokenizer, head.json dict) from a folder written by `save_finetuned` (<out>/best)."""
    from safetensors.torch import load_file

    from engine.checkpoint import load
    p = Path(path)
    if not (p / "head.json").is_file() or not (p / "head.safetensors").is_file():
        raise EngineError(f"{p} has no head.json/head.safetensors; it is not a fine-tuned model folder (fine-tune with --save-best)")
    try:
        meta = json.loads((p / "head.json").read_text(encoding="utf-8"))
        kind, num_labels = meta["kind"], meta["num_labels"]
    except (OSError, ValueError, TypeError, KeyError) as e:
        raise EngineError(f"{p}/head.json is unreadable or lacks kind/num_labels ({e}); restore it or fine-tune again with --save-best") from e
    bundle = load(p, device="cpu")
    model = TaskModel(bundle.model.bert, kind, num_labels, bilstm=meta.get("bilstm", False))
    missing, unexpected = model.load_state_dict(load_file(str(p / "head.safetensors")), strict=False)
    if unexpected or any(not k.startswith("bert.") for k in missing):
        raise EngineError(f"{p}/head.safetensors does not fit head.json; the files do not belong together")
    return model.to(device).eval(), bundle.tokenizer, meta


# ------------------------------------------------------------------ CLI
def build_parser():
    """The flags of `python -m engine finetune`: FinetuneConfig's settings (engine/cli.py)."""
    from engine import recipes
    ap = cli.parser(FinetuneConfig,
                    "Fine-tune a BERT checkpoint on a downstream task over a lr/batch/epochs grid with restarts; "
                    "prints the best dev metrics as one JSON line. The defaults are the paper's; --recipe lays a named "
                    "recipe over them and the flags given over it. --resume continues a run in --out with its "
                    "own settings (finished trials kept, the interrupted one started again).")
    ap.add_argument("--recipe", choices=recipes.names(FinetuneConfig.command),
                    help="lay a named recipe over the defaults (engine/recipes.py): " + recipes.help_text(FinetuneConfig.command))
    return ap


def config_from_args(a) -> FinetuneConfig:
    """A FinetuneConfig from the flags given (an argparse Namespace or dict holding only those) laid over the named
    recipe (--recipe, engine/recipes.py) or the defaults; with --resume, the rest comes from the run's run.json."""
    given = dict(a if isinstance(a, dict) else vars(a))
    from engine import recipes
    name = given.pop("recipe", None)
    base = recipes.settings(name, FinetuneConfig.command) if name else {}
    if given.get("resume"):
        if name:
            raise EngineError(f"--recipe {name} with --resume: a resumed run keeps its own settings; drop --recipe")
        from engine.runs import read_run_json
        out = Path(given["out"])
        saved = (read_run_json(out).get("config") or {}) if out.is_dir() else {}
        known = {f.name for f in fields(FinetuneConfig)}
        base = {k: v for k, v in saved.items() if k in known and k != "out"} if isinstance(saved, dict) else {}
    for flag in ("model", "task"):
        if flag not in given and flag not in base:
            raise EngineError(f"--{flag} is required (or continue a run with --out DIR --resume); see python -m engine finetune --help")
    return FinetuneConfig(**{**base, **given})


def summary_line(result: dict) -> dict:
    """The one-line JSON the CLI prints: the best dev metrics and where they came from."""
    best = result.get("best") or {}
    line = {"task": result.get("task"), "model": result.get("model"), "metric": result.get("metric"), "score": result.get("score")}
    line.update(_scalars(result.get("dev") or {}))
    line.update({k: best.get(k) for k in ("lr", "batch_size", "epochs", "best_epoch", "restart", "seed")})
    line.update(trials=len(result.get("trials", [])), seconds=result.get("seconds"))
    return line


def main(argv) -> int:
    cfg = config_from_args(cli.given(FinetuneConfig, build_parser(), argv))
    result = finetune(cfg, progress_bar=True)
    for w in result.get("warnings", [])[len(result["data"]["parsed"]["warnings"]):]:  # the data's were printed first
        print(f"warning: {w}", file=sys.stderr, flush=True)
    print(json.dumps(summary_line(result)), flush=True)
    return 0
