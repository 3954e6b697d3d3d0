"""What a task file was parsed into, shown before training (the CLI prints it, the Fine-tune page shows it,
eval.json keeps it): the task type, the columns used, the example counts, the labels with their train counts,
and sanity warnings about the data.

Warnings (each one line, also kept in eval.json):
- a label column with nearly as many distinct values as rows (more than half of the rows, and over 20): an id
  or text column was taken as the label;
- labels (or entity types) in dev that the train file never has (a text task refuses those at load time);
- a label seen only once in train;
- whatever the loader noted (`task.info["warnings"]`, e.g. the tag column taken by default from a wide file).
The collapse warning (a classifier predicting one class for all of dev) comes from the evaluation
(`collapse_warning`), after training.
"""
from collections import Counter

from engine.tasks.kinds import KINDS

MANY_LABELS = 20  # fewer distinct labels than this are never "an id or text column"


def counted(kind: str) -> str:
    """What a task kind's label counts count ("labels", "tags"), for the CLI and the Fine-tune page."""
    k = KINDS.get(kind)
    return k.counted if k is not None and k.counted else "labels"


def _counts(values) -> dict:
    return dict(sorted(Counter(values).items(), key=lambda kv: (-kv[1], str(kv[0]))))


def describe(task, train=None, dev=None) -> dict:
    """{"task", "type", "columns", "train_examples", "dev_examples", "labels": {label: train count} (at most
    50, the most frequent), "n_labels", "warnings": [...]} for a task of engine.tasks (`train`/`dev`: the
    examples actually used, default the task's)."""
    train = task.train if train is None else train
    dev = task.dev if dev is None else dev
    kind = getattr(task, "kind", "?")
    k = KINDS.get(kind)
    info = getattr(task, "info", {}) or {}
    out = {"task": task.name, "type": kind, "columns": info.get("columns"), "train_examples": len(train),
           "dev_examples": len(dev), "labels": None, "n_labels": None, "warnings": list(info.get("warnings", []))}
    if k is None or k.counted is None:  # regression, squad: no label set
        return out
    if k.per_token:  # tagging: BIO tags, entity types unseen
        counts = _counts(t for s in train for t in s.tags)
        dev_tags = {t for s in dev for t in s.tags}
        unseen = sorted({t[2:] for t in dev_tags if t != "O"} - {t[2:] for t in counts if t != "O"})
    elif k.choices:
        counts = _counts(f"ending {e.label}" for e in train if e.label is not None)
        unseen = []
    else:
        counts = _counts(e.label for e in train)
        dev_labels = {e.label for e in dev}
        unseen = sorted(dev_labels - set(counts))
    out["labels"] = dict(list(counts.items())[:50])
    out["n_labels"] = len(counts)
    warn = out["warnings"]
    col = (out["columns"] or {}).get("label") if isinstance(out["columns"], dict) else None
    where = f"label column {col!r}" if col is not None else "the label column"
    if k.label_column and len(counts) > max(MANY_LABELS, len(train) // 2):
        warn.append(f"{where} has {len(counts)} distinct values in {len(train)} training rows: is it an id or text "
                    f"column? pick the label with --label-col")
    if unseen:
        warn.append(f"the dev set has {k.unseen} the train set never has: {', '.join(map(str, unseen[:8]))}"
                    f"{' ...' if len(unseen) > 8 else ''}; they can only be missed")
    once = [l for l, n in counts.items() if n == 1]
    if k.label_column and once and len(counts) <= max(MANY_LABELS, len(train) // 2):
        warn.append(f"{len(once)} label(s) occur once in train ({', '.join(map(str, once[:5]))}"
                    f"{' ...' if len(once) > 5 else ''}): a header row or a typo?")
    return out


def describe_lines(d: dict) -> list:
    """Human-readable lines of `describe`'s dict (the CLI prints them before training)."""
    lines = [f"task {d['task']} ({d['type']}): {d['train_examples']} train / {d['dev_examples']} dev examples"]
    if d.get("columns"):
        cols = d["columns"]
        lines.append("columns: " + (", ".join(f"{k} = {v}" for k, v in cols.items() if v is not None)
                                    if isinstance(cols, dict) else str(cols)))
    if d.get("labels"):
        shown = ", ".join(f"{l} ({n})" for l, n in list(d["labels"].items())[:12])
        more = f", ... ({d['n_labels']} in all)" if d["n_labels"] > 12 else ""
        lines.append(f"{counted(d['type'])} in train: {shown}{more}")
    lines += [f"warning: {w}" for w in d.get("warnings", [])]
    return lines


def collapse_warning(pred_ids, labels) -> str:
    """A warning when a classifier predicts a single class for every dev example (MCC 0), else None."""
    distinct = set(int(p) for p in pred_ids)
    if len(pred_ids) > 1 and len(distinct) == 1 and len(labels) > 1:
        label = labels[distinct.pop()]
        return (f"the classifier predicts {label!r} for every dev example (a collapse: MCC 0); try a smaller --lr, "
                f"more epochs or more restarts, and check the labels")
    return None
