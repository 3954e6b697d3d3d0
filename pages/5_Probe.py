"""Probe page: what the MLM head predicts at each [MASK], mask and watch (click WordPieces to mask them: the
predictions there and where the masked token looks), the NSP head's P(IsNext), how both change over a run's
checkpoints, and the built-in probe set's accuracy per checkpoint beside chance and the unigram baseline, with a
reading of what the scores mean (paper section 3.1). A model without an MLM or NSP head (MiniLM) gets one line
saying so and the probe-ready build; each section that needs a head is offered only on a model that has it."""
import zlib
from pathlib import Path

import pandas as pd
import streamlit as st

from engine import measured, probe_baselines, probe_set, probes, replaced_tokens
from engine.objectives import MLM_HEAD, NSP_HEAD
from studio import mask_watch, probe_ready
from studio.common import (bert_base_model, chart_config, choice_label, fill_blanks_model, guard, list_model_choices,
                           load_bundle, model_picker, runs_root)
from studio.figures import fill_mask_figure, over_steps_figure, probe_set_comparison_figure

st.title("Probe")
st.caption("Masked LM: BERT predicts a hidden word from both sides of its context. Next sentence prediction: "
           "does B really follow A? Download any chart (PNG or SVG, as the sidebar says) with the camera icon in its toolbar.")

root = runs_root()
path = model_picker("Model", key="probe_model", probe_ready_first=True, fill_first=True)
bundle = None
with guard("Loading the model"):
    bundle = load_bundle(path)
if bundle is None:
    st.stop()
name = probes.model_name(bundle)
about = probe_ready.card(path, step=(bundle.info.get("training_state") or {}).get("step"))
if about:
    st.caption(about)
have = probes.heads(bundle)  # "mlm" and / or "nsp": what the sections that need a head may offer
if not have:  # MiniLM, an encoder only: one line and the way out, never an error per section
    ready = bert_base_model() or fill_blanks_model(root)
    st.info(f"{name} has no MLM or NSP head, so it cannot fill blanks or score sentence pairs (attention below still "
            "works); " + (f"pick `{ready}` above, which can." if ready else
                          "build the probe-ready model (MiniLM continued with MLM + NSP) with the button below."))
    if ready is None:
        probe_ready.panel(root, why=False)


def missing(head: str, what: str) -> bool:
    """True when the model lacks `head`; says so in one line unless the line above has already said it."""
    if head in have:
        return False
    if have:
        st.caption(f"{name} has no {head.upper()} head, so {what} is not offered for it; pick a model that has one.")
    return True


DEFAULT_TEXT = "the prime [MASK] said the government would cut taxes ."
DEFAULT_PAIR = ("the man went to the store .", "he bought a gallon of milk .")
masked, (sa, sb), top_k = DEFAULT_TEXT, DEFAULT_PAIR, 5

# ---------------------------------------------------------------------------------------------- fill the mask
if not missing(MLM_HEAD, "filling the mask"):
    st.header("Fill the mask")
    text = st.text_input("Sentence with one or more [MASK]", key="probe_text", value=DEFAULT_TEXT)
    words = text.split()
    pick = st.multiselect("…or pick words to mask", options=[f"{i + 1}. {w}" for i, w in enumerate(words)],
                          key=f"probe_pick_{zlib.crc32(text.encode())}",
                          help="each chosen word is replaced by [MASK]")
    picked = {int(p.split(".", 1)[0]) - 1 for p in pick}
    masked = " ".join("[MASK]" if i in picked else w for i, w in enumerate(words))
    top_k = st.slider("Top k", 1, 20, 5, key="probe_top_k")
    if picked:
        st.caption(f"Probing: `{masked}`")
    if "[mask]" not in masked.lower():
        st.info("Type [MASK] where a word should be predicted, or pick words to mask.")
    else:
        with guard("Predicting the masked words"):
            preds = probes.fill_mask(bundle, masked, top_k=top_k)
            st.session_state["class_probed"] = True  # step 3 of the Start page's guided class
            for n in preds.notes:
                st.warning(n)
            for i, m in enumerate(preds):
                st.markdown(f"**[MASK] {i + 1}** → " + " · ".join(f"`{t}` {p:.3f}" for t, p in m))
            st.plotly_chart(fill_mask_figure(preds), config=chart_config("fill-mask"), key="probe_fill_fig")
            st.dataframe(pd.DataFrame([{"mask": i + 1, "rank": r + 1, "token": t, "probability": round(p, 4)}
                                       for i, m in enumerate(preds) for r, (t, p) in enumerate(m)]),
                         hide_index=True, width="stretch")

# ---------------------------------------------------------------------------------------------- mask and watch
WATCH_DEFAULT = "the prime minister said the government would cut taxes ."
st.header("Mask and watch")
st.caption("Click any WordPiece to mask it (click again to unmask): " +
           ("the predictions at the masked positions and " if MLM_HEAD in have else "") +
           "where the masked token looks, in every layer, update at once.")
wtext = st.text_input("Sentence", value=WATCH_DEFAULT, key="probe_watch_text")
with guard("Reading the sentence"):
    pcs = mask_watch.pieces(bundle, wtext) if wtext.strip() else []
    picked = st.pills("Click WordPieces to mask them", list(range(len(pcs))), format_func=lambda i: mask_watch.pill_label(pcs, i),
                      selection_mode="multi", default=[2] if wtext == WATCH_DEFAULT and len(pcs) > 2 else None,
                      key=f"probe_watch_pick_{zlib.crc32(wtext.encode())}") or []
    if pcs and not picked:
        st.info("Click a WordPiece above to mask it.")
    elif pcs:
        wmasked = mask_watch.masked_text(pcs, picked)
        st.caption(f"The model sees: `{wmasked}`")
        wtokens, watt = probes.attention(bundle, wmasked)
        mask_pos = [i for i, t in enumerate(wtokens) if t == "[MASK]"]
        if MLM_HEAD in have:  # the predictions need the MLM head; where the masked token looks needs none
            with guard("Predicting the masked pieces"):
                wpreds = probes.fill_mask(bundle, wmasked, top_k=top_k)
                for piece, m in zip(sorted(picked), wpreds):
                    st.markdown(f"`{pcs[piece]}` → " + " · ".join(f"`{t}` {p:.3f}" for t, p in m))
                st.plotly_chart(fill_mask_figure(wpreds, title="Predictions at the masked pieces"),
                                config=chart_config("mask-and-watch"), key="probe_watch_fig")
        if mask_pos:
            w1, w2 = st.columns(2)
            watch = w1.selectbox("Watch", mask_pos, format_func=lambda i: f"[MASK] at {i} (was {pcs[i - 1]})",
                                 key="probe_watch_which") if len(mask_pos) > 1 else mask_pos[0]
            wl = w2.selectbox("Layer for the per-head view", list(range(bundle.config.num_layers)),
                              index=bundle.config.num_layers - 1, format_func=lambda l: f"layer {l + 1}", key="probe_watch_layer")
            st.plotly_chart(mask_watch.token_attention_figure(watt, list(wtokens), watch), config=chart_config("masked-token-attention"),
                            key="probe_watch_att")
            st.plotly_chart(mask_watch.token_attention_by_head(watt, list(wtokens), watch, wl),
                            config=chart_config("masked-token-attention-heads"), key="probe_watch_heads")

# ---------------------------------------------------------------------------------------------- next sentence
if not missing(NSP_HEAD, "next sentence prediction"):
    pair = probes.pair_objective(bundle)  # NSP's question, or SOP's for a model trained on sentence order
    st.header(pair.pair_title)
    c1, c2 = st.columns(2)
    sa = c1.text_input("Sentence A", value=DEFAULT_PAIR[0], key="probe_nsp_a")
    sb = c2.text_input("Sentence B", value=DEFAULT_PAIR[1], key="probe_nsp_b")
    with guard("Scoring the pair"):
        p = probes.next_sentence(bundle, sa, sb)
        for n in p.notes:
            st.warning(n)
        st.metric(pair.pair_label, f"{float(p):.3f}", help=f"{pair.pair_meaning} (the pair head on [CLS])")
        st.caption(f"{name} says **{pair.pair_answers[0] if p > 0.5 else pair.pair_answers[1]}**. Chance is 0.50: a model "
                   f"that has not learned {pair.pair.upper()} gives about 0.50 to every pair (the classroom run ends at held-out "
                   f"{measured.fact('classroom_run.nsp_accuracy').text()}, the probe-ready model at "
                   f"{measured.fact('probe_ready.nsp_accuracy').text()}).")

# ---------------------------------------------------------------------------------------------- replaced tokens
if replaced_tokens.has_detector(getattr(bundle, "path", "") or "."):  # an ELECTRA run's discriminator
    st.header("Which tokens were replaced?")
    rtd_text = st.text_input("Sentence (swap a word for one that does not belong)", key="probe_rtd_text",
                             value="the prime minister said the government would cut bananas .")
    with guard("Scoring every token"):
        rtd_rows = replaced_tokens.replaced_tokens(replaced_tokens.load_detector(bundle), rtd_text)
        st.dataframe(pd.DataFrame(rtd_rows).rename(columns={"p_replaced": "P(replaced)"}), hide_index=True)
        st.caption(f"{name} is ELECTRA's discriminator: in training it judged every token, original or replaced by "
                   "its generator's sample; above 0.5 it says replaced.")

# ---------------------------------------------------------------------------------------------- over training steps
st.header("Over training steps")
runs, headless = [], 0
if root.is_dir():
    for r in sorted((d for d in root.iterdir() if d.is_dir() and not d.name.startswith(".")), key=lambda d: d.name):
        steps = probes.checkpoint_steps(r)
        if steps and probes.heads_on_disk(steps[-1][1]) == ():
            headless += 1  # an encoder-only run (no head to probe): not offered
        elif steps:
            runs.append((r, steps))
if not runs:
    st.caption(f"No pre-training run with saved checkpoints under `{root}` yet" +
               (f" ({headless} whose checkpoints have no MLM or NSP head)" if headless else "") +
               "; pre-train one (Pre-train page) to watch its predictions change with training.")
else:
    own = Path(bundle.path).parent.parent if bundle.path else None
    names = [r.name for r, _ in runs]
    default = next((i for i, (r, _) in enumerate(runs) if own is not None and r.resolve() == own.resolve()), 0)
    run_name = st.selectbox("Run", names, index=default, key="probe_run")
    run_dir, steps = runs[names.index(run_name)]
    all_steps = [s for s, _ in steps]
    if len(all_steps) > 8:
        idx = sorted({round(i * (len(all_steps) - 1) / 7) for i in range(8)})
        default_steps = [all_steps[i] for i in idx]
    else:
        default_steps = all_steps
    chosen = st.multiselect("Checkpoints (steps)", all_steps, default=default_steps, key=f"probe_steps_{run_name}")
    use_set = st.checkbox(f"Also score the built-in probe set ({len(probe_set.CLOZE)} cloze sentences, "
                          f"{len(probe_set.NSP_PAIRS)} sentence pairs)", value=True, key="probe_use_set")
    if st.button(f"Probe {len(chosen)} checkpoint(s)", key="probe_steps_go", disabled=not chosen):
        with guard("Probing the checkpoints"):
            with st.spinner("Loading and probing each checkpoint…"):
                rows = probes.probe_checkpoints([(s, p) for s, p in steps if s in chosen],
                                                text=masked if "[mask]" in masked.lower() else None,
                                                pair=(sa, sb), top_k=top_k, probe_set=use_set, loader=load_bundle)
            st.session_state["probe_steps_result"] = {"run": run_name, "text": masked, "pair": (sa, sb), "rows": rows}
    res = st.session_state.get("probe_steps_result")
    if res and res["run"] == run_name:
        rows = res["rows"]
        xs = [r["step"] for r in rows]
        st.caption(f"Run `{res['run']}`, sentence `{res['text']}`, pair `{res['pair'][0]}` / `{res['pair'][1]}`.")
        for err in sorted({e for r in rows for e in r["errors"]}):
            st.warning(err)
        table = []
        for r in rows:
            rec = {"step": r["step"]}
            if r["fill"] is not None:
                for i, m in enumerate(r["fill"]):
                    rec[f"[MASK] {i + 1} top-1"] = f"{m[0][0]} ({m[0][1]:.3f})"
            if r["p_isnext"] is not None:
                rec["P(IsNext)"] = round(r["p_isnext"], 4)
            table.append(rec)
        st.dataframe(pd.DataFrame(table), hide_index=True, width="stretch")
        n_masks = max((len(r["fill"]) for r in rows if r["fill"] is not None), default=0)
        if n_masks:
            mi = st.selectbox("Mask", list(range(n_masks)), format_func=lambda i: f"[MASK] {i + 1}", key="probe_steps_mask") if n_masks > 1 else 0
            series = probes.mask_probs_over_steps(rows, mask_index=mi)
            st.plotly_chart(over_steps_figure(xs, series, f"[MASK] {mi + 1}: probability of the leading candidates"),
                            config=chart_config("mask-over-steps"), key="probe_mask_steps_fig")
        if any(r["p_isnext"] is not None for r in rows):
            st.plotly_chart(over_steps_figure(xs, {"P(IsNext)": [r["p_isnext"] for r in rows]}, "P(IsNext) over training steps",
                                              y_range=(0, 1)), config=chart_config("nsp-over-steps"), key="probe_nsp_steps_fig")
        scored = [r for r in rows if r["probe_set"] is not None]
        if scored:
            st.subheader("Built-in probe set")
            k = scored[0]["probe_set"]["top_k"]
            acc = pd.DataFrame([{"step": r["step"], "cloze top-1": r["probe_set"]["cloze_top1"],
                                 f"cloze top-{k}": r["probe_set"]["cloze_topk"], "next sentence": r["probe_set"]["nsp_acc"]}
                                for r in scored])
            base = probe_baselines.probe_set_baselines(load_bundle(scored[-1]["path"]), top_k=k)
            series = {c: acc[c].tolist() for c in acc.columns if c != "step"}
            series["unigram baseline (cloze top-1)"] = [base["unigram_top1"]] * len(acc)
            series[f"unigram baseline (cloze top-{k})"] = [base["unigram_topk"]] * len(acc)
            series["chance (next sentence)"] = [0.5] * len(acc)
            st.dataframe(acc, hide_index=True, width="stretch")
            st.plotly_chart(over_steps_figure(acc["step"], series, "Probe-set accuracy per checkpoint, with chance and the "
                                              "unigram baseline", y_title="accuracy", y_range=(0, 1)),
                            config=chart_config("probe-set-accuracy"), key="probe_set_fig")
            for line in probe_baselines.reading(scored[-1]["probe_set"], base):
                st.markdown(line)
            for n in scored[-1]["probe_set"]["notes"]:
                st.caption(n)

# ---------------------------------------------------------------------------------------------- models side by side
# only models with a head to score (heads_on_disk () is an encoder only; None, not known cheaply, is offered)
choices = list(dict.fromkeys(([path] if have else []) + [c for c in list_model_choices(fill_first=True)
                                                         if c != path and probes.heads_on_disk(c) != ()]))
if choices:
    st.header("Compare models on the classroom probe set")
    n_sections = ", ".join(f"{len(v)} {k}" for k, v in probe_set.CLOZE_SECTIONS.items())
    st.caption(f"A fixed set of cloze sentences ({n_sections}) and {len(probe_set.NSP_PAIRS)} sentence pairs (half really "
               "consecutive), scored on every model you pick. A cloze item counts when the model's best word is one of "
               "its answers; items whose answers are not whole words of a model's vocabulary are skipped for that model "
               "(its 'cloze items' column says how many it answered).")
    picked_models = st.multiselect("Models", choices, default=[choices[0]], key="probe_compare_models",
                                   format_func=choice_label)
    if st.button(f"Score {len(picked_models)} model(s) on the probe set", key="probe_compare_go", disabled=not picked_models):
        with guard("Scoring the models"):
            with st.spinner("Scoring each model…"):
                st.session_state["probe_compare_result"] = probes.compare_probe_set(
                    [load_bundle(m) for m in picked_models], top_k=top_k)
    cmp = st.session_state.get("probe_compare_result")
    if cmp:
        st.dataframe(pd.DataFrame(cmp["summary"]), hide_index=True, width="stretch")
        st.plotly_chart(probe_set_comparison_figure(cmp["summary"]), config=chart_config("probe-set-comparison"),
                        key="probe_compare_fig")
        for model, notes in cmp["notes"].items():
            for n in notes:
                st.caption(f"{model}: {n}")
        st.subheader("Every cloze item")
        st.dataframe(pd.DataFrame(cmp["cloze"]), hide_index=True, width="stretch")
        st.subheader("Every sentence pair: P(IsNext)")
        st.dataframe(pd.DataFrame(cmp["nsp"]), hide_index=True, width="stretch")

with st.expander("The built-in probe set"):
    st.dataframe(pd.DataFrame([{"section": probe_set.CLOZE_SECTION_OF[s], "sentence": s, "answers": " / ".join(a)}
                               for s, a in probe_set.CLOZE]), hide_index=True, width="stretch")
    st.dataframe(pd.DataFrame([{"A": a, "B": b, "IsNext": y} for a, b, y in probe_set.NSP_PAIRS]), hide_index=True, width="stretch")
    if have and st.button(f"Score {name} on the probe set", key="probe_set_go"):
        with guard("Scoring the probe set"):
            r = probes.probe_set_accuracy(bundle, top_k=top_k)
            base = probe_baselines.probe_set_baselines(bundle, top_k=r["top_k"])
            c = st.columns(3)
            fmt = lambda x: "n/a" if x is None else f"{x:.0%}"  # noqa: E731
            c[0].metric("Cloze top-1", fmt(r["cloze_top1"]), help="share of cloze items whose best prediction is right")
            c[1].metric(f"Cloze top-{r['top_k']}", fmt(r["cloze_topk"]))
            c[2].metric("Next sentence", fmt(r["nsp_acc"]))
            c[0].caption(f"chance {base['chance_top1']:.2%} · unigram baseline {fmt(base['unigram_top1'])}")
            c[1].caption(f"chance {base['chance_topk']:.2%} · unigram baseline {fmt(base['unigram_topk'])}")
            c[2].caption(f"chance 50% · always IsNext {fmt(base['nsp_majority'])}")
            st.caption(f"Unigram baseline: always the {r['top_k']} most frequent words of {base['corpus']} "
                       f"({', '.join(base['unigram_words'])}), whatever the sentence.")
            for line in probe_baselines.reading(r, base):
                st.markdown(line)
            for n in r["notes"]:
                st.caption(n)
            st.dataframe(pd.DataFrame(r["items"]), hide_index=True, width="stretch")
