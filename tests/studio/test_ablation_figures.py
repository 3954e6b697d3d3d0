"""studio.ablation_figures: the dev-score bars of a study hold downstream scores only (a held-out pre-training figure,
such as Table 5's accuracy at [MASK], sits in the results table and the held-out pre-training table, not in a chart
labelled "dev score (%)"); the pre-training curves name their metric in words."""
import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from engine import ablations as A
from engine.ablations.study import pretrain_column_name
from studio import ablation_figures as F

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def table5(tmp_path, fake_runs):
    root = tmp_path / "runs"
    study = A.get_study("pretraining-tasks", seeds=2, evaluations=(A.BBC, A.WNUT))
    d = root / "studies" / "t5"
    d.mkdir(parents=True)
    jobs = A.plan(study, d)
    A.write_study(d, study, jobs, mode="foreground")
    fake_runs.fill_table5(d, jobs)
    return root, d


def test_the_dev_score_bars_leave_held_out_pretraining_figures_out(table5):
    _, d = table5
    res = A.collect_results(d)
    at_mask = pretrain_column_name("mlm_mask_acc")
    assert at_mask in res.table.columns  # the table keeps it
    fig = F.results_bars(res.summary, [v.name for v in res.study.variants], list(res.table.columns))
    assert fig.layout.yaxis.title.text == "dev score (%)"
    assert {x for t in fig.data for x in t.x} == {A.BBC.name, A.WNUT.name}


@pytest.mark.slow
def test_the_ablations_page_draws_no_held_out_bar_among_the_dev_scores(table5):
    root, _ = table5
    at = AppTest.from_file(str(REPO / "pages" / "7_Ablations.py"), default_timeout=60)
    at.session_state["runs_root"] = str(root)
    at.run()
    assert not at.exception
    scored = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    scored = [f for f in scored if f["layout"].get("yaxis", {}).get("title", {}).get("text") == "dev score (%)"]
    assert len(scored) == 1
    assert {x for t in scored[0]["data"] for x in t["x"]} == {A.BBC.name, A.WNUT.name}
    assert not any("[MASK]" in x for t in scored[0]["data"] for x in t["x"])

