"""The Ablations page with the family's studies (AppTest): the study picker lists them after the paper's, grouped
"BERT, 2018" / "after BERT"; each renders in the New-study tab with its paper's table where transcribed and a note
that it has not been run here; with no study in the runs folder the Results tab lists them; and a finished fake run of
each renders its dashboard (our table, the verdicts) with no error, the NSP-vs-SOP table with its 2x2 pair columns."""
import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from engine import ablations as A
from engine import paper_tables

pytestmark = pytest.mark.slow  # AppTest runs whole pages

PAGE = str(Path(__file__).resolve().parents[2] / "pages" / "7_Ablations.py")
FAMILY = A.GROUPS["after BERT"]


def app(root) -> AppTest:
    at = AppTest.from_file(PAGE, default_timeout=60)
    at.session_state["runs_root"] = str(root)
    return at


def test_the_picker_groups_the_family_after_the_paper_and_each_study_renders(tmp_path):
    at = app(tmp_path / "runs").run()
    assert not at.exception, at.exception
    picker = at.selectbox(key="abl_study")
    assert list(picker.options)[-len(FAMILY):] == [f"after BERT · {A.STUDIES[n]().title}  ({n})" for n in FAMILY]
    assert list(picker.options)[0].startswith("BERT, 2018 · ")
    for name in FAMILY:
        picker.set_value(name).run()
        assert not at.exception, (name, at.exception)
        never_run = any("Not yet run on our machines" in c.value and f"ablate estimate {name}" in c.value for c in at.caption)
        assert never_run is (name not in A.REFERENCE_MINUTES), name  # a family study run here shows its measured table
        if name in A.REFERENCE_MINUTES:
            assert any(m.value.startswith("**At classroom scale, as we measured it**") for m in at.markdown), name
        if paper_tables.table(name) is not None:
            assert any(e.label.startswith("The paper's numbers: ") for e in at.expander), name
        picker = at.selectbox(key="abl_study")


def test_with_no_study_yet_the_results_tab_lists_the_family_with_their_papers_tables(tmp_path):
    at = app(tmp_path / "runs").run()
    assert not at.exception, at.exception
    labels = [e.label for e in at.expander]
    assert all(any(l.endswith(f"({n})") for l in labels) for n in FAMILY)
    assert any(s.value.startswith("After BERT") for s in at.subheader)


def fill(d, study, jobs, fake_runs):
    """Finished fake runs for every job: each pre-training with held-out pair accuracies where it has a pair task."""
    for i, j in enumerate(jobs):
        if j.kind == "pretrain":
            fake_runs.pretrain(d / j.out, 4.0, "mlm+nsp")
            cross = {"BERT (MLM + NSP)": {"eval_nsp_acc": 0.9, "eval_cross_sop_acc": 0.52},
                     "MLM + SOP (ALBERT)": {"eval_sop_acc": 0.86, "eval_cross_nsp_acc": 0.79}}.get(j.variant)
            if cross:
                with open(d / j.out / "metrics.jsonl", "a") as f:
                    f.write(json.dumps({"step": 30, "split": "eval", "eval_mlm_loss": 4.0, **cross}) + "\n")
        else:
            metric = next(e.metric for e in study.evaluations if e.name == j.evaluation)
            fake_runs.eval(d / j.out, metric, 0.5 + 0.01 * (i % 7), restarts=[0.5 + 0.01 * (i % 7), 0.49, 0.51])


@pytest.mark.parametrize("name", FAMILY)
def test_a_finished_family_study_renders_its_table_and_verdicts(tmp_path, fake_runs, name):
    root = tmp_path / "runs"
    study = A.get_study(name, scale="classroom")
    d = root / "studies" / name
    d.mkdir(parents=True)
    jobs = A.plan(study, d)
    A.write_study(d, study, jobs, mode="foreground")
    fill(d, study, jobs, fake_runs)
    at = app(root)
    at.session_state["abl_show"] = name
    at.run()
    assert not at.exception, at.exception
    table = at.dataframe[0].value
    assert list(table.index) == [v.name for v in study.variants]
    md = " ".join(m.value for m in at.markdown)
    assert "**Reproduced here?**" in md
    if name == "nsp-vs-sop":  # ALBERT's 2x2: each pair model on its own task and on the other's
        nsp, sop = A.family.NSP_COL, A.family.SOP_COL
        assert table.loc["BERT (MLM + NSP)", sop].startswith("52.0") and table.loc["MLM + SOP (ALBERT)", nsp].startswith("79.0")
        assert table.loc["BERT (MLM + NSP)", nsp].startswith("90.0") and table.loc["MLM only (No NSP)", nsp] == "–"
