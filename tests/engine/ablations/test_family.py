"""The family's studies (engine/ablations/family.py): registered beside the paper's in two groups, each buildable at
every scale with its paper's figures as contrasts on rows and columns it has; the BERT and MLM-only rows have Table
5's settings exactly, so planning a family study after Table 5 shares those pre-trainings instead of training them
again; the NSP-vs-SOP study's pair columns hold ALBERT's 2x2 table; every study is estimated."""
import json

import pandas as pd
import pytest

from engine import ablations as A
from engine.ablations import family, timing
from engine.ablations.folders import write_study
from engine.ablations.reuse import config_of, training_key
from engine.objectives import objective

FAMILY = list(family.FAMILY_STUDIES)


def pretrain_keys(study, where) -> dict:
    """{variant: its pre-training's training key} of a study's plan."""
    return {j.variant: json.dumps(training_key(config_of(j.argv)), sort_keys=True, default=str)
            for j in A.plan(study, where) if j.kind == "pretrain"}


def test_the_family_is_registered_beside_the_papers_studies_in_two_groups():
    assert A.GROUPS == {family.PAPER_GROUP: ["pretraining-tasks", "model-size", "feature-based", "masking", "training-steps"],
                        family.FAMILY_GROUP: FAMILY}
    assert set(FAMILY) <= set(A.STUDIES) and set(family.CLASSROOM_FAMILY) == set(FAMILY)
    assert all(A.CLASSROOM.settings(n).steps == 6000 for n in FAMILY)


@pytest.mark.parametrize("name", FAMILY)
def test_each_study_builds_at_every_scale_and_its_contrasts_name_rows_and_columns_it_has(name, tmp_path):
    for scale in (None, "classroom", "lab"):
        study = A.get_study(name, scale=scale)
        assert A.plan(study, tmp_path / str(scale))
        assert study.findings() == study.contrasts  # every contrast's rows and column are in the study
    study = A.get_study(name, scale="classroom")
    assert study.budget == ("steps" if name == "masking-rate" else "flops")
    for c in study.contrasts:
        assert c.paper_task, c  # where the paper's figures come from, or why there are none
        assert c.paper is None or len(c.paper) == 2
    empty = A.summarise(pd.DataFrame(columns=["variant", "column", "step", "seed", "value"]))
    assert all(c["holds"] is None for c in study.check_finding(empty))  # nothing yet: no claim holds or fails


@pytest.mark.parametrize("name", [n for n in FAMILY if n != "masking-rate"])
def test_the_bert_and_mlm_rows_are_table_5s_pretrainings(name, tmp_path):
    t5 = {v: k for v, k in pretrain_keys(A.get_study("pretraining-tasks", scale="classroom"), tmp_path / "t5").items()}
    ours = pretrain_keys(A.get_study(name, scale="classroom"), tmp_path / name)
    study = A.get_study(name)
    objectives = {v.name: objective(v.pretrain.get("objective", study.base.objective)) for v in study.variants}
    for row, key in ours.items():
        plain = set(study.variant(row).pretrain) == {"objective"}  # changes nothing but the objective
        if plain and objectives[row].name in ("mlm+nsp", "mlm") and not objectives[row].causal:
            assert key == t5[{"mlm+nsp": "BERT (MLM + NSP)", "mlm": "No NSP"}[objectives[row].name]], row
    assert ours[study.variants[0].name] == t5["BERT (MLM + NSP)"]  # BERT first: every row gets its FLOPs


def queue_file(root, jobs):
    (root / ".jobs").mkdir(parents=True, exist_ok=True)
    (root / ".jobs" / "queue.json").write_text(json.dumps({"version": 1, "jobs": [
        {"id": i, "name": n, "argv": argv, "status": st} for i, n, argv, st in jobs]}))


def test_planning_a_family_study_after_table_5_shares_the_baseline_jobs(tmp_path):
    """Table 5 queued with its jobs at once: the NSP-vs-SOP and ELECTRA studies find its BERT and MLM-only
    pre-trainings ahead of them in the queue (taken over once trained), the input-formats study its BERT row, the
    masking-rate study nothing; the estimate takes them off."""
    t5 = A.get_study("pretraining-tasks", scale="classroom")
    d = tmp_path / "studies" / "pretraining-tasks"
    d.mkdir(parents=True)
    write_study(d, t5, A.plan(t5, d), mode="queue", runs_root=str(tmp_path), reuse=True)
    queue_file(tmp_path, [("t5", "table 5", ["ablate", "resume", str(d), "--parallel", "2"], "queued")])
    shared = {n: sorted(q["key"] for q in timing.queued_twins(A.get_study(n, scale="classroom"), tmp_path))
              for n in ("nsp-vs-sop", "electra-vs-mlm", "input-formats", "masking-rate")}
    assert shared == {"nsp-vs-sop": ["pretrain/bert-mlm-nsp/s0", "pretrain/mlm-only-no-nsp/s0"],
                      "electra-vs-mlm": ["pretrain/bert-mlm-nsp/s0"],
                      "input-formats": ["pretrain/segment-pair-nsp/s0"], "masking-rate": []}
    check = A.SpeedCheck("bf16", 2, timing.REFERENCE_MINUTES[timing.ANALOGUE].step_ms)
    study = A.get_study("nsp-vs-sop", scale="classroom")
    alone, after = A.estimate(study, check), A.estimate(study, check, runs_root=tmp_path)
    assert len(after["queued"]) == 2 and after["minutes"] < alone["minutes"]


def test_the_nsp_vs_sop_pair_columns_are_albert_2x2_table():
    study = A.get_study("nsp-vs-sop", scale="classroom")
    names = [A.study.pretrain_column_name(c) for c in study.pretrain_columns]
    # each model's own pair accuracy and its accuracy on the other task's pairs share the task's column
    assert names.count(family.NSP_COL) == 2 and names.count(family.SOP_COL) == 2
    assert [e.task for e in study.evaluations] == ["bbc-cloze", "bbc-story", "bbc-order", "bbc-topic"]
    scores = pd.DataFrame([(family.BERT_ROW, family.NSP_COL, None, 0, 0.9), (family.BERT_ROW, family.SOP_COL, None, 0, 0.52),
                           (family.SOP_ROW, family.NSP_COL, None, 0, 0.79), (family.SOP_ROW, family.SOP_COL, None, 0, 0.86)],
                          columns=["variant", "column", "step", "seed", "value"])
    table = A.paper_table(study, A.summarise(scores))
    assert list(table.columns).count(family.NSP_COL) == 1 and table.loc[family.SOP_ROW, family.NSP_COL].startswith("79.0")
    checks = {c["claim"]: c["holds"] for c in study.check_finding(A.summarise(scores))}
    assert checks["the NSP model is at chance on sentence order (ALBERT: 52.0%)"] is True
    assert checks["the SOP model is above chance on next-sentence pairs (ALBERT: 78.9%)"] is True


def test_the_electra_study_has_its_table_5_ablations_and_names_the_row_it_leaves_out():
    study = A.get_study("electra-vs-mlm")
    assert [v.name for v in study.variants] == [family.BERT_ROW, family.ELECTRA_ROW, family.ALL_TOKENS_ROW,
                                                family.REPLACE_ROW]  # ELECTRA's Table 5 rows
    assert {v.name: v.pretrain["objective"] for v in study.variants}[family.ALL_TOKENS_ROW] == "all-tokens-mlm"
    assert "Not a row here: ELECTRA 15%" in study.description and "--objective electra-15" in study.description
    papers = {(c.better, c.worse): c.paper for c in study.findings()}  # ELECTRA's Table 5, GLUE score
    assert papers[(family.ALL_TOKENS_ROW, family.BERT_ROW)] == (84.3, 82.2)
    assert papers[(family.REPLACE_ROW, family.BERT_ROW)] == (82.4, 82.2)
    assert papers[(family.ELECTRA_ROW, family.ALL_TOKENS_ROW)] == (85.0, 84.3)
    # every row at BERT's pre-training FLOPs: the generator's share makes the two ablations train fewer steps than MLM
    from engine.ablations.planner import pretrain_config
    classroom = A.get_study("electra-vs-mlm", scale="classroom")
    steps = {v.name: pretrain_config(classroom, v).steps for v in classroom.variants}
    assert steps[family.ALL_TOKENS_ROW] < steps[family.REPLACE_ROW] < steps[family.ELECTRA_ROW] < steps[family.BERT_ROW]
