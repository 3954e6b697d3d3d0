"""Feature-based use of a frozen BERT (paper 5.3, Table 7): hidden states of any layer, the paper's layer
combinations, and classifiers trained on them while the encoder stays fixed.

B = batch size, T = sequence length, H = hidden size, L = layers, K = layers combined, D = feature size.

`hidden_states` has L+1 entries: index 0 is the embeddings output, index i the output of layer i, so -1 is the
last layer. Combinations (the names of the CLI's --combine):
- "embeddings": hidden_states[0]; "last": hidden_states[-1]; "second-to-last": hidden_states[-2];
- "concat": the `layers` (default the last four) side by side, D = K*H (the paper's best: 96.1 dev F1);
- "sum" / "mean": their sum / mean, D = H;
- "weighted": a weighted sum of `layers`, D = H. The weights are a learned scalar mix (softmax-normalised
  weights and a scale, as ELMo) when the BiLSTM tagger is trained on the features; raw extraction and the
  logistic regression use uniform weights (then "weighted" equals "mean"), or the `weights` passed in;
- "all-weighted": the same over all L layers (hidden_states[1:], the paper's "weighted sum all 12 layers").
Pooling: "cls" (the [CLS] vector of each text), "mean" (the mean over its non-padding positions, [CLS] and
[SEP] included, as sentence-transformers does) give one (D,) row per text; "first-subtoken" gives one row per
word (the first WordPiece of each word, 5.3), a list of (n_words, D) arrays (words cut off by max_seq_len get
zero rows).

Classifiers on frozen features: a two-layer BiLSTM tagger with a linear output for tagging tasks (Table 7's
"two-layer 768-dimensional BiLSTM"; the hidden size is configurable, 256 per direction by default on CPU), a
scikit-learn logistic regression (standardised features) for sentence classification and ridge regression for
regression tasks. The dev metric lands in <out>/eval.json next to what `engine.finetune` writes for the same
checkpoint (model, task, combination, metric, score), so feature-based and fine-tuned results sit side by side.
Departures from the paper: one sentence per input (no document context); the BiLSTM size and its training
schedule (Adam, lr 1e-3, best epoch on dev) are ours; sentence tasks use a linear classifier, not a BiLSTM.
"""
import dataclasses
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Optional

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from engine import cli, records
from engine.cli import setting
from engine.commands import FEATURES
from engine.progress import Progress
from engine.errors import EngineError
from engine.fileio import atomic_save_with, atomic_write_text
from engine.heads import last_real_index
from engine.tasks.batching import pad_batch, cut_text
from engine.tasks.describe import describe, describe_lines
from engine.tasks.glue import TASK_TYPES
from engine.tasks.kinds import TAGGING, task_kind
from engine.tasks.registry import feature_task_names
from engine.trackers import HELP as TRACKERS_HELP, check_trackers, open_trackers, report_to
from engine.status import FINISHED, RUNNING

COMBINES = ("concat", "sum", "mean", "weighted", "all-weighted", "last", "second-to-last", "embeddings")
TABLE7 = ("embeddings", "second-to-last", "last", "weighted", "concat", "all-weighted")  # the paper's rows
POOLINGS = ("cls", "mean", "first-subtoken")
MIXED = ("weighted", "all-weighted")  # combinations a BiLSTM tagger learns weights for


# ------------------------------------------------------------------ layers and combinations
def combination_layers(combine: str, layers=(-1, -2, -3, -4), num_layers: int = 12) -> list:
    """Absolute indices into hidden_states (0 = embeddings, L = last layer) that a combination reads."""
    L = num_layers
    if combine not in COMBINES:
        raise EngineError(f"unknown combination '{combine}'; choose one of {', '.join(COMBINES)}")
    if combine == "last":
        return [L]
    if combine == "second-to-last":
        if L < 2:
            raise EngineError("a one-layer model has no second-to-last layer; use last or embeddings")
        return [L - 1]
    if combine == "embeddings":
        return [0]
    if combine == "all-weighted":
        return list(range(1, L + 1))
    out = []
    for i in layers:
        i = int(i)
        if not -(L + 1) <= i <= L:
            raise EngineError(f"layer {i} does not exist: the model has hidden states 0 (embeddings) to {L} "
                              f"(or -1 to -{L + 1} from the top)")
        out.append(i % (L + 1))
    if not out:
        raise EngineError("no layers given; e.g. --layers -1,-2,-3,-4")
    return out


def combine_layers(stack, combine: str, weights=None):
    """Combine stacked layers (..., K, H) -> (..., D) (numpy or torch). `weights` (K,) for the weighted sums
    (uniform when None)."""
    K, H = stack.shape[-2], stack.shape[-1]
    if combine == "concat":
        return stack.reshape(*stack.shape[:-2], K * H)
    if combine == "sum":
        return stack.sum(-2)
    if combine in ("mean", "weighted", "all-weighted"):
        if weights is None or combine == "mean":
            return stack.mean(-2)
        w = weights if not isinstance(stack, np.ndarray) else np.asarray(weights, dtype=stack.dtype)
        if len(w) != K:
            raise EngineError(f"{len(w)} weights for {K} layers; give one weight per layer")
        return (stack * w[..., :, None]).sum(-2)
    if K != 1:
        raise ValueError(f"combination {combine!r} takes one layer, got {K}")
    return stack[..., 0, :]


def _as_words(t) -> list:
    if isinstance(t, str):
        return t.split()
    return [str(w) for w in t]


@torch.no_grad()
def layer_stack(bundle, texts, layer_idx: list, pooling: str = "cls", batch_size: int = 32, max_seq_len: int = 128,
                progress: bool = False, device=None):
    """The selected hidden states of every text, before combining: (N, K, H) float32 for "cls"/"mean", or a
    list of (n_words, K, H) for "first-subtoken". `texts`: strings or (a, b) pairs; for "first-subtoken",
    word lists (or strings, split on whitespace)."""
    if pooling not in POOLINGS:
        raise EngineError(f"unknown pooling '{pooling}'; choose one of {', '.join(POOLINGS)}")
    model, tok = bundle.model, bundle.tokenizer
    device = torch.device(device) if device is not None else next(model.parameters()).device
    bert = model.bert if hasattr(model, "bert") else model
    was_training = bert.training
    bert.eval()
    max_len = min(int(max_seq_len), bundle.config.max_position_embeddings)
    texts = list(texts)
    # each text (each word) cut to what max_len pieces can use before tokenizing (engine.tasks.batching.cut_text)
    if pooling == "first-subtoken":
        encs = [tok.encode_words([cut_text(w, max_len) for w in _as_words(t)], max_length=max_len) for t in texts]
    else:
        items = [tuple(cut_text(x, max_len) for x in t) if isinstance(t, (list, tuple)) else cut_text(t, max_len)
                 for t in texts]
        encs = tok.encode_batch(items, max_length=max_len) if items else []
    order = sorted(range(len(encs)), key=lambda i: len(encs[i].ids))
    K, H = len(layer_idx), bundle.config.hidden_size
    out = [None] * len(encs)
    bar = Progress(len(encs), "features", "text") if progress else None  # a bar on a terminal, lines in a log
    for s in range(0, len(order), batch_size):
        idx = order[s:s + batch_size]
        ids, types, mask = pad_batch([(encs[i].ids, encs[i].type_ids) for i in idx], tok.pad_id)  # (B, T) each
        o = bert(ids.to(device), types.to(device), mask.to(device), output_hidden_states=True, unpad=True)  # 0 at padding
        hs = torch.stack([o.hidden_states[j] for j in layer_idx], dim=2).float()  # (B, T, K, H)
        if pooling == "cls" and bundle.config.causal:  # a left-to-right model: [CLS] saw only itself (heads.py)
            rows = hs[torch.arange(len(idx), device=device), last_real_index(hs, mask)].cpu().numpy()  # (B, K, H)
        elif pooling == "cls":
            rows = hs[:, 0].cpu().numpy()  # (B, K, H)
        elif pooling == "mean":
            m = mask.to(device)[:, :, None, None].float()  # (B, T, 1, 1)
            rows = ((hs * m).sum(1) / m.sum(1)).cpu().numpy()  # (B, K, H)
        else:
            hs = hs.cpu().numpy()
            rows = []
            for b, i in enumerate(idx):
                n_words = len(_as_words(texts[i]))
                feats = np.zeros((n_words, K, H), dtype=np.float32)  # words lost to truncation stay zero
                prev = None
                for t, w in enumerate(encs[i].word_ids):
                    if w is not None and w != prev:
                        feats[w] = hs[b, t]
                    prev = w
                rows.append(feats)
        for b, i in enumerate(idx):
            out[i] = rows[b]
        if bar is not None:
            bar.update(len(idx))
    if bar is not None:
        bar.close()
    bert.train(was_training)
    if pooling == "first-subtoken":
        return out
    return np.stack(out).astype(np.float32) if out else np.zeros((0, K, H), dtype=np.float32)


def extract_features(bundle, texts, layers=(-1, -2, -3, -4), combine: str = "concat", pooling: str = "cls",
                     batch_size: int = 32, max_seq_len: int = 128, progress: bool = False, weights=None, device=None):
    """Frozen features of `texts` from a loaded bundle (engine.load): numpy (N, D) for pooling "cls"/"mean",
    or a list of (n_words, D) arrays for "first-subtoken" (texts then are word lists or whitespace-split
    strings). `layers` index hidden_states (0 = embeddings, -1 = last layer) and matter for concat, sum, mean
    and weighted; `weights` (one per layer) for weighted / all-weighted, uniform when None. For a left-to-right
    (causal) model "cls" takes the last real token instead of [CLS], which under causal attention sees only itself."""
    idx = combination_layers(combine, layers, bundle.config.num_layers)
    stack = layer_stack(bundle, texts, idx, pooling, batch_size, max_seq_len, progress, device)
    if pooling == "first-subtoken":
        return [combine_layers(s, combine, weights) for s in stack]
    return combine_layers(stack, combine, weights)


# ------------------------------------------------------------------ classifiers on frozen features
def logreg_eval(Xtr, ytr, Xdev, regression: bool = False, seed: int = 0, C: float = 1.0):
    """Fit a standardised logistic regression (or ridge regression) and return dev predictions."""
    from sklearn.linear_model import LogisticRegression, Ridge
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    if regression:
        clf = make_pipeline(StandardScaler(), Ridge(alpha=1.0))
    else:
        clf = make_pipeline(StandardScaler(), LogisticRegression(C=C, max_iter=2000, random_state=seed))
    clf.fit(Xtr, ytr)
    return clf.predict(Xdev)


class ScalarMix(nn.Module):
    """gamma * sum_k softmax(w)_k h_k: the learned weighted sum of layers (ELMo), for "weighted"."""

    def __init__(self, K: int):
        super().__init__()
        self.w = nn.Parameter(torch.zeros(K))
        self.gamma = nn.Parameter(torch.ones(()))

    def forward(self, x):  # (B, T, K, H) -> (B, T, H)
        return self.gamma * (x * self.w.softmax(0)[:, None]).sum(-2)


class BiLSTMTagger(nn.Module):
    """A two-layer BiLSTM over frozen word features, then a linear layer to the tags (Table 7)."""

    def __init__(self, in_dim: int, num_labels: int, hidden: int = 256, dropout: float = 0.2, mix_layers: int = 0):
        super().__init__()
        self.mix = ScalarMix(mix_layers) if mix_layers else None
        self.dropout = nn.Dropout(dropout)
        self.lstm = nn.LSTM(in_dim, hidden, num_layers=2, batch_first=True, bidirectional=True, dropout=dropout)
        self.out = nn.Linear(2 * hidden, num_labels)

    def forward(self, x, lengths):  # x (B, T, D) or (B, T, K, H) with a mix; lengths (B,) -> (B, T, C)
        from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
        if self.mix is not None:
            x = self.mix(x)
        T = x.shape[1]
        packed = pack_padded_sequence(self.dropout(x), lengths.cpu(), batch_first=True, enforce_sorted=False)
        y, _ = self.lstm(packed)
        y, _ = pad_packed_sequence(y, batch_first=True, total_length=T)
        return self.out(self.dropout(y))


def _pad_words(feats: list, idx: list, device):
    lengths = torch.tensor([max(1, len(feats[i])) for i in idx])
    T = int(lengths.max())
    shape = feats[idx[0]].shape[1:]
    x = torch.zeros((len(idx), T) + tuple(shape))  # (B, T, D) or (B, T, K, H)
    for b, i in enumerate(idx):
        if len(feats[i]):
            x[b, :len(feats[i])] = torch.from_numpy(np.ascontiguousarray(feats[i]))
    return x.to(device), lengths


def bilstm_tagger_eval(train_feats: list, train_tags: list, dev_feats: list, labels: list, evaluate,
                       hidden: int = 256, epochs: int = 5, lr: float = 1e-3, batch_size: int = 32, seed: int = 0,
                       mix: bool = False, device="cpu", log=None) -> tuple:
    """Train a BiLSTM tagger on frozen word features (arrays (n, D), or (n, K, H) with `mix`); after every
    epoch `evaluate(pred_tag_lists)` -> metrics dict on dev; returns (best metrics, best epoch, mix weights)."""
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    lab = {l: i for i, l in enumerate(labels)}
    shape = train_feats[0].shape[1:]
    in_dim = shape[-1]
    model = BiLSTMTagger(in_dim, len(labels), hidden, mix_layers=shape[0] if mix else 0).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    y = [torch.tensor([lab[t] for t in tags]) for tags in train_tags]
    lengths = [len(f) for f in train_feats]
    best, best_epoch, best_w = None, None, None
    for epoch in range(1, epochs + 1):
        model.train()
        from engine.finetune import length_batches
        for idx in length_batches(lengths, batch_size, g):
            x, lens = _pad_words(train_feats, idx, device)
            tgt = torch.full((len(idx), x.shape[1]), -100, dtype=torch.long)  # (B, T)
            for b, i in enumerate(idx):
                tgt[b, :len(y[i])] = y[i]
            logits = model(x, lens)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.to(device).reshape(-1), ignore_index=-100)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            opt.step()
        model.eval()
        preds = [None] * len(dev_feats)
        with torch.no_grad():
            for idx in length_batches([len(f) for f in dev_feats], 128):
                x, lens = _pad_words(dev_feats, idx, device)
                ids = model(x, lens).argmax(-1).cpu()
                for b, i in enumerate(idx):
                    preds[i] = [labels[k] for k in ids[b, :len(dev_feats[i])].tolist()]
        metrics = evaluate(preds)
        if log is not None:
            log(epoch, float(loss.detach()), metrics)
        if best is None or metrics["f1"] > best["f1"]:
            best, best_epoch = metrics, epoch
            best_w = model.mix.w.softmax(0).tolist() if model.mix is not None else None
    return best, best_epoch, best_w


# ------------------------------------------------------------------ the feature-based experiment
@dataclass
class FeaturesConfig:
    """Every setting of a feature-based run, each also a flag of `python -m engine features` (engine/cli.py)."""
    command: ClassVar[str] = "features"  # python -m engine features
    model: str = setting("minilm", "RUN_DIR | CHECKPOINT_DIR | HF_DIR | minilm (required unless --resume)")
    task: str = setting("bbc-topic", "a sentence classification/regression or tagging task "
                        "(engine.tasks.registry.feature_task_names(); required unless --resume)")
    train: Optional[str] = setting(None, "train file (glue: TSV/CSV/JSONL, tagging: BIO)")
    dev: Optional[str] = setting(None, "dev file")
    text_cols: Optional[str] = setting(None, "text column(s): A or A,B")
    label_col: Optional[str] = setting(None, "label column; tagging: the tag column (default: the last)")
    token_col: Optional[str] = setting(None, "tagging: the word column (default: the first)")
    header: str = setting("auto", "glue: does the first row name the columns? (default: detect)", choices=("yes", "no", "auto"))
    task_type: Optional[str] = setting(None, "glue: force classification or regression", choices=TASK_TYPES)
    layers: tuple = setting((-1, -2, -3, -4), "hidden states to combine (0 = embeddings, -1 = last)", parse=cli.ints)
    combine: tuple = setting(("concat",), "concat|sum|mean|weighted|all-weighted|last|second-to-last|embeddings, a comma "
                             "list, or table7 (the paper's six)", parse=cli.words)
    pooling: str = setting("cls", "sentence tasks: [CLS] vector or mean of the tokens (tagging uses the first sub-token)",
                           choices=("cls", "mean"))
    classifier: Optional[str] = setting(None, "default: logreg for sentence tasks, bilstm for tagging", choices=("logreg", "bilstm"))
    max_train: Optional[int] = setting(None, "use a fixed random sample of N training examples",
                                       limits=(0, 1_000_000, 500))
    max_dev: Optional[int] = setting(None, "use a fixed random sample of N dev examples")
    max_seq_len: int = setting(128, "max tokens per input")
    batch_size: int = setting(32, "extraction batch size")
    hidden: int = setting(256, "BiLSTM units per direction (the paper: 768 total per layer, for BERT-BASE)")
    epochs: int = setting(5, "BiLSTM training epochs (the best on dev is kept)", limits=(1, 200, 1))
    lr: float = setting(1e-3, "BiLSTM learning rate (Adam)", limits=(1e-5, 1e-1, 1e-4))
    seed: int = setting(0, "random seed", limits=(0, 1_000_000, 1))
    device: str = setting("auto", "auto | cpu | cuda")
    out: str = setting("runs/features", "output folder: run.json, eval.json, features/", required=True)
    save_features: bool = setting(True, "do not write the .npy feature files (<out>/features/<combine>/<split>.npy)",
                                  flag="--no-save-features")
    num_threads: Optional[int] = setting(None, "CPU threads for torch")
    resume: bool = setting(False, "continue the run in --out with its own settings (finished combinations are kept)")
    report_to: Optional[str] = setting(None, TRACKERS_HELP, parse=report_to)  # engine/trackers.py

    def __post_init__(self):
        if isinstance(self.combine, str):
            self.combine = tuple(c.strip() for c in self.combine.split(",") if c.strip())
        combos = []
        for c in self.combine:
            combos += list(TABLE7) if c in ("table7", "all") else [c]
        self.combine = tuple(dict.fromkeys(combos))
        for c in self.combine:
            if c not in COMBINES:
                raise EngineError(f"unknown combination '{c}'; choose from {', '.join(COMBINES)} (or table7 for the paper's six)")
        self.layers = tuple(int(x) for x in self.layers)
        from engine.config import check_numbers
        check_numbers(self)
        if self.pooling not in ("cls", "mean", "first-subtoken"):
            raise EngineError(f"--pooling {self.pooling} is not known; use cls or mean (tagging uses first-subtoken)")
        if self.classifier not in (None, "logreg", "bilstm"):
            raise EngineError(f"--classifier {self.classifier} is not known; use logreg (sentence tasks) or bilstm (tagging)")
        if self.task not in feature_task_names():
            raise EngineError(f"feature-based use supports sentence classification/regression and tagging "
                              f"({', '.join(feature_task_names())}), not {self.task}")


# settings that may differ between the first start and a resume without changing the results
RUNTIME_FIELDS = ("out", "device", "num_threads", "batch_size", "save_features", "report_to")


def _finished_results(out: Path, combine: tuple) -> list:
    """The finished combinations' results from <out>/eval.json when resuming (in the order of `combine`)."""
    path = out / records.EVAL_JSON
    _, results = records.read_eval_to_resume(out, "results", "the combinations")
    if len(results) > len(combine) or any(not isinstance(r, dict) or r.get("combine") != c for r, c in zip(results, combine)):
        raise EngineError(f"cannot resume: {path} does not list this run's combinations in order; move it away to run them again")
    return results


def _split_data(task, max_train, max_dev):
    from engine.finetune import subsample
    return subsample(task.train, max_train), subsample(task.dev, max_dev)


def _save_split(out_dir: Path, split: str, feats, index_rows: list) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    if isinstance(feats, list):  # token level: rows of all words, the index says where each sentence starts
        arr = np.concatenate(feats) if feats else np.zeros((0, 0), dtype=np.float32)
        start = 0
        for r, f in zip(index_rows, feats):
            r.update(start=start, n=len(f))
            start += len(f)
    else:
        arr = feats
    def write(path):
        with open(path, "wb") as f:  # a file object: np.save would add ".npy" to the temporary name
            np.save(f, arr.astype(np.float32))
    atomic_save_with(out_dir / f"{split}.npy", write)
    atomic_write_text(out_dir / f"{split}.index.jsonl", "".join(json.dumps(r) + "\n" for r in index_rows))


def run_features(cfg: FeaturesConfig, progress_bar: bool = False) -> dict:
    """Extract frozen features for the task's train and dev sets, train the classifier per combination and
    write <out>/eval.json. Returns its content."""
    from dataclasses import asdict

    from engine.checkpoint import load
    from engine.device import resolve_device
    from engine.runs import Run, check_run_folder, truncate_metrics

    out = Path(cfg.out)
    check_trackers(cfg.report_to)  # --report-to a tracker that is not installed: the pip command, before anything
    config = {**asdict(cfg), "layers": list(cfg.layers), "combine": list(cfg.combine)}
    config.pop("resume")
    check_run_folder(out, FEATURES.name, config, cfg.resume, RUNTIME_FIELDS)  # before anything is written
    done = _finished_results(out, cfg.combine) if cfg.resume else []
    if cfg.num_threads:
        torch.set_num_threads(int(cfg.num_threads))
    device = resolve_device(cfg.device)
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.time()
    with Run(out, kind=FEATURES.name, config=config, task=cfg.task, model=cfg.model,
             evaluation_version=records.EVALUATION_VERSION,
             trackers=open_trackers(cfg.report_to, out, config, {"kind": FEATURES.name})) as run:
        truncate_metrics(out, after_step=len(done) + 1 if done else -1)  # step 1 extraction, k + 2 combination k
        bundle = load(cfg.model, device=device)
        fd = _feature_data(cfg, bundle, run, device, progress_bar)
        run.log({"step": 1, "phase": "extracted", "seconds": round(time.time() - t_start, 2)})
        task = fd.task
        result = {"kind": FEATURES.name, "status": RUNNING.name, "model": cfg.model, "model_path": bundle.path, "task": task.name,
                  "task_source": cfg.task, "task_kind": task.kind, "classifier": fd.classifier, "pooling": fd.pooling,
                  "layers": list(cfg.layers), "metric": task.metrics[0], "results": list(done), "config": config,
                  "data": {"train_examples": len(fd.train), "dev_examples": len(fd.dev), "hidden_size": fd.hidden_size,
                           "num_layers": bundle.config.num_layers, "parsed": fd.parsed}}
        if done:
            print(f"resuming {out}: {len(done)} of {len(cfg.combine)} combinations finished", file=sys.stderr, flush=True)
        for k in range(len(done), len(cfg.combine)):
            combo = cfg.combine[k]
            res, ftr, fdv = _score_combination(fd, cfg, k, run, device)
            result["results"].append(res)
            run.log({"step": k + 2, "combine": combo, "score": res["score"]})
            if cfg.save_features:
                _save_combination(out / "features" / combo, fd, combo, ftr, fdv)
            best = max(result["results"], key=lambda r: r["score"])
            result.update(combine=best["combine"], score=best["score"], dev=best["dev"], seconds=round(time.time() - t_start, 2))
            records.write_eval(out, result)
        result["status"] = FINISHED.name
        records.write_eval(out, result)
        run.set(best_score=result["score"], metric=result["metric"])
    return result


@dataclass
class FeatureData:
    """A task's frozen features, extracted once for all the combinations of one run."""
    task: object  # TextTask or TaggingTask
    train: list  # the (sampled) examples
    dev: list
    tagging: bool
    classifier: str  # logreg (sentence tasks) | bilstm (tagging)
    pooling: str  # cls | mean | first-subtoken (tagging)
    per_combo: dict  # combination -> the hidden-state indexes it combines
    needed: list  # every hidden-state index extracted, in the order of the stacks' K axis
    stacks: dict  # "train"/"dev" -> sentence tasks (N, K, H); tagging a list of (words, K, H) per sentence
    hidden_size: int
    parsed: dict  # what the task files were read as (engine.tasks.describe): printed, kept in eval.json

    def pick(self, combo: str) -> tuple:
        """(train, dev) features of a combination: its layers combined, or kept stacked (tagging, a learned mix)."""
        pos = [self.needed.index(i) for i in self.per_combo[combo]]
        mix = self.tagging and combo in MIXED

        def pick(stack):
            if isinstance(stack, list):
                return [s[:, pos] if mix else combine_layers(s[:, pos], combo) for s in stack]
            return combine_layers(stack[:, pos], combo)
        return pick(self.stacks["train"]), pick(self.stacks["dev"])


def _feature_data(cfg: FeaturesConfig, bundle, run, device, progress_bar: bool) -> FeatureData:
    """Load the task, check the classifier fits it, and extract the hidden states every combination needs."""
    from engine.tasks.registry import load_task_files
    task = load_task_files(cfg.task, cfg.train, cfg.dev, cfg.text_cols, cfg.label_col, cfg.task_type,
                           token_col=cfg.token_col, header={"yes": True, "no": False}.get(cfg.header))
    train, dev = _split_data(task, cfg.max_train, cfg.max_dev)
    if not train or not dev:
        raise EngineError(f"task {task.name} needs train and dev examples for the feature-based classifier")
    parsed = describe(task, train, dev)
    if progress_bar:
        print("\n".join(describe_lines(parsed)), file=sys.stderr, flush=True)
    tagging = task_kind(task.kind) is TAGGING  # a label per token: the BiLSTM tagger (engine.tasks.kinds)
    classifier = cfg.classifier or ("bilstm" if tagging else "logreg")
    if tagging and classifier != "bilstm":
        raise EngineError("tagging tasks use --classifier bilstm (a logistic regression classifies whole texts)")
    if not tagging and classifier != "logreg":
        raise EngineError("sentence tasks use --classifier logreg (the BiLSTM tagger labels words)")
    pooling = "first-subtoken" if tagging else cfg.pooling
    if tagging:
        texts = {"train": [s.words for s in train], "dev": [s.words for s in dev]}
    else:
        texts = {s: [e.text_a if e.text_b is None else (e.text_a, e.text_b) for e in exs] for s, exs in (("train", train), ("dev", dev))}
    per_combo = {c: combination_layers(c, cfg.layers, bundle.config.num_layers) for c in cfg.combine}
    needed = sorted({i for idx in per_combo.values() for i in idx})
    run.set(total_steps=len(cfg.combine) + 1, n_combinations=len(cfg.combine))
    stacks = {s: layer_stack(bundle, texts[s], needed, pooling, cfg.batch_size, cfg.max_seq_len, progress_bar, device)
              for s in ("train", "dev")}
    return FeatureData(task, train, dev, tagging, classifier, pooling, per_combo, needed, stacks, bundle.config.hidden_size, parsed)


def _score_combination(fd: FeatureData, cfg: FeaturesConfig, k: int, run, device) -> tuple:
    """Train the classifier on combination k and score it on dev: (its result record, train and dev features)."""
    combo, task, t0 = cfg.combine[k], fd.task, time.time()
    ftr, fdv = fd.pick(combo)
    weights, extra = None, {}
    if fd.tagging:
        def log(epoch, loss, m):
            run.log({"step": k + 2, "combine": combo, "epoch": epoch, "loss": loss, "score": m["f1"],
                     **{f"dev_{n}": v for n, v in m.items() if isinstance(v, float)}})
        gold_tags = [s.tags for s in fd.dev]
        # dev_scores keeps each sentence's entity counts, as a fine-tuned tagger does: a study's verdict resamples
        # dev sentences when it compares a combination with another row
        dev_metrics, best_epoch, weights = bilstm_tagger_eval(
            ftr, [s.tags for s in fd.train], fdv, task.labels, lambda p: task.dev_scores(p, gold_tags),
            cfg.hidden, cfg.epochs, cfg.lr, 32, cfg.seed, combo in MIXED, device, log)
        extra = {"best_epoch": best_epoch}
    else:
        regression = task_kind(task.kind).regression
        ids = None if regression else task.label_to_id
        ytr = [e.label if regression else ids[e.label] for e in fd.train]
        gold = [e.label if regression else ids[e.label] for e in fd.dev]
        preds = logreg_eval(ftr, ytr, fdv, regression, cfg.seed)
        dev_metrics = task.dev_scores([float(p) if regression else int(p) for p in preds], gold)
    dims = len(fd.per_combo[combo]) * fd.hidden_size if combo == "concat" else fd.hidden_size
    res = {"combine": combo, "layers": fd.per_combo[combo], "dims": dims,
           "classifier": fd.classifier, "metric": task.metrics[0], "score": dev_metrics[task.metrics[0]],
           "dev": dev_metrics, "mix_weights": weights, "seconds": round(time.time() - t0, 2), **extra}
    if fd.tagging and not res["score"]:
        res["warning"] = (f"the BiLSTM tagger on '{combo}' features predicted no correct entity in {cfg.epochs} epochs "
                          "(still on the all-O plateau); raise --epochs (features of tiny models need about 20) or --lr")
        print(f"warning: {res['warning']}", file=sys.stderr, flush=True)
    return res, ftr, fdv


def _save_combination(folder: Path, fd: FeatureData, combo: str, ftr, fdv) -> None:
    """<out>/features/<combine>/<split>.npy + .index.jsonl (a learned mix is saved with uniform weights)."""
    for split, f, exs in (("train", ftr, fd.train), ("dev", fdv, fd.dev)):
        rows = [{"i": i, "guid": getattr(e, "guid", None), "label": getattr(e, "label", None) if not fd.tagging else None}
                for i, e in enumerate(exs)]
        if fd.tagging and combo in MIXED:
            f = [combine_layers(s, combo) for s in f]
        _save_split(folder, split, f, rows)


def build_parser():
    """The flags of `python -m engine features`: FeaturesConfig's settings (engine/cli.py)."""
    return cli.parser(FeaturesConfig,
                      "Frozen BERT features (paper Table 7) and a classifier on them; prints the dev metric as one JSON line. "
                      "--resume continues a run in --out with its own settings (finished combinations kept).")


def main(argv) -> int:
    given = cli.given(FeaturesConfig, build_parser(), argv)
    base = {}
    if given.get("resume"):
        from engine.runs import read_run_json
        out = Path(given["out"])
        saved = (read_run_json(out).get("config") or {}) if out.is_dir() else {}
        known = {f.name for f in dataclasses.fields(FeaturesConfig)}
        base = {k: v for k, v in saved.items() if k in known and k != "out"} if isinstance(saved, dict) else {}
    for flag in ("model", "task"):
        if flag not in given and flag not in base:
            raise EngineError(f"--{flag} is required (or continue a run with --out DIR --resume); see python -m engine features --help")
    cfg = FeaturesConfig(**{**base, **given})
    result = run_features(cfg, progress_bar=True)
    line = {"task": result["task"], "model": result["model"], "classifier": result["classifier"], "metric": result["metric"],
            "results": {r["combine"]: r["score"] for r in result["results"]}, "combine": result["combine"], "score": result["score"],
            "seconds": result.get("seconds")}
    print(json.dumps(line), flush=True)
    return 0
