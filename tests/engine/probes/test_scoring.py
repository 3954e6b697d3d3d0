"""engine.probes.scoring: the probe set's accuracies are what the model predicts, per section, and several models
side by side."""
import pytest

import engine
from engine import probe_set
from engine.errors import EngineError
from engine.probes.model_info import model_name
from engine.probes.predictions import fill_mask, next_sentence
from engine.probes.scoring import compare_probe_set, probe_set_accuracy


@pytest.mark.slow
def test_probe_set_accuracy_scores_what_the_model_predicts(bundle):
    r = probe_set_accuracy(bundle)
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
        best = fill_mask(bundle, it["input"], top_k=1)[0][0]
        assert it["predicted"] == best[0] and it["prob"] == pytest.approx(best[1], rel=1e-4)
    for it in [i for i in r["items"] if i["kind"] == "nsp"][:3]:
        a, b = it["input"].split(" ||| ")
        assert it["prob"] == pytest.approx(float(next_sentence(bundle, a, b)), abs=1e-5)
    sentence = "the prime [MASK] said the government would cut taxes ."
    top = fill_mask(bundle, sentence, top_k=5)[0]
    good = probe_set_accuracy(bundle, {"cloze": [(sentence, (top[0][0],))], "nsp": []})
    assert good["cloze_top1"] == 1.0 and good["cloze_topk"] == 1.0
    fifth = probe_set_accuracy(bundle, {"cloze": [(sentence, (top[4][0],))], "nsp": []})
    assert fifth["cloze_top1"] == 0.0 and fifth["cloze_topk"] == 1.0
    p = float(next_sentence(bundle, "a man .", "a dog ."))
    nsp = probe_set_accuracy(bundle, {"cloze": [], "nsp": [("a man .", "a dog .", p > 0.5), ("a man .", "a dog .", p <= 0.5)]})
    assert nsp["nsp_acc"] == 0.5 and [i["correct"] for i in nsp["items"]] == [True, False]


def test_probe_set_sections_and_models_side_by_side(bundle, minilm):
    r = probe_set_accuracy(bundle)
    cloze = [i for i in r["items"] if i["kind"] == "cloze"]
    assert sum(s["n"] for s in r["by_section"].values()) == r["cloze_n"] == len(cloze)
    for name, sec in r["by_section"].items():
        mine = [i for i in cloze if i["section"] == name]
        assert sec["n"] == len(mine) and sec["top1"] == pytest.approx(sum(i["correct"] for i in mine) / len(mine))
    cmp = compare_probe_set([bundle, ("MiniLM", minilm), bundle])
    assert cmp["names"] == [model_name(bundle), "MiniLM", f"{model_name(bundle)} (2)"]
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
        compare_probe_set([])
