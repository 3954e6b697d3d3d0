"""Plotly figures for the Ablations, Fine-tune and Features pages (no streamlit inside; each returns a Figure).

- `results_bars(summary, ...)`: grouped bars per task, one bar per variant, error bars = std over seeds x restarts.
- `steps_lines(summary, ...)`: Figure 5: downstream score against pre-training steps, one line per variant.
- `curves_figure(curves, metric, split, x)`: the pre-training curves of all variants on one chart, against steps,
  tokens seen or training time.
- `trials_bars(trials, metric)`, `epoch_lines(records, metric)`, `loss_curve(steps, losses)`: a fine-tuning run.
- `threshold_curve(curve)`: SQuAD v2.0 F1 / EM against the null threshold tau.
- `approach_bars(table, metric)`: feature-based combinations next to fine-tuning (the Features page).
- `projection_scatter(xy, labels, hover)`: a 2-D projection of sentence features coloured by label.
Scores in [0, 1] are shown in percent, as in the paper's tables.
"""
import plotly.graph_objects as go

from engine.ablations.results import CURVE_X
from engine.ablations.study import is_pretrain_column

PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"]


def _colour(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def _is_dev_score(col: str) -> bool:
    """A column the dev-score bars draw: a downstream score, not a held-out pre-training figure (its own table)."""
    return not is_pretrain_column(col) and "ppl" not in col and "perplexity" not in col


def results_bars(summary, variants=None, columns=None, title="Results (mean ± std over seeds x restarts)") -> go.Figure:
    """Grouped bars: x = task column, one bar per variant (in `variants` order), error bars = std over seeds x restarts.

    `summary` has columns variant, column, step, mean, std, n (engine.ablations.summarise); rows with a
    step (Figure 5) are left to `steps_lines`. Held-out pre-training columns (the study's `pretrain_columns`: perplexity,
    accuracy at [MASK]) are not dev scores and are left out: the results table and the held-out pre-training table
    show them."""
    fig = go.Figure()
    if summary is None or len(summary) == 0:
        return _empty(fig, title, "no results yet")
    s = summary[summary["step"].isna()] if "step" in summary else summary
    s = s[s["column"].map(_is_dev_score)]
    if len(s) == 0:
        return _empty(fig, title, "no results yet")
    variants = list(variants) if variants else list(dict.fromkeys(s["variant"]))
    columns = list(columns) if columns else list(dict.fromkeys(s["column"]))
    for i, v in enumerate(variants):
        rows = s[s["variant"] == v].set_index("column")
        xs = [c for c in columns if c in rows.index]
        if not xs:
            continue
        fig.add_bar(name=v, x=xs, y=[100 * rows.loc[c, "mean"] for c in xs],
                    error_y=dict(type="data", array=[100 * rows.loc[c, "std"] for c in xs], visible=True),
                    marker_color=_colour(i),
                    customdata=[int(rows.loc[c, "n"]) for c in xs],
                    hovertemplate="%{fullData.name}<br>%{x}: %{y:.1f} ± %{error_y.array:.1f} (n=%{customdata})<extra></extra>")
    fig.update_layout(barmode="group", title=title, yaxis_title="dev score (%)", legend_title="variant",
                      margin=dict(t=50, l=50, r=20, b=40))
    return fig


def steps_lines(summary, variants=None, title="Downstream score against pre-training steps") -> go.Figure:
    """Figure 5: one line per (variant, task) through the evaluated checkpoints, error bars = std over seeds x restarts."""
    fig = go.Figure()
    if summary is None or len(summary) == 0 or "step" not in summary:
        return _empty(fig, title, "no results yet")
    s = summary[summary["step"].notna()]
    if len(s) == 0:
        return _empty(fig, title, "no results yet")
    variants = list(variants) if variants else list(dict.fromkeys(s["variant"]))
    columns = list(dict.fromkeys(s["column"]))
    dashes = ["solid", "dash", "dot", "dashdot"]
    for i, v in enumerate(variants):
        for j, c in enumerate(columns):
            rows = s[(s["variant"] == v) & (s["column"] == c)].sort_values("step")
            if len(rows) == 0:
                continue
            fig.add_scatter(x=[int(x) for x in rows["step"]], y=[100 * float(x) for x in rows["mean"]], mode="lines+markers",
                            name=v if len(columns) == 1 else f"{v} — {c}",
                            error_y=dict(type="data", array=[100 * float(x) for x in rows["std"]], visible=True),
                            line=dict(color=_colour(i), dash=dashes[j % len(dashes)]))
    fig.update_layout(title=title, xaxis_title="pre-training steps", yaxis_title="dev score (%)", margin=dict(t=50, l=50, r=20, b=40))
    return fig


def curves_figure(curves, metric="loss", split="train", title=None, x="step") -> go.Figure:
    """The pre-training curve of `metric` for every variant (and seed) on one chart, against `x`: a key of
    engine.ablations.CURVE_X (steps, tokens seen, training time); points without that x are left out.

    `curves` has columns variant, seed, step, tokens, elapsed, metric, split, value (engine.ablations.collect_results)."""
    fig = go.Figure()
    title = title or f"Pre-training {'held-out ' if split == 'eval' else ''}{metric}, all variants, against {CURVE_X.get(x, x)}"
    if curves is None or len(curves) == 0:
        return _empty(fig, title, "no pre-training metrics yet")
    c = curves[(curves["metric"] == metric) & (curves["split"] == split)]
    if x in c:
        c = c[c[x].notna()]
    if len(c) == 0:
        return _empty(fig, title, f"no {metric} logged yet")
    for i, v in enumerate(dict.fromkeys(c["variant"])):
        for k, seed in enumerate(sorted(set(c[c["variant"] == v]["seed"]))):
            rows = c[(c["variant"] == v) & (c["seed"] == seed)].sort_values("step")
            fig.add_scatter(x=[float(p) for p in rows[x]], y=[float(p) for p in rows["value"]], mode="lines" + ("+markers" if split == "eval" else ""),
                            name=f"{v} (seed {seed})", legendgroup=v, showlegend=True,
                            line=dict(color=_colour(i), dash="solid" if k == 0 else "dot"))
    fig.update_layout(title=title, xaxis_title=CURVE_X.get(x, x), yaxis_title=metric, margin=dict(t=50, l=50, r=20, b=40))
    return fig


def available_curve_metrics(curves) -> list:
    """[(split, metric)] present in `curves`, held-out first."""
    if curves is None or len(curves) == 0:
        return []
    pairs = list(dict.fromkeys(zip(curves["split"], curves["metric"])))
    return sorted(pairs, key=lambda p: (p[0] != "eval", p[1]))


def trials_bars(trials, metric: str, title=None) -> go.Figure:
    """One bar per fine-tuning trial (its best dev `metric`), the selected trial highlighted.

    `trials` is a DataFrame with columns trial (label), value, best (bool)."""
    fig = go.Figure()
    title = title or f"Dev {metric} per trial"
    if trials is None or len(trials) == 0:
        return _empty(fig, title, "no trials finished yet")
    colours = ["#d62728" if b else "#1f77b4" for b in trials["best"]]
    fig.add_bar(x=list(trials["trial"]), y=[100 * v if v is not None else None for v in trials["value"]], marker_color=colours,
                hovertemplate="%{x}<br>" + metric + ": %{y:.1f}<extra></extra>")
    fig.update_layout(title=title, yaxis_title=f"{metric} (%)", xaxis_title="trial (lr / batch / epochs / restart)",
                      margin=dict(t=50, l=50, r=20, b=80))
    return fig


def epoch_lines(records, metric: str, title=None) -> go.Figure:
    """Dev `metric` after each epoch, one line per trial. `records`: DataFrame with trial, epoch, value."""
    fig = go.Figure()
    title = title or f"Dev {metric} per epoch"
    if records is None or len(records) == 0:
        return _empty(fig, title, "no epochs evaluated yet")
    for i, t in enumerate(dict.fromkeys(records["trial"])):
        rows = records[records["trial"] == t].sort_values("epoch")
        fig.add_scatter(x=[int(x) for x in rows["epoch"]], y=[100 * float(x) for x in rows["value"]], mode="lines+markers", name=str(t), line=dict(color=_colour(i)))
    fig.update_layout(title=title, xaxis_title="epoch", yaxis_title=f"{metric} (%)", margin=dict(t=50, l=50, r=20, b=40))
    fig.update_xaxes(dtick=1)
    return fig


def loss_curve(steps, losses, title="Training loss") -> go.Figure:
    """The training loss against the optimizer step."""
    fig = go.Figure()
    if not steps:
        return _empty(fig, title, "no loss logged yet")
    fig.add_scatter(x=list(steps), y=list(losses), mode="lines", name="loss")
    fig.update_layout(title=title, xaxis_title="step", yaxis_title="loss", margin=dict(t=50, l=50, r=20, b=40))
    return fig


def threshold_curve(curve, tau=None, title="SQuAD v2.0: dev score against the null threshold τ") -> go.Figure:
    """F1 and EM against tau from [(tau, exact, f1)], the chosen tau marked."""
    fig = go.Figure()
    if not curve:
        return _empty(fig, title, "no threshold sweep in this run")
    taus = [float(c[0]) for c in curve]
    fig.add_scatter(x=taus, y=[100 * float(c[2]) for c in curve], mode="lines", name="F1")
    fig.add_scatter(x=taus, y=[100 * float(c[1]) for c in curve], mode="lines", name="EM")
    if tau is not None:
        fig.add_vline(x=float(tau), line_dash="dash", annotation_text=f"τ = {float(tau):.2f}")
    fig.update_layout(title=title, xaxis_title="τ (predict a span when s_span > s_null + τ)", yaxis_title="dev score (%)",
                      margin=dict(t=50, l=50, r=20, b=40))
    return fig


def approach_bars(table, metric: str, title=None) -> go.Figure:
    """One bar per approach (rows of `table` with columns "approach" and `metric`, a fraction) in percent;
    fine-tuning in red, the feature-based combinations in blue."""
    fig = go.Figure(go.Bar(x=list(table["approach"]), y=[None if v is None else 100 * v for v in table[metric]],
                           marker_color=["#d62728" if a.startswith("fine") else "#1f77b4" for a in table["approach"]]))
    fig.update_layout(title=title or f"Feature-based vs fine-tuning: dev {metric} (%)", yaxis_title=f"{metric} (%)",
                      margin=dict(t=50, l=50, r=20, b=80))
    return fig


def projection_scatter(xy, labels, hover, title="Sentence features, 2-D projection") -> go.Figure:
    """A scatter of 2-D points (N, 2), one trace per label (so the legend filters), hover text per point."""
    fig = go.Figure()
    labels = [str(l) for l in labels]
    for i, lab in enumerate(sorted(set(labels))):
        idx = [k for k, l in enumerate(labels) if l == lab]
        fig.add_scatter(x=[float(xy[k][0]) for k in idx], y=[float(xy[k][1]) for k in idx], mode="markers", name=lab,
                        text=[hover[k] for k in idx], hovertemplate="%{text}<extra>" + lab + "</extra>",
                        marker=dict(color=_colour(i), size=7, opacity=0.8))
    fig.update_layout(title=title, xaxis_title="component 1", yaxis_title="component 2", legend_title="label",
                      margin=dict(t=50, l=40, r=20, b=40))
    return fig


def _empty(fig: go.Figure, title: str, text: str) -> go.Figure:
    fig.add_annotation(text=text, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    fig.update_layout(title=title, xaxis_visible=False, yaxis_visible=False)
    return fig
