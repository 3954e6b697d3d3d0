"""Plotly figures of the Layers page (no streamlit import; each function returns a go.Figure or text).

- `probe_curves`: one task's accuracy per layer with its control accuracy, selectivity and the majority floor, and
  the expected layer marked (which layer knows it);
- `depth_figure`: the tasks ordered by expected layer (the pipeline inside the model);
- `layer_step_heatmap`: one task's score per layer x checkpoint step (when and where it appears);
- `role_map`: each head's role at one step, layer x head;
- `role_multiples`: small multiples, one panel per (layer, head), its shares of attention over the steps;
- `report_html`: figures in one HTML file that works offline (plotly.js inside), for the page's downloads.
Input frames are engine.layers.frame (probes) and engine.head_roles.frame (heads).
"""
import plotly.graph_objects as go
from plotly.subplots import make_subplots

ROLE_COLOURS = {"cls": "#1f77b4", "sep": "#ff7f0e", "punct": "#2ca02c", "prev": "#d62728", "next": "#9467bd",
                "self": "#8c564b", "word": "#e377c2", "broad": "#c7c7c7", "focused": "#7f7f7f"}
SHARES = ("cls", "sep", "punct", "prev", "next", "word")  # the lines of each small multiple


def last_step(df):
    """The rows of the last checkpoint step (all rows when there are no steps)."""
    if df.empty or df["step"].isna().all():
        return df
    return df[df["step"] == df["step"].max()]


def probe_curves(df, task: str) -> go.Figure:
    """`df`: engine.layers.frame; the last step of `task`: accuracy, control accuracy, selectivity per layer."""
    d = last_step(df[df["task"] == task]).sort_values("layer")
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=d["name"], y=d["accuracy"], mode="lines+markers", name="accuracy"))
    if d["control_accuracy"].notna().any():
        fig.add_trace(go.Scatter(x=d["name"], y=d["control_accuracy"], mode="lines+markers", name="control accuracy",
                                 line=dict(dash="dash")))
        fig.add_trace(go.Bar(x=d["name"], y=d["selectivity"], name="selectivity (accuracy - control)", opacity=0.4))
    if len(d) and d["majority"].notna().any():
        fig.add_hline(y=float(d["majority"].iloc[0]), line=dict(dash="dot", color="grey"),
                      annotation_text="always the most frequent label", annotation_position="bottom right")
    e = d["expected_layer"].dropna()
    if len(e):
        fig.add_vline(x=float(e.iloc[0]), line=dict(color="#d62728", dash="dot"),
                      annotation_text=f"expected layer {float(e.iloc[0]):.2f}")
    step = d["step"].dropna()
    fig.update_layout(title=f"{task}: what each layer knows" + (f" (step {int(step.iloc[0])})" if len(step) else ""),
                      xaxis_title="hidden state probed", yaxis_title="dev accuracy", barmode="overlay",
                      margin=dict(l=10, r=10, t=60, b=10), legend=dict(orientation="h", y=-0.2))
    return fig


def depth_figure(table) -> go.Figure:
    """`table`: rows task, expected_layer (studio.layers_view.depth_table), shallowest first."""
    t = table.dropna(subset=["expected_layer"])
    fig = go.Figure(go.Bar(x=t["expected_layer"], y=t["task"], orientation="h",
                           text=[f"{v:.2f}" for v in t["expected_layer"]], textposition="outside"))
    fig.update_layout(title="Tasks by depth: the expected layer of each", xaxis_title="expected layer",
                      yaxis=dict(autorange="reversed"), margin=dict(l=10, r=10, t=60, b=10), height=160 + 40 * len(t))
    return fig


def layer_step_heatmap(df, task: str, value: str = "accuracy") -> go.Figure:
    """`task`'s `value` per layer (rows) and checkpoint step (columns)."""
    d = df[df["task"] == task].dropna(subset=["step"])
    z = d.pivot_table(index="layer", columns="step", values=value, aggfunc="mean").sort_index()
    names = {l: n for l, n in zip(d["layer"], d["name"])}
    fig = go.Figure(go.Heatmap(z=z.values, x=[str(int(s)) for s in z.columns], y=[names[l] for l in z.index],
                               colorscale="Viridis", colorbar=dict(title=value),
                               hovertemplate="step %{x}, %{y}: " + value + " %{z:.3f}<extra></extra>"))
    fig.update_layout(title=f"{task}: {value} per layer over training", xaxis_title="checkpoint step",
                      yaxis_title="hidden state", margin=dict(l=10, r=10, t=60, b=10))
    return fig


def role_map(heads, labels: dict) -> go.Figure:
    """Each head's role at the last step, layer x head; `labels`: role -> words (engine.head_roles.ROLE_LABELS)."""
    d = last_step(heads)
    fig = go.Figure()
    for role, colour in ROLE_COLOURS.items():
        r = d[d["role"] == role]
        if len(r):
            fig.add_trace(go.Scatter(x=r["head"], y=r["layer"], mode="markers", name=labels.get(role, role),
                                     marker=dict(symbol="square", size=22, color=colour),
                                     hovertemplate="layer %{y}, head %{x}: " + labels.get(role, role) + "<extra></extra>"))
    L = int(d["layer"].max()) if len(d) else 1
    fig.update_layout(title="Each head's role" + (f" at step {int(d['step'].max())}" if d["step"].notna().any() else ""),
                      xaxis=dict(title="head", dtick=1), yaxis=dict(title="layer", dtick=1, autorange="reversed"),
                      height=180 + 34 * L, margin=dict(l=10, r=10, t=60, b=10))
    return fig


def role_multiples(heads, labels: dict) -> go.Figure:
    """One small panel per (layer, head): its shares of attention (SHARES) over the checkpoint steps."""
    L, A = int(heads["layer"].max()), int(heads["head"].max())
    fig = make_subplots(rows=L, cols=A, shared_xaxes=True, shared_yaxes=True, horizontal_spacing=0.01,
                        vertical_spacing=0.02, row_titles=[f"L{l}" for l in range(1, L + 1)],
                        column_titles=[f"H{h}" for h in range(1, A + 1)])
    for (l, h), g in heads.sort_values("step").groupby(["layer", "head"]):
        for share in SHARES:
            fig.add_trace(go.Scatter(x=g["step"], y=g[share], mode="lines+markers" if len(g) < 3 else "lines",
                                     line=dict(color=ROLE_COLOURS[share], width=1.5), marker=dict(size=4),
                                     name=labels.get(share, share), legendgroup=share, showlegend=(l, h) == (1, 1),
                                     hovertemplate=f"layer {l} head {h}, step %{{x}}: {labels.get(share, share)} %{{y:.2f}}<extra></extra>"),
                          row=int(l), col=int(h))
    fig.update_yaxes(range=[0, 1], showticklabels=False)
    fig.update_xaxes(showticklabels=False)
    fig.update_layout(title="Where each head looks over training (layer x head; x: step, y: share of attention)",
                      height=120 + 70 * L, margin=dict(l=10, r=30, t=80, b=10), legend=dict(orientation="h", y=-0.05))
    return fig


def report_html(title: str, figures: list, tables: list = ()) -> str:
    """One self-contained HTML page (plotly.js inside, so it opens offline): a title, `tables` (DataFrames) and
    `figures`."""
    import html
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title></head><body>",
             f"<h1>{html.escape(title)}</h1>"]
    parts += [t.to_html(index=False, float_format=lambda v: f"{v:.3f}") for t in tables]
    for i, fig in enumerate(figures):
        parts.append(fig.to_html(full_html=False, include_plotlyjs=i == 0))
    return "\n".join(parts + ["</body></html>"])
