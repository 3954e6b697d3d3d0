"""engine.ablations: studies -> job command lines, Table 8's mask-ratio mapping, reading results back into the
paper's layout, CSV export and the findings checks. Fake run folders are written by the tests; nothing trains."""
import json
import math
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from engine import ablations as A
from engine.errors import EngineError


def flag(argv, name):
    i = argv.index(name)
    return argv[i + 1]


# ------------------------------------------------------------------ Table 8 mapping
@pytest.mark.parametrize("row, ratios", [
    ((80, 10, 10), (0.8, 0.1, 0.1)),
    ((100, 0, 0), (1.0, 0.0, 0.0)),
    ((80, 0, 20), (0.8, 0.2, 0.0)),  # 20% RND -> the RANDOM share (second), SAME (third) 0
    ((80, 20, 0), (0.8, 0.0, 0.2)),  # 20% SAME -> the third share
    ((0, 20, 80), (0.0, 0.8, 0.2)),
    ((0, 0, 100), (0.0, 1.0, 0.0)),
])
def test_table8_rows_map_to_mask_random_same(row, ratios):
    assert A.mask_ratios_for_row(*row) == pytest.approx(ratios)


def test_masking_study_passes_the_six_rows_in_cli_order(tmp_path):
    study = A.get_study("masking", seeds=1)
    jobs = A.plan(study, tmp_path)
    pre = [j for j in jobs if j.kind == "pretrain"]
    assert len(pre) == 6
    got = [flag(j.argv, "--mask-ratios") for j in pre]
    assert got == ["0.8,0.1,0.1", "1,0,0", "0.8,0.2,0", "0.8,0,0.2", "0,0.8,0.2", "0,1,0"]
    assert [j.variant for j in pre][4] == "MASK 0 / SAME 20 / RND 80"
    # the feature-based column goes through `engine features` with the concat of the last three hidden states
    feats = [j for j in jobs if j.kind == "features"]
    assert len(feats) == 6 and all(flag(j.argv, "--combine") == "concat" and flag(j.argv, "--layers") == "-1,-2,-3" for j in feats)
    # every variant is the base model: the override touches the masking only
    assert all("--layers" not in j.argv and flag(j.argv, "--preset") == "tiny" for j in pre)


def test_bad_table8_row_is_refused():
    with pytest.raises(EngineError, match="summing to 100"):
        A.mask_ratios_for_row(80, 10, 20)


# ------------------------------------------------------------------ studies -> jobs
def test_pretraining_tasks_plan(tmp_path):
    study = A.get_study("pretraining-tasks", seeds=2, evaluations=(A.BBC, A.WNUT))
    jobs = A.plan(study, tmp_path)
    pre = [j for j in jobs if j.kind == "pretrain"]
    ft = [j for j in jobs if j.kind == "finetune"]
    # 3 pre-training runs per seed (the BiLSTM row reuses LTR) and 4 rows x 2 tasks of fine-tuning per seed
    assert len(pre) == 6 and len(ft) == 16
    assert [flag(j.argv, "--objective") for j in pre[:3]] == ["mlm+nsp", "mlm", "ltr"]
    assert {flag(j.argv, "--seed") for j in pre} == {"0", "1"}
    bilstm = [j for j in ft if j.variant == "+ BiLSTM"]
    ltr_run = next(j for j in pre if j.variant == "LTR & No NSP" and j.seed == 0)
    assert all("--bilstm" in j.argv for j in bilstm)
    assert flag(bilstm[0].argv, "--model") == flag(ltr_run.argv, "--out")
    assert not any("--bilstm" in j.argv for j in ft if j.variant != "+ BiLSTM")
    # each evaluation comes after the pre-training it uses; outputs are unique and inside the study folder
    order = {flag(j.argv, "--out"): i for i, j in enumerate(jobs)}
    for i, j in enumerate(ft):
        assert order[flag(j.argv, "--model")] < order[flag(j.argv, "--out")]
    outs = [flag(j.argv, "--out") for j in jobs]
    assert len(set(outs)) == len(outs) and all(o.startswith(str(tmp_path)) for o in outs)
    assert {flag(j.argv, "--task") for j in ft} == {"bbc-topic", "wnut16"}


def test_variants_are_overrides_of_the_base():
    study = A.get_study("model-size")
    sizes = [study.pretrain_args(v) for v in study.variants]
    assert [(a.layers, a.hidden, a.heads) for a in sizes] == [(2, 128, 2), (4, 128, 2), (4, 256, 4)]
    assert all(replace(a, layers=None, hidden=None, heads=None) == replace(study.base, layers=None, hidden=None, heads=None) for a in sizes)


def test_lab_scale_is_one_flag_with_its_own_settings(tmp_path, capsys):
    study = A.get_study("pretraining-tasks", scale="lab")
    assert study.scale == "lab" and study.seeds == (0, 1) and study.title.endswith("(lab scale)")
    assert (study.base.preset, study.base.steps, study.base.batch_size, study.base.dupe_factor) == ("mini", 5000, 128, 5)
    assert (study.base.dropout, study.base.mask_rate) == (0.1, 0.15)  # the paper's, for the longer run
    assert [e.task for e in study.evaluations] == ["bbc-cloze", "bbc-punct", "bbc-story", "bbc-topic"]
    assert A.main(["run", "pretraining-tasks", "--lab", "--dry-run", "--runs-root", str(tmp_path)]) == 0
    lines = [l.split() for l in capsys.readouterr().out.splitlines() if l.startswith("python -m engine")]
    pre = [l for l in lines if l[3] == "pretrain"]
    ft = [l for l in lines if l[3] == "finetune"]
    assert len(pre) == 6 and len(ft) == 2 * 4 * 4  # two seeds; four rows x four tasks per seed
    assert all(flag(l, "--preset") == "mini" and flag(l, "--steps") == "5000" for l in pre)
    assert all("--max-train" not in l and flag(l, "--lr") == "0.0003" for l in ft)  # every training example
    assert flag(pre[0], "--out").startswith(str(tmp_path.absolute() / "studies" / "pretraining-tasks" / "runs"))
    with pytest.raises(SystemExit) as e:
        A.main(["run", "pretraining-tasks", "--lab", "--classroom", "--dry-run"])
    assert e.value.code == 2 and "not allowed with" in capsys.readouterr().err
    with pytest.raises(EngineError, match="unknown scale 'huge'"):
        A.get_study("masking", scale="huge")
    # the scale goes into study.json and comes back; an older study.json's classroom flag reads as the scale
    back = A.study_from_dict(json.loads(json.dumps(study.to_dict())))
    assert back.scale == "lab" and back == study
    old = A.get_study("masking", scale="classroom").to_dict()
    old.pop("scale")
    assert A.study_from_dict({**old, "classroom": True}).scale == "classroom"


def test_classroom_scale_fits_the_hour():
    study = A.get_study("pretraining-tasks", scale="classroom")
    assert study.scale == "classroom" and study.seeds == (0,)
    # the pre-training runs: the paper's short-then-long schedule scaled down (32 tokens, then 128 for the last 30%),
    # every other setting the classroom default of `python -m engine pretrain` (the learning rate too)
    from engine.pretraining.config import PretrainConfig
    b = study.base
    # BERT 6,000 steps (twice the recipe's), the other rows at its FLOPs (engine/ablations/paper.py: why)
    assert (b.preset, b.steps, b.batch_size, b.seq_len, b.phase2_seq_len, b.phase2_fraction) == ("tiny", 6000, 64, 32, 128, 0.3)
    assert study.budget == "flops"
    assert b.save_every == 750  # an eighth of the steps, as every classroom study's (study.checkpoint_cadence)
    own = PretrainConfig.classroom()
    assert replace(b, steps=own.steps, save_every=own.save_every) == own
    # span, token (right context), a sentence pair (same story?), and the topic control
    assert [e.task for e in study.evaluations] == ["bbc-cloze", "bbc-punct", "bbc-story", "bbc-topic"]
    jobs = A.plan(study, "/x")
    assert sum(j.kind == "pretrain" for j in jobs) == 3 and sum(j.kind == "finetune" for j in jobs) == 16
    ft = [j for j in jobs if j.kind == "finetune"]
    assert all(flag(j.argv, "--lr").count(",") == 0 and flag(j.argv, "--epochs").count(",") == 0 for j in ft)
    assert all(flag(j.argv, "--restarts") == "3" for j in ft)  # the replicates each verdict resamples
    assert {(c.better, c.worse, c.column) for c in study.findings()} >= {
        ("BERT (MLM + NSP)", "LTR & No NSP", "BBC cloze span (F1)"), ("BERT (MLM + NSP)", "No NSP", "BBC same story (acc)"),
        ("BERT (MLM + NSP)", "LTR & No NSP", "BBC punctuation (F1)"), ("+ BiLSTM", "LTR & No NSP", "BBC cloze span (F1)")}


def test_every_pretraining_study_evaluates_corpus_made_tasks_at_classroom_scale(tmp_path):
    """Tables 6 and 8 and Figure 5 use the tasks made from BBC News (dev texts held out of pre-training), and
    every contrast a study judges names one of its own columns and two of its rows."""
    made = {"bbc-cloze", "bbc-punct", "bbc-next", "bbc-story", "bbc-topic"}
    for name, tasks in (("model-size", ["bbc-cloze", "bbc-topic"]), ("masking", ["bbc-punct", "bbc-punct"]),
                        ("training-steps", ["bbc-cloze"])):
        study = A.get_study(name, scale="classroom")
        assert [e.task for e in study.evaluations] == tasks and set(tasks) <= made
        assert study.findings() == study.contrasts and study.contrasts, name  # none dropped for a missing column
    masking = A.plan(A.get_study("masking", scale="classroom"), tmp_path)
    feats = [j for j in masking if j.kind == "features"]
    assert len(feats) == 6 and all(flag(j.argv, "--task") == "bbc-punct" and flag(j.argv, "--combine") == "concat"
                                   and flag(j.argv, "--max-train") == "1000" for j in feats)
    # its fine-tuning has the same smaller cap (six 4-layer rows: the hour), the other studies the scale's 1,500
    assert {flag(j.argv, "--max-train") for j in masking if j.kind == "finetune"} == {"1000"}
    assert A.get_study("model-size", scale="classroom").finetune.max_train == 1500
    assert A.get_study("masking", scale="lab").finetune.max_train is None


def test_classroom_epochs_and_the_epochs_override(tmp_path):
    """Table 7 trains longer at classroom scale than the scale's 5 epochs (its 5-epoch run stopped before the
    plateau), the fine-tuning and the feature-based BiLSTM alike; `--epochs` sets both for any study; the other
    studies, the lab scale and the study as defined keep theirs, and the setting survives study.json."""
    t7 = A.plan(A.get_study("feature-based", scale="classroom"), tmp_path / "t7")
    assert {flag(j.argv, "--epochs") for j in t7 if j.kind in ("finetune", "features")} == {"15"}
    for name in ("pretraining-tasks", "model-size", "masking", "training-steps"):
        assert A.get_study(name, scale="classroom").finetune.epochs == (5,), name
    t8 = A.plan(A.get_study("masking", scale="classroom"), tmp_path / "t8")
    assert {flag(j.argv, "--epochs") for j in t8 if j.kind in ("finetune", "features")} == {"5"}  # features: its own
    t8 = A.plan(A.get_study("masking", scale="classroom", epochs=7), tmp_path / "t8x")
    assert {flag(j.argv, "--epochs") for j in t8 if j.kind in ("finetune", "features")} == {"7"}
    assert A.get_study("masking", scale="lab").finetune.epochs == (4,)
    assert A.get_study("feature-based").finetune.epochs == (3,) and A.feature_epochs(A.get_study("feature-based")) == 5
    from engine.ablations.folders import study_from_dict
    study = A.get_study("masking", scale="classroom", epochs=7)
    back = study_from_dict(json.loads(json.dumps(study.to_dict())))
    assert back.feature_epochs == 7 and back.finetune == study.finetune
    for bad in (0, -2):
        with pytest.raises(EngineError, match="--epochs"):
            A.get_study("masking", scale="classroom", epochs=bad)


def test_cli_epochs_flag(tmp_path, capsys):
    assert A.main(["run", "masking", "--classroom", "--epochs", "7", "--dry-run", "--runs-root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "epochs 7" in out and "feature classifier 7 epochs" in out  # the description says it
    assert f"python -m engine ablate estimate masking --epochs 7 --runs-root {tmp_path} (" in out  # estimates these settings
    assert A.main(["run", "training-steps", "--classroom", "--steps", "12000", "--dry-run", "--runs-root", str(tmp_path)]) == 0
    assert f"ablate estimate training-steps --steps 12000 --runs-root {tmp_path} (" in capsys.readouterr().out
    lines = [l.split() for l in out.splitlines() if l.startswith("python -m engine")]
    evals = [l for l in lines if l[3] in ("finetune", "features")]
    assert len(evals) == 12 and {flag(l, "--epochs") for l in evals} == {"7"}
    with pytest.raises(EngineError, match="--epochs"):
        A.main(["run", "masking", "--classroom", "--epochs", "0", "--dry-run", "--runs-root", str(tmp_path)])


def test_training_steps_evaluates_each_checkpoint(tmp_path):
    study = A.get_study("training-steps", scale="classroom")
    jobs = A.plan(study, tmp_path)
    pre = [j for j in jobs if j.kind == "pretrain"]
    ft = [j for j in jobs if j.kind == "finetune"]
    k = study.base.steps
    assert study.checkpoint_steps == (k // 4, k // 2, k)
    assert all(int(flag(j.argv, "--save-every")) == k // 8 for j in pre)  # 375: the quarters among its checkpoints
    models = [flag(j.argv, "--model") for j in ft if j.variant == "LTR"]
    assert [Path(m).name for m in models] == [f"step-{s}" for s in study.checkpoint_steps]
    assert all(Path(m).parent.name == "checkpoints" for m in models)


def test_feature_based_study_extracts_once_per_seed():
    study = A.get_study("feature-based", seeds=2)
    jobs = A.plan(study, "/s")
    assert not any(j.kind == "pretrain" for j in jobs)
    assert [j.kind for j in jobs] == ["finetune", "features"] * 2
    feats = jobs[1]
    assert flag(feats.argv, "--combine") == "embeddings,second-to-last,last,weighted,concat,all-weighted"
    assert flag(feats.argv, "--layers") == "-1,-2,-3,-4" and flag(feats.argv, "--task") == "wnut16"
    assert feats.combines == {v.name: v.features.combine for v in study.variants[1:]}
    assert all(flag(j.argv, "--model") == "minilm" for j in jobs)


def test_shared_evaluations_only_when_files_exist(tmp_path):
    assert A.shared_evaluations(tmp_path) == []
    (tmp_path / "rte").mkdir()
    (tmp_path / "rte" / "train.tsv").write_text("x")
    (tmp_path / "rte" / "dev.tsv").write_text("x")
    evs = A.shared_evaluations(tmp_path)
    assert [e.name for e in evs] == ["RTE (acc)"] and evs[0].task == "glue" and evs[0].train.endswith("train.tsv")


def test_unknown_study_and_bad_seeds():
    with pytest.raises(EngineError, match="unknown study"):
        A.get_study("table-9")
    with pytest.raises(EngineError, match="at least 1"):
        A.get_study("masking", seeds=0)


def test_study_json_round_trip(tmp_path):
    for name in A.STUDIES:
        s = A.get_study(name, scale="classroom")
        back = A.study_from_dict(json.loads(json.dumps(s.to_dict())))
        assert back == s
        assert back.finding_check is s.finding_check is not None  # each built-in study carries its own check
        assert [j.argv for j in A.plan(back, tmp_path)] == [j.argv for j in A.plan(s, tmp_path)]


# ------------------------------------------------------------------ results
def make_study(tmp_path, name="pretraining-tasks", seeds=2, evaluations=(A.BBC, A.WNUT)):
    study = A.get_study(name, seeds=seeds, evaluations=evaluations)
    d = tmp_path / "studies" / name
    d.mkdir(parents=True)
    jobs = A.plan(study, d)
    A.write_study(d, study, jobs, mode="foreground")
    return study, d, jobs


def test_collect_results_paper_layout(tmp_path, fake_runs):
    study, d, jobs = make_study(tmp_path)
    fake_runs.fill_table5(d, jobs)
    res = A.collect_results(d)
    assert list(res.table.index) == [v.name for v in study.variants]
    assert list(res.table.columns) == [A.BBC.name, A.WNUT.name, "held-out acc at [MASK]"]
    # mean of 0.90 and 0.91, sample std 0.00707, n=2, shown in percent
    assert res.table.loc["BERT (MLM + NSP)", A.BBC.name] == "90.5 ± 0.7 (n=2)"
    # whether the MLM models learned any context; a left-to-right model has no [MASK]
    assert res.table.loc["No NSP", "held-out acc at [MASK]"] == "5.0 ± 0.0 (n=2)"
    assert res.table.loc["LTR & No NSP", "held-out acc at [MASK]"] == "–"
    row = res.summary[(res.summary["variant"] == "No NSP") & (res.summary["column"] == A.WNUT.name)].iloc[0]
    assert row["mean"] == pytest.approx(0.285) and row["std"] == pytest.approx(0.00707, abs=1e-4) and row["n"] == 2
    assert len(res.scores) == 16 + 4  # 8 cells x 2 seeds, and [MASK] accuracy of the two MLM runs x 2 seeds
    # pre-training curves of the three pre-trained variants, train and held-out
    assert set(res.curves["variant"]) == {"BERT (MLM + NSP)", "No NSP", "LTR & No NSP"}
    ev = res.curves[(res.curves["split"] == "eval") & (res.curves["metric"] == "mlm_loss")]
    assert sorted(ev["value"]) == [4.0, 4.0, 5.0, 5.0]
    assert set(res.curves[res.curves["variant"] == "LTR & No NSP"]["metric"]) >= {"lm_loss", "lm_ppl"}
    # every point carries the three x axes; a held-out point those of the training record at its step
    assert list(A.CURVE_X) == ["step", "tokens", "elapsed"] and res.curves[list(A.CURVE_X)].notna().all().all()
    assert set(ev["tokens"]) == {40960} and set(ev["elapsed"]) == {20.0}
    assert res.progress["total"] == len(jobs) and res.progress["finished"] == len(jobs)
    final = A.final_pretrain_metrics(res.curves)
    assert len(final) == 6 and set(final.columns) >= {"variant", "seed", "step", "mlm_acc", "mlm_ppl", "mlm_mask_acc", "lm_acc"}
    ltr = final[(final["variant"] == "LTR & No NSP") & (final["seed"] == 1)].iloc[0]
    assert ltr["step"] == 20 and ltr["lm_ppl"] == pytest.approx(math.exp(4.0), rel=1e-3)


def test_a_cell_is_the_mean_and_spread_of_its_restarts(tmp_path, fake_runs):
    """Classroom scale: one pre-training seed, 3 fine-tuning restarts per cell; the cell is their mean ± std (n=3),
    not the best restart."""
    study, d, jobs = make_study(tmp_path, seeds=1)
    fake_runs.fill_table5(d, jobs)
    ft = next(j for j in jobs if j.variant == "No NSP" and j.evaluation == A.BBC.name)
    fake_runs.eval(d / ft.out, "accuracy", None, restarts=[0.70, 0.80, 0.90])
    res = A.collect_results(d)
    assert res.table.loc["No NSP", A.BBC.name] == "80.0 ± 10.0 (n=3)"
    assert res.table.loc["BERT (MLM + NSP)", A.BBC.name] == "90.0 ± 0.0 (n=1)"


def test_findings_reproduced_and_not(tmp_path, fake_runs):
    study, d, jobs = make_study(tmp_path, seeds=1)
    fake_runs.fill_table5(d, jobs)
    checks = A.collect_results(d).checks
    assert len(checks) == 3 and all(c["holds"] is True for c in checks), checks
    # now LTR beats No NSP on WNUT: "MLM > LTR on every task" must fail, the others still hold
    bad = dict(fake_runs.TABLE5, **{"LTR & No NSP": (0.70, 0.40)})
    study, d2, jobs = make_study(tmp_path / "b", seeds=1)
    fake_runs.fill_table5(d2, jobs, bad)
    checks = {c["claim"]: c["holds"] for c in A.collect_results(d2).checks}
    assert checks["No NSP > LTR & No NSP on every task (MLM beats left-to-right)"] is False
    assert checks["BERT (MLM + NSP) ≥ No NSP on average (removing NSP hurts)"] is True


def test_a_task_where_both_score_zero_is_ignored(tmp_path, fake_runs):
    table = {k: (bbc, 0.0) for k, (bbc, _) in fake_runs.TABLE5.items()}  # nobody finds an entity
    study, d, jobs = make_study(tmp_path, seeds=1)
    fake_runs.fill_table5(d, jobs, table, noise=0.0)
    checks = A.collect_results(d).checks
    assert all(c["holds"] is True for c in checks), checks
    assert all("ignored (both 0): WNUT-16 NER (F1)" in c["detail"] for c in checks)


def test_partial_results_say_not_enough(tmp_path, fake_runs):
    study, d, jobs = make_study(tmp_path, seeds=1)
    fake_runs.eval(d / jobs[1].out, "accuracy", 0.9)  # one finished evaluation only
    res = A.collect_results(d)
    assert res.table.loc["No NSP", A.BBC.name] == "–"
    assert res.table.loc["BERT (MLM + NSP)", A.BBC.name] == "90.0 ± 0.0 (n=1)"
    assert all(c["holds"] is None for c in res.checks)
    assert res.progress["finished"] == 1 and res.progress["queued"] == len(jobs) - 1


def test_csv_export(tmp_path, fake_runs):
    study, d, jobs = make_study(tmp_path)
    fake_runs.fill_table5(d, jobs)
    res = A.collect_results(d)
    path = tmp_path / "out.csv"
    res.to_csv(path)
    df = pd.read_csv(path)
    assert list(df.columns) == ["variant", "column", "step", "mean", "std", "n"]
    assert len(df) == 8 + 2  # 4 variants x 2 columns, and [MASK] accuracy of the two MLM variants
    r = df[(df["variant"] == "LTR & No NSP") & (df["column"] == A.BBC.name)].iloc[0]
    assert r["mean"] == pytest.approx(0.705) and r["n"] == 2


def test_model_size_perplexity_column_and_check(tmp_path, fake_runs):
    study, d, jobs = make_study(tmp_path, "model-size", seeds=1)
    ppl_loss = {"L=2 H=128 A=2": 6.0, "L=4 H=128 A=2": 5.5, "L=4 H=256 A=4": 5.0}
    score = {"L=2 H=128 A=2": 0.80, "L=4 H=128 A=2": 0.82, "L=4 H=256 A=4": 0.85}
    for j in jobs:
        if j.kind == "pretrain":
            fake_runs.pretrain(d / j.out, ppl_loss[j.variant])
        else:
            fake_runs.eval(d / j.out, "accuracy" if j.evaluation == A.BBC.name else "f1", score[j.variant])
    res = A.collect_results(d)
    assert "held-out MLM ppl" in res.table.columns
    assert res.table.loc["L=4 H=256 A=4", "held-out MLM ppl"] == f"{math.exp(5.0):.2f} ± 0.00 (n=1)"
    checks = {c["claim"]: c["holds"] for c in res.checks}
    assert checks["held-out MLM perplexity falls with size"] is True
    assert checks["L=4 H=256 A=4 ≥ L=2 H=128 A=2 on every task (bigger is better)"] is True


def test_training_steps_table_and_checks(tmp_path, fake_runs):
    study = A.get_study("training-steps", scale="classroom")
    d = tmp_path / "studies" / "fig5"
    d.mkdir(parents=True)
    jobs = A.plan(study, d)
    A.write_study(d, study, jobs, mode="foreground")
    for j in jobs:
        if j.kind == "pretrain":
            fake_runs.pretrain(d / j.out, 5.0)
        else:
            base = 0.6 if j.variant == "LTR" else 0.7
            fake_runs.eval(d / j.out, "f1", base + j.step / 10000, "span")
    res = A.collect_results(d)
    steps = study.checkpoint_steps
    assert study.evaluations == (A.CLOZE,)  # span extraction, where the missing right context shows
    assert list(res.table.columns) == [f"{A.CLOZE.name} @ {k}" for k in steps]
    assert set(res.summary["step"]) == set(steps)
    checks = {c["claim"]: c["holds"] for c in res.checks}
    assert checks["MLM (BERT): more pre-training steps score higher"] is True
    assert checks["MLM (BERT) > LTR at the last checkpoint"] is True


def test_feature_based_and_masking_checks(tmp_path, fake_runs):
    study, d, jobs = make_study(tmp_path, "feature-based", seeds=1, evaluations=(A.WNUT,))
    vals = {"Fine-tuning": 0.40, "Embeddings": 0.10, "Second-to-last hidden": 0.30, "Last hidden": 0.28,
            "Weighted sum last four hidden": 0.33, "Concat last four hidden": 0.35, "Weighted sum all layers": 0.32}
    for j in jobs:
        if j.kind == "features":
            fake_runs.features(d / j.out, "f1", {c: vals[v] for v, c in j.combines.items()})
        else:
            fake_runs.eval(d / j.out, "f1", vals[j.variant], "tagging")
    res = A.collect_results(d)
    assert res.table.loc["Concat last four hidden", A.WNUT.name] == "35.0 ± 0.0 (n=1)"
    assert res.table.loc["Embeddings", A.WNUT.name] == "10.0 ± 0.0 (n=1)"
    assert [c["holds"] for c in res.checks] == [True, True, True]
    emb = next(f for f in res.findings if f["worse"] == "Embeddings")
    assert emb["verdict"] == "inconclusive" and emb["ours"]["interval_95"] is None  # one score each, nothing to resample

    # with per-sentence entity counts, as a real features run keeps them, the same contrast gets an interval
    concat = [[1, 0, 0]] * 35 + [[0, 1, 1]] * 65  # F1 = 2*35 / (2*35 + 65 + 65) = 0.35
    emb_counts = [[1, 0, 0]] * 10 + [[0, 2, 2]] * 90  # F1 = 20 / (20 + 360) = 0.053
    for j in jobs:
        if j.kind == "features":
            fake_runs.features(d / j.out, "f1", {c: vals[v] for v, c in j.combines.items()},
                               per_example={"concat": concat, "embeddings": emb_counts})
    emb = next(f for f in A.collect_results(d).findings if f["worse"] == "Embeddings")
    assert emb["ours"]["resampled"] == "replicates+examples" and emb["ours"]["dev_examples"] == 100
    assert emb["verdict"] == "reproduced" and emb["ours"]["interval_95"][0] > 0

    study, d, jobs = make_study(tmp_path / "m", "masking", seeds=1, evaluations=None)
    ft = {0: 0.80, 1: 0.81, 2: 0.80, 3: 0.79, 4: 0.80, 5: 0.70}  # RND-only far below: not robust, and worse
    rows = [v.name for v in study.variants]
    for j in jobs:
        if j.kind == "pretrain":
            fake_runs.pretrain(d / j.out, 5.0)
        elif j.kind == "features":  # the feature-based column: concat of the last three, MASK-only hurts
            fake_runs.features(d / j.out, "f1", {"concat": 0.5 if j.variant == rows[1] else 0.6})
        else:
            fake_runs.eval(d / j.out, "accuracy" if j.evaluation == A.BBC.name else "f1", ft[rows.index(j.variant)])
    res = A.collect_results(d)
    fb = A.PUNCT_FEATURES.name
    assert res.table.loc[rows[1], fb] == "50.0 ± 0.0 (n=1)" and res.table.loc[rows[0], fb] == "60.0 ± 0.0 (n=1)"
    checks = {c["claim"].split(" (")[0]: c["holds"] for c in res.checks}
    assert checks["feature-based: MASK 80 / SAME 10 / RND 10 ≥ MASK 100 / SAME 0 / RND 0"] is True
    assert checks["fine-tuning is robust to the masking strategy"] is False
    assert checks["MASK 80 / SAME 10 / RND 10 > MASK 0 / SAME 0 / RND 100"] is True


def test_best_score_reads_the_eval_json_fields_the_engine_writes():
    """engine.records defines eval.json: "dev" holds the best trial's (or combination's) dev metrics."""
    assert A.best_score({"score": 0.5, "metric": "f1", "dev": {"f1": 0.5, "accuracy": 0.9}}, "accuracy") == 0.9
    assert A.best_score({"dev": {"mcc": 0.2}}, "mcc") == 0.2
    assert A.best_score({"status": "running", "dev": None, "trials": []}, "f1") is None  # no trial finished yet
    assert A.best_score({"dev": {"f1": 0.5}}, "accuracy") is None  # a metric the task does not report
    assert A.best_score({}, "f1") is None
    features = {"results": [{"combine": "concat", "dev": {"f1": 0.4}}, {"combine": "sum", "dev": {"f1": 0.3}}]}
    assert A.combination_score(features, "sum", "f1") == 0.3 and A.combination_score(features, "last", "f1") is None


# ------------------------------------------------------------------ CLI
def test_cli_dry_run_and_show(tmp_path, capsys, fake_runs):
    assert A.main(["run", "pretraining-tasks", "--classroom", "--dry-run", "--runs-root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    lines = [l for l in out.splitlines() if l.startswith("python -m engine ")]
    first = lines[0].split()
    assert len(lines) == 19 and first[:4] == ["python", "-m", "engine", "pretrain"]
    # the printed run folders are the ones `run` would write: <runs-root>/studies/<study>/runs/...
    assert flag(first, "--out").startswith(str(tmp_path.absolute() / "studies" / "pretraining-tasks" / "runs"))
    assert (flag(first, "--corpus"), flag(first, "--preset"), flag(first, "--objective")) == ("bbc", "tiny", "mlm+nsp")
    assert not (tmp_path / "studies").exists()  # a dry run writes nothing

    study, d, jobs = make_study(tmp_path)
    fake_runs.fill_table5(d, jobs)
    csv = tmp_path / "t5.csv"
    assert A.main(["show", str(d), "--csv", str(csv)]) == 0
    out = capsys.readouterr().out
    assert "90.5 ± 0.7 (n=2)" in out and csv.is_file()
    # the verdicts first, then the direction of the means, said to be no verdict
    assert out.index("verdicts (") < out.index("the direction of the means, without their uncertainty (a hint, not a verdict)")
    assert "[holds] " in out and "[yes]" not in out


def test_cli_show_on_a_non_study_is_one_line_error(tmp_path):
    with pytest.raises(EngineError, match="not a study folder"):
        A.main(["show", str(tmp_path)])


@pytest.mark.slow
def test_foreground_run_records_failures(tmp_path, monkeypatch):
    """--foreground runs each job as `python -m engine ...`; a failing command is recorded with its error (the one
    its run.json says)."""
    study = A.get_study("feature-based", seeds=1, evaluations=(A.WNUT,))
    study = replace(study, variants=study.variants[:1], model=str(tmp_path / "no-such-model"))
    d = A.launch(study, runs_root=tmp_path, foreground=True, log=lambda *a: None)
    data = A.read_study(d)
    assert d.parent == tmp_path / "studies" and len(data["jobs"]) == 1
    job = data["jobs"][0]
    assert job["status"] == "failed" and job["rc"] == 2 and "no-such-model' does not exist" in job["error"]  # its run.json's
    states = A.job_states(d)
    assert states[0]["state"] == "failed"
    # a second launch of the same study gets its own folder
    assert A.new_study_dir(study, tmp_path).name == d.name + "-2"


def test_launch_queues_jobs(tmp_path, monkeypatch):
    """Queued mode hands every job to engine.jobs.submit with its run folder, in order, and keeps the ids."""
    import engine.jobs as Q
    calls = []

    def fake_submit(argv, name=None, run_dir=None, root=None, **kw):
        calls.append((argv, name, run_dir, root))
        return {"id": f"id{len(calls)}"}
    monkeypatch.setattr(Q, "submit", fake_submit)
    monkeypatch.setattr(Q, "list_jobs", lambda root=None: [
        {"id": "id1", "status": "running", "run_dir": calls[0][2], "error": None},
        {"id": "id2", "status": "failed", "run_dir": calls[1][2], "error": "error: boom"}])
    study = A.get_study("pretraining-tasks", scale="classroom")
    d = A.launch(study, runs_root=tmp_path, log=lambda *a: None)
    assert len(calls) == 19 and all(c[3] == tmp_path.absolute() for c in calls)
    data = A.read_study(d)
    # every job is queued as `ablate job` (reuse's check, and the check that its pre-training finished, when it
    # starts), each in its own run folder
    assert all(c[0][:2] == ["ablate", "job"] and c[0][2] == str(d.absolute()) for c in calls)
    assert [c[0][3] for c in calls] == [j["key"] for j in data["jobs"]]
    assert [c[2] for c in calls] == [str(d / j["out"]) for j in data["jobs"]]
    assert [j["job_id"] for j in data["jobs"]] == [f"id{i}" for i in range(1, 20)]
    states = A.job_states(d)
    assert states[0]["state"] == "running" and states[1]["state"] == "failed" and states[1]["error"] == "error: boom"
    assert states[2]["state"] == "queued"
    assert A.list_studies(tmp_path)[0]["name"] == d.name


def test_equal_flops_gives_cheaper_steps_more_steps(tmp_path):
    from engine.ablations.planner import pretrain_config, run_flops, step_flops
    study = replace(A.get_study("pretraining-tasks", scale="classroom"), budget="flops")
    jobs = {j.variant: j for j in A.plan(study, tmp_path) if j.kind == "pretrain"}
    steps = {v: int(flag(j.argv, "--steps")) for v, j in jobs.items()}
    bert, nonsp, ltr = (study.pretrain_args(study.variant(n)) for n in ("BERT (MLM + NSP)", "No NSP", "LTR & No NSP"))
    assert steps["BERT (MLM + NSP)"] == bert.steps  # the reference keeps its steps
    # LTR's head predicts every position (MLM: 15%), so its step costs more and it gets fewer steps
    assert step_flops(ltr) > step_flops(bert) > step_flops(nonsp)
    assert steps["LTR & No NSP"] < bert.steps <= steps["No NSP"]  # NSP adds only the pooler and a 2-way classifier
    for v, cfg in (("No NSP", nonsp), ("LTR & No NSP", ltr)):  # the whole runs' FLOPs equal within one long step's
        long_step = step_flops(replace(cfg, seq_len=cfg.phase2_seq_len))  # both phases counted (32 and 128 tokens)
        assert abs(run_flops(replace(cfg, steps=steps[v])) - run_flops(bert)) <= long_step
    assert steps["LTR & No NSP"] == round(bert.steps * run_flops(bert) / run_flops(replace(ltr, steps=bert.steps)))
    assert pretrain_config(replace(study, budget="steps"), study.variant("LTR & No NSP")).steps == bert.steps


def test_equal_time_gives_every_run_the_same_minutes(tmp_path, capsys):
    study = replace(A.get_study("pretraining-tasks", scale="classroom"), budget="time", budget_minutes=12.5)
    pre = [j for j in A.plan(study, tmp_path) if j.kind == "pretrain"]
    assert len(pre) == 3 and all(flag(j.argv, "--max-minutes") == "12.5" for j in pre)
    assert len({flag(j.argv, "--steps") for j in pre}) == 1
    with pytest.raises(EngineError, match="--budget-minutes"):
        A.plan(replace(study, budget_minutes=None), tmp_path)
    with pytest.raises(EngineError, match="budget steps"):
        A.plan(replace(A.get_study("training-steps", scale="classroom"), budget="flops"), tmp_path)
    # the command line: --budget time --budget-minutes M, saved in study.json and read back
    assert A.main(["run", "pretraining-tasks", "--classroom", "--budget", "time", "--budget-minutes", "12.5",
                   "--dry-run", "--runs-root", str(tmp_path)]) == 0
    assert "--max-minutes 12.5" in capsys.readouterr().out
    back = A.study_from_dict(study.to_dict())
    assert (back.budget, back.budget_minutes) == ("time", 12.5)
    with pytest.raises(EngineError, match="--budget time"):
        A.main(["run", "pretraining-tasks", "--budget-minutes", "3", "--dry-run", "--runs-root", str(tmp_path)])


def test_tasks_flag_knows_the_corpus_made_tasks(tmp_path, capsys):
    assert A.main(["run", "pretraining-tasks", "--classroom", "--tasks", "bbc-cloze,bbc-next", "--dry-run",
                   "--runs-root", str(tmp_path)]) == 0
    tasks = {flag(l.split(), "--task") for l in capsys.readouterr().out.splitlines() if l.startswith("python -m engine finetune")}
    assert tasks == {"bbc-cloze", "bbc-next"}


def test_steps_override_moves_figure5_checkpoints_in_the_cli_and_the_planner(capsys):
    """--steps on a study that evaluates checkpoints takes them at a quarter, half and all of the new steps (the CLI
    once kept 750/1,500/3,000 for a 1,000-step run: checkpoints that never exist); one rule, `with_steps`."""
    study = A.with_steps(A.get_study("training-steps", scale="classroom"), 1000)
    assert study.checkpoint_steps == (250, 500, 1000) and study.base.save_every == 125  # checkpoint_cadence
    assert A.get_study("training-steps", scale="classroom").checkpoint_steps == (750, 1500, 3000)  # at_scale, same rule
    from engine.ablations.cli import main
    assert main(["run", "training-steps", "--classroom", "--steps", "1000", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "step-1000" in out and "step-3000" not in out and "--save-every 125" in out
    with pytest.raises(EngineError, match="--steps must be"):
        A.with_steps(study, 0)


def _fake_jobs(tmp_path, monkeypatch, fail=()):
    """Replace each job's command by a short Python process that logs its start and end and writes the output a
    finished job leaves (run.json or eval.json); a key in `fail` exits 1 instead."""
    import sys
    from engine.ablations import runner
    trace = tmp_path / "trace.txt"

    def fake_command(study_dir, job):
        out = Path(study_dir) / job["out"]
        name = "run.json" if job["kind"] == "pretrain" else "eval.json"
        record = '{"kind": "pretrain", "status": "finished"}' if job["kind"] == "pretrain" else "{}"
        code = (f"import time, pathlib, sys; t = pathlib.Path({str(trace)!r}); k = {job['key']!r}\n"
                "with t.open('a') as f: f.write(f'start {k} {time.time()}\\n')\n"
                "time.sleep(0.4)\n"
                f"ok = k not in {list(fail)!r}\n"
                f"if ok: pathlib.Path({str(out / name)!r}).write_text({record!r})\n"
                "with t.open('a') as f: f.write(f'end {k} {time.time()}\\n')\n"
                "sys.exit(0 if ok else 1)\n")
        return [sys.executable, "-c", code]
    monkeypatch.setattr(runner, "job_command", fake_command)
    return trace


def _spans(trace):
    spans = {}
    for line in trace.read_text().splitlines():
        what, key, t = line.split(" ")
        spans.setdefault(key, {})[what] = float(t)
    return spans


def test_parallel_foreground_waits_for_each_model_and_caps_the_running_jobs(tmp_path, monkeypatch):
    """--parallel 3: the three pre-training runs start together, no fine-tune starts before its model finished,
    never more than three jobs run at once, and every job is recorded finished."""
    trace = _fake_jobs(tmp_path, monkeypatch)
    study = A.get_study("pretraining-tasks", scale="classroom", evaluations=(A.BBC,))
    d = A.launch(study, runs_root=tmp_path, foreground=True, log=lambda *a: None, parallel=3)
    spans = _spans(trace)
    data = A.read_study(d)
    assert len(data["jobs"]) == 7 and all(j["status"] == "finished" for j in data["jobs"])
    pre = {j["key"]: j for j in data["jobs"] if j["kind"] == "pretrain"}
    assert max(spans[k]["start"] for k in pre) < min(spans[k]["end"] for k in pre)  # all three ran together
    for j in data["jobs"]:
        if j["kind"] != "pretrain":
            src = next(k for k, p in pre.items() if flag(j["argv"], "--model") == str(d / p["out"]))
            assert spans[j["key"]]["start"] >= spans[src]["end"]
    events = sorted((t, +1 if w == "start" else -1) for s in spans.values() for w, t in s.items())
    running, peak = 0, 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    assert peak == 3


def test_a_failed_pretraining_skips_its_fine_tunes_and_resume_reruns_only_those(tmp_path, monkeypatch, capsys):
    """The fine-tunes of a failed pre-training run are recorded failed with a one-line reason and not run; the
    other rows go on; `ablate resume --parallel 2` then runs just the unfinished jobs."""
    study = A.get_study("pretraining-tasks", scale="classroom", evaluations=(A.BBC,))
    ltr = next(j.key for j in A.plan(study, tmp_path) if j.kind == "pretrain" and j.variant.startswith("LTR"))
    trace = _fake_jobs(tmp_path, monkeypatch, fail=(ltr,))
    d = A.launch(study, runs_root=tmp_path, foreground=True, log=lambda *a: None, parallel=2)
    states = {j["key"]: j for j in A.read_study(d)["jobs"]}
    assert states[ltr]["status"] == "failed"
    skipped = [j for j in states.values() if j["status"] == "failed" and j["key"] != ltr]
    assert len(skipped) == 2 and all(j["error"].startswith(f"not run: {ltr} failed") for j in skipped)
    assert not any(j["key"] in _spans(trace) for j in skipped)
    assert sum(j["status"] == "finished" for j in states.values()) == 4
    from engine.ablations.cli import _failed_jobs, main
    assert _failed_jobs(d) == 1  # the command's exit status: a script (or the queue) sees the failure
    assert capsys.readouterr().err.startswith(f"error: 3 of 7 jobs did not finish (first: {ltr}: ")
    trace = _fake_jobs(tmp_path, monkeypatch)
    trace.write_text("")
    assert main(["resume", str(d), "--parallel", "2"]) == 0
    assert set(_spans(trace)) == {ltr} | {j["key"] for j in skipped}
    assert all(j["status"] == "finished" for j in A.read_study(d)["jobs"])
    with pytest.raises(EngineError, match="--parallel 0: give a number of jobs >= 1"):
        main(["run", "pretraining-tasks", "--classroom", "--parallel", "0", "--runs-root", str(tmp_path)])


def test_a_queued_parallel_study_is_one_queue_job_that_resumes_it(tmp_path, monkeypatch, fake_runs):
    """Without --foreground, --parallel N queues one job, `ablate resume STUDY --parallel N`, writing to the study
    folder (the queue itself runs one job at a time and knows no dependencies); while it runs the jobs' states come
    from study.json and the run folders, and when it was cancelled the jobs it never started say so."""
    import engine.jobs as Q
    calls = []
    monkeypatch.setattr(Q, "submit", lambda argv, name=None, run_dir=None, root=None, **kw: calls.append((argv, run_dir)) or {"id": "r1"})
    study = A.get_study("pretraining-tasks", scale="lab", seeds=1, evaluations=(A.BBC,))
    d = A.launch(study, runs_root=tmp_path, log=lambda *a: None, parallel=4)
    assert calls == [(["ablate", "resume", str(d.absolute()), "--parallel", "4"], str(d))]
    assert A.read_study(d)["mode"] == "parallel"
    runner = {"id": "r1", "status": "running", "run_dir": str(d.absolute()), "error": None}
    monkeypatch.setattr(Q, "list_jobs", lambda root=None: [runner])
    fake_runs.pretrain(d / next(j["out"] for j in A.read_study(d)["jobs"] if j["key"] == "pretrain/bert-mlm-nsp/s0"), 4.0)
    states = {s["key"]: s["state"] for s in A.job_states(d)}
    assert states["pretrain/bert-mlm-nsp/s0"] == "finished" and states["pretrain/no-nsp/s0"] == "queued"
    runner.update(status="cancelled", error="cancelled by the user")
    rows = {s["key"]: s for s in A.job_states(d)}
    assert rows["pretrain/bert-mlm-nsp/s0"]["state"] == "finished"
    assert rows["pretrain/no-nsp/s0"]["state"] == "cancelled"
    assert rows["pretrain/no-nsp/s0"]["error"] == "not run: the study's job cancelled: cancelled by the user"


def test_sigterm_stops_the_running_jobs_and_marks_them_cancelled(tmp_path, monkeypatch):
    """A SIGTERM to a foreground study (a `timeout`, a cluster's time limit) stops the jobs it started instead of
    leaving them running, orphaned; they are recorded cancelled, so `ablate resume` picks them up again."""
    import os
    import signal
    import sys
    import threading
    from engine.ablations import runner
    pids = tmp_path / "pids.txt"

    def slow_command(study_dir, job):
        return [sys.executable, "-c", f"import os, time; open({str(pids)!r}, 'a').write(f'{{os.getpid()}}\\n'); time.sleep(60)"]
    monkeypatch.setattr(runner, "job_command", slow_command)
    study = A.get_study("pretraining-tasks", scale="classroom", evaluations=(A.BBC,))
    threading.Timer(2.0, os.kill, (os.getpid(), signal.SIGTERM)).start()
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt):
        A.launch(study, runs_root=tmp_path, foreground=True, log=lambda *a: None, parallel=2)
    assert signal.getsignal(signal.SIGTERM) is before  # the handler is put back
    d = tmp_path / "studies" / "pretraining-tasks"
    states = [j.get("status") for j in A.read_study(d)["jobs"]]
    assert states.count("cancelled") == 2 and states.count(None) == 5
    for pid in map(int, pids.read_text().split()):
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_jobs_that_wait_on_each_other_are_one_line_error_not_a_hang(tmp_path, monkeypatch):
    """A hand-edited study.json where two pre-training runs read each other's folder: the runner says so at once."""
    _fake_jobs(tmp_path, monkeypatch)
    study = A.get_study("pretraining-tasks", scale="classroom", evaluations=(A.BBC,))
    d = tmp_path / "studies" / "loop"
    d.mkdir(parents=True)
    a = A.Job("pretrain/a/s0", "pretrain", ["pretrain", "--init", str(d / "runs/b"), "--out", str(d / "runs/a")], "runs/a", "a", 0)
    b = A.Job("pretrain/b/s0", "pretrain", ["pretrain", "--init", str(d / "runs/a"), "--out", str(d / "runs/b")], "runs/b", "b", 0)
    A.write_study(d, study, [a, b], mode="foreground")
    with pytest.raises(EngineError, match=r"pretrain/a/s0 waits on \['pretrain/b/s0'\], which never start"):
        A.run_foreground(d, log=lambda *x: None, parallel=2)


def test_table5_with_fewer_rows_makes_the_claims_whose_rows_it_has():
    """A Table 5 study run with two of its rows (`--variants`): its check names only the claim between those two, and
    reading it does not fail (before: every study of fewer than four rows raised ValueError on the page)."""
    import pandas as pd
    from dataclasses import replace as dc_replace
    s = A.get_study("pretraining-tasks", scale="classroom")
    two = dc_replace(s, variants=tuple(v for v in s.variants if v.name in ("BERT (MLM + NSP)", "No NSP")))
    col = s.evaluations[0].name
    summary = pd.DataFrame([{"variant": "BERT (MLM + NSP)", "column": col, "step": None, "mean": 0.6},
                            {"variant": "No NSP", "column": col, "step": None, "mean": 0.5}])
    claims = two.check_finding(summary)
    assert [c["claim"] for c in claims] == ["BERT (MLM + NSP) ≥ No NSP on average (removing NSP hurts)"]
    assert claims[0]["holds"] is True
    assert len(s.check_finding(summary)) == 3  # the whole study: all three, those without results not yet decided
