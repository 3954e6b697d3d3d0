"""Downstream metrics (paper 4.1: GLUE reports accuracy, F1 for MRPC/QQP, Matthews correlation for CoLA,
Pearson/Spearman for STS-B).

Every function takes two sequences (predictions first, gold second: lists, numpy arrays or CPU tensors)
and returns a plain Python float in [0, 1] (correlations in [-1, 1]); scikit-learn and scipy compute them. Degenerate inputs give 0.0, never
NaN: an empty input, a constant prediction (MCC, Pearson, Spearman), no positive class (F1).
Entity-level F1 lives in `tagging.py`, SQuAD EM/F1 in `squad.py`.
"""
import numpy as np
from scipy import stats
from sklearn import metrics as skm


def _arrays(preds, golds):
    p = np.asarray(preds.tolist() if hasattr(preds, "tolist") else preds)
    g = np.asarray(golds.tolist() if hasattr(golds, "tolist") else golds)
    if p.shape != g.shape:
        raise ValueError(f"predictions {p.shape} and gold labels {g.shape} differ in shape")
    return p.reshape(-1), g.reshape(-1)


def accuracy(preds, golds) -> float:
    p, g = _arrays(preds, golds)
    return float(skm.accuracy_score(g, p)) if len(p) else 0.0


def f1_binary(preds, golds, positive=1) -> float:
    """F1 of the `positive` class (MRPC, QQP); 0.0 when it is neither predicted nor gold."""
    p, g = _arrays(preds, golds)
    return float(skm.f1_score(g, p, labels=[positive], average="macro", zero_division=0)) if len(p) else 0.0


def f1_macro(preds, golds) -> float:
    """Unweighted mean of per-class F1 over the classes that appear in gold or predictions."""
    p, g = _arrays(preds, golds)
    return float(skm.f1_score(g, p, average="macro", zero_division=0)) if len(p) else 0.0


def matthews_corr(preds, golds) -> float:
    """Matthews correlation coefficient (CoLA), multi-class form (Gorodkin 2004); 0.0 when either side is constant."""
    p, g = _arrays(preds, golds)
    if not len(p) or len(set(p.tolist())) < 2 or len(set(g.tolist())) < 2:
        return 0.0
    return float(skm.matthews_corrcoef(g, p))


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
