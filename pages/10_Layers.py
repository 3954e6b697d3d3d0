"""Layers: the pipeline inside the model. Probes per layer (which layer knows what: accuracy, the control task's
accuracy and selectivity per layer, the expected layer, and over a run's checkpoints when it appears) and head roles
over training (what each attention head looks at, when its role settles, beside Clark et al. 2019's BERT-base).
Every computation is a queued `python -m engine layers` job (studio.layers_view); this page reads its results."""
import streamlit as st

from studio import layers_view as V
from studio.common import runs_root

st.title("Layers")
st.caption("Which layer knows what, and when during pre-training it appears: a small probe per layer on frozen hidden "
           "states (Tenney et al. 2019, with Hewitt and Liang's control tasks), and the roles of the attention heads "
           "over training (Clark et al. 2019).")
root = runs_root()
tab_probes, tab_heads = st.tabs(["Probes per layer", "Head roles over training"])

with tab_probes:
    st.markdown("A probe reads one label from one layer's hidden states: a word's entity or punctuation, or a sentence's "
                "length, words, word order or whether B follows A. The layer where accuracy rises is where the model "
                "has that information; the expected layer sums it up in one number, so tasks can be ordered by depth.")
    V.probe_form(root)
    st.divider()
    V.probe_results(root)

with tab_heads:
    st.markdown("For every head: its share of attention to [CLS], [SEP], punctuation, the previous and the next token "
                "and the other pieces of the same word, and how broad it is, at every checkpoint of a run.")
    V.heads_form(root)
    st.divider()
    V.heads_results(root)
