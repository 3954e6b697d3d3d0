"""GLUE-style sentence and sentence-pair classification / regression (paper 4.1).

File format: TSV (GLUE's own, no quoting), CSV or JSON Lines, one example per row; see `tables.py`.
Columns are found in the header by their usual GLUE names, or given explicitly (a name or a 0-based
index):
- text A / text B: `sentence1`/`sentence2` (RTE, MRPC-style, WNLI), `question1`/`question2` (QQP),
  `question`/`sentence` (QNLI), `premise`/`hypothesis` (MNLI-style), `text_a`/`text_b`; one text:
  `sentence` (SST-2, CoLA), `text`, `text_a`;
- label: `label`, `gold_label`, `is_duplicate`, `score`, `labels`, `target`, `class`.
A header is detected by its names or its content (`tables.looks_like_header`; `header=True/False` forces it);
a label equal to a column name of the header (a header row inside the data: two files concatenated) is refused.
A file without a header needs column indexes, except CoLA's GLUE layout (`source, label, original label,
sentence`), recognised by its content (`glue_layout`), never by the folder's name. A headerless dev file
(RTE's val.tsv) reuses the columns found in the train header when it has the same number of columns.

Labels: the label set is the train labels as strings, sorted (numerically when they are all integers).
The task is a regression when `task_type="regression"` or when every train label is a number and some
are not integers (STS-B). Metrics: every one that applies is computed (classification: accuracy, macro-F1,
Matthews correlation, and the positive class's F1 with two labels; regression: Pearson, Spearman); the first
is the selection metric: `metric=` when given, else the recognised layout's (MCC for CoLA, F1 for MRPC/QQP,
Pearson for STS-B), else accuracy (Pearson for regression). The task's name is `name=`, else the recognised
layout's name, else "glue". Input: [CLS] A [SEP] B [SEP], classifier on the pooled [CLS] vector (the model
side). Departure from the paper: none on the data side; the GLUE test sets (no labels) are not read.
"""
import functools
import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import torch

from engine import records
from engine.errors import EngineError
from engine.tasks import metrics as M
from engine.tasks.batching import Prepared, cut_text, pad_batch, predict
from engine.tasks.describe import collapse_warning
from engine.tasks.kinds import CLASSIFICATION, GLUE_TYPES, REGRESSION, task_kind
from engine.tasks.tables import find_column, read_table

TASK_TYPES = GLUE_TYPES  # --task-type: what a glue task predicts (detected when not given; engine.tasks.kinds)
PAIR_COLUMNS = [("sentence1", "sentence2"), ("question1", "question2"), ("question", "sentence"),
                ("premise", "hypothesis"), ("text_a", "text_b"), ("#1 string", "#2 string")]
SINGLE_COLUMNS = ["sentence", "text", "text_a", "review", "content", "document"]
LABEL_COLUMNS = ["label", "gold_label", "is_duplicate", "score", "labels", "target", "class", "quality"]
KNOWN_NAMES = {n for p in PAIR_COLUMNS for n in p} | set(SINGLE_COLUMNS) | set(LABEL_COLUMNS) | {"index", "idx", "id"}
CLASSIFICATION_METRICS = ("accuracy", "f1", "f1_macro", "mcc")  # "f1" (binary) only with two labels
REGRESSION_METRICS = ("pearson", "spearman")
# GLUE layouts recognised by their content: (name, header names that must all be present, label values that
# must cover the train labels (None: any), the selection metric).
GLUE_LAYOUTS = (("qqp", {"question1", "question2", "is_duplicate"}, None, "f1"),
                ("mrpc", {"#1 string", "#2 string", "quality"}, None, "f1"),
                ("sts-b", {"sentence1", "sentence2", "score"}, None, "pearson"),
                ("rte", {"sentence1", "sentence2"}, {"entailment", "not_entailment"}, "accuracy"),
                ("qnli", {"question", "sentence"}, {"entailment", "not_entailment"}, "accuracy"),
                ("mnli", {"sentence1", "sentence2"}, {"entailment", "neutral", "contradiction"}, "accuracy"))
COLA_COLUMNS = {"text_a": 3, "text_b": None, "label": 1}  # CoLA's headerless source, label, original label, sentence


def some(values, k: int = 8) -> str:
    """At most `k` values for a message: "a, b, c, ... (40 in all)"; long values cut to 40 characters."""
    vals = [str(v) if len(str(v)) <= 40 else str(v)[:37] + "..." for v in values]
    return ", ".join(vals[:k]) + (f", ... ({len(vals)} in all)" if len(vals) > k else "")


def is_cola_layout(table) -> bool:
    """CoLA's GLUE file: no header, 4 columns, 0/1 labels in column 1, '', '*', '?' or '#' marks in column 2."""
    if table.columns is not None or table.n_cols != 4:
        return False
    return all(cells[1] in ("0", "1") and len(cells[2]) <= 2 and not any(ch.isalnum() for ch in cells[2])
               for _, cells in table.rows)


def glue_layout(table, labels) -> tuple:
    """(name, selection metric) of the GLUE layout a train table has by its content, or (None, None)."""
    if is_cola_layout(table):
        return "cola", "mcc"
    names = {str(c).lower() for c in table.columns or ()}
    for name, cols, label_values, metric in GLUE_LAYOUTS:
        if cols <= names and (label_values is None or set(labels) <= label_values):
            return name, metric
    return None, None


@dataclass
class Example:
    text_a: str
    text_b: str = None  # None for single-sentence tasks
    label: object = None  # a string label (classification), a float (regression), None when unlabeled
    guid: str = None  # where it came from ("train.tsv:12", a BBC file id), for showing errors


@dataclass
class TextTask:
    name: str
    kind: str  # CLASSIFICATION.name | REGRESSION.name (engine.tasks.kinds)
    labels: list  # class names (strings) in id order; [] for regression
    train: list  # of Example
    dev: list  # of Example
    metrics: tuple  # metric names (engine.tasks.metrics.METRICS); the first is the one to select on
    info: dict = field(default_factory=dict)  # files, columns used, counts

    @property
    def classifies(self) -> bool:
        """A label set (classification), not a number (regression): engine.tasks.kinds says which."""
        return not task_kind(self.kind).regression

    @property
    def num_labels(self) -> int:
        return len(self.labels) if self.classifies else 1

    @property
    def label_to_id(self) -> dict:
        return {l: i for i, l in enumerate(self.labels)} if self.classifies else None

    def collate(self, tok, max_len: int):
        """A DataLoader `collate_fn` that encodes a list of Examples (padded to the batch's longest)."""
        return functools.partial(encode_classification, tok, max_len=max_len, label_to_id=self.label_to_id)

    def gold(self, split: str = "dev") -> list:
        """Gold labels as ids (classification) or floats (regression)."""
        exs = getattr(self, split)
        return [self.label_to_id[e.label] for e in exs] if self.classifies else [e.label for e in exs]

    def compute_metrics(self, preds, golds=None) -> dict:
        """{metric: float} for predicted ids (or values) against `golds` (default: the dev labels)."""
        golds = self.gold("dev") if golds is None else golds
        pos = self.label_to_id.get("1", 1) if self.classifies else 1
        return M.compute(self.metrics, preds, golds, positive=pos)

    def dev_scores(self, preds, golds=None) -> dict:
        """compute_metrics plus, when the selection metric is classification accuracy, each example's 1 (correct) or
        0 (wrong) under records.PER_EXAMPLE, what a study's bootstrap resamples (fine-tuning and features both)."""
        golds = self.gold("dev") if golds is None else golds
        scores = self.compute_metrics(preds, golds)
        if self.classifies and self.metrics[0] == "accuracy":
            scores[records.PER_EXAMPLE] = [int(p == g) for p, g in zip(preds, golds)]
        return scores

    def lengths(self, tok, examples, max_len: int) -> list:
        """Pieces per example ([CLS] A [SEP] B [SEP], truncated to max_len)."""
        return [len(e.ids) for e in tok.encode_batch(_texts(examples, max_len), max_length=max_len)]

    def prepare(self, tok, max_len: int, cfg=None) -> Prepared:
        """The loop's view: Examples as items, a classifier (argmax) or regression (the value) evaluator."""
        tr_len, dv_len = self.lengths(tok, self.train, max_len), self.lengths(tok, self.dev, max_len)
        collate = self.collate(tok, max_len)

        def evaluate(model, device, bs):
            outs = predict(model, self.dev, dv_len, collate, bs, device)
            preds = [int(o.argmax()) for o in outs] if self.classifies else [float(o) for o in outs]
            scores = self.dev_scores(preds)
            collapse = collapse_warning(preds, self.labels) if self.classifies else None
            return {**scores, "collapse": collapse} if collapse else scores  # a one-class collapse, said
        info = {"truncated_train": sum(n >= max_len for n in tr_len), "labels": list(self.labels)}
        if self.classifies and self.dev:
            # the accuracy of always answering the dev set's most frequent label: the floor a study checks a row
            # against before reading a comparison on this column (engine.ablations.verdict.above_floor)
            info["dev_majority_accuracy"] = max(Counter(e.label for e in self.dev).values()) / len(self.dev)
        return Prepared(self, self.kind, self.num_labels, self.metrics[0], self.train, tr_len, self.dev, dv_len,
                        collate, evaluate, info)

    def preview(self, n: int = 10) -> list:
        """The first n training examples as table rows (the Fine-tune page's preview)."""
        return [{"text_a": e.text_a, "text_b": e.text_b, "label": e.label} for e in self.train[:n]]


def _is_number(s: str) -> bool:
    try:
        return math.isfinite(float(s))
    except (TypeError, ValueError):
        return False


def _is_integer_like(s: str) -> bool:
    return _is_number(s) and float(s) == int(float(s))


def _resolve(table, text_a, text_b, label, fallback=None) -> dict:
    """Column indexes {text_a, text_b (or None), label} for a table."""
    if table.columns is None and fallback is not None and fallback["n_cols"] == table.n_cols:
        return fallback  # a headerless dev file: the columns found in the train file
    if table.columns is None and text_a is None and label is None:
        raise EngineError(f"{table.path} has no header row (none detected); give the columns by 0-based index, e.g. "
                          f"--text-cols 1 --label-col 0 (a pair: --text-cols 1,2; in Python text_a=1 label=0) "
                          f"({table.n_cols} columns; first row: {' | '.join(str(c)[:30] for c in table.rows[0][1])}); "
                          f"if that first row is a header, add --header yes")
    a = b = None
    if text_a is not None:
        a = find_column(table, text_a, what="text (--text-cols)")
        b = find_column(table, text_b, what="second text (--text-cols A,B)") if text_b is not None else None
    else:
        for ca, cb in PAIR_COLUMNS:
            ia, ib = find_column(table, None, [ca]), find_column(table, None, [cb])
            if ia is not None and ib is not None:
                a, b = ia, ib
                break
        if a is None:
            a = find_column(table, None, SINGLE_COLUMNS)
        if text_b is not None:
            b = find_column(table, text_b, what="second text (--text-cols A,B)")
    lab = find_column(table, label, LABEL_COLUMNS, what="label (--label-col)")
    if a is None or lab is None:
        missing = " and no ".join(w for w, i in (("text column", a), ("label column", lab)) if i is None)
        raise EngineError(f"{table.path}: found no {missing} (columns: {', '.join(map(str, table.columns or range(table.n_cols)))}); expected "
                          f"text columns like sentence, sentence1/sentence2, question/sentence, premise/hypothesis and a "
                          f"label column like label; or name them: --text-cols A[,B] --label-col L (names or 0-based indexes)")
    return {"text_a": a, "text_b": b, "label": lab, "n_cols": table.n_cols}


def _read(path, cols, header, fallback):
    """(examples with raw string labels, the columns used)."""
    names = set(KNOWN_NAMES) | {str(c).lower() for c in cols.values() if isinstance(c, str) and not c.isdigit()}
    table = read_table(path, header=header, known_names=names)
    c = _resolve(table, cols.get("text_a"), cols.get("text_b"), cols.get("label"), fallback)
    out = []
    header_names = {str(n).strip().lower() for n in table.columns or ()}
    for ln, cells in table.rows:
        def cell(i, what):
            v = cells[i]
            if v is None:
                raise EngineError(f"{table.where(ln)} has no {what} value; every example needs one")
            return v if isinstance(v, str) else (str(v) if not isinstance(v, (list, dict)) else _bad(table, ln, what))
        a = cell(c["text_a"], "text_a")
        b = cell(c["text_b"], "text_b") if c["text_b"] is not None else None
        lab = cell(c["label"], "label").strip()
        if lab == "":
            raise EngineError(f"{table.where(ln)} has an empty label; fill it in or remove the line")
        if table.columns and lab.lower() in header_names:
            raise EngineError(f"{table.where(ln)}: the label {lab[:40]!r} is a column name of the header: a header row "
                              f"inside the data (two files joined?) or the wrong --label-col; remove that line or pick the label")
        out.append(Example(a, b, lab, f"{Path(path).name}:{ln}"))
    used = {k: (table.columns[v] if table.columns and v is not None else v) for k, v in c.items() if k != "n_cols"}
    return out, c, used, table


def _bad(table, ln, what):
    raise EngineError(f"{table.where(ln)}: the {what} value is a list or object; it must be a string or number")


def load_glue(train, dev=None, name: str = None, text_a=None, text_b=None, label=None, header=None,
              task_type: str = None, metrics=None, metric: str = None) -> TextTask:
    """Load a GLUE-style task from a train file and an optional dev file (TSV/CSV/JSONL; see the module
    docstring). `text_a`, `text_b`, `label`: column names or 0-based indexes (None = detect from the header;
    when `text_a` is given, `text_b` is used only if given too). `header`: None = detect, True/False =
    force. `task_type`: "classification", "regression" or None (detect). `metric`: the selection metric (one
    of the applicable ones); `metrics`: the full list instead, first = the selection metric."""
    train = Path(train)
    if task_type is not None and task_type not in TASK_TYPES:
        raise EngineError(f"task type {task_type!r} is not known; use --task-type {' or '.join(TASK_TYPES)}")
    cols = {"text_a": text_a, "text_b": text_b, "label": label}
    if text_a is None and label is None and header is not True:
        names = set(KNOWN_NAMES)
        if is_cola_layout(read_table(train, header=header, known_names=names)):
            cols = dict(COLA_COLUMNS)
    tr, c, used, table = _read(train, cols, header, None)
    # a headerless dev file reuses the train columns (by index) when it has as many columns
    dv, _, _, _ = _read(dev, cols, header, c) if dev is not None else ([], None, None, None)
    if not tr:
        raise EngineError(f"{train} has no examples")
    raw = [e.label for e in tr]
    if header is None and table.columns is None and len(tr) > 2:
        first, counts = raw[0], {}
        for l in raw:
            counts[l] = counts.get(l, 0) + 1
        if counts[first] == 1 and min(n for l, n in counts.items() if l != first) >= 2:
            raise EngineError(f"{tr[0].guid}: the first row's label {first[:40]!r} occurs nowhere else in {train.name}: is "
                              f"that row a header? add --header yes (or --header no to train on it)")
    numeric = all(_is_number(l) for l in raw)
    if task_type is None:
        task_type = REGRESSION.name if numeric and not all(_is_integer_like(l) for l in raw) else CLASSIFICATION.name
    if task_kind(task_type).regression:
        for split, exs in (("train", tr), ("dev", dv)):
            for e in exs:
                if not _is_number(e.label):
                    raise EngineError(f"{e.guid}: label {e.label[:40]!r} is not a number; a regression task needs numeric labels")
                e.label = float(e.label)
        labels = []
    else:
        uniq = set(raw)
        labels = sorted(uniq, key=lambda s: (float(s), s)) if all(_is_integer_like(l) for l in uniq) else sorted(uniq)
        if len(labels) < 2:
            raise EngineError(f"{train} has only one label ({labels[0][:40]!r}); a classifier needs at least two classes")
        for e in dv:
            if e.label not in uniq:
                raise EngineError(f"{Path(dev)}:{e.guid.rsplit(':', 1)[1]}: label {e.label[:40]!r} does not occur in the train "
                                  f"file; expected one of {some(labels)} (wrong --label-col?)")
    layout, layout_metric = glue_layout(table, labels)
    name = (name or layout or "glue").lower()
    if metrics is None:
        applicable = REGRESSION_METRICS if task_kind(task_type).regression else \
            tuple(m for m in CLASSIFICATION_METRICS if m != "f1" or len(labels) == 2)
        chosen = metric or (layout_metric if layout_metric in applicable else applicable[0])
        if chosen not in applicable:
            raise EngineError(f"--metric {chosen} does not apply to this {task_type} task"
                              f"{' with ' + str(len(labels)) + ' labels' if labels else ''}; use one of {', '.join(applicable)}")
        metrics = (chosen,) + tuple(m for m in applicable if m != chosen)
    for m in metrics:
        if m not in M.METRICS:
            raise EngineError(f"metric {m!r} is not known; use one of {', '.join(M.METRICS)}")
    info = {"train_file": str(train), "dev_file": str(dev) if dev is not None else None, "columns": used,
            "layout": layout, "train_examples": len(tr), "dev_examples": len(dv)}
    return TextTask(name, task_type, labels, tr, dv, tuple(metrics), info)


def _texts(examples, max_len: int) -> list:
    """What the tokenizer gets: text A, or the pair (A, B), each cut to what `max_len` pieces can use (cut_text)."""
    return [cut_text(e.text_a, max_len) if e.text_b is None else (cut_text(e.text_a, max_len), cut_text(e.text_b, max_len))
            for e in examples]


def encode_classification(tok, examples, max_len: int = 128, label_to_id: dict = None) -> dict:
    """Encode Examples as one batch padded to its longest sequence (usable as a DataLoader collate_fn via
    `functools.partial(encode_classification, tok, max_len=..., label_to_id=...)` or `task.collate`).
    Returns input_ids, token_type_ids, attention_mask (B, T) long, and `labels` (B,): long ids when
    `label_to_id` is given, float values when it is None (regression); no `labels` when any label is None."""
    if not examples:
        raise ValueError("encode_classification needs at least one example")
    encs = tok.encode_batch(_texts(examples, max_len), max_length=max_len)
    input_ids, token_type_ids, attention_mask = pad_batch([(e.ids, e.type_ids) for e in encs], tok.pad_id)  # (B, T)
    out = {"input_ids": input_ids, "token_type_ids": token_type_ids, "attention_mask": attention_mask}
    if all(e.label is not None for e in examples):
        if label_to_id is None:
            out["labels"] = torch.tensor([float(e.label) for e in examples], dtype=torch.float)  # (B,)
        else:
            try:
                out["labels"] = torch.tensor([label_to_id[e.label] for e in examples], dtype=torch.long)  # (B,)
            except KeyError as k:
                raise EngineError(f"label {str(k.args[0])[:40]!r} is not in the task's labels ({some(label_to_id)})")
    return out
