"""pages/1_Model.py through Streamlit's AppTest: configuration, parameter count, WordPieces, shapes, errors."""
import shutil

import pytest

import engine

pytestmark = pytest.mark.slow  # AppTest runs whole pages

PAGE = "1_Model.py"


def _metrics(at):
    return {m.label: m.value for m in at.metric}


def test_minilm_config_tokens_and_shapes(tiny_run, page_app):
    at = page_app(PAGE, tiny_run.parent)
    assert not at.exception and not at.error
    m = _metrics(at)
    minilm = engine.load("minilm")
    assert m["Parameters"] == f"{minilm.model.num_parameters():,}" and m["Layers (L)"] == "6" and m["Heads (A)"] == "12"
    assert any("no MLM and no NSP head" in i.value for i in at.info)
    config, tokens, shapes = (d.value for d in at.dataframe)
    assert dict(zip(config["setting"], config["value"]))["hidden_size"] == "384"
    enc = minilm.tokenizer.encode("The man went to the store.", "He bought a gallon of milk.")
    assert tokens["token"].tolist() == enc.tokens and tokens["id"].tolist() == enc.ids
    assert tokens["segment"].tolist() == enc.type_ids and tokens["token"].iloc[0] == "[CLS]"
    s = dict(zip(shapes["output"], shapes["shape"]))
    T = len(enc.ids)
    assert s["hidden_states"] == f"7 x (1, {T}, 384)" and s["attentions"] == f"6 x (1, 12, {T}, {T})"
    assert s["mlm_logits"] == "no MLM head" and s["nsp_logits"] == "no NSP head"


def test_tiny_checkpoint_and_a_new_sentence(tiny_run, ck, page_app):
    at = page_app(PAGE, tiny_run.parent, model_page_model=ck)
    at.text_input(key="model_page_a").input("oil prices rose sharply").run()
    at.text_input(key="model_page_b").input("").run()
    assert not at.exception and not at.error
    m = _metrics(at)
    bundle = engine.load(ck)
    assert m["Parameters"] == f"{bundle.model.num_parameters():,}" and m["Layers (L)"] == "2" and m["Hidden (H)"] == "64"
    tokens, shapes = at.dataframe[1].value, at.dataframe[2].value
    enc = bundle.tokenizer.encode("oil prices rose sharply")
    assert tokens["token"].tolist() == enc.tokens and set(tokens["segment"]) == {0}
    s = dict(zip(shapes["output"], shapes["shape"]))
    assert s["mlm_logits"] == f"(1, {len(enc.ids)}, {bundle.config.vocab_size})" and s["nsp_logits"] == "(1, 2)"


def test_bad_folders_show_one_clear_message(tiny_run, tmp_path, page_app):
    at = page_app(PAGE, tiny_run.parent)
    (tmp_path / "empty").mkdir()
    at.text_input(key="model_page_model_path").input(str(tmp_path / "empty")).run()
    assert not at.exception and len(at.error) == 1
    assert "not a BERT checkpoint" in at.error[0].value and not at.dataframe
    bad = tmp_path / "badvocab"
    shutil.copytree(tiny_run / "checkpoints" / "step-12", bad)
    lines = (bad / "vocab.txt").read_text().splitlines()
    (bad / "vocab.txt").write_text("\n".join(lines[:-100]) + "\n")
    at.text_input(key="model_page_model_path").input(str(bad)).run()
    assert not at.exception and len(at.error) == 1
    assert "vocab.txt has" in at.error[0].value and "embeddings" in at.error[0].value
