"""The look-inside pages (pages/1_Model.py, 5_Probe.py, 6_Attention.py) through Streamlit's AppTest on a tiny RoBERTa
saved in the test (conftest `tiny_encoder`): listed under the runs folder or typed in, it loads through transformers
and each page draws with no traceback; what only a BERT can do is one line."""
import shutil

import pytest

import engine

pytestmark = pytest.mark.slow  # AppTest runs whole pages


@pytest.fixture
def roberta_root(tmp_path, tiny_encoder):
    """A runs folder holding a tiny RoBERTa folder (as a downloaded model saved beside the runs would be)."""
    root = tmp_path / "runs"
    shutil.copytree(tiny_encoder("roberta"), root / "tiny-roberta")
    return root


def test_model_page_lists_and_shows_a_roberta_folder(roberta_root, page_app):
    folder = str(roberta_root / "tiny-roberta")
    at = page_app("1_Model.py", roberta_root)
    assert folder in at.selectbox(key="model_page_model").options  # listed with the runs folder's models
    at.selectbox(key="model_page_model").select(folder).run()
    assert not at.exception and not at.error
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Layers (L)"] == "2" and metrics["Hidden (H)"] == "32" and metrics["Heads (A)"] == "2"
    assert any("A RoBERTa model" in c.value and "<s> as [CLS]" in c.value for c in at.caption)
    assert any("has no NSP head" in i.value and "not next-sentence predictions" in i.value for i in at.info)
    tokens, shapes = at.dataframe[1].value, at.dataframe[2].value
    assert tokens["token"].iloc[0] == "[CLS]" and tokens["piece"].iloc[0] == "<s>"
    s = dict(zip(shapes["output"], shapes["shape"]))
    T = len(tokens)
    b = engine.load(folder)
    assert s["hidden_states"] == f"3 x (1, {T}, 32)" and s["attentions"] == f"2 x (1, 2, {T}, {T})"
    assert s["mlm_logits"] == f"(1, {T}, {b.tokenizer.vocab_size})" and s["nsp_logits"] == "no NSP head"


def test_probe_page_fills_the_mask_of_a_typed_roberta_folder(roberta_root, page_app):
    folder = str(roberta_root / "tiny-roberta")
    at = page_app("5_Probe.py", roberta_root)
    at.text_input(key="probe_model_path").input(folder).run()
    assert not at.exception and not at.error
    b = engine.load(folder)
    want = engine.fill_mask(b, "the prime [MASK] said the government would cut taxes .", top_k=5)
    assert any(m.value.startswith("**[MASK] 1** → " + f"`{want[0][0][0]}`") for m in at.markdown)
    assert any("has no NSP head" in c.value for c in at.caption)  # the next-sentence section is not offered


def test_attention_page_draws_a_roberta_and_says_what_needs_bert(roberta_root, page_app):
    folder = str(roberta_root / "tiny-roberta")
    at = page_app("6_Attention.py", roberta_root)
    at.text_input(key="att_model_path").input(folder).run()
    assert not at.exception
    b = engine.load(folder)
    tokens, _ = engine.attention(b, "the cat sat on the mat .", "it was very happy .")
    assert any(f"{len(tokens)} WordPieces, 2 layers x 2 heads" in c.value for c in at.caption)
    # the neuron view and value-weighted attention read BERT's own weights: one line each, no traceback
    assert at.error and all("BERT checkpoints only" in e.value and "\n" not in e.value for e in at.error)
    assert any("BERT checkpoints only" in i.value for i in at.info)  # head importance
