"""Verdicts: the bootstrap difference of two variants over replicates and dev examples, on hand-made numbers, and
`ablate show --json`."""
import json
from types import SimpleNamespace

import numpy as np
import pytest

import engine.ablations as A
from engine.ablations.results import incomplete_cells
from engine.ablations.study import pretrain_column_name
from engine.ablations.verdict import VERDICTS, Contrast, above_floor, bootstrap_difference, judge, metric_of, verdict


def correct(n: int, k: int, shift: int = 0) -> list:
    """n per-example 0/1 scores with k ones, rotated by `shift` (a different restart's errors)."""
    v = [1] * k + [0] * (n - k)
    return v[shift:] + v[:shift]


def reps(n: int, ks: list) -> list:
    return [(k / n, correct(n, k, 7 * i)) for i, k in enumerate(ks)]


def test_clear_gain_is_reproduced_and_its_reverse_is_not():
    a, b = reps(1000, [850, 860, 840]), reps(1000, [700, 710, 690])
    r = bootstrap_difference(a, b)
    assert r["difference"] == pytest.approx(0.15) and r["resampled"] == "replicates+examples" and r["n_examples"] == 1000
    assert 0 < r["low"] < 0.15 < r["high"]
    assert verdict(r["low"], r["high"]) == "reproduced"
    back = bootstrap_difference(b, a)
    assert verdict(back["low"], back["high"]) == "not reproduced"
    assert verdict(r["low"], r["high"], direction=-1) == "not reproduced"  # the paper expected the opposite


def test_a_gap_within_the_noise_is_inconclusive():
    a, b = reps(200, [150, 160, 140]), reps(200, [148, 158, 145])  # 1 point apart, 200 examples
    r = bootstrap_difference(a, b)
    assert r["low"] < 0 < r["high"] and verdict(r["low"], r["high"]) == "inconclusive"
    assert set(VERDICTS) == {"reproduced", "not reproduced", "inconclusive"}


def test_without_per_example_scores_only_the_replicates_are_resampled():
    r = bootstrap_difference([(0.80, None), (0.81, None), (0.82, None)], [(0.70, None), (0.71, None), (0.72, None)])
    assert r["resampled"] == "replicates" and r["low"] >= 0.08 and verdict(r["low"], r["high"]) == "reproduced"
    one = bootstrap_difference([(0.9, None)], [(0.5, None)])  # one replicate each: nothing to resample
    assert one["resampled"] == "nothing" and verdict(one["low"], one["high"]) == "inconclusive"


def test_tagging_counts_give_micro_f1_and_are_resampled_by_sentence():
    assert metric_of(np.array([[1, 0, 0], [0, 1, 1]])) == pytest.approx(0.5)  # 2*1 / (2*1 + 1 + 1)
    good = [[2, 0, 0]] * 90 + [[0, 1, 1]] * 10
    bad = [[1, 1, 1]] * 90 + [[0, 1, 1]] * 10
    r = bootstrap_difference([(metric_of(np.array(good)), good)], [(metric_of(np.array(bad)), bad)])
    assert r["resampled"] == "replicates+examples" and verdict(r["low"], r["high"]) == "reproduced"


def test_several_pretraining_seeds_are_resampled_as_clusters():
    """Restarts of one pre-trained model are not independent draws of the variant: with two pre-training seeds
    whose gaps disagree, many tight restarts must not make the finding look certain."""
    def seeded(n, ks_by_seed):
        return [(k / n, correct(n, k, 7 * i + 3 * s), s) for s, ks in enumerate(ks_by_seed) for i, k in enumerate(ks)]

    a = seeded(1000, [[850, 851, 849, 850, 852], [760, 761, 759, 760, 762]])  # seed 0: A far ahead; seed 1: behind
    b = seeded(1000, [[700, 701, 699, 700, 702], [780, 781, 779, 780, 782]])
    flat = bootstrap_difference([r[:2] for r in a], [r[:2] for r in b])  # the seeds forgotten: 10 "independent" runs
    r = bootstrap_difference(a, b)
    assert r["difference"] == pytest.approx(flat["difference"]) and (r["seeds_a"], r["seeds_b"]) == (2, 2)
    assert verdict(flat["low"], flat["high"]) == "reproduced"
    assert verdict(r["low"], r["high"]) == "inconclusive" and r["low"] < -0.01 and r["high"] > 0.14  # each seed's own gap
    consistent = seeded(1000, [[850, 851, 849], [830, 831, 829]]), seeded(1000, [[700, 701, 699], [710, 711, 709]])
    c = bootstrap_difference(*consistent)
    assert verdict(c["low"], c["high"]) == "reproduced" and c["low"] > 0.1
    # one pre-training seed: the same interval as replicates without a seed (the one-stage bootstrap)
    one, plain = bootstrap_difference(a[:5], b[:5]), bootstrap_difference([x[:2] for x in a[:5]], [x[:2] for x in b[:5]])
    assert (one["low"], one["high"]) == (plain["low"], plain["high"]) and one["seeds_a"] == 1
    e = judge(Contrast("A beats B", "A", "B", "col"), {("A", "col"): a, ("B", "col"): b})
    assert e["ours"]["pretraining_seeds"] == [2, 2] and "pre-training seeds 2 and 2 (difference by seed: 0: +15.0, 1: -2.0)" in A.describe_entry(e)
    e1 = judge(Contrast("A beats B", "A", "B", "col"), {("A", "col"): a[:5], ("B", "col"): b[:5]})
    assert "one pre-training seed" in A.describe_entry(e1)
    assert "per_seed" not in e1["ours"] and e["ours"]["per_seed"]["A"]["1"] == pytest.approx(0.7604)


def test_judge_puts_the_paper_beside_ours():
    c = Contrast("MLM beats LTR on spans", "MLM", "LTR", "span", (88.5, 77.8), "SQuAD 1.1 F1")
    e = judge(c, {("MLM", "span"): reps(500, [400, 410]), ("LTR", "span"): reps(500, [300, 310])})
    assert e["verdict"] == "reproduced" and e["paper"]["difference"] == pytest.approx(10.7)
    assert e["ours"]["MLM"] == pytest.approx(0.81) and len(e["ours"]["interval_95"]) == 2
    empty = judge(c, {})
    assert empty["verdict"] == "inconclusive" and empty["ours"] is None


def test_a_comparison_of_two_rows_at_chance_says_the_task_was_not_learned():
    c = Contrast("removing NSP hurts coherence", "BERT", "No NSP", "next")
    at_chance = {("BERT", "next"): reps(2000, [1004, 1010, 998]), ("No NSP", "next"): reps(2000, [1002, 996, 1006])}
    e = judge(c, at_chance, floor=0.5)
    assert e["verdict"] == "inconclusive" and e["floor"]["majority_accuracy"] == 0.5
    assert e["floor"]["BERT"]["learned"] is False and e["floor"]["No NSP"]["learned"] is False
    assert "neither row is above the majority-class rate (50.0%)" in e["note"] and e["note"] in A.describe_entry(e)
    # one row learned: no such note, and the verdict is still the interval's
    learned = {**at_chance, ("BERT", "next"): reps(2000, [1200, 1210, 1190])}
    e = judge(c, learned, floor=0.5)
    assert e["verdict"] == "reproduced" and e["floor"]["BERT"]["learned"] is True and e["note"] == ""
    assert e["floor"]["BERT"]["interval_95"][0] > 0 > e["floor"]["No NSP"]["interval_95"][0]
    assert "floor" not in judge(c, at_chance)  # no floor known (an F1 column, an older eval.json): no check
    # the floor is the majority rate, not 50%: 70% right on a 70/30 dev set is not above it
    r = above_floor(reps(1000, [700, 702]), 0.7)
    assert r["learned"] is False and r["low"] < 0 < r["high"]
    assert above_floor([(0.9, None)], 0.5)["learned"] is None  # one replicate and no per-example scores


def _eval_with_restarts(out, metric, per_restart, data=None):
    """An eval.json as engine.finetune writes it, one trial per restart with per-example scores."""
    out.mkdir(parents=True, exist_ok=True)
    trials = []
    for i, per in enumerate(per_restart):
        dev = {metric: float(np.mean(per)), "per_example": per}
        trials.append({"trial": i, "lr": 1e-3, "batch_size": 32, "epochs": 5, "restart": i, "seed": i, "best_epoch": 5,
                       "score": dev[metric], "dev": dev, "epochs_log": [], "seconds": 1.0})
    best = max(trials, key=lambda t: t["score"])
    (out / "eval.json").write_text(json.dumps({"kind": "finetune", "status": "finished", "metric": metric,
                                               "score": best["score"], "dev": best["dev"], "best": best, "trials": trials,
                                               "data": data or {}}))
    (out / "run.json").write_text(json.dumps({"kind": "finetune", "status": "finished"}))


def test_show_json_prints_one_object_with_each_findings_verdict(tmp_path, capsys, fake_runs):
    study = A.get_study("pretraining-tasks", seeds=1, evaluations=(A.CLOZE, A.BBC))
    d = tmp_path / "studies" / study.name
    d.mkdir(parents=True)
    jobs = A.plan(study, d)
    A.write_study(d, study, jobs, mode="foreground")
    ks = {"BERT (MLM + NSP)": 700, "No NSP": 690, "LTR & No NSP": 500, "+ BiLSTM": 560}  # of 1,000 cloze questions
    for j in jobs:
        if j.kind == "pretrain":
            fake_runs.pretrain(d / j.out, 5.0)
        elif j.evaluation == A.CLOZE.name:
            k = ks[j.variant]
            _eval_with_restarts(d / j.out, "f1", [correct(1000, k + 5 * r, 11 * r) for r in range(3)])
        else:  # the control: the same topic accuracy for every row, well above the majority topic's 23%
            _eval_with_restarts(d / j.out, "accuracy", [correct(400, 360, 3 * r) for r in range(3)],
                                {"dev_majority_accuracy": 0.23})
    assert A.main(["show", str(d), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)  # one JSON object, nothing else printed
    by = {(f["better"], f["worse"], f["column"]): f for f in out["findings"]}
    assert {f["verdict"] for f in out["findings"]} <= set(VERDICTS)
    span = by[("BERT (MLM + NSP)", "LTR & No NSP", A.CLOZE.name)]
    assert span["verdict"] == "reproduced" and span["ours"]["replicates"] == [3, 3] and span["ours"]["dev_examples"] == 1000
    assert span["paper"]["BERT (MLM + NSP)"] == 88.5 and span["paper"]["task"] == "SQuAD 1.1 F1" and span["statement"]
    assert by[("+ BiLSTM", "LTR & No NSP", A.CLOZE.name)]["verdict"] == "reproduced"
    assert by[("BERT (MLM + NSP)", "No NSP", A.CLOZE.name)]["verdict"] == "inconclusive"  # 1 point on 1,000 questions
    control = by[("BERT (MLM + NSP)", "LTR & No NSP", A.BBC.name)]
    assert control["verdict"] == "inconclusive" and control["ours"]["difference"] == pytest.approx(0)
    assert control["floor"]["majority_accuracy"] == 0.23 and control["floor"]["LTR & No NSP"]["learned"] is True
    assert "floor" not in span  # an F1 column has no majority-class floor
    assert all(c not in {k[2] for k in by} for c in (A.PUNCT.name, A.NEXT.name))  # columns the study does not have
    assert out["progress"]["total"] == len(jobs) and out["table"]
    assert A.main(["show", str(d)]) == 0  # the same verdicts as text
    text = capsys.readouterr().out
    assert f"[reproduced] {span['statement']} ({A.CLOZE.name}): 70.5 vs 50.5, difference +20.0 [" in text
    assert "paper (SQuAD 1.1 F1): 88.5 vs 77.8" in text


def test_show_json_resamples_a_studys_pretraining_seeds(tmp_path, capsys, fake_runs):
    """A study with two pre-training seeds: each replicate keeps the seed of the run it was fine-tuned from, so a
    gap that holds for seed 0 and reverses for seed 1 is inconclusive."""
    study = A.get_study("pretraining-tasks", seeds=2, evaluations=(A.CLOZE,))
    d = tmp_path / "studies" / study.name
    d.mkdir(parents=True)
    jobs = A.plan(study, d)
    A.write_study(d, study, jobs, mode="foreground")
    ks = {0: {"BERT (MLM + NSP)": 700, "LTR & No NSP": 500}, 1: {"BERT (MLM + NSP)": 480, "LTR & No NSP": 520}}
    for j in jobs:
        if j.kind == "pretrain":
            fake_runs.pretrain(d / j.out, 5.0)
        else:
            k = ks[j.seed].get(j.variant, 600)
            _eval_with_restarts(d / j.out, "f1", [correct(1000, k + r, 11 * r) for r in range(3)])
    assert A.main(["show", str(d), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    span = next(f for f in out["findings"] if (f["better"], f["worse"]) == ("BERT (MLM + NSP)", "LTR & No NSP"))
    assert span["ours"]["replicates"] == [6, 6] and span["ours"]["pretraining_seeds"] == [2, 2]
    assert span["ours"]["difference"] == pytest.approx(0.08, abs=0.002) and span["verdict"] == "inconclusive"
    per = span["ours"]["per_seed"]  # each start's own means: seed 0 far ahead, seed 1 behind
    assert per["BERT (MLM + NSP)"]["0"] == pytest.approx(0.701) and per["LTR & No NSP"]["1"] == pytest.approx(0.521)


def test_a_fixed_models_seeds_are_not_pretraining_clusters(tmp_path, capsys, fake_runs):
    """Table 7 fine-tunes one fixed model (MiniLM): its seeds are fine-tuning seeds of that one model, so they are
    resampled as one pre-trained model's replicates."""
    study = A.get_study("feature-based", seeds=2)
    d = tmp_path / "studies" / study.name
    d.mkdir(parents=True)
    jobs = A.plan(study, d)
    A.write_study(d, study, jobs, mode="foreground")
    for j in jobs:
        if j.kind == "finetune":
            fake_runs.eval(d / j.out, "f1", None, "tagging", restarts=[0.40 + 0.01 * j.seed, 0.41 + 0.01 * j.seed])
        else:
            fake_runs.features(d / j.out, "f1", {c: 0.30 + 0.01 * j.seed for c in j.combines.values()})
    assert A.main(["show", str(d), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    ft = next(f for f in out["findings"] if f["better"] == "Fine-tuning")
    assert ft["ours"]["replicates"] == [4, 2] and ft["ours"]["pretraining_seeds"] == [1, 1]


def test_dev_evaluators_record_per_example_scores_that_make_the_metric(monkeypatch):
    import torch

    import engine.tasks.glue as glue
    import engine.tasks.tagging as tagging
    from engine.records import PER_EXAMPLE
    from engine.tasks.glue import Example, TextTask
    from engine.tasks.tagging import TaggedSentence, entity_counts, make_tagging_task

    task = TextTask("t", "classification", ["0", "1"], [], [Example("a", None, "1"), Example("b", None, "0"),
                                                              Example("c", None, "1")], ("accuracy",))
    monkeypatch.setattr(glue, "predict", lambda *a, **k: [torch.tensor([0.0, 1.0])] * 3)  # always "1"
    monkeypatch.setattr(task, "lengths", lambda tok, ex, n: [1] * len(ex))
    monkeypatch.setattr(task, "collate", lambda tok, n: None)
    prepared = task.prepare(None, 8)
    dev = prepared.evaluate(None, "cpu", 2)
    assert dev[PER_EXAMPLE] == [1, 0, 1] and dev["accuracy"] == pytest.approx(np.mean(dev[PER_EXAMPLE]))
    assert prepared.info["dev_majority_accuracy"] == pytest.approx(2 / 3)  # always "1": the floor

    gold = [TaggedSentence(["a", "b"], ["B-X", "O"]), TaggedSentence(["c", "d"], ["O", "B-X"])]
    pred = [["B-X", "O"], ["B-X", "O"]]
    assert entity_counts([s.tags for s in gold], pred) == [[1, 0, 0], [0, 1, 1]]
    tt = make_tagging_task("t", gold, gold)
    monkeypatch.setattr(tagging, "predict", lambda *a, **k: pred)
    monkeypatch.setattr(tagging, "count_truncated", lambda *a: 0)
    monkeypatch.setattr(tt, "collate", lambda tok, n: None)
    dev = tt.prepare(None, 8).evaluate(None, "cpu", 2)
    assert metric_of(np.array(dev[PER_EXAMPLE])) == pytest.approx(dev["f1"]) == pytest.approx(0.5)


def test_a_finding_on_a_cell_with_jobs_unfinished_is_not_judged_yet():
    c = Contrast("SOP beats NSP on spans", "SOP", "NSP", "span")
    cells = {("SOP", "span"): reps(500, [450, 452, 449]), ("NSP", "span"): reps(500, [400, 398, 402])}
    assert judge(c, cells)["verdict"] == "reproduced"
    e = judge(c, {**cells, ("SOP", "span"): reps(500, [450])}, incomplete={("SOP", "span"): (0, 1)})
    assert e["verdict"] == "inconclusive" and e["incomplete"] is True and e["ours"]["SOP"] == pytest.approx(0.9)
    assert e["note"] == "incomplete, so not judged yet: SOP has 0 of its 1 jobs finished" and e["note"] in A.describe_entry(e)
    # a cell of another finding unfinished does not hold this one back
    assert judge(c, cells, incomplete={("MLM", "span"): (1, 2)})["verdict"] == "reproduced"


def test_incomplete_cells_are_those_with_an_unfinished_evaluation_or_pretraining():
    study = SimpleNamespace(pretrain_columns=("mlm_acc",))
    jobs = [{"kind": "pretrain", "variant": "SOP"}, {"kind": "pretrain", "variant": "NSP"},
            {"kind": "finetune", "variant": "SOP", "evaluation": "span"},
            {"kind": "finetune", "variant": "NSP", "evaluation": "span"},
            {"kind": "finetune", "variant": "NSP", "evaluation": "order"},
            {"kind": "features", "variant": "NSP", "evaluation": "ner", "combines": {"NSP": "last", "SOP": "last"}}]
    states = [{"state": s} for s in ("finished", "cancelled", "finished", "queued", "finished", "finished")]
    held = pretrain_column_name("mlm_acc")
    assert incomplete_cells(study, jobs, states) == {
        ("NSP", held): (0, 1),  # its pre-training cancelled
        ("NSP", "span"): (0, 2), ("NSP", "order"): (1, 2), ("NSP", "ner"): (1, 2)}  # and every downstream cell with it
    assert incomplete_cells(study, jobs, [{"state": "finished"}] * len(jobs)) == {}
