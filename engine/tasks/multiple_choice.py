"""Multiple choice, SWAG-style (paper 4.4): N inputs `[CLS] context [SEP] start-phrase ending_k [SEP]`, one
score per input from the pooled [CLS] vector (model side), softmax over the N; metric accuracy.

File format: CSV, TSV or JSON Lines (see `tables.py`) with a header:
- context: `sent1` (SWAG), `context`, `ctx_a` (HellaSwag), `ctx`, `question`;
- optional start phrase, prepended to every ending: `sent2` (SWAG), `start`, `ctx_b` (HellaSwag);
- endings: `ending0`, `ending1`, ... (SWAG), or one column `endings` holding a JSON list;
- label: `label` (0-based index of the right ending).
Columns can be named explicitly (`context=`, `start=`, `endings=[...]` or a list column, `label=`).
Departure from the paper: none on the data side (the paper's SWAG has four endings; any N >= 2 works).
"""
import functools
import json
from dataclasses import dataclass, field
from pathlib import Path

import torch

from engine.errors import EngineError
from engine.tasks.batching import Prepared, cut_text, pad_batch, predict
from engine.tasks.kinds import MULTIPLE_CHOICE
from engine.tasks.tables import find_column, read_table

CONTEXT_COLUMNS = ["sent1", "context", "ctx_a", "ctx", "question"]
START_COLUMNS = ["sent2", "start", "ctx_b", "startphrase_end"]
LABEL_COLUMNS = ["label", "answer", "gold"]


@dataclass
class ChoiceExample:
    context: str
    start: str  # start phrase shared by the endings ("" when none)
    endings: list  # of str, N of them
    label: int = None  # index of the right ending, None when unlabeled
    guid: str = None


@dataclass
class MultipleChoiceTask:
    name: str
    n_choices: int
    train: list  # of ChoiceExample
    dev: list  # of ChoiceExample
    metrics: tuple = ("accuracy",)
    info: dict = field(default_factory=dict)
    kind: str = MULTIPLE_CHOICE.name

    def collate(self, tok, max_len: int):
        return functools.partial(encode_multiple_choice, tok, max_len=max_len)

    def compute_metrics(self, preds, golds=None) -> dict:
        from engine.tasks.metrics import accuracy
        golds = [e.label for e in self.dev] if golds is None else golds
        return {"accuracy": accuracy(preds, golds)}

    @staticmethod
    def lengths(examples) -> list:
        """Words of the context, the start phrase and the longest ending (evaluation batches only need an order)."""
        return [len(e.context.split()) + len(e.start.split()) + max(len(x.split()) for x in e.endings) for e in examples]

    def prepare(self, tok, max_len: int, cfg=None) -> Prepared:
        """The loop's view: examples as items of N inputs each, the evaluator picks the best-scored ending."""
        collate = self.collate(tok, max_len)
        tr_len, dv_len = self.lengths(self.train), self.lengths(self.dev)

        def evaluate(model, device, bs):
            outs = predict(model, self.dev, dv_len, collate, max(1, bs // self.n_choices), device)
            return self.compute_metrics([int(o.argmax()) for o in outs])
        return Prepared(self, MULTIPLE_CHOICE.name, self.n_choices, self.metrics[0], self.train, tr_len, self.dev, dv_len,
                        collate, evaluate, {"choices": self.n_choices})

    def preview(self, n: int = 10) -> list:
        """The first n training examples as table rows (the Fine-tune page's preview)."""
        return [{"context": e.context, "endings": " | ".join(e.endings), "label": e.label} for e in self.train[:n]]


def read_multiple_choice(path, context=None, start=None, endings=None, label=None) -> list:
    """ChoiceExamples of a SWAG-style file (format in the module docstring)."""
    explicit = [c for c in (context, start, label) if isinstance(c, str)]
    if isinstance(endings, (list, tuple)):
        explicit += [c for c in endings if isinstance(c, str)]
    elif isinstance(endings, str):
        explicit.append(endings)
    names = set(CONTEXT_COLUMNS + START_COLUMNS + LABEL_COLUMNS + ["endings", "ending0"]) | {c.lower() for c in explicit}
    table = read_table(path, known_names=names)
    if table.columns is None and (context is None or endings is None):
        raise EngineError(f"{table.path} has no header row; add one naming the columns (sent1, sent2, ending0, ending1, ..., "
                          f"label), or in Python name them: context=<index> endings=[<index>, ...] label=<index>")
    ci = find_column(table, context, CONTEXT_COLUMNS, "context (--text-cols)")
    si = find_column(table, start, START_COLUMNS, "start phrase (--text-cols CONTEXT,START)") if start is not False else None
    li = find_column(table, label, LABEL_COLUMNS, "label (--label-col)")
    list_col = None
    if isinstance(endings, (list, tuple)):
        ending_cols = [find_column(table, c, what="ending") for c in endings]
    elif endings is not None:
        list_col = find_column(table, endings, what="endings")
        ending_cols = []
    else:
        lower = [c.lower() for c in table.columns]
        ending_cols = []
        while f"ending{len(ending_cols)}" in lower:
            ending_cols.append(lower.index(f"ending{len(ending_cols)}"))
        if not ending_cols and "endings" in lower:
            list_col = lower.index("endings")
    if ci is None or li is None or (not ending_cols and list_col is None):
        missing = [w for w, ok in (("context column (sent1, context, ctx_a)", ci is not None), ("label column (label)", li is not None),
                                   ("ending columns (ending0, ending1, ... or endings)", ending_cols or list_col is not None)) if not ok]
        raise EngineError(f"{table.path}: found no {' and no '.join(missing)} (columns: {', '.join(map(str, table.columns or range(table.n_cols)))}); "
                          f"name them with context=, endings=, label=")
    out, n = [], None
    for ln, cells in table.rows:
        where = table.where(ln)
        if list_col is not None:
            ends = cells[list_col]
            if isinstance(ends, str):
                try:
                    ends = json.loads(ends)
                except json.JSONDecodeError:
                    raise EngineError(f"{where}: the endings cell is not a JSON list of strings")
            if not isinstance(ends, list) or not all(isinstance(x, str) for x in ends):
                raise EngineError(f"{where}: endings must be a list of strings")
        else:
            ends = [cells[i] if cells[i] is not None else "" for i in ending_cols]
        n = len(ends) if n is None else n
        if len(ends) != n or n < 2:
            raise EngineError(f"{where} has {len(ends)} endings but {'earlier rows have ' + str(n) if n >= 2 else 'at least 2 are needed'}; "
                              f"every example needs the same number of endings")
        raw = cells[li]
        try:
            lab = int(float(str(raw).strip()))
            if not 0 <= lab < n or float(str(raw).strip()) != lab:
                raise ValueError
        except (TypeError, ValueError):
            raise EngineError(f"{where}: label {raw!r} is not an ending index; expected one of {', '.join(map(str, range(n)))}")
        ctx = cells[ci]
        if ctx is None:
            raise EngineError(f"{where} has no context value")
        st = cells[si] if si is not None and cells[si] is not None else ""
        out.append(ChoiceExample(str(ctx), str(st), [str(x) for x in ends], lab, f"{Path(path).name}:{ln}"))
    return out


def load_multiple_choice(train, dev=None, name: str = "swag", **cols) -> MultipleChoiceTask:
    """A multiple-choice task from SWAG-style train/dev files; `cols`: context=, start=, endings=, label=."""
    tr = read_multiple_choice(train, **cols)
    dv = read_multiple_choice(dev, **cols) if dev is not None else []
    n = len(tr[0].endings)
    if dv and len(dv[0].endings) != n:
        raise EngineError(f"{dev} has {len(dv[0].endings)} endings per example but {train} has {n}; use files with the same number")
    info = {"train_file": str(train), "dev_file": str(dev) if dev is not None else None,
            "train_examples": len(tr), "dev_examples": len(dv)}
    return MultipleChoiceTask(name, n, tr, dv, info=info)


def encode_multiple_choice(tok, examples, max_len: int = 128) -> dict:
    """input_ids, token_type_ids, attention_mask (B, N, T) long, padded to the batch's longest, and labels
    (B,) long when every example has one. Each choice is `[CLS] context [SEP] start ending_k [SEP]`,
    truncated longest side first."""
    B, N = len(examples), len(examples[0].endings)
    if any(len(e.endings) != N for e in examples):
        raise ValueError("all examples in a batch need the same number of endings")
    pairs = [(cut_text(e.context, max_len), cut_text(f"{e.start} {end}".strip(), max_len))  # cut to what max_len can use
             for e in examples for end in e.endings]
    encs = tok.encode_batch(pairs, max_length=max_len)
    input_ids, token_type_ids, attention_mask = pad_batch([(x.ids, x.type_ids) for x in encs], tok.pad_id)  # (B*N, T)
    T = input_ids.shape[1]
    out = {"input_ids": input_ids.view(B, N, T), "token_type_ids": token_type_ids.view(B, N, T),
           "attention_mask": attention_mask.view(B, N, T)}  # (B, N, T)
    if all(e.label is not None for e in examples):
        out["labels"] = torch.tensor([e.label for e in examples], dtype=torch.long)  # (B,)
    return out
