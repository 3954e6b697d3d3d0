"""Plotly figures and tables for the attention analyses of engine.analysis (no streamlit import).

- `head_grid_figure`: a layer x head grid of one per-head statistic (Clark et al.), drawn as square markers so a
  click selects a head (Streamlit's point selection works on scatter traces, not on heatmaps).
- `importance_figure`: head importance (Michel et al.) as a layer x head heatmap, diverging around 0.
- `side_by_side_figure`: two maps of one head side by side (plain weights and value-weighted norms).
- `sample_texts`: the first sentences of a built-in corpus, for statistics over "a set of texts".
- `STAT_LABELS`: what each statistic column means, for legends and captions.
"""
import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from studio.figures import label_tokens

STAT_LABELS = {
    "cls": "attention to [CLS]",
    "sep": "attention to [SEP]",
    "self": "attention to the token itself",
    "prev": "attention to the previous token",
    "next": "attention to the next token",
    "punct": "attention to punctuation",
    "entropy": "entropy of the attention (nats)",
}


def head_grid_figure(stats, column: str, selected=None) -> go.Figure:
    """`stats`: engine.head_statistics's DataFrame; one square per (layer, head), colour = `column`.
    `selected`: (layer, head), 1-based, outlined."""
    L, A = int(stats["layer"].max()), int(stats["head"].max())
    vals = stats[column].to_numpy(dtype=float)
    size = int(max(14, min(44, 520 / max(L, A))))
    fig = go.Figure(go.Scatter(
        x=stats["head"], y=stats["layer"], mode="markers+text" if L * A <= 150 else "markers",
        marker=dict(symbol="square", size=size, color=vals, colorscale="Viridis",
                    cmin=0.0, cmax=float(np.nanmax(vals)) if column == "entropy" else 1.0,
                    colorbar=dict(title=column), line=dict(width=0)),
        text=[f"{v:.2f}" for v in vals], textfont=dict(size=9, color="white"),
        customdata=np.stack([stats["layer"], stats["head"]], axis=-1),
        hovertemplate="layer %{y}, head %{x}<br>" + STAT_LABELS.get(column, column) + ": %{marker.color:.4f}<extra></extra>"))
    if selected is not None:
        fig.add_trace(go.Scatter(x=[selected[1]], y=[selected[0]], mode="markers", hoverinfo="skip", showlegend=False,
                                 marker=dict(symbol="square-open", size=size + 6, color="#d62728", line=dict(width=3))))
    fig.update_layout(title=f"Per-head {STAT_LABELS.get(column, column)}: click a head to open it",
                      xaxis=dict(title="head", tickmode="linear", dtick=1, range=[0.5, A + 0.5]),
                      yaxis=dict(title="layer", tickmode="linear", dtick=1, autorange="reversed", range=[L + 0.5, 0.5]),
                      height=int(min(900, 160 + (size + 6) * L)), margin=dict(l=10, r=10, t=60, b=10), showlegend=False)
    return fig


def importance_figure(importance, base_loss=None) -> go.Figure:
    """(L, A) loss change per masked head; layer 1 at the top; red = the loss rises without the head."""
    imp = np.asarray(importance, dtype=float)
    L, A = imp.shape
    m = float(np.abs(imp).max()) or 1e-9
    fig = go.Figure(go.Heatmap(
        z=np.round(imp, 5), x=[f"head {h + 1}" for h in range(A)], y=[f"layer {l + 1}" for l in range(L)],
        colorscale="RdBu_r", zmin=-m, zmax=m, colorbar=dict(title="Δ loss"),
        text=[[f"{v:+.3f}" for v in row] for row in imp], texttemplate="%{text}" if L * A <= 150 else None,
        hovertemplate="%{y}, %{x}: Δ MLM loss %{z:+.4f}<extra></extra>"))
    base = f" (loss with every head {base_loss:.3f})" if base_loss is not None else ""
    fig.update_layout(title=f"Head importance: change in held-out MLM loss when the head is masked{base}",
                      yaxis=dict(autorange="reversed"), height=int(min(900, 140 + 34 * L)), margin=dict(l=10, r=10, t=60, b=10))
    return fig


def side_by_side_figure(left, right, tokens, titles) -> go.Figure:
    """Two (T, T) maps with the same token labels, each with its own colour scale."""
    labels = label_tokens(tokens)
    fig = make_subplots(rows=1, cols=2, subplot_titles=list(titles), horizontal_spacing=0.12)
    for c, (m, cb) in enumerate(((left, 0.44), (right, 1.0)), start=1):
        m = np.asarray(m, dtype=float)
        fig.add_trace(go.Heatmap(z=np.round(m, 4), x=labels, y=labels, colorscale="Blues", zmin=0.0,
                                 zmax=max(1e-6, float(m.max()) if m.size else 1.0), colorbar=dict(x=cb, len=0.9),
                                 hovertemplate="query %{y}<br>key %{x}<br>%{z:.4f}<extra></extra>"), row=1, col=c)
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(tickangle=-60)
    n = len(tokens)
    fig.update_layout(height=int(min(800, max(380, 160 + 14 * n))), margin=dict(l=10, r=10, t=60, b=10))
    return fig


def sample_texts(corpus: str = "bbc", n_docs: int = 16, per_doc: int = 2, max_words: int = 40) -> list:
    """The first `per_doc` sentences of the first `n_docs` documents of a built-in corpus (at most `max_words`
    words each): a fixed, reproducible set of texts for per-head statistics and head importance."""
    import engine
    docs = engine.load_corpus(corpus)
    texts = []
    for d in list(docs)[:n_docs]:
        for s in d[:per_doc]:
            words = s.split()
            if len(words) >= 3:
                texts.append(" ".join(words[:max_words]))
    return texts
