"""engine.model_view: the Model page's token table, output shapes and summary."""
import pytest

import engine
from engine import model_view


def test_tokenize_table_and_output_shapes(bundle, minilm):
    t = model_view.tokenize_table(bundle, "the cat sat .", "it ran .")
    rows = t["rows"]
    assert rows[0]["token"] == "[CLS]" and rows[-1]["token"] == "[SEP]"
    assert [r["segment"] for r in rows] == bundle.tokenizer.encode("the cat sat .", "it ran .").type_ids
    shapes = dict(model_view.output_shapes(bundle, "the cat sat ."))
    T, V = len(bundle.tokenizer.encode("the cat sat .").ids), bundle.config.vocab_size
    assert shapes["mlm_logits"] == f"(1, {T}, {V})" and shapes["nsp_logits"] == "(1, 2)"
    assert shapes["hidden_states"] == f"3 x (1, {T}, 64)" and shapes["attentions"] == f"2 x (1, 2, {T}, {T})"
    m = dict(model_view.output_shapes(minilm, "the cat sat ."))
    assert m["mlm_logits"] == "no MLM head" and m["nsp_logits"] == "no NSP head"
    s = model_view.model_summary(minilm)
    assert s["name"] == "MiniLM" and s["parameters"] == minilm.model.num_parameters() and s["missing_heads"] == ["mlm", "nsp"]
