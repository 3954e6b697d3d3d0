"""Attention views drawn by us, offline: a bertviz-style head view as one self-contained HTML page.

bertviz's own HTML loads require.js, d3 and jQuery from a CDN (blank without internet) and embeds every layer x
head x T^2 weight (about 105 MB at 128 tokens for 12 x 12). This head view has no external resource at all
(inline CSS + plain JavaScript + a <canvas>), embeds only the selected layers and heads, stores each weight
as an integer per mille (3 decimals) and caps the tokens (`MAX_TOKENS`) so a long input cannot freeze the
browser. The model view (a grid of small heatmaps) is `studio.figures.model_view_figure`.

Head view: tokens on the left (queries) and right (keys), one line per (query, key) whose opacity is the
weight, one colour per head; pick the layer in a menu, click a colour to toggle a head (double-click: only
that head), hover a token to see only its lines.

Also here: whether head importance can be offered for a model, dropping [CLS]/[SEP] from a map (rows
renormalised), capping the tokens, CSV export.
"""
import csv
import io
import json

import numpy as np

MAX_TOKENS = 128  # tokens drawn by the head view
ROW_PX = 22
HEAD_COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
                "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#ad494a"]


def head_importance_unavailable(bundle):
    """None when head importance can be scored on `bundle`, else the one line saying why not: it masks words and
    reads the MLM head's loss, so a model without an MLM head (MiniLM is an encoder only) cannot be scored; nor can an
    encoder other than BERT (engine.encoders), whose heads it cannot mask."""
    from engine import probes
    from engine.encoders import require_bert
    from engine.errors import EngineError
    try:
        require_bert(bundle, "head importance (it masks heads in BERT's own output projection)")
    except EngineError as e:
        return str(e)
    try:
        probes.require_head(bundle, "mlm")
    except EngineError:
        return (f"Head importance needs an MLM head (it scores each head by the masked-word loss) and "
                f"{probes.model_name(bundle)} has none; pick a checkpoint pre-trained with mlm or mlm+nsp in the Model box.")
    return None


def hide_special(tokens, att, special, renormalize: bool = True):
    """Drop [CLS]/[SEP] (where `special` is 1) from rows and columns of `att` (..., T, T).
    With `renormalize`, each remaining row is rescaled to sum to 1 (what the other tokens share among
    themselves); a row that put all its weight on special tokens stays 0."""
    keep = [i for i, s in enumerate(special) if not s]
    if not keep:
        return list(tokens), att
    sub = att[..., keep, :][..., :, keep]
    if renormalize:
        s = sub.sum(axis=-1, keepdims=True)
        sub = np.divide(sub, s, out=np.zeros_like(sub), where=s > 0)
    return [tokens[i] for i in keep], sub


def cap_tokens(tokens, att, max_tokens: int = MAX_TOKENS):
    """The first `max_tokens` tokens (rows and columns); returns (tokens, att, capped)."""
    if len(tokens) <= max_tokens:
        return list(tokens), att, False
    return list(tokens[:max_tokens]), att[..., :max_tokens, :max_tokens], True


def matrix_csv(att2d, tokens) -> str:
    """One head's (T, T) map as CSV: a header of key tokens, one row per query token."""
    buf = io.StringIO()
    w = csv.writer(buf)
    labels = [f"{i}:{t}" for i, t in enumerate(tokens)]
    w.writerow(["query \\ key"] + labels)
    for lab, row in zip(labels, np.asarray(att2d)):
        w.writerow([lab] + [f"{v:.6f}" for v in row])
    return buf.getvalue()


def long_csv(att, tokens, layers, heads) -> str:
    """Selected layers/heads (0-based) of (L, A, T, T) as long CSV: layer, head, query_index, query, key_index, key, weight."""
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["layer", "head", "query_index", "query", "key_index", "key", "weight"])
    for l in layers:
        for h in heads:
            m = att[l, h]
            for i, qt in enumerate(tokens):
                for j, kt in enumerate(tokens):
                    w.writerow([l + 1, h + 1, i, qt, j, kt, f"{m[i, j]:.6f}"])
    return buf.getvalue()


def head_view_html(tokens, att, layers, heads, max_tokens: int = MAX_TOKENS, notes=(), element_id: str = "bs-head-view"):
    """A self-contained HTML page (no network) drawing the head view of `att` (L, A, T, T) for the 0-based
    `layers` and `heads`. Returns (html, notes, height_px)."""
    notes = list(notes)
    tokens, att, capped = cap_tokens(tokens, att, max_tokens)
    if capped:
        notes.append(f"head view shows the first {max_tokens} tokens only (long inputs would freeze the browser); "
                     "the heatmaps show all of them")
    layers, heads = [int(l) for l in layers], [int(h) for h in heads]
    if not layers or not heads:
        raise ValueError("select at least one layer and one head")
    T = len(tokens)
    # weights per mille, one flat list of T*T ints per (layer, head)
    w = [[np.rint(np.asarray(att[l, h], dtype=np.float64) * 1000).astype(int).ravel().tolist() for h in heads] for l in layers]
    data = {"tokens": [str(t) for t in tokens], "layers": [l + 1 for l in layers], "heads": [h + 1 for h in heads],
            "colours": [HEAD_COLOURS[h % len(HEAD_COLOURS)] for h in heads], "w": w, "notes": notes, "row": ROW_PX}
    payload = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
    height = int(min(1200, 110 + 24 * len(notes) + T * ROW_PX))
    html = _TEMPLATE.replace("__ID__", element_id).replace("__DATA__", payload)
    return html, notes, height


def render_head_view(tokens, att, layers, heads, max_tokens: int = MAX_TOKENS, notes=()):
    """Draw the head view in a Streamlit page: an iframe holding our inline HTML (tokens reach the page only as
    JSON data set with textContent, never as markup); nothing is fetched."""
    html, notes, height = head_view_html(tokens, att, layers, heads, max_tokens=max_tokens, notes=notes)
    embed_html(html, height)
    return notes


def embed_html(html: str, height: int) -> None:
    """Show a self-contained HTML view in an iframe on the page (at most 900 px high; it scrolls past that)."""
    import streamlit as st
    if hasattr(st, "iframe"):
        st.iframe(html, height=min(height, 900))
    else:  # older Streamlit
        import streamlit.components.v1 as components
        components.html(html, height=min(height, 900), scrolling=height > 900)


_TEMPLATE = r"""<!doctype html>
<html><head><meta charset="utf-8">
<style>
  body { font-family: "Source Sans Pro", system-ui, sans-serif; font-size: 14px; margin: 4px; color: #262730; }
  .bs-ctrl { display: flex; flex-wrap: wrap; gap: 10px; align-items: center; margin-bottom: 6px; }
  .bs-swatch { display: inline-block; min-width: 22px; height: 20px; line-height: 20px; text-align: center;
               color: white; border-radius: 3px; cursor: pointer; margin-right: 3px; font-size: 12px; user-select: none; }
  .bs-swatch.off { opacity: 0.2; }
  .bs-hint { color: #808495; font-size: 12px; }
  .bs-note { color: #9c6500; font-size: 12px; }
  .bs-body { display: flex; align-items: flex-start; }
  .bs-col { display: flex; flex-direction: column; }
  .bs-tok { height: __ROW__px; line-height: __ROW__px; padding: 0 6px; white-space: nowrap; cursor: default; border-radius: 3px; }
  .bs-left .bs-tok { text-align: right; }
  .bs-tok.focus { font-weight: bold; outline: 1px solid #999; }
</style></head>
<body>
<div id="__ID__" class="bs-head-view">
  <div class="bs-ctrl">
    <label>Layer <select class="bs-layer"></select></label>
    <span class="bs-heads"></span>
    <span class="bs-hint">hover a token to focus it · click a colour to toggle a head · double-click to show it alone</span>
  </div>
  <div class="bs-notes"></div>
  <div class="bs-body">
    <div class="bs-col bs-left"></div>
    <canvas class="bs-canvas" width="200" height="10"></canvas>
    <div class="bs-col bs-right"></div>
  </div>
</div>
<script>
(function () {
  const D = __DATA__;
  const root = document.getElementById("__ID__");
  const T = D.tokens.length, ROW = D.row, W = 200;
  const sel = root.querySelector(".bs-layer"), headsEl = root.querySelector(".bs-heads");
  const left = root.querySelector(".bs-left"), right = root.querySelector(".bs-right");
  const canvas = root.querySelector(".bs-canvas"), ctx = canvas.getContext("2d");
  const on = D.heads.map(() => true);
  let layer = 0, focus = null;  // focus: {side: "q"|"k", i}
  canvas.width = W; canvas.height = Math.max(ROW, T * ROW);
  D.notes.forEach(n => { const d = document.createElement("div"); d.className = "bs-note"; d.textContent = n; root.querySelector(".bs-notes").appendChild(d); });
  D.layers.forEach((l, k) => { const o = document.createElement("option"); o.value = k; o.textContent = l; sel.appendChild(o); });
  sel.onchange = () => { layer = +sel.value; draw(); };
  D.heads.forEach((h, k) => {
    const s = document.createElement("span"); s.className = "bs-swatch"; s.style.background = D.colours[k]; s.textContent = h;
    s.title = "head " + h;
    s.onclick = () => { on[k] = !on[k]; s.classList.toggle("off", !on[k]); draw(); };
    s.ondblclick = () => { on.fill(false); on[k] = true; headsEl.querySelectorAll(".bs-swatch").forEach((e, j) => e.classList.toggle("off", j !== k)); draw(); };
    headsEl.appendChild(s);
  });
  function tokenDivs(parent, side) {
    D.tokens.forEach((t, i) => {
      const d = document.createElement("div"); d.className = "bs-tok"; d.textContent = t;
      d.onmouseenter = () => { focus = {side, i}; draw(); };
      d.onmouseleave = () => { focus = null; draw(); };
      parent.appendChild(d);
    });
  }
  tokenDivs(left, "q"); tokenDivs(right, "k");
  function hex(c, a) {
    const n = parseInt(c.slice(1), 16);
    return "rgba(" + (n >> 16) + "," + ((n >> 8) & 255) + "," + (n & 255) + "," + a + ")";
  }
  function draw() {
    ctx.clearRect(0, 0, canvas.width, canvas.height);
    const L = left.children, R = right.children, shade = new Float32Array(T), active = on.filter(x => x).length || 1;
    for (let k = 0; k < D.heads.length; k++) {
      if (!on[k]) continue;
      const w = D.w[layer][k];
      ctx.lineWidth = 2;
      for (let i = 0; i < T; i++) {
        if (focus && focus.side === "q" && focus.i !== i) continue;
        for (let j = 0; j < T; j++) {
          if (focus && focus.side === "k" && focus.i !== j) continue;
          const v = w[i * T + j] / 1000;
          if (v < 0.01) continue;
          if (focus) shade[focus.side === "q" ? j : i] += v / active;
          ctx.strokeStyle = hex(D.colours[k], Math.min(1, v));
          ctx.beginPath(); ctx.moveTo(0, i * ROW + ROW / 2); ctx.lineTo(W, j * ROW + ROW / 2); ctx.stroke();
        }
      }
    }
    for (let i = 0; i < T; i++) {
      L[i].classList.toggle("focus", !!focus && focus.side === "q" && focus.i === i);
      R[i].classList.toggle("focus", !!focus && focus.side === "k" && focus.i === i);
      L[i].style.background = focus && focus.side === "k" ? "rgba(31,119,180," + Math.min(1, shade[i]).toFixed(3) + ")" : "";
      R[i].style.background = focus && focus.side === "q" ? "rgba(31,119,180," + Math.min(1, shade[i]).toFixed(3) + ")" : "";
    }
    root.dataset.drawn = "1";
  }
  draw();
})();
</script>
</body></html>
""".replace("__ROW__", str(ROW_PX))
