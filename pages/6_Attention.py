"""Attention page: where each head looks, as plotly heatmaps, a bertviz-style head view, model view (every layer
by default) and neuron view drawn offline (studio.attention_view, studio.neuron_view), the per-head difference
between two checkpoints, and the analyses of engine.analysis (studio.attention_analysis): rollout, per-head
statistics, word level, value-weighted attention, head importance (on models with an MLM head)."""
import streamlit as st

from engine import analysis, probes
from studio import attention_analysis as AA
from studio.attention_view import (MAX_TOKENS, head_importance_unavailable, head_view_html, hide_special, long_csv,
                                   matrix_csv, render_head_view)
from studio.common import chart_config, guard, load_bundle, model_picker
from studio.figures import attention_heatmap, model_view_figure
from studio.neuron_view import render_neuron_view

HEAD_VIEW_CELLS = 1_500_000  # weights sent to the head view at most (layers x heads x T^2)
MODEL_VIEW_CELLS = 400_000  # cells drawn by the model-view grid at most
LONG_CSV_ROWS = 300_000

st.title("Attention")
st.caption("Each layer has A heads; each head gives every token a probability distribution over the tokens it "
           "attends to. Download any figure with the camera icon in its toolbar (top right; PNG or SVG as chosen in the "
           "sidebar), tables as CSV, the head view as an HTML file that works offline.")

path = model_picker("Model", key="att_model", probe_ready_first=True)
bundle = None
with guard("Loading the model"):
    bundle = load_bundle(path)
if bundle is None:
    st.stop()
cfg = bundle.config

c1, c2 = st.columns(2)
sa = c1.text_input("Sentence A", value="the cat sat on the mat .", key="att_a")
sb = c2.text_input("Sentence B (optional)", value="it was very happy .", key="att_b")

o1, o2, o3 = st.columns([1.4, 2, 2])
hide = o1.checkbox("Hide [CLS]/[SEP]", value=False, key="att_hide",
                   help="drop the special tokens from rows and columns; each row is renormalised over the remaining tokens")
all_layers = list(range(cfg.num_layers))
all_heads = list(range(cfg.num_heads))
layers = o2.multiselect("Layers", all_layers, default=all_layers,
                        format_func=lambda l: f"layer {l + 1}", key=f"att_layers_{cfg.num_layers}")
heads = o3.multiselect("Heads", all_heads, default=all_heads if cfg.num_heads <= 12 else all_heads[:12],
                       format_func=lambda h: f"head {h + 1}", key=f"att_heads_{cfg.num_heads}")
layers, heads = sorted(layers), sorted(heads)

tokens = att = None
with guard("Computing attention"):
    tokens, att = probes.attention(bundle, sa, sb or None)
if tokens is None:
    st.stop()
for n in tokens.notes:
    st.warning(n)
view_tokens, view_att = list(tokens), att
if hide:
    view_tokens, view_att = hide_special(list(tokens), att, tokens.special)
T = len(view_tokens)
st.caption(f"{probes.model_name(bundle)}: {len(tokens)} WordPieces, {cfg.num_layers} layers x {cfg.num_heads} heads"
           + (f"; showing {T} without [CLS]/[SEP]" if hide else ""))
if not layers or not heads:
    st.info("Select at least one layer and one head.")
    st.stop()

(tab_maps, tab_head, tab_model, tab_neuron, tab_cmp, tab_roll, tab_stats, tab_words, tab_vw, tab_imp) = st.tabs(
    ["Heatmaps", "Head view", "Model view", "Neuron view", "Compare checkpoints", "Rollout", "Head statistics",
     "Word level", "Value-weighted", "Head importance"])

with tab_maps:
    h1, h2 = st.columns(2)
    layer = h1.selectbox("Layer", layers, format_func=lambda l: f"layer {l + 1}", key="att_map_layer")
    head = h2.selectbox("Head", heads, format_func=lambda h: f"head {h + 1}", key="att_map_head")
    m = view_att[layer, head]
    st.plotly_chart(attention_heatmap(m, view_tokens, title=f"Layer {layer + 1}, head {head + 1}"),
                    config=chart_config(f"attention-L{layer + 1}-H{head + 1}"), key="att_heatmap")
    d1, d2 = st.columns(2)
    d1.download_button("Download this map as CSV", matrix_csv(m, view_tokens), file_name=f"attention-L{layer + 1}-H{head + 1}.csv",
                       mime="text/csv", on_click="ignore", key="att_csv_one")
    if len(layers) * len(heads) * T * T <= LONG_CSV_ROWS:
        d2.download_button("Download selected layers/heads as CSV", long_csv(view_att, view_tokens, layers, heads),
                           file_name="attention-selected.csv", mime="text/csv", on_click="ignore", key="att_csv_all")
    else:
        d2.caption("Select fewer layers/heads (or a shorter input) to download them all as one CSV.")

with tab_head:
    hv_layers = list(layers)
    notes = []
    per_layer = len(heads) * min(T, MAX_TOKENS) ** 2
    if len(hv_layers) * per_layer > HEAD_VIEW_CELLS:
        keep = max(1, HEAD_VIEW_CELLS // per_layer)
        hv_layers = hv_layers[:keep]
        notes.append(f"head view limited to the first {keep} selected layer(s) to stay light in the browser")
    st.caption("Lines join each token (left) to the tokens it attends to (right); darker = more weight, one colour per head.")
    with guard("Drawing the head view"):
        render_head_view(view_tokens, view_att, hv_layers, heads, notes=notes)
        st.download_button("Download the head view as HTML (works offline)",
                           head_view_html(view_tokens, view_att, hv_layers, heads, notes=notes)[0],
                           file_name="head-view.html", mime="text/html", on_click="ignore", key="att_hv_html")

with tab_model:
    panels = len(layers) * len(heads)
    mv_T = T
    if panels * T * T > MODEL_VIEW_CELLS:
        mv_T = max(8, int((MODEL_VIEW_CELLS / panels) ** 0.5))
        st.warning(f"Model view shows the first {mv_T} of {T} tokens for {panels} panels; select fewer layers/heads to see more.")
    st.plotly_chart(model_view_figure(view_att[:, :, :mv_T, :mv_T], view_tokens[:mv_T], layers, heads),
                    config=chart_config("attention-model-view"), key="att_model_view")

with tab_neuron:
    st.caption("How one head's weights arise: the query q of a token, the key k of every token, their product element "
               "by element, q · k, and softmax(q · k / √d) over the keys, which is the head's attention row. All tokens "
               "are shown ([CLS]/[SEP] included): the softmax runs over every key, as in the model.")
    n1, n2 = st.columns(2)
    nv_layer = n1.selectbox("Layer", layers, format_func=lambda l: f"layer {l + 1}", key="att_nv_layer")
    nv_head = n2.selectbox("Head", heads, format_func=lambda h: f"head {h + 1}", key="att_nv_head")
    with guard("Drawing the neuron view"):
        nv_tokens, nv_q, nv_k, _ = analysis.queries_and_keys(bundle, sa, sb or None)
        render_neuron_view(list(nv_tokens), nv_q, nv_k, nv_layer, nv_head, causal=bool(cfg.causal))

with tab_cmp:
    AA.render_compare(bundle, path, sa, sb, hide)

with tab_roll:
    AA.render_rollout(view_tokens, view_att)
with tab_stats:
    AA.render_head_statistics(bundle, sa, sb, view_tokens, view_att)
with tab_words:
    AA.render_word_level(view_tokens, view_att, layers, heads)
with tab_vw:
    AA.render_value_weighted(bundle, sa, sb, layers, heads)
with tab_imp:
    imp_blocked = head_importance_unavailable(bundle)
    if imp_blocked:
        st.info(imp_blocked)
    else:
        AA.render_head_importance(bundle, sa, sb)
