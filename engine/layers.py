"""Probes per layer: which layer of a frozen model knows what, and when during pre-training it appears.

N = probed items (words of a token task, texts of a sentence task), L = layers, H = hidden size, C = labels.

For a frozen model (any run or checkpoint, MiniLM, a Hub BERT: `engine.load`) and a probing task
(engine.layer_tasks: the built-in tagging tasks, the user's word-label files, sentence tasks made from a corpus),
one small probe per hidden state (index 0 the embeddings, l the output of layer l) is trained on the train split's
states and scored (accuracy) on the dev split's:
- probes: `linear` (softmax regression) or `mlp` (one hidden layer, ReLU), on features standardised with the train
  split's mean and deviation, trained with minibatch Adam for a fixed number of epochs (no choice on dev: dev is
  what is reported);
- the control task (Hewitt and Liang 2019) of a token task is probed on the same states: `control_accuracy`, and
  `selectivity` = accuracy - control_accuracy;
- the expected layer (Tenney et al. 2019, "BERT Rediscovers the Classical NLP Pipeline"): the centre of gravity of
  the per-layer gains, E[l] = sum_l l * (s_l - s_{l-1}) / sum_l (s_l - s_{l-1}), l = 1..L. Tenney's s_l is a
  cumulative score, a probe on the mix of layers 0..l, so gains are never negative; here s_l is the best single-layer
  accuracy among layers 0..l, which plays that part (with raw per-layer scores a task held only in layer k would
  gain at k and lose as much at k+1, and have no centre). When no layer gains on the embeddings it is 0 if the
  embeddings beat the majority baseline (the information is there from the start), else None.
- over a run's checkpoints (`checkpoints="all"`): the same per checkpoint, the layer x step table behind the heatmap
  ("when and where does it appear").
Hidden states are computed once per model (path and weights' mtime), data and settings, and kept in memory and on
disk (`$BERT_STUDIO_CACHE/hidden_states`, float16 .npy); probes read them, so a second probe type or a control task
costs no forward pass.

The notebook API is `layer_probes(...)` (a pandas DataFrame, one row per task, step and layer) and
`head_role_table(...)` (engine.head_roles: what each head attends to, over checkpoints); the CLI is
`python -m engine layers` (one JSON object with --json; --out DIR writes a run folder for the studio's jobs), which
with `--heads` computes head roles over the checkpoints instead (engine.head_roles).
Departures: probes score accuracy on words (first WordPiece) or texts, not Tenney's edge probing of spans; the
cumulative score is the best layer so far, not a scalar mix.
"""
import hashlib
import json
import os
import sys
import time
from collections import OrderedDict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import ClassVar, Optional

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from engine import cli
from engine.cli import setting
from engine.commands import LAYERS
from engine.progress import Progress
from engine.errors import EngineError
from engine.layer_tasks import SENTENCE_TASKS, TOKEN, control_task, load_probe_task, sized, task_names
from engine.status import FINISHED, RUNNING

PROBES = ("linear", "mlp")
POOLINGS = ("mean", "cls")  # sentence tasks' vector of a text; token tasks read each word's first WordPiece
MEMORY_BYTES = 1 << 30  # hidden-state arrays kept in memory, newest first, up to this size (at least the newest)
DISK_BYTES = 4 << 30  # the disk cache keeps its newest files up to this size
EXTRACT_CHUNK = 256  # texts per extraction call, converted to float16 as they come


# ------------------------------------------------------------------ hidden states, once per model and data
def model_key(bundle) -> str:
    """What identifies a model's weights: its folder, the weights file's size and mtime."""
    d = Path(bundle.path or ".")
    stamp = []
    for name in ("model.safetensors", "pytorch_model.bin"):
        try:
            s = (d / name).stat()
            stamp.append(f"{name}:{s.st_size}:{s.st_mtime_ns}")
        except OSError:
            pass
    return f"{d.resolve() if bundle.path else id(bundle.model)}|{'|'.join(stamp)}"


def states_key(bundle, texts, level: str, pooling: str, max_seq_len: int) -> str:
    h = hashlib.sha256(json.dumps([model_key(bundle), level, pooling, int(max_seq_len)]).encode())
    for t in texts:
        h.update(json.dumps(t).encode())
    return h.hexdigest()[:32]


def cache_folder(cache_dir=None) -> Path:
    if cache_dir:
        return Path(cache_dir).expanduser()
    return Path(os.environ.get("BERT_STUDIO_CACHE", "~/.cache/bert_studio")).expanduser() / "hidden_states"


_MEMORY = OrderedDict()  # key -> (N, L+1, H) float16


def extract_states(bundle, texts, level: str, pooling: str = "mean", max_seq_len: int = 128, batch_size: int = 32,
                   device=None) -> np.ndarray:
    """(N, L+1, H) float16: every hidden state of every word (token level: word lists, the first WordPiece) or text
    (sentence level: strings or (a, b) pairs, `pooling` mean or cls)."""
    from engine.features import layer_stack
    layers = list(range(bundle.config.num_layers + 1))
    word_level = level == TOKEN
    parts = []
    for s in range(0, len(texts), EXTRACT_CHUNK):
        chunk = texts[s:s + EXTRACT_CHUNK]
        out = layer_stack(bundle, chunk, layers, "first-subtoken" if word_level else pooling, batch_size, max_seq_len,
                          device=device)
        arr = np.concatenate(out) if word_level else out  # (n, L+1, H)
        parts.append(arr.astype(np.float16))
    if not parts:
        return np.zeros((0, len(layers), bundle.config.hidden_size), dtype=np.float16)
    return np.concatenate(parts)


def _read_cached(path: Path, shape: tuple):
    """A cached array of the expected shape and dtype (a regular file, no pickles), else None; a hit is touched, so the
    disk cache drops the least recently used first."""
    try:
        if path.is_symlink() or not path.is_file():
            return None
        arr = np.load(path, allow_pickle=False)
        os.utime(path)
    except (OSError, ValueError):
        return None
    return arr if arr.dtype == np.float16 and arr.shape == shape else None


def hidden_states(bundle, texts, level: str, pooling: str = "mean", max_seq_len: int = 128, batch_size: int = 32,
                  cache_dir=None, use_disk: bool = True, device=None) -> np.ndarray:
    """`extract_states`, cached in memory and (with `use_disk`) on disk by model, data and settings."""
    key = states_key(bundle, texts, level, pooling, max_seq_len)
    if key in _MEMORY:
        _MEMORY.move_to_end(key)
        return _MEMORY[key]
    n = sum(len(t) for t in texts) if level == TOKEN else len(texts)
    shape = (n, bundle.config.num_layers + 1, bundle.config.hidden_size)
    path = cache_folder(cache_dir) / f"{key}.npy"
    arr = _read_cached(path, shape) if use_disk else None
    if arr is None:
        arr = extract_states(bundle, texts, level, pooling, max_seq_len, batch_size, device)
        if use_disk:
            from engine.fileio import atomic_save_with

            def write(tmp):
                with open(tmp, "wb") as f:  # a file object: np.save would add ".npy" to the temporary name
                    np.save(f, arr)
            try:
                atomic_save_with(path, write)
                prune(path.parent, DISK_BYTES)
            except (OSError, EngineError) as e:  # a cache that cannot be written costs time, not the result
                print(f"warning: hidden states not cached ({e})", file=sys.stderr, flush=True)
    _MEMORY[key] = arr
    while len(_MEMORY) > 1 and sum(a.nbytes for a in _MEMORY.values()) > MEMORY_BYTES:
        _MEMORY.popitem(last=False)
    return arr


def prune(folder: Path, max_bytes: int) -> None:
    """Remove the oldest .npy files of the cache folder until the rest fit in `max_bytes`."""
    files = []
    for p in folder.glob("*.npy"):
        try:
            st = p.stat()
            files.append((st.st_mtime, st.st_size, p))
        except OSError:
            pass
    total = sum(size for _, size, _ in files)
    for _, size, p in sorted(files):
        if total <= max_bytes:
            break
        p.unlink(missing_ok=True)
        total -= size


# ------------------------------------------------------------------ probes
@dataclass
class ProbeSettings:
    probe: str = "linear"  # linear | mlp
    epochs: int = 10
    lr: float = 1e-2
    hidden: int = 256  # the MLP's hidden units
    batch_size: int = 256
    seed: int = 0


def make_probe(H: int, C: int, s: ProbeSettings) -> nn.Module:
    if s.probe == "linear":
        return nn.Linear(H, C)
    if s.probe == "mlp":
        return nn.Sequential(nn.Linear(H, s.hidden), nn.ReLU(), nn.Linear(s.hidden, C))
    raise EngineError(f"unknown probe {s.probe!r}; choose one of {', '.join(PROBES)}")


def standardised(train: np.ndarray, dev: np.ndarray) -> tuple:
    """(train, dev) float32 tensors standardised with the train split's mean and deviation."""
    tr = torch.from_numpy(np.asarray(train, dtype=np.float32))
    dv = torch.from_numpy(np.asarray(dev, dtype=np.float32))
    mean, std = tr.mean(0), tr.std(0).clamp_min(1e-4)
    return (tr - mean) / std, (dv - mean) / std


def fit_predict(Xtr: torch.Tensor, ys: list, Xdv: torch.Tensor, C: int, s: ProbeSettings) -> list:
    """Train one probe per label vector in `ys` (each (N,) over the rows of Xtr (N, H)) and return each one's dev
    predictions (N_dev,). The probes share the minibatch order and one optimizer but no parameter, so each is trained
    exactly as it would be alone (Adam's update is per parameter); sharing saves the passes over the data."""
    g = torch.Generator().manual_seed(s.seed)
    with torch.random.fork_rng(devices=[]):  # seeded initial weights, the caller's random stream untouched
        torch.manual_seed(s.seed)
        probes = nn.ModuleList(make_probe(Xtr.shape[1], C, s) for _ in ys)
    opt = torch.optim.Adam(probes.parameters(), lr=s.lr)
    n, bs = Xtr.shape[0], int(s.batch_size)
    for _ in range(int(s.epochs)):
        order = torch.randperm(n, generator=g)
        for i in range(0, n, bs):
            idx = order[i:i + bs]
            x = Xtr[idx]  # (B, H)
            loss = sum(F.cross_entropy(p(x), y[idx]) for p, y in zip(probes, ys))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    with torch.no_grad():
        return [torch.cat([p(Xdv[i:i + 8192]).argmax(-1) for i in range(0, Xdv.shape[0], 8192)]) for p in probes]


def layer_scores(train_states, ytr, dev_states, ydv, C: int, s: ProbeSettings, control=None) -> list:
    """Per hidden state l: {"layer", "name", "accuracy", "control_accuracy", "selectivity"}. `train_states`,
    `dev_states`: (N, L+1, H); `ytr`, `ydv`: label ids; `control`: (control train ids, control dev ids) or None."""
    ys = [torch.as_tensor(ytr, dtype=torch.long)]
    golds = [torch.as_tensor(ydv, dtype=torch.long)]
    if control is not None:
        ys.append(torch.as_tensor(control[0], dtype=torch.long))
        golds.append(torch.as_tensor(control[1], dtype=torch.long))
    if not len(golds[0]):
        raise EngineError("the dev split has no items to score the probes on; give a dev set")
    rows = []
    for l in range(train_states.shape[1]):
        Xtr, Xdv = standardised(train_states[:, l], dev_states[:, l])
        acc = [float((p == y).float().mean()) for p, y in zip(fit_predict(Xtr, ys, Xdv, C, s), golds)]
        row = {"layer": l, "name": layer_name(l), "accuracy": acc[0], "control_accuracy": None, "selectivity": None}
        if control is not None:
            row.update(control_accuracy=acc[1], selectivity=acc[0] - acc[1])
        rows.append(row)
    return rows


def layer_name(l: int) -> str:
    return "embeddings" if l == 0 else f"layer {l}"


def expected_layer(scores, floor=None) -> Optional[float]:
    """Tenney's expected layer of per-layer scores s_0..s_L (module docstring): the centre of gravity of the gains of
    the cumulative score (the best of layers 0..l). When no layer gains on the embeddings: 0 if the embeddings score
    above `floor` (the majority baseline: the information is there from the start), else None (nothing found)."""
    best, gains = None, []
    for s in scores:
        s = float(s)
        gains.append(0.0 if best is None else max(0.0, s - best))
        best = s if best is None else max(best, s)
    total = sum(gains)
    if total <= 1e-12:
        return 0.0 if floor is not None and len(gains) and float(scores[0]) > floor else None
    return sum(l * g for l, g in enumerate(gains)) / total


def majority_accuracy(ytr, ydv) -> float:
    """Dev accuracy of always answering the most frequent training label: the floor of every layer."""
    if not len(ydv):
        return float("nan")
    top = np.bincount(np.asarray(ytr)).argmax()
    return float(np.mean(np.asarray(ydv) == top))


# ------------------------------------------------------------------ one model, one task
@dataclass
class Prepared:
    """A task ready to probe: the task, its control (token tasks), the label ids of every side."""
    task: object  # engine.layer_tasks.ProbeTask
    control: object  # its control ProbeTask, or None
    y: dict  # "train"/"dev" -> label ids; "control_train"/"control_dev" with a control

    @classmethod
    def of(cls, task, seed: int = 0) -> "Prepared":
        control = control_task(task, seed) if task.level == TOKEN else None
        y = {"train": task.ids(task.train), "dev": task.ids(task.dev)}
        if control is not None:
            y.update(control_train=control.ids(control.train), control_dev=control.ids(control.dev))
        return cls(task, control, y)


def probe_model(bundle, prep: Prepared, cfg) -> dict:
    """One model's per-layer scores on one prepared task: {"layers", "expected_layer"}."""
    t = prep.task
    kw = dict(level=t.level, pooling=cfg.pooling, max_seq_len=cfg.max_seq_len, batch_size=cfg.batch_size,
              cache_dir=cfg.cache_dir, use_disk=not cfg.no_cache, device=next(bundle.model.parameters()).device)
    tr = hidden_states(bundle, t.texts(t.train), **kw)
    dv = hidden_states(bundle, t.texts(t.dev), **kw)
    control = (prep.y["control_train"], prep.y["control_dev"]) if prep.control is not None else None
    rows = layer_scores(tr, prep.y["train"], dv, prep.y["dev"], len(t.labels), cfg.probe_settings(), control)
    floor = majority_accuracy(prep.y["train"], prep.y["dev"])
    return {"layers": rows, "expected_layer": expected_layer([r["accuracy"] for r in rows], floor)}


def task_record(prep: Prepared) -> dict:
    t = prep.task
    units = (lambda items: sum(len(w) for w, _ in items)) if t.level == TOKEN else len
    return {"task": t.name, "level": t.level, "labels": list(t.labels), "n_train": len(t.train), "n_dev": len(t.dev),
            "train_units": units(t.train), "dev_units": units(t.dev), "control": prep.control is not None,
            "majority": majority_accuracy(prep.y["train"], prep.y["dev"]),
            "control_majority": majority_accuracy(prep.y["control_train"], prep.y["control_dev"]) if prep.control else None,
            "info": t.info, "steps": [],
            "layers": None, "expected_layer": None}


# ------------------------------------------------------------------ models of a run, tasks, the sweep
def model_list(model: str, checkpoints=None) -> list:
    """[(step or None, what to load)]: the model itself, or the run's complete checkpoints (`checkpoints` "all" or
    comma-separated steps)."""
    if not checkpoints:
        return [(None, str(model))]
    from engine.probes.over_steps import checkpoint_steps
    if not Path(str(model)).is_dir():
        raise EngineError(f"--checkpoints needs --model to be a run folder with checkpoints; '{model}' is not a folder")
    found = checkpoint_steps(model)
    if not found:
        raise EngineError(f"{model} has no complete checkpoints; give a pre-training run folder (runs/NAME), or leave out --checkpoints")
    if str(checkpoints).strip().lower() == "all":
        return [(s, str(p)) for s, p in found]
    try:
        wanted = [int(x) for x in str(checkpoints).split(",") if x.strip()]
    except ValueError:
        raise EngineError(f"--checkpoints {checkpoints!r} must be all or comma-separated steps, e.g. 1000,2000")
    have = dict(found)
    missing = [w for w in wanted if w not in have]
    if missing:
        raise EngineError(f"{model} has no checkpoint at step {', '.join(map(str, missing))}; it has {', '.join(str(s) for s, _ in found)}")
    return [(w, str(have[w])) for w in wanted]


def prepare_tasks(cfg) -> list:
    out = []
    for name in cfg.task:
        task = load_probe_task(name, cfg.train, cfg.dev, cfg.corpus or ("bbc" if name in SENTENCE_TASKS else None),
                               cfg.token_col, cfg.label_col, cfg.seed)
        task = sized(task, cfg.max_train, cfg.max_dev, cfg.seed)
        if not task.train or not task.dev:
            raise EngineError(f"task {task.name} needs training and dev examples to probe")
        out.append(Prepared.of(task, cfg.seed))
    return out


def by_depth(records: list) -> list:
    """Task names ordered by expected layer (tasks without one last)."""
    known = sorted((r for r in records if r["expected_layer"] is not None), key=lambda r: r["expected_layer"])
    return [r["task"] for r in known] + [r["task"] for r in records if r["expected_layer"] is None]


def sweep(cfg, on_step=None) -> dict:
    """Every task probed on every model of `cfg` (LayersConfig): the result object the CLI prints. `on_step(result,
    k, total)` after each (checkpoint, task)."""
    from engine.checkpoint import load
    from engine.device import resolve_device
    t0 = time.time()
    models = model_list(cfg.model, cfg.checkpoints)
    preps = prepare_tasks(cfg)
    device = resolve_device(cfg.device)
    records = [task_record(p) for p in preps]
    result = {"kind": LAYERS.name, "model": cfg.model, "probe": cfg.probe, "checkpoints": [s for s, _ in models] if cfg.checkpoints else None,
              "tasks": records, "by_depth": [], "seconds": None}
    k = 0
    for step, path in models:
        bundle = load(path, device=device)
        for prep, rec in zip(preps, records):
            scores = probe_model(bundle, prep, cfg)
            rec["steps"].append({"step": step, "model_path": bundle.path, **scores})
            rec.update(scores)
            k += 1
            result.update(by_depth=by_depth(records), seconds=round(time.time() - t0, 2))
            result.update(task=records[0]["task"], layers=records[0]["layers"], expected_layer=records[0]["expected_layer"])
            if on_step is not None:
                on_step(result, k, len(models) * len(preps))
    return result


def frame(result: dict):
    """The result object as a pandas DataFrame: one row per task, step and layer (columns task, level, step, layer,
    name, accuracy, control_accuracy, selectivity, majority, expected_layer)."""
    import pandas as pd
    rows = []
    for rec in result.get("tasks") or []:
        for st in rec.get("steps") or []:
            for r in st.get("layers") or []:
                rows.append({"task": rec["task"], "level": rec["level"], "step": st.get("step"), **r,
                             "majority": rec.get("majority"), "expected_layer": st.get("expected_layer")})
    cols = ["task", "level", "step", "layer", "name", "accuracy", "control_accuracy", "selectivity", "majority", "expected_layer"]
    return pd.DataFrame(rows, columns=cols)


def layer_probes(model="minilm", task="wnut16", train=None, dev=None, corpus=None, checkpoints=None, probe="linear",
                 **settings):
    """Probes per layer as a DataFrame (see `frame`): `model` a run, checkpoint, "minilm" or Hub id; `task` a name of
    engine.layer_tasks.task_names() or a list of them (tagging with `train` / `dev` files; sentence tasks from
    `corpus`, default bbc); `checkpoints` "all" for every checkpoint of a run; any other LayersConfig field as a keyword
    (max_train, max_dev, epochs, lr, hidden, pooling, seed, ...). The result object is in `df.attrs["result"]`."""
    tasks = (task,) if isinstance(task, str) else tuple(task)
    cfg = LayersConfig(model=str(model), task=tasks, train=train, dev=dev, corpus=corpus, checkpoints=checkpoints,
                       probe=probe, **settings)
    result = sweep(cfg)
    df = frame(result)
    df.attrs["result"] = result
    return df


# ------------------------------------------------------------------ the command
def count_or_all(text: str):
    """'2000' -> 2000; 'all' -> None (no sample)."""
    if str(text).strip().lower() == "all":
        return None
    try:
        return int(text)
    except ValueError:
        import argparse
        raise argparse.ArgumentTypeError(f"'{text}' must be a whole number or all")


@dataclass
class LayersConfig:
    """Every setting of `python -m engine layers` (engine/cli.py)."""
    command: ClassVar[str] = "layers"
    model: str = setting("minilm", "RUN_DIR | CHECKPOINT_DIR | HF_DIR | minilm | a Hub id (with --checkpoints: a run folder)")
    task: tuple = setting(("wnut16",), "probing task(s), comma-separated: " + ", ".join(task_names()), parse=cli.words)
    train: Optional[str] = setting(None, "--task tagging: the train file (a word and its label per line)")
    dev: Optional[str] = setting(None, "--task tagging: the dev file")
    token_col: Optional[str] = setting(None, "--task tagging: the word column (default the first)")
    label_col: Optional[str] = setting(None, "--task tagging: the label column (default the last)")
    corpus: Optional[str] = setting(None, "sentence tasks: the corpus they are made from, a built-in name or a path (default bbc)")
    checkpoints: Optional[str] = setting(None, "all, or comma-separated steps: every checkpoint of the run --model names")
    probe: str = setting("linear", "the probe: linear, or mlp (one hidden layer)", choices=PROBES)
    heads: bool = setting(False, "head roles (attention to [CLS], [SEP], punctuation, neighbours, the same word; entropy) "
                          "over the checkpoints instead of probes")
    pooling: str = setting("mean", "sentence tasks: a text's vector is the mean of its tokens or [CLS]", choices=POOLINGS)
    max_train: Optional[int] = setting(2000, "a fixed sample of at most N training sentences or texts per task (all: every one)",
                                       parse=count_or_all, none="all")
    max_dev: Optional[int] = setting(500, "a fixed sample of at most N dev sentences or texts per task (all: every one)",
                                     parse=count_or_all, none="all")
    epochs: int = setting(10, "probe training epochs (minibatch Adam)")
    lr: float = setting(1e-2, "probe learning rate (Adam)")
    hidden: int = setting(256, "--probe mlp: hidden units")
    probe_batch: int = setting(256, "probe minibatch size")
    max_seq_len: int = setting(128, "max WordPieces per input")
    batch_size: int = setting(32, "batch size of the forward passes")
    seed: int = setting(0, "random seed (samples, control labels, probes)")
    device: str = setting("auto", "auto | cpu | cuda")
    cache_dir: Optional[str] = setting(None, "hidden-state cache folder (default $BERT_STUDIO_CACHE/hidden_states)")
    no_cache: bool = setting(False, "keep hidden states in memory only (no disk cache)")
    out: Optional[str] = setting(None, "a run folder for run.json, metrics.jsonl and eval.json (the studio's jobs)")
    as_json: bool = setting(False, "print the result as one JSON object", flag="--json")
    num_threads: Optional[int] = setting(None, "CPU threads for torch")

    def __post_init__(self):
        from engine.config import check_numbers
        if isinstance(self.task, str):
            self.task = cli.words(self.task)
        self.task = tuple(dict.fromkeys(self.task))
        check_numbers(self)
        unknown = [t for t in self.task if t not in task_names()]
        if unknown or not self.task:
            raise EngineError(f"--task {','.join(unknown) or '(none)'} is not a probing task; choose from {', '.join(task_names())}")
        if self.probe not in PROBES:
            raise EngineError(f"--probe {self.probe} is not known; use linear or mlp")
        if self.pooling not in POOLINGS:
            raise EngineError(f"--pooling {self.pooling} is not known; use mean or cls")
        for name in ("epochs", "hidden", "probe_batch", "max_seq_len", "batch_size"):
            if int(getattr(self, name)) < 1:
                raise EngineError(f"--{name.replace('_', '-')} must be at least 1")
        for name in ("max_train", "max_dev"):
            if getattr(self, name) is not None and int(getattr(self, name)) < 1:
                raise EngineError(f"--{name.replace('_', '-')} must be at least 1 (or left out: every example)")
        if not self.lr > 0:
            raise EngineError(f"--lr {self.lr} must be positive, e.g. 1e-2")

    def probe_settings(self) -> ProbeSettings:
        return ProbeSettings(self.probe, self.epochs, self.lr, self.hidden, self.probe_batch, self.seed)


def run_layers(cfg: LayersConfig) -> dict:
    """The command's work: probes (or head roles with `heads`), into `cfg.out` as a run folder when given."""
    if cfg.num_threads:
        torch.set_num_threads(int(cfg.num_threads))
    work = head_roles_result if cfg.heads else sweep
    bar, started = {}, time.monotonic()  # one (checkpoint, task) sweep a unit: a bar on a terminal, a line a minute in a log

    def shown(result, k, total):
        progress = bar.get("p")
        if progress is None:  # the count is known at the first sweep's end; the pace counts from the command's start
            progress = bar["p"] = Progress(total, "layers", "sweep")
            progress.t0 = progress.last_line = started
        progress.update(k - progress.done)
    if not cfg.out:
        result = work(cfg, on_step=shown)
        if bar:
            bar["p"].close()
        result["status"] = FINISHED.name
        return result
    from engine import records
    from engine.runs import Run, check_run_folder
    out = Path(cfg.out)
    config = {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(cfg).items()}
    check_run_folder(out, LAYERS.name, config, False)
    with Run(out, kind=LAYERS.name, config=config, model=cfg.model, task=",".join(cfg.task)) as run:
        def on_step(result, k, total):
            shown(result, k, total)
            run.set(total_steps=total)
            run.log({"step": k, "seconds": result.get("seconds") or 0.0})
            records.write_eval(out, {**result, "status": RUNNING.name, "config": config})
        result = work(cfg, on_step=on_step)
        if bar:
            bar["p"].close()
        result["status"] = FINISHED.name
        records.write_eval(out, {**result, "config": config})
    return result


def head_roles_result(cfg: LayersConfig, on_step=None) -> dict:
    """`--heads`: head roles over the models of `cfg` (engine.head_roles) as the result object."""
    from engine.head_roles import roles_over_models
    return roles_over_models(model_list(cfg.model, cfg.checkpoints), cfg.model, device=cfg.device, on_step=on_step)


def head_role_table(model="minilm", checkpoints=None, texts=None, device="auto"):
    """Head roles (engine.head_roles) as a DataFrame, one row per step, layer and head: the shares of attention, entropy,
    breadth, role and the step its role settled; `checkpoints` "all" for every checkpoint of a run, `texts` strings
    or (a, b) pairs (default the probe set). `df.attrs["findings"]` holds Clark et al.'s findings beside ours."""
    from engine.head_roles import frame as heads_frame, roles_over_models
    result = roles_over_models(model_list(model, checkpoints), str(model), texts, device)
    df = heads_frame(result)
    df.attrs["findings"] = result["findings"]
    return df


def text_lines(result: dict) -> list:
    """The result as a few readable lines (without --json)."""
    if result.get("analysis") == "heads":
        from engine.head_roles import summary_lines
        return summary_lines(result)
    lines = []
    for rec in result["tasks"]:
        e = rec["expected_layer"]
        lines.append(f"{rec['task']} ({rec['level']}, {rec['n_train']} train / {rec['n_dev']} dev, majority "
                     f"{rec['majority']:.3f}): expected layer {'-' if e is None else f'{e:.2f}'}")
        lines.append(f"  {'layer':<12} {'accuracy':>9} {'control':>9} {'selectivity':>12}")
        for r in rec["layers"]:
            c = "-" if r["control_accuracy"] is None else f"{r['control_accuracy']:.3f}"
            s = "-" if r["selectivity"] is None else f"{r['selectivity']:+.3f}"
            lines.append(f"  {r['name']:<12} {r['accuracy']:>9.3f} {c:>9} {s:>12}")
    if len(result["tasks"]) > 1:
        lines.append("by depth: " + " < ".join(result["by_depth"]))
    return lines


def build_parser():
    return cli.parser(LayersConfig, "Probes per layer of a frozen model (accuracy, control accuracy, selectivity, expected "
                                    "layer), over a run's checkpoints with --checkpoints all; --heads: head roles instead.")


def main(argv) -> int:
    cfg = LayersConfig(**cli.given(LayersConfig, build_parser(), argv))
    result = run_layers(cfg)
    if cfg.as_json:
        print(json.dumps(result), flush=True)
    else:
        print("\n".join(text_lines(result)), flush=True)
    return 0
