"""Plotly figures for the Probe and Attention pages (no streamlit import; each function returns a go.Figure).

- `fill_mask_figure`: top-k predictions per [MASK] as horizontal bars.
- `over_steps_figure`: any {series: [value per step]} as lines over training steps (P(IsNext), a mask's
  token probabilities, probe-set accuracy).
- `attention_heatmap`: one layer/head as a heatmap with token labels (query rows, key columns).
- `model_view_figure`: the bertviz-style "model view": a grid of small heatmaps, selected layers x heads.
- `head_diff_figure`: per-head difference between two models (L x A).
- `probe_set_comparison_figure`: the classroom probe set's accuracies, several models side by side.
`PLOTLY_CONFIG` keeps the mode bar visible with a PNG (or SVG: `plotly_config(name, "svg")`) download button;
pages pass it as `config=` (studio.common.chart_config picks the format the sidebar chose).
"""
import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

PLOTLY_CONFIG = {
    "displayModeBar": True,
    "displaylogo": False,
    "toImageButtonOptions": {"format": "png", "filename": "bert-studio", "scale": 2},
}


IMAGE_FORMATS = ("png", "svg")  # what the toolbar's camera button downloads (the sidebar's choice)


def plotly_config(filename: str, fmt: str = "png") -> dict:
    """PLOTLY_CONFIG with the toolbar download named `filename`, as PNG or SVG (`fmt`; SVG for papers)."""
    cfg = dict(PLOTLY_CONFIG)
    cfg["toImageButtonOptions"] = dict(PLOTLY_CONFIG["toImageButtonOptions"], filename=filename,
                                       format=fmt if fmt in IMAGE_FORMATS else "png")
    return cfg


def label_tokens(tokens) -> list:
    """Unique axis labels ("3 the") so repeated tokens keep their own row/column."""
    return [f"{i} {t}" for i, t in enumerate(tokens)]


def fill_mask_figure(predictions, title: str = "Top predictions per [MASK]") -> go.Figure:
    """`predictions`: one list of (token, prob) per mask (engine.fill_mask's result)."""
    m = max(1, len(predictions))
    cols = min(m, 3)
    rows = (m + cols - 1) // cols
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=[f"[MASK] {i + 1}" for i in range(m)],
                        horizontal_spacing=0.12, vertical_spacing=0.15)
    for i, preds in enumerate(predictions):
        toks = [t for t, _ in preds][::-1]  # best at the top
        probs = [p for _, p in preds][::-1]
        fig.add_trace(go.Bar(x=probs, y=[f"{t} " for t in toks], orientation="h", name=f"[MASK] {i + 1}",
                             text=[f"{p:.3f}" for p in probs], textposition="auto",
                             hovertemplate="%{y}: %{x:.4f}<extra></extra>"),
                      row=i // cols + 1, col=i % cols + 1)
    fig.update_xaxes(title_text="probability", rangemode="tozero")
    fig.update_layout(title=title, showlegend=False, height=max(260, 60 + rows * (40 + 28 * max((len(p) for p in predictions), default=1))),
                      margin=dict(l=10, r=10, t=70, b=10))
    return fig


def over_steps_figure(steps, series: dict, title: str, y_title: str = "probability", y_range=None) -> go.Figure:
    """Lines over training steps; `series` maps a name to one value (or None) per step."""
    fig = go.Figure()
    for name, values in series.items():
        fig.add_trace(go.Scatter(x=list(steps), y=[None if v is None else float(v) for v in values], mode="lines+markers",
                                 name=str(name), hovertemplate=f"{name}<br>step %{{x}}: %{{y:.4f}}<extra></extra>"))
    fig.update_layout(title=title, xaxis_title="training step", yaxis_title=y_title, height=380,
                      margin=dict(l=10, r=10, t=60, b=10), legend=dict(orientation="h", y=-0.2))
    if y_range is not None:
        fig.update_yaxes(range=list(y_range))
    return fig


def attention_heatmap(att2d, tokens_q, tokens_k=None, title: str = "", zmax: float = None) -> go.Figure:
    """One head's attention (T_q, T_k): row i = where query token i looks."""
    att2d = np.asarray(att2d)
    tokens_k = tokens_q if tokens_k is None else tokens_k
    fig = go.Figure(go.Heatmap(
        z=np.round(att2d, 4).astype(np.float32), x=label_tokens(tokens_k), y=label_tokens(tokens_q), colorscale="Blues",
        zmin=0.0, zmax=zmax if zmax is not None else max(1e-6, float(att2d.max()) if att2d.size else 1.0),
        colorbar=dict(title="weight"), hovertemplate="query %{y}<br>key %{x}<br>weight %{z:.4f}<extra></extra>"))
    n = len(tokens_q)
    side = int(min(900, max(380, 160 + 16 * n)))
    fig.update_layout(title=title, height=side, margin=dict(l=10, r=10, t=50, b=10),
                      xaxis=dict(title="key (attended to)", tickangle=-60, side="bottom"),
                      yaxis=dict(title="query", autorange="reversed"))
    return fig


def model_view_figure(att, tokens, layers, heads, title: str = "Model view: every selected layer (L) and head (H)") -> go.Figure:
    """`att` numpy (L, A, T, T); `layers`, `heads`: 0-based indices to draw (rows x columns)."""
    layers, heads = list(layers), list(heads)
    rows, cols = max(1, len(layers)), max(1, len(heads))
    fig = make_subplots(rows=rows, cols=cols, horizontal_spacing=0.01, vertical_spacing=0.02,
                        column_titles=[f"H{h + 1}" for h in heads], row_titles=[f"L{l + 1}" for l in layers])
    labels = label_tokens(tokens)
    for r, l in enumerate(layers):
        for c, h in enumerate(heads):
            fig.add_trace(go.Heatmap(z=np.round(att[l, h], 3).astype(np.float32), x=labels, y=labels, coloraxis="coloraxis",
                                     hovertemplate=f"layer {l + 1} head {h + 1}<br>" + "query %{y}<br>key %{x}<br>%{z:.3f}<extra></extra>"),
                          row=r + 1, col=c + 1)
    fig.update_xaxes(showticklabels=False)
    fig.update_yaxes(showticklabels=False, autorange="reversed")
    cell = 150 if cols <= 3 else 110 if cols <= 6 else 70  # roughly square panels in a ~700 px column
    fig.update_layout(title=title, coloraxis=dict(colorscale="Blues", cmin=0.0, cmax=1.0), height=80 + rows * cell,
                      margin=dict(l=10, r=40, t=70, b=10))
    return fig


def head_diff_figure(diff, metric: str = "jsd", names=("model 1", "model 2")) -> go.Figure:
    """Per-head difference (L, A) as a heatmap; layer 1 at the top."""
    diff = np.asarray(diff)
    L, A = diff.shape
    what = "Jensen-Shannon divergence (bits), mean over tokens" if metric == "jsd" else "mean |delta attention|"
    fig = go.Figure(go.Heatmap(z=np.round(diff, 5), x=[f"head {h + 1}" for h in range(A)], y=[f"layer {l + 1}" for l in range(L)],
                               colorscale="Reds", zmin=0.0, colorbar=dict(title=metric),
                               text=[[f"{v:.3f}" for v in row] for row in diff], texttemplate="%{text}" if L * A <= 150 else None,
                               hovertemplate="%{y}, %{x}: %{z:.4f}<extra></extra>"))
    fig.update_layout(title=f"{names[0]} vs {names[1]}: {what}", yaxis=dict(autorange="reversed"),
                      height=int(min(900, 140 + 34 * L)), margin=dict(l=10, r=10, t=60, b=10))
    return fig


def probe_set_comparison_figure(summary: list, title: str = "Classroom probe set: models side by side") -> go.Figure:
    """Grouped bars: one group per measure (cloze top-1 and each section's, next sentence), one bar per model.
    `summary`: engine.probes.compare_probe_set(...)["summary"]; a measure a model cannot answer is left out."""
    measures = [k for k in (summary[0] if summary else {}) if k.endswith("top-1") or k == "next sentence"]
    fig = go.Figure()
    for row in summary:
        fig.add_trace(go.Bar(name=row["model"], x=measures, y=[row.get(m) for m in measures]))
    fig.update_layout(title=title, barmode="group", yaxis=dict(title="accuracy", range=[0, 1]), height=360,
                      margin=dict(l=10, r=10, t=50, b=10), legend=dict(orientation="h"))
    return fig
