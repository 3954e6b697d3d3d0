"""The records of a run folder, each defined once: its file name, its fields, and how to read it.

Writers (engine.runs for run.json and metrics.jsonl, engine.finetune and engine.features for eval.json) write
these fields; readers (the pages, studio/, engine.ablations) read exactly these keys. Runs written before this
module existed hold the same fields.

run.json, merge-updated by engine.runs (`write_run_json`, `start_run`, `set_status`; `Run.set`):
    RUN_FIELDS for every kind, plus PRETRAIN_RUN_FIELDS (engine.pretraining.loop) or FINETUNE_RUN_FIELDS /
    FEATURES_RUN_FIELDS (engine.finetune, engine.features).
metrics.jsonl, one JSON object per line, appended (engine.runs.append_metrics); every record has "step":
    pre-training: {"step", "split": "train", loss, lr, tokens, ... per objective} every log_every steps and
    {"step", "split": "eval", "eval_<name>": ...} per held-out evaluation (`eval_record` strips the prefix);
    fine-tuning: {"step", "trial", "epoch", "elapsed", "loss", "lr"} every log_every steps and {"step", "trial",
    "epoch", "elapsed", "train_loss", "score", "dev_<metric>": ...} after each epoch's dev evaluation ("elapsed":
    seconds since the fine-tune began, the Compare page's wall-time axis);
    features: {"step": 1, "phase": "extracted", "seconds"} once, then per combination {"step", "combine",
    "score"} (a tagging task also per BiLSTM epoch {"step", "combine", "epoch", "loss", "score", "dev_<metric>"}).
eval.json, rewritten atomically after each trial / combination (`write_eval`): FINETUNE_EVAL_FIELDS or
    FEATURES_EVAL_FIELDS; "dev" holds the best dev metrics so far ({metric name: value}), None before the
    first trial ends. `best_dev_score(ev, metric)` is the one way to read a run's score of a metric.
"""
import json
import math
from pathlib import Path

from engine.errors import EngineError
from engine.fileio import atomic_write_json, read_regular

JSON_MAX_BYTES = 16 << 20  # a run folder's JSON record (run.json, eval.json, study.json) is read up to this size
from engine.objectives import METRIC_PREFIXES
from engine.status import FINISHED, status_of

RUN_JSON = "run.json"
METRICS = "metrics.jsonl"
METRICS_LABELS = ("split", "phase", "combine")  # the only text fields of a metrics.jsonl record; the rest are numbers
EVAL_JSON = "eval.json"
# a study folder's record (engine.ablations.folders writes it: the study, its jobs and each job's recorded "status")
STUDY_JSON = "study.json"
# the x axes of a training curve, each a field of a metrics.jsonl training record: optimizer steps, tokens seen,
# training time in seconds (`elapsed`: no evaluation or saving; a held-out point takes the values of the training
# record at its step). The Pre-train, Compare and Ablations pages all plot against these.
CURVE_X = {"step": "steps", "tokens": "tokens seen", "elapsed": "training time (s)"}
# metrics.jsonl keys in words, for every chart and picker that names one (`metric_label`): the keys whose words
# are not their parts', then the words of the parts (eval_ -> held-out, dev_ -> dev)
METRIC_LABELS = {"loss": "training loss", "eval_loss": "held-out loss", "score": "dev score", "lr": "learning rate",
                 "tokens_per_s": "tokens / s", "grad_norm": "gradient norm", "train_loss": "training loss (epoch)",
                 "eval_mlm_mask_acc": "held-out accuracy at [MASK]",
                 "eval_mlm_mask_baseline": "held-out most frequent token at [MASK]",
                 "eval_nsp_baseline": "held-out NSP no-model rule", "eval_seq_len": "held-out length (tokens)",
                 "eval_instances": "held-out instances", "seconds": "seconds"}
METRIC_WORDS = {"eval": "held-out", "dev": "dev", "mlm": "MLM", "lm": "next-token", "nsp": "NSP", "sop": "SOP",
                "disc": "discriminator", "replaced": "share replaced", "sbo": "span-boundary",
                "acc": "accuracy", "ppl": "perplexity", "f1": "F1", "em": "exact match", "mcc": "Matthews"}


def metric_label(key: str) -> str:
    """A metrics.jsonl key in words: "eval_mlm_acc" -> "held-out MLM accuracy", "mlm_loss" -> "training MLM loss"."""
    if key in METRIC_LABELS:
        return METRIC_LABELS[key]
    parts = [part for part in str(key).split("_") if part]
    training = bool(parts) and parts[0] in METRIC_PREFIXES  # a pre-training record's own (not held-out) figure
    return ("training " if training else "") + " ".join(METRIC_WORDS.get(part, part) for part in parts)

RUN_FIELDS = (
    "kind",  # pretrain | finetune | features | layers (engine.commands.RUN_KINDS)
    "status",  # running | finished | failed | cancelled (engine.runs.STATUSES, engine.status)
    "config",  # the command's configuration as a dict
    "pid", "proc_start", "host",  # the writer process (engine.runs.effective_status checks it is alive)
    "created", "started", "ended", "updated",  # ISO times with UTC offset
    "error",  # one line when failed or cancelled, else None
    "versions",  # {python, torch, tokenizers, transformers}
    "starts",  # how many times a process started the run (resume counts)
    "total_steps",  # the number the last metrics record's "step" runs up to (progress)
)
PRETRAIN_RUN_FIELDS = ("tokenizer", "objective", "world_size", "device", "bf16", "model", "parameters", "resumed_from",
                       "init",  # with --init: {source, kind, path, heads_from_init, heads_new} (engine.pretraining.init), else None
                       "corpus_fingerprint",  # the hash of the corpus text (engine.tokenizer.corpus_fingerprint): resume checks it
                       "training_version")  # engine.pretraining.config.TRAINING_VERSION of the code that trained it ("mixed")
FINETUNE_RUN_FIELDS = ("task", "model", "n_trials", "best_score", "metric",
                       "evaluation_version")  # EVALUATION_VERSION of the code that ran it (older runs: none)
FEATURES_RUN_FIELDS = ("task", "model", "n_combinations", "best_score", "metric", "evaluation_version")
# The version of what a fine-tuning or feature-based evaluation computes from the same command line: the built-in
# tasks' data and splits, the training loop, the metrics. Raise it with any change that moves a score of the same
# command (a task's split, a default the command line does not spell out, the optimizer); a study takes over a
# finished evaluation of another study only of this version (engine/ablations/reuse.py); runs that record none
# are never taken over.
EVALUATION_VERSION = 1

FINETUNE_EVAL_FIELDS = (
    "kind", "status", "model", "model_path", "random_init", "causal",
    "task",  # the task's name (a recognised GLUE layout's, e.g. rte, cola; else the format: glue; tagging: the file's)
    "task_source",  # the --task value
    "task_kind",  # the task kind (engine.tasks.kinds)
    "metric",  # the selection metric, a key of "dev"
    "score",  # dev[metric] of the best trial
    "dev",  # the best trial's dev metrics; with PER_EXAMPLE: its scores per dev example (see below)
    "best",  # the best trial: {trial, lr, batch_size, epochs, restart, seed, best_epoch, score, dev, seconds}
    "trials",  # every finished trial, as "best" plus "epochs_log" (per epoch: epoch, train_loss, score, metrics)
    "grid",  # per grid point across restarts: {lr, batch_size, epochs, n, mean, std, min, max}
    "data",  # the task's sizes and details (train_examples, dev_examples, labels, max_seq_len, ...; a classification
    #   task's dev_majority_accuracy: always answering dev's most frequent label, the floor); "parsed": what
    #   the files were read as (engine.tasks.describe: type, columns, counts, labels with train counts, warnings)
    "warnings",  # when finished: the data's warnings, plus a classifier's one-class collapse on dev
    "device", "precision", "config", "seconds",
    "saved_trial", "best_model",  # with --save-best: the trial saved and its folder
    "threshold_curve",  # SQuAD v2.0: [{tau, exact, f1}] of the best trial
)
FEATURES_EVAL_FIELDS = (
    "kind", "status", "model", "model_path", "task", "task_source", "task_kind", "classifier", "pooling", "layers",
    "metric", "config", "seconds",
    "data",  # sizes of the data and the model; "parsed": what the files were read as (engine.tasks.describe)
    "results",  # per combination: {combine, layers, dims, classifier, metric, score, dev, mix_weights, seconds}, a
    #   tagging task adds best_epoch and, when no entity was found, a warning line
    "combine", "score", "dev",  # the best combination so far
)


# A fine-tuning "dev" dict (the best trial's, and each trial's in "trials") holds PER_EXAMPLE when the task's selection
# metric is made of per-example parts, in dev order: numbers whose mean is the metric (classification accuracy: 1
# correct / 0 wrong; SQuAD v1.1 F1: each question's F1), or [tp, fp, fn] per sentence (tagging entity F1 = 2tp /
# (2tp + fp + fn) of their sums). engine.ablations.verdict resamples them (a bootstrap over dev examples).
PER_EXAMPLE = "per_example"


def trial_scores(ev: dict, metric: str) -> list:
    """[(score, per-example values or None)] of the finished fine-tuning trials at the best trial's grid point (lr,
    batch size, epochs): its restarts, the replicates a study's verdict resamples. [] when none has finished."""
    best = ev.get("best") or {}
    point = tuple(best.get(k) for k in ("lr", "batch_size", "epochs"))
    out = []
    for t in ev.get("trials") or []:
        if tuple(t.get(k) for k in ("lr", "batch_size", "epochs")) != point:
            continue
        dev = t.get("dev") or {}
        score = _number(dev.get(metric))
        if score is not None:
            per = dev.get(PER_EXAMPLE)
            out.append((score, per if isinstance(per, list) and per else None))
    return out


def read_json_or_empty(path) -> dict:
    """A JSON object file as a dict; {} when it is missing, unreadable or not an object (for listings that must
    not fail on one bad folder; runs.read_run_json is the strict reader)."""
    try:  # a regular file only, bounded: a FIFO, a device or a link out of its folder is never read
        data = json.loads(read_regular(path, JSON_MAX_BYTES).decode("utf-8"))
    except (OSError, ValueError, EngineError):
        return {}
    return data if isinstance(data, dict) else {}


def study_fraction_done(study_dir) -> float | None:
    """The share of a study's jobs recorded finished in its study.json (None without one): the progress of the
    queue job that runs a whole study (`ablate resume STUDY --parallel N`)."""
    jobs = read_json_or_empty(Path(study_dir) / STUDY_JSON).get("jobs")
    if not jobs:
        return None
    return sum(status_of(j.get("status")) is FINISHED for j in jobs) / len(jobs)


def read_eval(run_dir) -> dict:
    """eval.json of a run as a dict; {} when the run has none (yet) or it cannot be read."""
    return read_json_or_empty(Path(run_dir) / EVAL_JSON)


def read_eval_to_resume(run_dir, key: str, what: str) -> tuple:
    """(eval.json, its list `key`: the finished trials or combinations) of a run being resumed; ({}, []) when it
    has none yet. A file that cannot be read, or whose `key` is not a list, is an EngineError telling the user to
    move it away so that `what` run again (the finished work is never silently dropped)."""
    path = Path(run_dir) / EVAL_JSON
    if not path.exists():
        return {}, []
    try:
        data = json.loads(read_regular(path, JSON_MAX_BYTES).decode("utf-8"))
    except (OSError, ValueError, EngineError) as e:
        raise EngineError(f"cannot resume: {path} is unreadable ({e}); move it away to run {what} again") from e
    if not isinstance(data, dict) or not isinstance(data.get(key) or [], list):
        raise EngineError(f"cannot resume: {path} has no list of {key}; move it away to run {what} again")
    return data, list(data.get(key) or [])


def write_eval(run_dir, data: dict) -> None:
    """Write eval.json atomically (a polling reader sees the old or the new file, never half)."""
    atomic_write_json(Path(run_dir) / EVAL_JSON, data)


def _number(v):
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def best_dev_score(ev: dict, metric: str):
    """The dev `metric` of the best trial (fine-tuning) or combination (features) of an eval.json; None while
    none has finished or when the task does not report that metric."""
    return _number((ev.get("dev") or {}).get(metric))


def combination_score(ev: dict, combine: str, metric: str):
    """The dev `metric` of one combination of a features eval.json (None until that combination is done)."""
    return next((s for s, _ in combination_scores(ev, combine, metric)), None)


def combination_scores(ev: dict, combine: str, metric: str) -> list:
    """[(score, per-example values or None)] of one combination of a features eval.json, as trial_scores gives a
    fine-tune's: one replicate (a features run trains one classifier per combination); [] until it is done."""
    for r in ev.get("results") or []:
        if r.get("combine") == combine:
            dev = r.get("dev") or {}
            score, per = _number(dev.get(metric)), dev.get(PER_EXAMPLE)
            return [] if score is None else [(score, per if isinstance(per, list) and per else None)]
    return []


def eval_record(record: dict):
    """A pre-training held-out record of metrics.jsonl as numbers without the "eval_" prefixes ({step, mlm_loss,
    mlm_acc, mlm_ppl, ..., instances, tokens}); None for any other record."""
    if record.get("split") != "eval" or not isinstance(record.get("step"), (int, float)):
        return None
    out = {(k[len("eval_"):] if k.startswith("eval_") else k): float(v) for k, v in record.items()
           if k != "step" and _number(v) is not None}
    out["step"] = int(record["step"])
    return out
