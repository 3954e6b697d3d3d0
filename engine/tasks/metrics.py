"""Downstream metrics (paper 4.1: GLUE reports accuracy, F1 for MRPC/QQP, Matthews correlation for CoLA,
Pearson/Spearman for STS-B).

Every function takes two sequences (predictions first, gold second: lists, numpy arrays or CPU tensors)
and returns a plain Python float in [0, 1] (correlations in [-1, 1]). Degenerate inputs give 0.0, never
NaN: an empty input, a constant prediction (MCC, Pearson, Spearman), no positive class (F1).
Entity-level F1 lives in `tagging.py`, SQuAD EM/F1 in `squad.py`.
"""
import math

import numpy as np
from scipy import stats


def _arrays(preds, golds):
    p = np.asarray(preds.tolist() if hasattr(preds, "tolist") else preds)
    g = np.asarray(golds.tolist() if hasattr(golds, "tolist") else golds)
    if p.shape != g.shape:
        raise ValueError(f"predictions {p.shape} and gold labels {g.shape} differ in shape")
    return p.reshape(-1), g.reshape(-1)


def accuracy(preds, golds) -> float:
    p, g = _arrays(preds, golds)
    return float((p == g).mean()) if len(p) else 0.0


def _f1(tp: int, fp: int, fn: int) -> float:
    denom = 2 * tp + fp + fn
    return 2.0 * tp / denom if denom else 0.0


def f1_binary(preds, golds, positive=1) -> float:
    """F1 of the `positive` class (MRPC, QQP)."""
    p, g = _arrays(preds, golds)
    tp = int(((p == positive) & (g == positive)).sum())
    fp = int(((p == positive) & (g != positive)).sum())
    fn = int(((p != positive) & (g == positive)).sum())
    return _f1(tp, fp, fn)


def f1_macro(preds, golds) -> float:
    """Unweighted mean of per-class F1 over the classes that appear in gold or predictions."""
    p, g = _arrays(preds, golds)
    classes = sorted(set(p.tolist()) | set(g.tolist()))
    if not classes:
        return 0.0
    return float(np.mean([f1_binary(p, g, positive=c) for c in classes]))


def matthews_corr(preds, golds) -> float:
    """Matthews correlation coefficient (CoLA), multi-class form (Gorodkin 2004); 0.0 when either side is constant."""
    p, g = _arrays(preds, golds)
    if not len(p):
        return 0.0
    classes = sorted(set(p.tolist()) | set(g.tolist()))
    idx = {c: i for i, c in enumerate(classes)}
    k = len(classes)
    cm = np.zeros((k, k), dtype=np.float64)  # (gold, pred)
    for a, b in zip(g.tolist(), p.tolist()):
        cm[idx[a], idx[b]] += 1
    t = cm.sum(axis=1)  # times each class truly occurred
    q = cm.sum(axis=0)  # times each class was predicted
    c = np.trace(cm)
    s = cm.sum()
    cov_pg = c * s - t @ q
    cov_pp = s * s - q @ q
    cov_gg = s * s - t @ t
    if cov_pp == 0 or cov_gg == 0:
        return 0.0
    return float(cov_pg / math.sqrt(cov_pp * cov_gg))


def pearson(preds, golds) -> float:
    p, g = _arrays(preds, golds)
    p, g = p.astype(np.float64), g.astype(np.float64)
    if len(p) < 2 or np.all(p == p[0]) or np.all(g == g[0]):
        return 0.0
    return float(stats.pearsonr(p, g)[0])


def spearman(preds, golds) -> float:
    p, g = _arrays(preds, golds)
    p, g = p.astype(np.float64), g.astype(np.float64)
    if len(p) < 2 or np.all(p == p[0]) or np.all(g == g[0]):
        return 0.0
    return float(stats.spearmanr(p, g)[0])


# The metric names a task may list (TextTask.metrics, MultipleChoiceTask.metrics).
METRICS = {
    "accuracy": accuracy,
    "f1": f1_binary,
    "f1_macro": f1_macro,
    "mcc": matthews_corr,
    "pearson": pearson,
    "spearman": spearman,
}


def compute(names, preds, golds, positive=1) -> dict:
    """{name: value} for the named metrics; `positive` is the class id that binary "f1" scores."""
    out = {}
    for n in names:
        if n not in METRICS:
            raise ValueError(f"unknown metric {n!r}; known: {', '.join(METRICS)}")
        out[n] = METRICS[n](preds, golds, positive) if n == "f1" else METRICS[n](preds, golds)
    return out
