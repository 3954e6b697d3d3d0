"""pages/5_Probe.py through AppTest: fill-mask bars and numbers, P(IsNext), picked words, checkpoints over steps,
the probe set's accuracy per checkpoint, and MiniLM's one line about its missing heads."""
import json
from pathlib import Path

import pytest

import engine
from engine import probes

pytestmark = pytest.mark.slow  # AppTest runs whole pages

PAGE = "5_Probe.py"


def _charts(at):
    return [json.loads(c.proto.spec) for c in at.get("plotly_chart")]


def test_minilm_says_once_it_has_no_heads_and_points_to_a_model_that_has(tiny_run, ck, page_app):
    at = page_app(PAGE, tiny_run.parent)
    assert at.selectbox(key="probe_model").value == ck  # the finished run's latest checkpoint is offered first
    at.selectbox(key="probe_model").set_value("minilm").run()
    assert not at.exception and not at.error
    lines = [i.value for i in at.info if "has no MLM or NSP head" in i.value]
    assert len(lines) == 1 and ck in lines[0]  # pick the checkpoint that can
    assert "probe_ready_go" not in [b.key for b in at.button]  # a model that fills blanks exists: no build offered
    assert not at.metric
    # no predictions drawn; mask and watch still shows where the masked token looks (attention needs no head)
    charts = _charts(at)
    assert charts and not any(t["type"] == "bar" for c in charts for t in c["data"])
    from studio.common import choice_label
    options = at.multiselect(key="probe_compare_models").options  # as shown: the comparison offers models with heads
    assert choice_label(ck) in options and choice_label("minilm") not in options


def test_fill_mask_and_next_sentence_show_the_engine_numbers(tiny_run, ck, page_app):
    at = page_app(PAGE, tiny_run.parent, probe_model=ck)
    text = "shares in the [MASK] fell on the stock [MASK] ."
    at.text_input(key="probe_text").input(text).run()
    at.slider(key="probe_top_k").set_value(4).run()
    assert not at.exception and not at.error
    bundle = engine.load(ck)
    preds = probes.fill_mask(bundle, text, top_k=4)
    lines = [m.value for m in at.markdown if m.value.startswith("**[MASK]")]
    assert len(lines) == 2
    for line, m in zip(lines, preds):
        assert f"`{m[0][0]}` {m[0][1]:.3f}" in line
    fig = _charts(at)[0]
    assert [t["type"] for t in fig["data"]] == ["bar", "bar"]
    assert fig["data"][0]["x"][::-1] == pytest.approx([p for _, p in preds[0]], rel=1e-6)  # best at the top
    table = at.dataframe[0].value
    assert len(table) == 8 and table["token"].tolist()[:4] == [t for t, _ in preds[0]]
    p = probes.next_sentence(bundle, "the man went to the store .", "he bought a gallon of milk .")
    assert at.metric[0].label == "P(IsNext)" and at.metric[0].value == f"{float(p):.3f}"


def test_picking_words_masks_them(tiny_run, ck, page_app):
    at = page_app(PAGE, tiny_run.parent, probe_model=ck)
    at.text_input(key="probe_text").input("oil prices rose in new york").run()
    assert any("Type [MASK]" in i.value for i in at.info)
    pick = [w for w in at.multiselect if w.label.startswith("…or pick")][0]
    pick.set_value(["2. prices", "5. new"]).run()
    assert not at.exception and not at.error
    assert any("oil [MASK] rose in [MASK] york" in c.value for c in at.caption)
    assert len([m for m in at.markdown if m.value.startswith("**[MASK]")]) == 2


def test_checkpoints_over_steps_and_probe_set(tiny_run, ck, tiny_run_steps, page_app):
    at = page_app(PAGE, tiny_run.parent, probe_model=ck)
    assert at.selectbox(key="probe_run").value == tiny_run.name
    assert at.multiselect(key=f"probe_steps_{tiny_run.name}").value == list(tiny_run_steps)
    n_before = len(_charts(at))
    at.button(key="probe_steps_go").click().run()
    assert not at.exception and not at.error
    steps_table = at.dataframe[1].value
    assert steps_table["step"].tolist() == list(tiny_run_steps)
    rows = probes.probe_checkpoints(tiny_run, text="the prime [MASK] said the government would cut taxes .",
                                    pair=("the man went to the store .", "he bought a gallon of milk ."), top_k=5)
    assert steps_table["P(IsNext)"].tolist() == pytest.approx([round(r["p_isnext"], 4) for r in rows], abs=1e-4)
    charts = _charts(at)
    assert len(charts) == n_before + 3
    nsp = [c for c in charts if c["layout"]["title"]["text"] == "P(IsNext) over training steps"][0]
    assert nsp["data"][0]["x"] == list(tiny_run_steps) and nsp["data"][0]["y"] == pytest.approx([r["p_isnext"] for r in rows], abs=1e-5)
    acc = at.dataframe[2].value
    assert acc["step"].tolist() == list(tiny_run_steps)
    expect = probes.probe_set_accuracy(engine.load(ck))
    last = acc.iloc[-1]
    assert last["next sentence"] == pytest.approx(expect["nsp_acc"]) and last["cloze top-1"] == pytest.approx(expect["cloze_top1"])
    first = acc.iloc[0]  # each row is its own checkpoint's score
    expect = probes.probe_set_accuracy(engine.load(tiny_run / "checkpoints" / f"step-{tiny_run_steps[0]}"))
    assert first["next sentence"] == pytest.approx(expect["nsp_acc"]) and first["cloze top-1"] == pytest.approx(expect["cloze_top1"])


def test_score_probe_set_button(tiny_run, ck, page_app):
    at = page_app(PAGE, tiny_run.parent, probe_model=ck)
    at.button(key="probe_set_go").click().run()
    assert not at.exception and not at.error
    expect = probes.probe_set_accuracy(engine.load(ck))
    m = {x.label: x.value for x in at.metric}
    assert m["Next sentence"] == f"{expect['nsp_acc']:.0%}" and m["Cloze top-1"] == f"{expect['cloze_top1']:.0%}"
    items = at.dataframe[-1].value
    assert len(items) == expect["cloze_n"] + expect["nsp_n"]


def test_mask_and_watch_predictions_and_attention_follow_the_clicks(tiny_run, ck, plotly, page_app):
    import numpy as np
    at = page_app(PAGE, tiny_run.parent, probe_model=ck)
    assert not at.exception and not at.error
    bundle = engine.load(ck)
    text = "the prime [MASK] said the government would cut taxes ."  # the default sentence, "minister" clicked
    preds = probes.fill_mask(bundle, text, top_k=5)
    line = [m.value for m in at.markdown if m.value.startswith("`minister` →")][0]
    assert f"`{preds[0][0][0]}` {preds[0][0][1]:.3f}" in line
    tokens, att = probes.attention(bundle, text)
    fig = [c for c in _charts(at) if c["layout"]["title"]["text"].startswith("Where 3 [MASK] looks")][0]
    np.testing.assert_allclose(plotly.array(fig["data"][0]["z"]), att[:, :, 3, :].mean(axis=1), atol=1e-4)
    # click "taxes" too: two masks, two prediction lines, the watched one can be switched
    pills = at.pills[0]
    assert pills.label == "Click WordPieces to mask them"
    pills.set_value([2, 8]).run()
    assert not at.exception and not at.error
    text2 = "the prime [MASK] said the government would cut [MASK] ."
    preds2 = probes.fill_mask(bundle, text2, top_k=5)
    line = [m.value for m in at.markdown if m.value.startswith("`taxes` →")][0]
    assert f"`{preds2[1][0][0]}` {preds2[1][0][1]:.3f}" in line
    at.selectbox(key="probe_watch_which").set_value(9).run()
    _, att2 = probes.attention(bundle, text2)
    fig = [c for c in _charts(at) if c["layout"]["title"]["text"].startswith("Where 9 [MASK] looks")][0]
    np.testing.assert_allclose(plotly.array(fig["data"][0]["z"]), att2[:, :, 9, :].mean(axis=1), atol=1e-4)
    heads = [c for c in _charts(at) if c["layout"]["title"]["text"].startswith("Layer 2: where 9 [MASK]")][0]
    np.testing.assert_allclose(plotly.array(heads["data"][0]["z"]), att2[1, :, 9, :], atol=1e-4)


def test_probe_set_scores_come_with_chance_unigram_baseline_and_a_reading(tiny_run, ck, page_app):
    from engine import probe_baselines
    at = page_app(PAGE, tiny_run.parent, probe_model=ck)
    at.button(key="probe_set_go").click().run()
    assert not at.exception and not at.error
    bundle = engine.load(ck)
    r = probes.probe_set_accuracy(bundle)
    base = probe_baselines.probe_set_baselines(bundle)
    captions = [c.value for c in at.caption]
    assert f"chance {base['chance_top1']:.2%} · unigram baseline {base['unigram_top1']:.0%}" in captions
    assert f"chance 50% · always IsNext {base['nsp_majority']:.0%}" in captions
    reading = probe_baselines.reading(r, base)
    shown = [m.value for m in at.markdown]
    assert reading and all(line in shown for line in reading)
def test_compare_models_on_the_probe_set(tiny_run, ck, page_app):
    at = page_app(PAGE, tiny_run.parent, probe_model=ck)
    assert at.multiselect(key="probe_compare_models").value == [ck]
    first = str(tiny_run / "checkpoints" / "step-3")
    at.multiselect(key="probe_compare_models").set_value([ck, first]).run()
    at.button(key="probe_compare_go").click().run()
    assert not at.exception and not at.error
    expect = probes.compare_probe_set([engine.load(ck), engine.load(first)])
    tables = [d.value for d in at.dataframe]
    summary = [t for t in tables if "cloze items" in t.columns][0]
    assert summary["model"].tolist() == expect["names"]
    assert summary["cloze top-1"].iloc[0] == pytest.approx(expect["summary"][0]["cloze top-1"])
    assert summary["next sentence"].iloc[0] == pytest.approx(expect["summary"][0]["next sentence"])
    items = [t for t in tables if "answers" in t.columns and "section" in t.columns and len(t.columns) > 3][0]
    assert items[expect["names"][0]].tolist() == [r[expect["names"][0]] for r in expect["cloze"]]
    assert expect["names"][0] != expect["names"][1]
    fig = [c for c in _charts(at) if c["layout"]["title"]["text"].startswith("Classroom probe set")][0]
    assert [t["name"] for t in fig["data"]] == expect["names"]


def test_bert_base_in_the_hub_cache_is_offered_first_and_fills_blanks_offline(tiny_run, offline_hub_cache, tmp_path,
                                                                               page_app):
    """A hub cache holding a tiny BERT under bert-base-uncased's name (as `class prepare` leaves it when online),
    HF_HUB_OFFLINE set: the Probe page offers it first, before the class's own checkpoint, and fills the mask with
    it; with no such cache it is not offered."""
    from engine import hub
    from tests.helpers import tiny_bert_in_hub_cache
    at = page_app(PAGE, tiny_run.parent)
    assert hub.BERT_BASE not in at.selectbox(key="probe_model").options
    tiny_bert_in_hub_cache(offline_hub_cache, hub.BERT_BASE, tmp_path)
    at = page_app(PAGE, tiny_run.parent)
    assert not at.exception and not at.error
    picker = at.selectbox(key="probe_model")
    assert picker.value == hub.BERT_BASE and "Google's BERT-base" in picker.options[0]
    bundle = engine.load(hub.BERT_BASE)
    preds = probes.fill_mask(bundle, "the cat [MASK] on the mat .", top_k=5)
    at.text_input(key="probe_text").input("the cat [MASK] on the mat .").run()
    assert not at.exception and not at.error
    line = next(m.value for m in at.markdown if m.value.startswith("**[MASK] 1**"))
    assert f"`{preds[0][0][0]}` {preds[0][0][1]:.3f}" in line


def test_a_sentence_order_model_is_asked_its_own_question(tiny_run, ck, page_app, tmp_path):
    """A model pre-trained with mlm+sop (its run.json says so) gets the pair section in SOP's words: the header
    'Sentence order', the metric P(in order) with the pair head's number, in order / swapped."""
    import shutil
    from engine.objectives import MLM_SOP
    run = tmp_path / "runs" / "sop"
    shutil.copytree(tiny_run, run)
    info = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps(dict(info, objective=MLM_SOP.name)))
    model = str(run / "checkpoints" / Path(ck).name)
    at = page_app(PAGE, run.parent, probe_model=model)
    assert not at.exception and not at.error
    assert any(h.value == MLM_SOP.pair_title for h in at.header)
    p = probes.next_sentence(engine.load(model), "the man went to the store .", "he bought a gallon of milk .")
    assert at.metric[0].label == MLM_SOP.pair_label == "P(in order)" and at.metric[0].value == f"{float(p):.3f}"
    assert any(f"**{MLM_SOP.pair_answers[0 if p > 0.5 else 1]}**" in c.value for c in at.caption)
