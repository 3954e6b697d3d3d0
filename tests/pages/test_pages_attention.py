"""pages/6_Attention.py through AppTest: heatmaps equal the engine's maps, the offline head view, the model
view grid (every layer), the neuron view, hiding [CLS]/[SEP], comparing two checkpoints, CSV export, and MiniLM's real weights."""
import json
import re

import numpy as np
import pytest

import engine
from engine import analysis, probes

pytestmark = pytest.mark.slow  # AppTest runs whole pages

PAGE = "6_Attention.py"
A, B = "the cat sat on the mat .", "it was very happy ."
URL = re.compile(r"https?://(?!(?:127\.0\.0\.1|localhost|\[::1\])[:/])", re.I)  # a URL outside localhost


def _payload(html):
    return json.loads(html.split("const D = ", 1)[1].split(";\n", 1)[0].replace("<\\/", "</"))


def test_tiny_checkpoint_heatmaps_head_view_model_view_and_compare(tiny_run, ck, plotly, page_app):
    at = page_app(PAGE, tiny_run.parent, att_model=ck)
    assert not at.exception and not at.error
    bundle = engine.load(ck)
    tokens, att = probes.attention(bundle, A, B)
    T = len(tokens)
    # the heatmap of layer 1 head 1 holds the engine's map
    heat = plotly.titled(at, "Layer 1, head 1")[0]
    assert np.allclose(plotly.array(heat["data"][0]["z"]), att[0, 0], atol=1e-4)
    assert heat["data"][0]["x"][0] == "0 [CLS]" and len(heat["data"][0]["y"]) == T
    # every figure keeps the modebar and a PNG download button
    for c in at.get("plotly_chart"):
        cfg = json.loads(c.proto.config)
        assert cfg["displayModeBar"] and cfg["toImageButtonOptions"]["format"] == "png"
    # head view: our own inline HTML with the selected weights, no external resource
    html = at.get("iframe")[0].proto.srcdoc
    assert 'id="bs-head-view"' in html and "<canvas" in html
    assert "http" not in html and "src=" not in html and "cdn" not in html.lower()
    payload = json.loads(html.split("const D = ", 1)[1].split(";\n", 1)[0].replace("<\\/", "</"))
    assert payload["tokens"] == list(tokens) and payload["layers"] == [1, 2] and payload["heads"] == [1, 2]
    assert payload["w"][1][0] == np.rint(att[1, 0] * 1000).astype(int).ravel().tolist()
    # model view: layers x heads panels
    mv = plotly.titled(at, "Model view")[0]
    assert len(mv["data"]) == 4 and all(d["type"] == "heatmap" for d in mv["data"])
    # compare tab: defaults to another checkpoint of the same run
    assert at.selectbox(key=f"att_cmp_model_{ck}").value != ck
    other = engine.load(at.selectbox(key=f"att_cmp_model_{ck}").value)
    r = probes.compare_attention(bundle, other, A, B)
    diff = plotly.titled(at, "tiny-run/step-")[0]
    assert np.allclose(plotly.array(diff["data"][0]["z"]), r["diff"], atol=1e-5)
    top = at.dataframe[0].value
    assert list(zip(top["layer"], top["head"])) == [(l, h) for l, h, _ in r["top"]]
    # CSV downloads are offered
    labels = [d.proto.label for d in at.get("download_button")]
    assert "Download this map as CSV" in labels and "Download selected layers/heads as CSV" in labels


def test_hide_special_and_select_layers_heads(tiny_run, ck, plotly, page_app):
    at = page_app(PAGE, tiny_run.parent, att_model=ck)
    at.checkbox(key="att_hide").check().run()
    at.multiselect(key="att_layers_2").set_value([1]).run()
    at.multiselect(key="att_heads_2").set_value([0]).run()
    assert not at.exception and not at.error
    tokens, _ = probes.attention(engine.load(ck), A, B)
    heat = plotly.titled(at, "Layer 2, head 1")[0]
    z = plotly.array(heat["data"][0]["z"])
    assert z.shape == (len(tokens) - 3, len(tokens) - 3)  # [CLS] and two [SEP] dropped
    assert np.allclose(z.sum(-1), 1.0, atol=1e-3) and not any("[SEP]" in x for x in heat["data"][0]["x"])
    mv = plotly.titled(at, "Model view")[0]
    assert len(mv["data"]) == 1
    html = at.get("iframe")[0].proto.srcdoc
    payload = json.loads(html.split("const D = ", 1)[1].split(";\n", 1)[0].replace("<\\/", "</"))
    assert payload["layers"] == [2] and payload["heads"] == [1] and "[CLS]" not in payload["tokens"]


def test_minilm_real_weights(tiny_run, tiny_run_steps, plotly, page_app):
    at = page_app(PAGE, tiny_run.parent)  # MiniLM is the default model
    assert not at.exception and not at.error
    bundle = engine.load("minilm")
    tokens, att = probes.attention(bundle, A, B)
    heat = [c for c in plotly.titled(at, "Layer 1, head 1") if c["layout"]["title"]["text"] == "Layer 1, head 1"][0]
    assert at.multiselect(key="att_layers_6").value == [0, 1, 2, 3, 4, 5]  # default: every layer, all 12 heads
    assert np.allclose(plotly.array(heat["data"][0]["z"]), att[0, 0], atol=1e-4)
    mv = plotly.titled(at, "Model view")[0]  # opens on every layer: 6 x 12 panels
    assert len(mv["data"]) == 72 and mv["layout"]["annotations"][-1]["text"] == "L6"
    np.testing.assert_allclose(plotly.array(mv["data"][71]["z"]), att[5, 11], atol=1e-3)
    html = at.get("iframe")[0].proto.srcdoc
    assert 'id="bs-head-view"' in html and "http" not in html
    assert _payload(html)["layers"] == [1, 2, 3, 4, 5, 6]
    # neuron view: layer 1 head 1's queries and keys, the engine's
    nv = at.get("iframe")[1].proto.srcdoc
    _, q, k, _ = analysis.queries_and_keys(bundle, A, B)
    data = _payload(nv)
    assert data["layer"] == 1 and data["head"] == 1 and data["tokens"] == list(tokens)
    np.testing.assert_allclose(data["q"], q[0, 0], atol=6e-4)
    np.testing.assert_allclose(data["k"], k[0, 0], atol=6e-4)
    at.selectbox(key="att_nv_layer").set_value(5).run()
    at.selectbox(key="att_nv_head").set_value(11).run()
    data = _payload(at.get("iframe")[1].proto.srcdoc)
    assert data["layer"] == 6 and data["head"] == 12
    np.testing.assert_allclose(data["k"], k[5, 11], atol=6e-4)
    for frame in at.get("iframe"):  # no view names a URL outside localhost
        assert not URL.search(frame.proto.srcdoc)
    # no other model of MiniLM's vocabulary here: one line says so (no map of MiniLM against itself)
    assert any("MiniLM is the only model of its vocabulary and shape here" in i.value for i in at.info)
    assert not plotly.titled(at, "MiniLM vs MiniLM")
    # comparing MiniLM with a checkpoint of another vocabulary: one clear message
    at.selectbox(key="att_cmp_model_minilm").set_value(str(tiny_run / "checkpoints" / f"step-{tiny_run_steps[-1]}")).run()
    assert not at.exception and len(at.error) == 1 and "different vocabularies" in at.error[0].value


def test_long_input_is_capped_in_the_head_view():
    from studio.attention_view import head_view_html
    T = 200
    att = np.full((1, 2, T, T), 1.0 / T, dtype=np.float32)
    html, notes, height = head_view_html([f"t{i}" for i in range(T)], att, [0], [0, 1], max_tokens=128)
    payload = json.loads(html.split("const D = ", 1)[1].split(";\n", 1)[0].replace("<\\/", "</"))
    assert len(payload["tokens"]) == 128 and len(payload["w"][0][0]) == 128 * 128
    assert any("first 128 tokens" in n for n in notes) and height <= 1200
    evil = head_view_html(["</script><script>alert(1)</script>", "b"], np.full((1, 1, 2, 2), 0.5), [0], [0])[0]
    assert "</script><script>alert(1)" not in evil


def test_compare_opens_on_the_previous_checkpoint_never_on_the_model_itself(tiny_run, tiny_run_steps, plotly, page_app):
    """The run folder loads its last checkpoint: Compare opens on the checkpoint before it (it opened on that same
    last checkpoint, an all-zero map); the first checkpoint opens on the run's next one."""
    cks = [str(tiny_run / "checkpoints" / f"step-{s}") for s in tiny_run_steps]
    at = page_app(PAGE, tiny_run.parent, att_model_path=str(tiny_run))
    assert not at.exception and not at.error
    assert at.selectbox(key=f"att_cmp_model_{tiny_run}").value == cks[-2]
    diff = plotly.array(plotly.titled(at, f"tiny-run/step-{tiny_run_steps[-1]} vs tiny-run/step-{tiny_run_steps[-2]}")[0]["data"][0]["z"])
    assert diff.max() > 0
    at = page_app(PAGE, tiny_run.parent, att_model=cks[0])
    assert at.selectbox(key=f"att_cmp_model_{cks[0]}").value == cks[1]


def test_a_model_with_nothing_to_compare_with_says_so_in_one_line(tmp_path, tiny_checkpoint, plotly, page_app):
    at = page_app(PAGE, tmp_path / "runs", att_model_path=str(tiny_checkpoint))
    assert not at.exception and not at.error
    lines = [i.value for i in at.info if "only model" in i.value]
    assert len(lines) == 1 and "\n" not in lines[0] and not plotly.titled(at, "checkpoint vs checkpoint")


def test_bert_base_in_the_hub_cache_is_offered_first(tiny_run, offline_hub_cache, tmp_path, page_app):
    """With bert-base-uncased in the hub cache (a tiny BERT under its name, offline), the Attention page's picker
    opens on it and draws its maps."""
    from engine import hub
    from tests.helpers import tiny_bert_in_hub_cache
    tiny_bert_in_hub_cache(offline_hub_cache, hub.BERT_BASE, tmp_path)
    at = page_app(PAGE, tiny_run.parent)
    assert not at.exception and not at.error
    assert at.selectbox(key="att_model").value == hub.BERT_BASE
    assert at.get("plotly_chart")
