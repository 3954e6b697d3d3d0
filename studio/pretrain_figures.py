"""Plotly figures of a pre-training run for the Pre-train page (no streamlit import): its loss and accuracy per
objective (train and held-out), NSP, ELECTRA's discriminator, learning rate and throughput, against steps, tokens seen or training time."""
import math

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from engine.records import CURVE_X
from studio.compare import ema



def series(recs: list, key: str, x: str = "step", x_at_step: dict = None):
    """(xs, ys) of `key`; x from the record, or from `x_at_step` (held-out records carry no training time)."""
    pts = []
    for r in recs:
        xv = r.get(x) if r.get(x) is not None else (x_at_step or {}).get(r.get("step"))
        if isinstance(r.get(key), (int, float)) and xv is not None:
            pts.append((xv, r[key]))
    return [p[0] for p in pts], [p[1] for p in pts]


def eval_length_switch(evals: list, x: str = "step", x_at_step: dict = None):
    """(x, new length) where the held-out set changes length (a two-phase run evaluates at the length being
    trained: engine/pretraining/loop.py), or None."""
    prev = None
    for r in evals:
        T = r.get("eval_seq_len")
        if prev is not None and T is not None and T != prev:
            xv = r.get(x) if r.get(x) is not None else (x_at_step or {}).get(r.get("step"))
            return (xv, T) if xv is not None else None
        prev = T if T is not None else prev
    return None


DISC, DISC_TITLE = "disc", "Replaced-token detection"  # ELECTRA's discriminator: its metrics' prefix (engine.objectives)


def share_only_rules(fig, train: list, evals: list, x: str, at_step: dict) -> None:
    """The rules that know only the share p of judged tokens replaced, train and held out: on the accuracy panel,
    calling every token "original" (1 - p); on the loss panel, saying p everywhere (the binary entropy of p, nats).
    A discriminator on the accuracy line has learned nothing it is sure of; below the loss line it has learned
    something about which tokens were replaced, before its calls flip (docs/lab-notes/electra-classroom.md)."""
    for recs, key, split, colour in ((train, "disc_replaced", "train", "#1f77b4"),
                                     (evals, "eval_disc_replaced", "held out", "#d62728")):
        xs, ys = series(recs, key, x, at_step)
        if ys:
            for col, name, rule in ((2, "always 'original'", lambda p: 1 - p), (1, "the share alone", binary_entropy)):
                fig.add_trace(go.Scatter(x=xs, y=[rule(v) for v in ys], mode="lines", name=f"{name} ({split})",
                                         line=dict(color=colour, dash="dot")), row=1, col=col)


def binary_entropy(p: float) -> float:
    """-(p ln p + (1 - p) ln(1 - p)): the mean binary cross-entropy of predicting p at every token, when a share p
    of them is replaced (0 at p = 0 or 1)."""
    return -sum(q * math.log(q) for q in (p, 1 - p) if 0 < q < 1)


def pretraining_curves(train: list, evals: list, obj, x: str = "step", smoothing: float = 0.0) -> list:
    """(title, plotly figure) for the token prediction of objective `obj` (engine.objectives), its NSP or SOP, its
    discriminator (ELECTRA, beside the rules that know only the replaced share), the learning rate and throughput,
    against `x` (step, tokens or elapsed). With `smoothing` > 0 each training curve is drawn faint with its debiased
    EMA (studio.compare.ema, as TensorBoard) on top; held-out points are few and stay raw."""
    at_step = {r["step"]: r.get(x) for r in train if r.get(x) is not None}
    x_title = CURVE_X.get(x, x)

    def train_traces(fig, key, name, colour, **where):
        xs, ys = series(train, key, x, at_step)
        faint = smoothing > 0
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", name=name, line=dict(color=colour, width=1),
                                 opacity=0.3 if faint else 1.0), **where)
        if faint and ys:
            fig.add_trace(go.Scatter(x=xs, y=ema(ys, smoothing).tolist(), mode="lines", name=f"{name} (smoothed)",
                                     line=dict(color=colour, width=2)), **where)

    figs = []
    groups = ([(obj.token, obj.token_label)] + ([(obj.pairs, obj.pairs.upper())] if obj.pairs else [])
              + ([(DISC, DISC_TITLE)] if obj.rtd else []))
    for key, label in groups:
        fig = make_subplots(rows=1, cols=2, subplot_titles=(f"{label} loss", f"{label} accuracy"))
        for col, what in ((1, "loss"), (2, "acc")):
            train_traces(fig, f"{key}_{what}", f"train {what}", "#1f77b4", row=1, col=col)
            xs, ys = series(evals, f"eval_{key}_{what}", x, at_step)
            fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines+markers", name=f"held-out {what}", line=dict(color="#d62728")), row=1, col=col)
        if key == obj.token and not obj.causal:  # a masked LM's: where the input is [MASK]: what context taught, beside the most frequent token's share
            for k, name, style in (("eval_mlm_mask_acc", "held-out acc at [MASK]", dict(color="#2ca02c")),
                                   ("eval_mlm_mask_baseline", "most frequent token at [MASK]", dict(color="#2ca02c", dash="dot"))):
                xs, ys = series(evals, k, x, at_step)
                if ys:
                    fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines+markers" if k.endswith("acc") else "lines", name=name,
                                             line=style), row=1, col=2)
        if key == DISC:  # only an ELECTRA run has the group
            share_only_rules(fig, train, evals, x, at_step)
        switch = eval_length_switch(evals, x, at_step)
        if switch is not None:  # the held-out points after it score longer text: a step down is not forgetting
            for col in (1, 2):  # one line per panel, one label (on the accuracy panel)
                fig.add_vline(x=switch[0], line_dash="dot", line_color="grey", row=1, col=col,
                              **(dict(annotation_text=f"held-out at {switch[1]} tokens", annotation_position="top left")
                                 if col == 2 else {}))
        fig.update_xaxes(title_text=x_title)
        fig.update_layout(height=300, margin=dict(l=10, r=10, t=40, b=10), showlegend=True)
        figs.append((f"{label}", fig))
    xs, ys = series(train, "lr", x, at_step)
    fig = go.Figure(go.Scatter(x=xs, y=ys, mode="lines", name="learning rate"))
    fig.update_layout(title="Learning rate", height=260, margin=dict(l=10, r=10, t=40, b=10), xaxis_title=x_title)
    figs.append(("Learning rate", fig))
    fig = go.Figure()
    train_traces(fig, "tokens_per_s", "tokens/s", "#1f77b4")
    fig.update_layout(title="Throughput (tokens/s)", height=260, margin=dict(l=10, r=10, t=40, b=10), xaxis_title=x_title)
    figs.append(("Throughput", fig))
    return figs
