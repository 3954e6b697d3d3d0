"""The Attention page's analysis tabs through AppTest: the numbers drawn are engine.analysis's (rollout, per-head
statistics and the head they open, word level, value-weighted, head importance), SVG downloads, the head view
as an HTML download, and MiniLM not offered head importance (it has no MLM head)."""
import json

import numpy as np
import pytest

import engine
from engine import analysis

pytestmark = pytest.mark.slow  # AppTest runs whole pages

PAGE = "6_Attention.py"
A, B = "the cat sat on the mat .", "it was very happy ."  # the page's default sentences


def test_rollout_statistics_word_level_and_value_weighted_show_the_engine_numbers(tiny_run, ck, plotly, page_app):
    at = page_app(PAGE, tiny_run.parent, att_model=ck)
    assert not at.exception and not at.error
    bundle = engine.load(ck)
    tokens, att = engine.attention(bundle, A, B)
    # rollout
    roll = plotly.titled(at, "Attention rollout")[0]
    z = plotly.array(roll["data"][0]["z"])
    np.testing.assert_allclose(z, engine.attention_rollout(bundle, A, B), atol=1e-4)
    np.testing.assert_allclose(z.sum(-1), 1.0, atol=1e-3)
    # per-head statistics over this input: the grid's colours are the engine's column
    stats = engine.head_statistics(bundle, [(A, B)])
    grid = plotly.titled(at, "Per-head attention to [CLS]")[0]
    np.testing.assert_allclose(plotly.array(grid["data"][0]["marker"]["color"]), stats["cls"], atol=1e-6)
    assert list(plotly.array(grid["data"][0]["x"])) == list(stats["head"]) and list(plotly.array(grid["data"][0]["y"])) == list(stats["layer"])
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["entropy"] == f"{stats.iloc[0]['entropy']:.3f}" and metrics["prev"] == f"{stats.iloc[0]['prev']:.3f}"
    # opening another head shows its map and its numbers
    at.selectbox(key="att_stats_head_2x2").set_value((2, 2)).run()
    assert not at.exception
    opened = plotly.titled(at, "Layer 2, head 2 on this input")[0]
    np.testing.assert_allclose(plotly.array(opened["data"][0]["z"]), att[1, 1], atol=1e-4)
    assert {m.label: m.value for m in at.metric}["self"] == f"{stats.iloc[3]['self']:.3f}"
    at.selectbox(key="att_stats_col").set_value("entropy").run()
    grid = plotly.titled(at, "Per-head entropy")[0]
    np.testing.assert_allclose(plotly.array(grid["data"][0]["marker"]["color"]), stats["entropy"], atol=1e-6)
    # word level: the merged words label the map
    words, watt = analysis.word_level(list(tokens), att)
    wl = plotly.titled(at, "Word level: layer 1, head 1")[0]
    assert [y.split(" ", 1)[1] for y in wl["data"][0]["y"]] == words
    np.testing.assert_allclose(plotly.array(wl["data"][0]["z"]), watt[0, 0], atol=1e-4)
    # value-weighted beside the plain weights
    _, vw, _ = engine.value_weighted_attention(bundle, A, B)
    vwf = [c for c in plotly.charts(at).values() if any("value-weighted" in str(a.get("text", "")) for a in c["layout"].get("annotations", []))][0]
    np.testing.assert_allclose(plotly.array(vwf["data"][0]["z"]), att[0, 0], atol=1e-4)
    np.testing.assert_allclose(plotly.array(vwf["data"][1]["z"]), vw[0, 0] / vw[0, 0].sum(-1, keepdims=True), atol=1e-4)
    # downloads: CSV for every analysis, the head view as offline HTML
    labels = {d.proto.label for d in at.get("download_button")}
    assert {"Download the rollout as CSV", "Download the statistics as CSV", "Download this word-level map as CSV",
            "Download the value-weighted map as CSV", "Download the head view as HTML (works offline)"} <= labels


def test_head_importance_heatmap_and_svg_downloads(tiny_run, ck, plotly, page_app):
    at = page_app(PAGE, tiny_run.parent, att_model=ck, chart_format="svg", att_imp_source="this input")
    at.button(key="att_imp_go").click().run()
    assert not at.exception and not at.error
    bundle = engine.load(ck)
    imp = engine.head_importance(bundle, [(A, B)])
    fig = plotly.titled(at, "Head importance")[0]
    np.testing.assert_allclose(plotly.array(fig["data"][0]["z"]), imp, atol=1e-4)
    assert f"{imp.base_loss:.3f}" in fig["layout"]["title"]["text"]
    for c in at.get("plotly_chart"):
        assert json.loads(c.proto.config)["toImageButtonOptions"]["format"] == "svg"


def test_minilm_is_not_offered_head_importance(tiny_run, plotly, page_app):
    """MiniLM has no MLM head: the tab says so in one line instead of offering a button that can only fail."""
    at = page_app(PAGE, tiny_run.parent)
    assert not at.exception and not at.error
    assert not [b for b in at.button if b.key == "att_imp_go"]
    assert len([i for i in at.info if "needs an MLM head" in i.value]) == 1
    # the other analyses work on MiniLM's real weights
    assert plotly.titled(at, "Attention rollout") and plotly.titled(at, "Per-head attention to [CLS]")
