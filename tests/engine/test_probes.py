"""engine.probes: fill-mask, NSP, attention, comparison, probe set, checkpoints over steps, CLI."""
import json

import numpy as np
import pytest
import torch

import engine
from engine import model_view, probe_set, probes
from engine.errors import EngineError

LONG = " ".join(["the market rose again"] * 40)


@pytest.fixture(scope="session")
def bundle(tiny_run):
    return engine.load(tiny_run)  # the latest checkpoint


@pytest.fixture(scope="session")
def early(tiny_run, tiny_run_steps):
    return engine.load(tiny_run / "checkpoints" / f"step-{tiny_run_steps[0]}")


@pytest.fixture(scope="session")
def minilm():
    return engine.load("minilm")


def _manual(bundle, a, b=None):
    enc = bundle.tokenizer.encode(a, b)
    with torch.no_grad():
        out = bundle.model(torch.tensor([enc.ids]), token_type_ids=torch.tensor([enc.type_ids]), output_attentions=True)
    return enc, out


def test_fill_mask_several_masks_normalised_and_matches_model(bundle):
    text = "the prime [MASK] said the [mask] would cut taxes ."
    preds = probes.fill_mask(bundle, text, top_k=7)
    assert len(preds) == 2 and all(len(m) == 7 for m in preds)
    assert preds.tokens.count("[MASK]") == 2 and preds.truncated is False
    for m in preds:
        ps = [p for _, p in m]
        assert ps == sorted(ps, reverse=True) and all(0 < p < 1 for p in ps)
    np.testing.assert_allclose(preds.probs.sum(-1), 1.0, atol=1e-5)
    enc, out = _manual(bundle, text.replace("[mask]", "[MASK]"))
    pos = [i for i, t in enumerate(enc.ids) if t == bundle.tokenizer.mask_id]
    assert pos == preds.mask_positions
    for k, i in enumerate(pos):
        p = out.mlm_logits[0, i].softmax(-1)
        top = p.topk(7)
        assert [bundle.tokenizer.id_to_token(int(j)) for j in top.indices] == [t for t, _ in preds[k]]
        np.testing.assert_allclose(top.values.numpy(), [q for _, q in preds[k]], rtol=1e-5)


def test_fill_mask_in_pair_and_errors(bundle):
    preds = probes.fill_mask(bundle, "oil prices rose .", top_k=3, text_pair="the [MASK] fell .")
    assert len(preds) == 1 and len(preds[0]) == 3
    with pytest.raises(EngineError, match="no \\[MASK\\]"):
        probes.fill_mask(bundle, "no mask here")
    with pytest.raises(EngineError, match="empty"):
        probes.fill_mask(bundle, "   ")


def test_next_sentence_probability_matches_nsp_head(bundle):
    a, b = "the man went to the store .", "he bought a gallon of milk ."
    p = probes.next_sentence(bundle, a, b)
    assert not p.truncated
    _, out = _manual(bundle, a, b)
    assert float(p) == pytest.approx(out.nsp_logits[0].softmax(-1)[0].item(), abs=1e-6)
    with pytest.raises(EngineError, match="sentence B is empty"):
        probes.next_sentence(bundle, a, " ")


def test_attention_shape_rows_and_equals_model(bundle):
    a, b = "the cat sat on the mat .", "it was happy ."
    tokens, att = probes.attention(bundle, a, b)
    L, A = bundle.config.num_layers, bundle.config.num_heads
    T = len(tokens)
    assert att.shape == (L, A, T, T) and att.dtype == np.float32
    np.testing.assert_allclose(att.sum(-1), 1.0, atol=1e-5)
    enc, out = _manual(bundle, a, b)
    assert list(tokens) == enc.tokens and tokens.type_ids == enc.type_ids
    assert tokens.special[0] == 1 and sum(tokens.special) == 3
    np.testing.assert_allclose(att, torch.stack([x[0] for x in out.attentions]).numpy(), atol=1e-6)


def test_minilm_has_no_heads_but_gives_attention(minilm):
    with pytest.raises(EngineError, match="MiniLM has no MLM head.*mlm or mlm\\+nsp"):
        probes.fill_mask(minilm, "the man went to the [MASK] .")
    with pytest.raises(EngineError, match="MiniLM has no NSP head"):
        probes.next_sentence(minilm, "a b .", "c d .")
    with pytest.raises(EngineError, match="no MLM head and no NSP head"):
        probes.probe_set_accuracy(minilm)
    tokens, att = probes.attention(minilm, "the cat sat on the mat .")
    assert att.shape == (6, 12, len(tokens), len(tokens))
    np.testing.assert_allclose(att.sum(-1), 1.0, atol=1e-5)


def test_long_input_is_truncated_and_says_so(bundle, tiny_run_max_pos):
    preds = probes.fill_mask(bundle, "the [MASK] " + LONG)
    assert preds.truncated and len(preds.tokens) == tiny_run_max_pos and "truncated" in preds.notes[0]
    tokens, att = probes.attention(bundle, LONG, "and then it fell .")
    assert tokens.truncated and att.shape[-1] == tiny_run_max_pos and tokens[-1] == "[SEP]"
    tokens, att = probes.attention(bundle, LONG, max_length=20)
    assert tokens.truncated and att.shape[-1] == 20
    p = probes.next_sentence(bundle, LONG, LONG)
    assert p.truncated and len(p.tokens) == tiny_run_max_pos
    with pytest.raises(EngineError, match="cut off by truncation"):
        probes.fill_mask(bundle, LONG + " [MASK]")
    short = probes.fill_mask(bundle, "the [MASK] rose .")
    assert not short.truncated and short.notes == []


def test_jensen_shannon_bounds():
    p = np.array([[0.5, 0.5, 0.0], [1.0, 0.0, 0.0]])
    q = np.array([[0.5, 0.5, 0.0], [0.0, 0.0, 1.0]])
    np.testing.assert_allclose(probes.jensen_shannon(p, q), [0.0, 1.0], atol=1e-9)


@pytest.mark.slow
def test_compare_attention(bundle, early, minilm):
    a = "the cat sat on the mat ."
    same = probes.compare_attention(bundle, bundle, a)
    assert same["diff"].shape == (bundle.config.num_layers, bundle.config.num_heads)
    assert np.allclose(same["diff"], 0.0, atol=1e-6)
    r = probes.compare_attention(early, bundle, a, "it was happy .")
    vals = [v for _, _, v in r["top"]]
    assert vals == sorted(vals, reverse=True) and vals[0] > 0
    l, h, v = r["top"][0]
    assert v == pytest.approx(float(r["diff"][l - 1, h - 1])) and v == pytest.approx(float(r["diff"].max()))
    l1 = probes.compare_attention(early, bundle, a, metric="l1")
    expect = np.abs(l1["att1"] - l1["att2"]).mean(axis=(-2, -1))
    np.testing.assert_allclose(l1["diff"], expect, rtol=1e-5)
    with pytest.raises(EngineError, match="different vocabularies"):
        probes.compare_attention(bundle, minilm, a)
    with pytest.raises(EngineError, match="unknown metric"):
        probes.compare_attention(bundle, early, a, metric="cosine")


@pytest.mark.slow
def test_probe_set_accuracy_scores_what_the_model_predicts(bundle):
    r = probes.probe_set_accuracy(bundle)
    assert r["nsp_n"] == len(probe_set.NSP_PAIRS) >= 20
    assert 0 < r["cloze_n"] <= len(probe_set.CLOZE) and len(probe_set.CLOZE) >= 20
    # the accuracies are the shares of items scored correct (top-1 inside top-k)
    cloze = [i for i in r["items"] if i["kind"] == "cloze"]
    nsp_items = [i for i in r["items"] if i["kind"] == "nsp"]
    assert len(cloze) == r["cloze_n"] and len(nsp_items) == r["nsp_n"]
    assert r["nsp_acc"] == pytest.approx(sum(i["correct"] for i in nsp_items) / len(nsp_items))
    assert r["cloze_top1"] == pytest.approx(sum(i["correct"] for i in cloze) / len(cloze))
    assert r["cloze_topk"] == pytest.approx(sum(i[f"in_top{r['top_k']}"] for i in cloze) / len(cloze))
    assert all(i[f"in_top{r['top_k']}"] for i in cloze if i["correct"])
    for it in [i for i in r["items"] if i["kind"] == "cloze"][:4]:  # batched scoring = one-by-one probes
        best = probes.fill_mask(bundle, it["input"], top_k=1)[0][0]
        assert it["predicted"] == best[0] and it["prob"] == pytest.approx(best[1], rel=1e-4)
    for it in [i for i in r["items"] if i["kind"] == "nsp"][:3]:
        a, b = it["input"].split(" ||| ")
        assert it["prob"] == pytest.approx(float(probes.next_sentence(bundle, a, b)), abs=1e-5)
    sentence = "the prime [MASK] said the government would cut taxes ."
    top = probes.fill_mask(bundle, sentence, top_k=5)[0]
    good = probes.probe_set_accuracy(bundle, {"cloze": [(sentence, (top[0][0],))], "nsp": []})
    assert good["cloze_top1"] == 1.0 and good["cloze_topk"] == 1.0
    fifth = probes.probe_set_accuracy(bundle, {"cloze": [(sentence, (top[4][0],))], "nsp": []})
    assert fifth["cloze_top1"] == 0.0 and fifth["cloze_topk"] == 1.0
    p = float(probes.next_sentence(bundle, "a man .", "a dog ."))
    nsp = probes.probe_set_accuracy(bundle, {"cloze": [], "nsp": [("a man .", "a dog .", p > 0.5), ("a man .", "a dog .", p <= 0.5)]})
    assert nsp["nsp_acc"] == 0.5 and [i["correct"] for i in nsp["items"]] == [True, False]


def test_classroom_probe_set_sections_and_answers_fit_a_real_vocabulary(minilm):
    assert set(probe_set.CLOZE_SECTIONS) == {"everyday facts", "grammar", "news"}
    assert all(len(items) >= 12 for items in probe_set.CLOZE_SECTIONS.values())
    assert len(probe_set.CLOZE) == len(probe_set.CLOZE_SECTION_OF) == sum(len(v) for v in probe_set.CLOZE_SECTIONS.values())
    for sentence, answers in probe_set.CLOZE:
        assert sentence.count("[MASK]") == 1 and sentence == sentence.lower().replace("[mask]", "[MASK]")
        assert all(minilm.tokenizer.token_to_id(a) is not None for a in answers), sentence  # Google's uncased vocab
    truth = [y for _, _, y in probe_set.NSP_PAIRS]
    assert len(truth) >= 30 and truth.count(True) == truth.count(False)


def test_probe_set_sections_and_models_side_by_side(bundle, minilm):
    r = probes.probe_set_accuracy(bundle)
    cloze = [i for i in r["items"] if i["kind"] == "cloze"]
    assert sum(s["n"] for s in r["by_section"].values()) == r["cloze_n"] == len(cloze)
    for name, sec in r["by_section"].items():
        mine = [i for i in cloze if i["section"] == name]
        assert sec["n"] == len(mine) and sec["top1"] == pytest.approx(sum(i["correct"] for i in mine) / len(mine))
    cmp = probes.compare_probe_set([bundle, ("MiniLM", minilm), bundle])
    assert cmp["names"] == [probes.model_name(bundle), "MiniLM", f"{probes.model_name(bundle)} (2)"]
    mine, none, again = cmp["summary"]
    assert mine["cloze top-1"] == r["cloze_top1"] and mine["next sentence"] == r["nsp_acc"] and mine["pairs"] == r["nsp_n"]
    assert mine["grammar top-1"] == r["by_section"]["grammar"]["top1"] and again == dict(mine, model=again["model"])
    assert none["cloze top-1"] is None and none["cloze items"] == 0 and "no MLM head" in cmp["notes"]["MiniLM"][0]
    assert len(cmp["cloze"]) == len(probe_set.CLOZE) and len(cmp["nsp"]) == len(probe_set.NSP_PAIRS)
    scored = {i["input"]: i for i in cloze}
    for row in cmp["cloze"]:
        it = scored.get(row["sentence"])
        assert row[cmp["names"][0]] == ("-" if it is None else f"{it['predicted']} {'✓' if it['correct'] else '✗'}")
        assert row["MiniLM"] == "-"
    nsp_items = [i for i in r["items"] if i["kind"] == "nsp"]
    assert [row[cmp["names"][0]] for row in cmp["nsp"]] == [round(i["prob"], 3) for i in nsp_items]
    with pytest.raises(EngineError, match="at least one model"):
        probes.compare_probe_set([])


@pytest.mark.slow
def test_probe_checkpoints_over_steps(tiny_run, tiny_run_steps):
    assert [s for s, _ in probes.checkpoint_steps(tiny_run)] == list(tiny_run_steps)
    rows = probes.probe_checkpoints(tiny_run, text="the [MASK] rose .", pair=("a man .", "a dog ."), top_k=3, probe_set=True)
    assert [r["step"] for r in rows] == list(tiny_run_steps)
    assert all(len(r["fill"][0]) == 3 and r["probe_set"]["nsp_n"] == len(probe_set.NSP_PAIRS) for r in rows)
    first = engine.load(tiny_run / "checkpoints" / f"step-{tiny_run_steps[0]}")  # each row is that checkpoint's probe
    assert rows[0]["p_isnext"] == pytest.approx(float(probes.next_sentence(first, "a man .", "a dog .")), abs=1e-6)
    assert len({round(r["p_isnext"], 6) for r in rows}) > 1  # training changed the model
    series = probes.mask_probs_over_steps(rows)
    assert series and all(len(v) == len(tiny_run_steps) for v in series.values())
    best_last = rows[-1]["fill"][0][0]
    assert list(series)[0] == best_last[0] and series[best_last[0]][-1] == pytest.approx(best_last[1], rel=1e-5)
    with pytest.raises(EngineError, match="does not exist"):
        probes.checkpoint_steps(tiny_run / "nope")


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


@pytest.mark.slow
def test_cli(tiny_run, capsys, tiny_run_steps):
    from engine.__main__ import run
    assert run(["probe", "--model", str(tiny_run), "--fill", "the [MASK] rose [MASK] .", "--top-k", "4", "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert len(obj["masks"]) == 2 and len(obj["masks"][0]) == 4 and obj["truncated"] is False
    assert run(["probe", "--model", str(tiny_run), "--nsp", "a man .", "a dog ."]) == 0
    assert "P(IsNext) = 0." in capsys.readouterr().out
    assert run(["probe", "--model", str(tiny_run), "--attention", "the cat sat .", "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert obj["shape"] == [2, 2, len(obj["tokens"]), len(obj["tokens"])]
    early = tiny_run / "checkpoints" / f"step-{tiny_run_steps[0]}"
    assert run(["probe", "--model", str(tiny_run), "--attention", "the cat sat .", "--compare", str(early)]) == 0
    assert "layer 1 head" in capsys.readouterr().out
    assert run(["probe", "--model", str(tiny_run), "--probe-set"]) == 0
    assert "next sentence" in capsys.readouterr().out
    assert run(["probe", "--model", "minilm", "--fill", "a [MASK] ."]) == 2
    assert "error: MiniLM has no MLM head" in capsys.readouterr().err


def test_ltr_model_reads_a_mask_from_the_position_before(bundle):
    from engine.checkpoint import Bundle
    cfg = bundle.config.replace(causal=True)
    model = engine.BertForPreTraining(cfg)
    model.load_state_dict(bundle.model.state_dict())
    ltr = Bundle(model=model.eval(), tokenizer=bundle.tokenizer, config=cfg, path=bundle.path, info=dict(bundle.info))
    a = probes.fill_mask(ltr, "the prime [MASK] said the government would cut taxes .", top_k=5)
    b = probes.fill_mask(ltr, "the prime [MASK] went home early .", top_k=5)
    assert [t for t, _ in a[0]] == [t for t, _ in b[0]]  # only the left context matters
    assert [p for _, p in a[0]] == pytest.approx([p for _, p in b[0]], rel=1e-4)
    assert any("left-to-right" in n for n in a.notes)
    enc, out = _manual(ltr, "the prime [MASK] went home early .")
    p = enc.ids.index(bundle.tokenizer.mask_id)
    expect = out.mlm_logits[0, p - 1].softmax(-1).topk(5)
    assert [t for t, _ in b[0]] == [bundle.tokenizer.id_to_token(int(i)) for i in expect.indices]
    r = probes.probe_set_accuracy(ltr)
    it = [i for i in r["items"] if i["kind"] == "cloze"][0]
    assert it["predicted"] == probes.fill_mask(ltr, it["input"], top_k=1)[0][0][0]
