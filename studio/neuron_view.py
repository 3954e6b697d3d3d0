"""The neuron view, drawn by us offline (what bertviz's neuron view shows): for one layer and head, the query
vector q of a chosen token, the key vector k of every token, their product element by element (q x k), the sum
q . k, and softmax(q . k / sqrt(D)), which is that head's attention row for the token.

One self-contained HTML page (inline CSS and plain JavaScript, vectors drawn on a <canvas>, no external
resource) holding only the chosen head's queries and keys (2 x T x D numbers, 3 decimals), so it stays small at
any length; the scores and weights are computed in the page from those numbers, the way the model does.
Tokens reach the page only as JSON data set with textContent, never as markup.

Click a query token (left) to show its row; hover a cell to read its numbers. Blue = positive, orange = negative,
stronger = larger |value|.
"""
import json

import numpy as np

ROW_PX = 20
CELL_PX = 7  # width of one vector element


def neuron_view_data(tokens, q, k, layer: int, head: int, causal: bool = False, query: int = None) -> dict:
    """The page's data for 0-based `layer`, `head`: q and k (L, A, T, D) from engine.analysis.queries_and_keys.
    `query`: the token shown first (default: the first after [CLS])."""
    q, k = np.asarray(q), np.asarray(k)
    if q.shape != k.shape or q.ndim != 4:
        raise ValueError(f"q and k must both be (L, A, T, D); got {q.shape} and {k.shape}")
    L, A, T, D = q.shape
    if not (0 <= layer < L and 0 <= head < A):
        raise ValueError(f"layer {layer + 1}, head {head + 1} is outside this model's {L} layers x {A} heads")
    if len(tokens) != T:
        raise ValueError(f"{len(tokens)} tokens but the vectors have {T} positions")
    first = min(1, T - 1) if query is None else int(query)
    return {"tokens": [str(t) for t in tokens], "layer": layer + 1, "head": head + 1, "D": D, "causal": bool(causal),
            "query": first, "q": np.round(q[layer, head].astype(np.float64), 3).tolist(),
            "k": np.round(k[layer, head].astype(np.float64), 3).tolist(), "row": ROW_PX, "cell": CELL_PX}


def neuron_view_html(tokens, q, k, layer: int, head: int, causal: bool = False, query: int = None,
                     element_id: str = "bs-neuron-view"):
    """(html, height_px): the self-contained page of `neuron_view_data`."""
    data = neuron_view_data(tokens, q, k, layer, head, causal=causal, query=query)
    payload = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
    height = int(130 + len(tokens) * ROW_PX)
    return _TEMPLATE.replace("__ID__", element_id).replace("__DATA__", payload), height


def render_neuron_view(tokens, q, k, layer: int, head: int, causal: bool = False):
    """Draw the neuron view in a Streamlit page (an iframe holding the inline HTML; nothing is fetched)."""
    from studio.attention_view import embed_html
    html, height = neuron_view_html(tokens, q, k, layer, head, causal=causal)
    embed_html(html, height)
    return html


_TEMPLATE = r"""<!doctype html>
<html><head><meta charset="utf-8">
<style>
  body { font-family: "Source Sans Pro", system-ui, sans-serif; font-size: 13px; margin: 4px; color: #262730; }
  .nv-head { display: flex; gap: 12px; align-items: center; margin-bottom: 4px; flex-wrap: wrap; }
  .nv-hint, .nv-read { color: #808495; font-size: 12px; }
  .nv-grid { display: grid; grid-template-columns: auto auto auto auto auto; column-gap: 8px; align-items: start; }
  .nv-col { display: flex; flex-direction: column; }
  .nv-col div { height: __ROW__px; line-height: __ROW__px; white-space: nowrap; padding: 0 4px; }
  .nv-title { font-weight: bold; height: __ROW__px; line-height: __ROW__px; white-space: nowrap; }
  .nv-q { cursor: pointer; text-align: right; border-radius: 3px; }
  .nv-q.sel { background: #dbe9f6; font-weight: bold; }
  .nv-num { text-align: right; font-variant-numeric: tabular-nums; }
</style></head>
<body>
<div id="__ID__" class="bs-neuron-view">
  <div class="nv-head">
    <span class="nv-label"></span>
    <span>query q <canvas class="nv-qvec" height="__ROW__"></canvas></span>
  </div>
  <div class="nv-hint">click a query token (left) · hover a cell for its numbers · blue &gt; 0, orange &lt; 0</div>
  <div class="nv-read">&nbsp;</div>
  <div class="nv-grid">
    <div><div class="nv-title">query</div><div class="nv-col nv-queries"></div></div>
    <div><div class="nv-title">key</div><div class="nv-col nv-keys"></div></div>
    <div><div class="nv-title">key k · q × k</div><canvas class="nv-cells"></canvas></div>
    <div><div class="nv-title">q · k</div><div class="nv-col nv-dots"></div></div>
    <div><div class="nv-title">softmax</div><div class="nv-col nv-weights"></div></div>
  </div>
</div>
<script>
(function () {
  const D = __DATA__;
  const root = document.getElementById("__ID__");
  const T = D.tokens.length, N = D.D, ROW = D.row, C = D.cell, GAP = 12;
  const qEl = root.querySelector(".nv-queries"), kEl = root.querySelector(".nv-keys");
  const dotEl = root.querySelector(".nv-dots"), wEl = root.querySelector(".nv-weights");
  const cells = root.querySelector(".nv-cells"), ctx = cells.getContext("2d");
  const qvec = root.querySelector(".nv-qvec"), qctx = qvec.getContext("2d");
  const read = root.querySelector(".nv-read");
  let sel = D.query, prod = [];
  cells.width = 2 * N * C + GAP; cells.height = T * ROW; qvec.width = N * C;
  const maxK = Math.max(1e-6, ...D.k.map(r => Math.max(...r.map(Math.abs))));
  function colour(v, m) {
    const a = Math.min(1, Math.abs(v) / m).toFixed(3);
    return v >= 0 ? "rgba(31,119,180," + a + ")" : "rgba(255,127,14," + a + ")";
  }
  function div(parent, text, cls) {
    const d = document.createElement("div"); d.textContent = text; if (cls) d.className = cls; parent.appendChild(d); return d;
  }
  D.tokens.forEach((t, i) => {
    const d = div(qEl, t, "nv-q"); d.onclick = () => { sel = i; draw(); };
    div(kEl, t); div(dotEl, "", "nv-num"); div(wEl, "", "nv-num");
  });
  cells.onmousemove = (e) => {
    const r = cells.getBoundingClientRect(), x = e.clientX - r.left, j = Math.floor((e.clientY - r.top) / ROW);
    if (j < 0 || j >= T) return;
    const inProd = x >= N * C + GAP, d = Math.floor((inProd ? x - N * C - GAP : x) / C);
    if (d < 0 || d >= N) return;
    read.textContent = "key " + j + " " + D.tokens[j] + ", element " + (d + 1) + ": q = " + D.q[sel][d].toFixed(3) +
      ", k = " + D.k[j][d].toFixed(3) + ", q × k = " + prod[j][d].toFixed(3);
  };
  function draw() {
    const q = D.q[sel], maxQ = Math.max(1e-6, ...q.map(Math.abs));
    prod = D.k.map(k => k.map((v, d) => v * q[d]));
    const maxP = Math.max(1e-6, ...prod.map(r => Math.max(...r.map(Math.abs))));
    const dots = prod.map(r => r.reduce((s, v) => s + v, 0));
    const scores = dots.map((s, j) => (D.causal && j > sel) ? -Infinity : s / Math.sqrt(N));
    const top = Math.max(...scores), ex = scores.map(s => Math.exp(s - top)), Z = ex.reduce((a, b) => a + b, 0);
    const w = ex.map(e => e / Z);
    qctx.clearRect(0, 0, qvec.width, qvec.height);
    q.forEach((v, d) => { qctx.fillStyle = colour(v, maxQ); qctx.fillRect(d * C, 2, C - 1, ROW - 4); });
    ctx.clearRect(0, 0, cells.width, cells.height);
    for (let j = 0; j < T; j++) {
      for (let d = 0; d < N; d++) {
        ctx.fillStyle = colour(D.k[j][d], maxK); ctx.fillRect(d * C, j * ROW + 2, C - 1, ROW - 4);
        ctx.fillStyle = colour(prod[j][d], maxP); ctx.fillRect(N * C + GAP + d * C, j * ROW + 2, C - 1, ROW - 4);
      }
      dotEl.children[j].textContent = dots[j].toFixed(2);
      const wd = wEl.children[j];
      wd.textContent = w[j].toFixed(3);
      wd.style.background = "linear-gradient(90deg, rgba(31,119,180,0.35) " + (100 * w[j]).toFixed(1) + "%, transparent 0)";
      qEl.children[j].classList.toggle("sel", j === sel);
    }
    root.querySelector(".nv-label").textContent = "Layer " + D.layer + ", head " + D.head + ": query token " + sel + " " + D.tokens[sel];
    root.dataset.weights = JSON.stringify(w.map(x => +x.toFixed(4)));
    root.dataset.drawn = "1";
  }
  draw();
})();
</script>
</body></html>
""".replace("__ROW__", str(ROW_PX))
