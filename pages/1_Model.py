"""Model page: pick MiniLM or a checkpoint, see its configuration and size, and what it makes of a sentence:
WordPieces, ids, segment ids, and the shapes of everything the model outputs."""
import pandas as pd
import streamlit as st

from engine import model_view
from studio import probe_ready
from studio.common import guard, load_bundle, model_picker, runs_root

st.title("Model")
st.caption("A BERT is a stack of Transformer encoder layers over WordPiece embeddings (paper section 3). "
           "Pick one and look inside (a RoBERTa, DistilBERT, ALBERT, ELECTRA, DeBERTa or ModernBERT folder or Hub id too).")

with st.expander("A real BERT to probe: continue pre-training MiniLM with MLM + NSP",
                 expanded=probe_ready.model_path(runs_root()) is None):
    probe_ready.panel(runs_root())

path = model_picker("Model", key="model_page_model")
st.session_state["class_visited_model"] = True  # step 1 of the Start page's guided class

bundle = None
with guard("Loading the model"):
    bundle = load_bundle(path)
if bundle is None:
    st.stop()

summary = model_view.model_summary(bundle)
cfg = summary["config"]
st.subheader(summary["name"])
about = probe_ready.card(path, step=(bundle.info.get("training_state") or {}).get("step"))
if about:
    st.info(about)
if summary["about"]:
    st.caption(summary["about"])
c = st.columns(5)
c[0].metric("Parameters", f"{summary['parameters']:,}")
c[1].metric("Layers (L)", cfg["num_layers"])
c[2].metric("Hidden (H)", cfg["hidden_size"])
c[3].metric("Heads (A)", cfg["num_heads"])
c[4].metric("Vocabulary", f"{cfg['vocab_size']:,}")
if summary["missing_heads"]:
    st.info(f"{summary['name']} has no {' and no '.join(h.upper() for h in summary['missing_heads'])} head: "
            "it can give hidden states and attention maps, but not "
            f"{' or '.join(w for h, w in (('mlm', 'masked-word'), ('nsp', 'next-sentence')) if h in summary['missing_heads'])} "
            "predictions.")
else:
    st.caption(f"Pre-training heads: {', '.join(summary['heads'])}. Folder: `{summary['path']}`")

with st.expander("Configuration", expanded=True):
    rows = [{"setting": k, "value": str(v)} for k, v in cfg.items()]
    rows.append({"setting": "tokenizer lowercase", "value": str(summary["lowercase"])})
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")

st.subheader("Tokenize a sentence")
a = st.text_input("Sentence A", value="The man went to the store.", key="model_page_a")
b = st.text_input("Sentence B (optional)", value="He bought a gallon of milk.", key="model_page_b")

with guard("Tokenizing"):
    table = model_view.tokenize_table(bundle, a, b or None)
    for n in table["notes"]:
        st.warning(n)
    df = pd.DataFrame(table["rows"])
    st.caption(f"{len(df)} WordPieces: `[CLS]` A `[SEP]` B `[SEP]`; segment 0 for A, 1 for B; `##` marks a word piece "
               "that continues a word.")
    st.dataframe(df, hide_index=True, width="stretch")

    st.subheader("Output shapes")
    shapes = model_view.output_shapes(bundle, a, b or None)
    st.dataframe(pd.DataFrame(shapes, columns=["output", "shape"]), hide_index=True, width="stretch")
    st.caption("hidden_states: the embeddings then one (batch, tokens, H) tensor per layer; attentions: one "
               "(batch, heads, tokens, tokens) map per layer.")

st.subheader("Where next")
NEXT = [("pages/2_Pretrain.py", "Pre-train a tiny BERT", "a 2-layer BERT on BBC News in a few minutes"),
        ("pages/5_Probe.py", "Probe a model", "what the MLM head predicts at a [MASK], and P(IsNext) for a pair"),
        ("pages/6_Attention.py", "Look at its attention", "every head's map, rollout, per-head statistics, head importance"),
        ("pages/0_Start.py", "Back to the guided class", "the four steps of a first class, with the paper's numbers")]
cols = st.columns(len(NEXT))
for c, (page, label, what) in zip(cols, NEXT):
    c.caption(what)
    if c.button(label, key=f"model_next_{page}"):
        st.switch_page(page)
