"""The Attention page's analysis tabs (engine.analysis): rollout, per-head statistics over a set of texts (a grid
that opens the head), the word-level view, value-weighted attention beside the plain weights, head importance, and
the comparison of two checkpoints (opening on another checkpoint than the model itself: `compare_default`). Each `render_*` draws one tab; the page only lays the tabs out."""
import io

import numpy as np
import pandas as pd
import streamlit as st

from engine import analysis
from studio.analysis_figures import STAT_LABELS, head_grid_figure, importance_figure, sample_texts, side_by_side_figure
from studio.attention_view import matrix_csv
from studio.common import chart_config, guard
from studio.figures import attention_heatmap

TEXT_SOURCES = ("this input", "BBC News (32 sentences)", "Wikipedia (32 sentences)", "my own texts")


@st.cache_data(show_spinner="Reading the corpus…", max_entries=4)
def _corpus_texts(corpus: str) -> list:
    return sample_texts(corpus)


@st.cache_data(show_spinner="Computing per-head statistics…", max_entries=8)
def _head_statistics(_bundle, bundle_key: tuple, texts: tuple):
    return analysis.head_statistics(_bundle, list(texts))


def text_set(sa: str, sb: str, key: str, default: int = 0) -> list:
    """The texts a statistic is computed over, picked on the page (the input, a built-in corpus, or typed)."""
    src = st.radio("Texts", TEXT_SOURCES, index=default, horizontal=True, key=f"{key}_source")
    if src == "this input":
        return [(sa, sb) if sb else sa]
    if src.startswith("BBC"):
        return _corpus_texts("bbc")
    if src.startswith("Wikipedia"):
        return _corpus_texts("wiki")
    typed = st.text_area("One text per line", key=f"{key}_typed", value="the cat sat on the mat .\nshares fell sharply on monday .")
    return [line.strip() for line in typed.splitlines() if line.strip()]


def _df_csv(df: pd.DataFrame) -> str:
    buf = io.StringIO()
    df.to_csv(buf, index=False)
    return buf.getvalue()


def render_rollout(tokens, att):
    st.caption("Attention rollout (Abnar & Zuidema 2020): each layer's heads averaged, the residual connection added "
               "as an identity (0.5 A + 0.5 I), and the layers multiplied. Row i: how much of the last layer's token i "
               "traces back to each input token. Rows sum to 1.")
    r = analysis.rollout(att)
    st.plotly_chart(attention_heatmap(r, tokens, title="Attention rollout through all layers"),
                    config=chart_config("attention-rollout"), key="att_rollout_fig")
    st.download_button("Download the rollout as CSV", matrix_csv(r, tokens), file_name="attention-rollout.csv",
                       mime="text/csv", on_click="ignore", key="att_rollout_csv")


def render_head_statistics(bundle, sa, sb, view_tokens, view_att):
    st.caption("Per-head statistics (Clark et al. 2019, \"What Does BERT Look At?\"): the mean attention each head gives "
               "to [CLS], [SEP], the token itself, its neighbours and punctuation, and the entropy of its attention, "
               "over every token of the texts. Click a square (or pick the head below) to open that head on this input.")
    texts = text_set(sa, sb, "att_stats")
    stats = None
    with guard("Computing the per-head statistics"):
        stats = _head_statistics(bundle, (bundle.path, id(bundle)), tuple(texts))
    if stats is None:
        return
    column = st.selectbox("Statistic", list(STAT_LABELS), format_func=STAT_LABELS.get, key="att_stats_col")
    L, A = bundle.config.num_layers, bundle.config.num_heads
    heads = [(l, h) for l in range(1, L + 1) for h in range(1, A + 1)]
    key = f"att_stats_head_{L}x{A}"  # one picker per model shape
    if st.session_state.get(key) not in heads:
        st.session_state[key] = heads[0]
    event = st.plotly_chart(head_grid_figure(stats, column, selected=st.session_state[key]),
                            config=chart_config(f"head-statistics-{column}"), key="att_stats_grid",
                            on_select="rerun", selection_mode="points")
    selection = getattr(event, "selection", None) or {}
    points = selection.get("points", []) if hasattr(selection, "get") else []
    if points:  # a click on the grid opens that head (once per click, so the picker below still works)
        clicked = (int(points[0]["y"]), int(points[0]["x"]))
        if clicked in heads and clicked != st.session_state.get("att_stats_clicked"):
            st.session_state["att_stats_clicked"] = clicked
            st.session_state[key] = clicked
            st.rerun()
    st.caption(f"{len(texts)} text(s). Uniform attention over T tokens would give 1/T to each position and entropy ln T.")
    l, h = st.selectbox("Open head", heads, key=key, format_func=lambda x: f"layer {x[0]}, head {x[1]}")
    row = stats[(stats["layer"] == l) & (stats["head"] == h)].iloc[0]
    cols = st.columns(len(STAT_LABELS))
    for c, k in zip(cols, STAT_LABELS):
        c.metric(k, f"{row[k]:.3f}", help=STAT_LABELS[k])
    st.plotly_chart(attention_heatmap(view_att[l - 1, h - 1], view_tokens, title=f"Layer {l}, head {h} on this input"),
                    config=chart_config(f"attention-L{l}-H{h}"), key="att_stats_head_fig")
    st.dataframe(stats.round(4), hide_index=True, width="stretch")
    st.download_button("Download the statistics as CSV", _df_csv(stats), file_name="head-statistics.csv", mime="text/csv",
                       on_click="ignore", key="att_stats_csv")


def render_word_level(tokens, att, layers, heads):
    st.caption("WordPieces merged into words (Clark et al. 2019): attention *to* a word is the sum over its pieces, "
               "attention *from* a word the mean over its pieces, so each row still sums to 1.")
    words, watt = analysis.word_level(tokens, att)
    c1, c2 = st.columns(2)
    l = c1.selectbox("Layer", layers, format_func=lambda x: f"layer {x + 1}", key="att_word_layer")
    h = c2.selectbox("Head", heads, format_func=lambda x: f"head {x + 1}", key="att_word_head")
    st.caption(f"{len(tokens)} WordPieces → {len(words)} words")
    st.plotly_chart(attention_heatmap(watt[l, h], words, title=f"Word level: layer {l + 1}, head {h + 1}"),
                    config=chart_config(f"attention-words-L{l + 1}-H{h + 1}"), key="att_word_fig")
    st.download_button("Download this word-level map as CSV", matrix_csv(watt[l, h], words),
                       file_name=f"attention-words-L{l + 1}-H{h + 1}.csv", mime="text/csv", on_click="ignore", key="att_word_csv")


def render_value_weighted(bundle, sa, sb, layers, heads):
    st.caption("Value-weighted attention (Kobayashi et al. 2020): ||α f(x)||, the weight times the norm of the value "
               "vector that the head actually passes on (through its slice of the output projection). A large weight "
               "on a token whose vector is small (often [SEP] or [CLS]) moves little; shown here per row normalised "
               "to sum to 1, beside the plain weights.")
    res = None
    with guard("Computing value-weighted attention"):
        res = analysis.value_weighted_attention(bundle, sa, sb or None)
    if res is None:
        return
    tokens, vw, att = res
    c1, c2 = st.columns(2)
    l = c1.selectbox("Layer", layers, format_func=lambda x: f"layer {x + 1}", key="att_vw_layer")
    h = c2.selectbox("Head", heads, format_func=lambda x: f"head {x + 1}", key="att_vw_head")
    m = vw[l, h]
    s = m.sum(axis=-1, keepdims=True)
    norm = np.divide(m, s, out=np.zeros_like(m), where=s > 0)
    st.plotly_chart(side_by_side_figure(att[l, h], norm, list(tokens), (f"weights α, layer {l + 1} head {h + 1}",
                                                                         "value-weighted ||α f(x)||, rows normalised")),
                    config=chart_config(f"value-weighted-L{l + 1}-H{h + 1}"), key="att_vw_fig")
    special = [j for j, t in enumerate(tokens) if t in ("[CLS]", "[SEP]")]
    if special:
        a_sp, v_sp = float(att[l, h][:, special].sum(-1).mean()), float(norm[:, special].sum(-1).mean())
        st.markdown(f"Share on [CLS]/[SEP]: **{a_sp:.2f}** of the weights, **{v_sp:.2f}** of the value-weighted norms.")
    st.download_button("Download the value-weighted map as CSV", matrix_csv(m, list(tokens)),
                       file_name=f"value-weighted-L{l + 1}-H{h + 1}.csv", mime="text/csv", on_click="ignore", key="att_vw_csv")


def render_head_importance(bundle, sa, sb):
    st.caption("Head importance (Michel et al. 2019): the held-out masked-LM loss with one head masked minus the loss "
               "with every head, on 15% of the WordPieces masked (the same positions for every head). Positive: the "
               "model needs the head; near 0: it can do without. One forward pass per head.")
    texts = text_set(sa, sb, "att_imp", default=1)  # BBC sentences: one input masks too few pieces to rank heads
    if st.button(f"Score {bundle.config.num_layers * bundle.config.num_heads} heads on {len(texts)} text(s)", key="att_imp_go"):
        with guard("Scoring the heads"):
            with st.spinner("Masking one head at a time…"):
                imp = analysis.head_importance(bundle, texts)
            st.session_state["att_imp_result"] = {"model": bundle.path, "n": len(texts), "imp": np.asarray(imp),
                                                  "base": imp.base_loss, "positions": imp.n_positions}
    res = st.session_state.get("att_imp_result")
    if not res or res["model"] != bundle.path:
        return
    imp = res["imp"]
    st.plotly_chart(importance_figure(imp, res["base"]), config=chart_config("head-importance"), key="att_imp_fig")
    order = np.argsort(-imp, axis=None)
    df = pd.DataFrame([{"layer": int(i // imp.shape[1]) + 1, "head": int(i % imp.shape[1]) + 1, "delta_loss": float(imp.flat[i])}
                       for i in order])
    st.caption(f"{res['positions']} masked WordPieces over {res['n']} text(s); MLM loss with every head {res['base']:.4f}.")
    st.dataframe(df.round(5), hide_index=True, width="stretch")
    st.download_button("Download head importance as CSV", _df_csv(df), file_name="head-importance.csv", mime="text/csv",
                       on_click="ignore", key="att_imp_csv")


def _checkpoint_dir(choice: str):
    """The checkpoint folder a picker choice loads ("minilm" and local folders only: a Hub id is never fetched for a
    default), or None when it does not resolve."""
    from pathlib import Path
    from engine.checkpoint import resolve_checkpoint_dir
    from engine.minilm import minilm_path
    try:
        if choice == "minilm":
            return Path(minilm_path()).resolve()
        if not choice or not Path(choice).expanduser().exists():
            return None
        return Path(resolve_checkpoint_dir(choice)).resolve()
    except Exception:  # an unreadable folder is just not a default
        return None


def _step(folder) -> int:
    tail = folder.name.rpartition("-")[2]
    return int(tail) if folder.name.startswith("step-") and tail.isdigit() else -1


def compare_default(loaded, config, choices: list):
    """The choice the Compare-with box opens on: never the loaded model itself (`loaded`: its checkpoint folder). The
    checkpoint before it in its run, else the run's first other checkpoint, else the first other model of the same
    vocabulary and shape (`config`: the loaded model's BertConfig); None when there is none."""
    from pathlib import Path
    from engine.checkpoint import read_config
    me = Path(loaded).resolve()
    dirs = {c: _checkpoint_dir(c) for c in choices}
    others = {c: d for c, d in dirs.items() if d is not None and d != me}
    same_run = sorted((c for c, d in others.items() if d.parent == me.parent and _step(d) >= 0), key=lambda c: _step(others[c]))
    before = [c for c in same_run if _step(others[c]) < _step(me)]
    if before or same_run:
        return (before or same_run)[-1 if before else 0]
    for c, d in others.items():
        try:
            cfg = read_config(d)[1]
        except Exception:
            continue
        if (cfg.vocab_size, cfg.num_layers, cfg.num_heads) == (config.vocab_size, config.num_layers, config.num_heads):
            return c
    return None


def render_compare(bundle, path: str, sa: str, sb: str, hide: bool) -> None:
    """The Compare checkpoints tab: a second model (by default another checkpoint, `compare_default`) through the
    same input, the per-head difference, the heads that changed most side by side. The same weights twice, or no
    second model to compare with, is one line instead of a map of zeros."""
    from studio.attention_view import hide_special
    from studio.common import list_model_choices, load_bundle
    from studio.figures import head_diff_figure
    from engine import probes
    st.caption("The same input through a second model (e.g. BERT vs No NSP, or an early vs a late checkpoint of one run): "
               "per-head difference, averaged over the query tokens.")
    choices = list_model_choices()
    choices = choices if path in choices else [path] + choices
    default = compare_default(bundle.path or path, bundle.config, choices)
    if default is None:
        st.info(f"{probes.model_name(bundle)} is the only model of its vocabulary and shape here: pre-train a run (its "
                "checkpoints compare with each other) or pick another model below.")
    other_path = st.selectbox("Compare with", choices, index=choices.index(default or path), key=f"att_cmp_model_{path}")
    metric = st.radio("Difference", ["jsd", "l1"], horizontal=True, key="att_cmp_metric",
                      format_func=lambda x: "Jensen-Shannon divergence" if x == "jsd" else "mean |Δ weight|")
    other_dir = _checkpoint_dir(other_path)
    if other_path == path or (other_dir is not None and other_dir == _checkpoint_dir(str(bundle.path or path))):
        if default is not None:
            st.info(f"{other_path} is the model above ({probes.model_name(bundle)}, the same weights); pick another one.")
        return
    with guard("Comparing the two models"):
        r = probes.compare_attention(bundle, load_bundle(other_path), sa, sb or None, metric=metric, top=10)
        st.plotly_chart(head_diff_figure(r["diff"], metric, r["names"]), config=chart_config("attention-head-difference"),
                        key="att_diff_fig")
        st.markdown("**Heads that changed most**")
        st.dataframe(pd.DataFrame([{"layer": l, "head": h, metric: round(v, 5)} for l, h, v in r["top"]]),
                     hide_index=True, width="stretch")
        l, h, _ = r["top"][0]
        ctoks, (a1, a2) = list(r["tokens"]), (r["att1"][l - 1, h - 1], r["att2"][l - 1, h - 1])
        if hide:
            _, a1 = hide_special(ctoks, a1, r["tokens"].special)
            ctoks, a2 = hide_special(ctoks, a2, r["tokens"].special)
        for col, a, name, n in zip(st.columns(2), (a1, a2), r["names"], (1, 2)):
            col.plotly_chart(attention_heatmap(a, ctoks, title=f"{name}: layer {l}, head {h}", zmax=1.0),
                             config=chart_config(f"attention-compare-{n}"), key=f"att_cmp_{n}")
