"""Mask and watch (the Probe page; exBERT's idea): click WordPieces to mask them and see at once what the MLM head
predicts there and where the masked token looks, layer by layer. No streamlit import: the page draws.

- `pieces(bundle, text)`: the sentence's WordPieces without [CLS]/[SEP].
- `masked_text(pieces, masked)`: the text to feed back with the chosen pieces replaced by [MASK]; a "##" piece
  joins its word without a space, so the tokenizer gives back the same positions ("play ##ing" with "##ing"
  masked -> "play [MASK]", two pieces as before). Text cannot say that a piece right after a [MASK] continues a
  word, so such a piece is fed as a word of its own ("##ing" after a masked "play" -> "[MASK] ing").
- `token_attention_figure(att, tokens, position)`: where one query token attends in every layer (mean over the
  heads), layer 1 at the top, and `token_attention_by_head(att, tokens, position, layer)` for one layer's heads.
"""
import numpy as np
import plotly.graph_objects as go

from studio.figures import label_tokens


def pieces(bundle, text: str) -> list:
    enc = bundle.tokenizer.encode(text)
    return [t for t, s in zip(enc.tokens, enc.special_tokens_mask) if not s]


def pill_label(pieces_: list, i: int) -> str:
    """The clickable label of piece i: the piece, with its position when the same piece occurs twice (the pills
    must be told apart: "the (1)" and "the (6)")."""
    p = pieces_[i]
    return f"{p} ({i + 1})" if pieces_.count(p) > 1 else p


def masked_text(pieces_: list, masked) -> str:
    masked = set(masked)
    out = []
    for i, p in enumerate(pieces_):
        word = "[MASK]" if i in masked else (p[2:] if p.startswith("##") else p)
        joins = p.startswith("##") and i not in masked and (i - 1) not in masked and out
        if joins:
            out[-1] += word
        else:
            out.append(word)
    return " ".join(out)


def token_attention_figure(att, tokens, position: int, title: str = None) -> go.Figure:
    """`att` (L, A, T, T): row `position` of every layer, averaged over heads -> an (L, T) heatmap."""
    rows = np.asarray(att)[:, :, position, :].mean(axis=1)  # (L, T)
    L = rows.shape[0]
    fig = go.Figure(go.Heatmap(z=np.round(rows, 4), x=label_tokens(tokens), y=[f"layer {l + 1}" for l in range(L)],
                               colorscale="Blues", zmin=0.0, zmax=max(1e-6, float(rows.max())), colorbar=dict(title="weight"),
                               hovertemplate="%{y}<br>key %{x}<br>%{z:.4f}<extra></extra>"))
    fig.update_layout(title=title or f"Where {position} {tokens[position]} looks, per layer (mean over heads)",
                      yaxis=dict(autorange="reversed"), xaxis=dict(tickangle=-60),
                      height=int(min(700, 150 + 32 * L)), margin=dict(l=10, r=10, t=60, b=10))
    return fig


def token_attention_by_head(att, tokens, position: int, layer: int) -> go.Figure:
    """One layer: row `position` of each head -> an (A, T) heatmap."""
    rows = np.asarray(att)[layer, :, position, :]  # (A, T)
    A = rows.shape[0]
    fig = go.Figure(go.Heatmap(z=np.round(rows, 4), x=label_tokens(tokens), y=[f"head {h + 1}" for h in range(A)],
                               colorscale="Blues", zmin=0.0, zmax=1.0, colorbar=dict(title="weight"),
                               hovertemplate="%{y}<br>key %{x}<br>%{z:.4f}<extra></extra>"))
    fig.update_layout(title=f"Layer {layer + 1}: where {position} {tokens[position]} looks, per head",
                      yaxis=dict(autorange="reversed"), xaxis=dict(tickangle=-60),
                      height=int(min(700, 150 + 28 * A)), margin=dict(l=10, r=10, t=60, b=10))
    return fig
