"""studio.compare: finding runs (top level and a study's), debiased EMA, the seed band, the settings that differ,
and the page through AppTest (the chart's numbers, the table, the CSV)."""
import json
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from studio import compare as C

REPO = Path(__file__).resolve().parents[2]


def _run(d: Path, kind: str, config: dict, records: list):
    d.mkdir(parents=True)
    (d / "run.json").write_text(json.dumps({"kind": kind, "status": "finished", "config": config}))
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


@pytest.fixture()
def root(tmp_path):
    r = tmp_path / "runs"
    for seed, scale in ((0, 1.0), (1, 2.0)):
        _run(r / f"bert-s{seed}", "pretrain", {"objective": "mlm+nsp", "seed": seed, "lr": 1e-3, "out": f"x{seed}"},
             [{"step": s, "split": "train", "tokens": 100 * s, "elapsed": 0.5 * s, "loss": scale * (10 - s)} for s in (1, 2, 3, 4)])
    _run(r / "nonsp", "pretrain", {"objective": "mlm", "seed": 0, "lr": 1e-3, "out": "y"},
         [{"step": s, "split": "train", "tokens": 100 * s, "elapsed": 0.4 * s, "loss": 9.0 - s} for s in (2, 4, 6)])
    _run(r / "ft", "finetune", {"task": "bbc-topic", "seed": 0}, [{"step": 5, "trial": 0, "epoch": 1, "loss": 1.5}])
    study = r / "studies" / "pretraining-tasks"
    _run(study / "runs" / "bert-s0", "pretrain", {"objective": "mlm+nsp", "seed": 0}, [{"step": 1, "loss": 3.0}])
    (study / "study.json").write_text(json.dumps({"jobs": [
        {"key": "pretrain/bert/s0", "kind": "pretrain", "argv": [], "out": "runs/bert-s0", "variant": "BERT (MLM + NSP)", "seed": 0},
        {"key": "eval/bert/s0/bbc", "kind": "finetune", "argv": [], "out": "runs/missing", "variant": "BERT (MLM + NSP)", "seed": 0}]}))
    return r


def test_find_runs_groups_seeds_and_study_variants(root):
    runs = {e.label: e for e in C.find_runs(root)}
    assert set(runs) == {"bert-s0", "bert-s1", "nonsp", "ft", "pretraining-tasks / BERT (MLM + NSP) / seed 0"}
    assert runs["bert-s0"].group == runs["bert-s1"].group == "bert" and runs["bert-s1"].seed == 1
    assert runs["nonsp"].group == "nonsp" and runs["ft"].kind == "finetune"
    st = runs["pretraining-tasks / BERT (MLM + NSP) / seed 0"]
    assert st.group == "pretraining-tasks: BERT (MLM + NSP)" and st.kind == "pretrain"


def test_debiased_ema_by_hand():
    y = [2.0, 4.0, np.nan, 8.0]
    s = C.ema(y, 0.5)
    # s1 = 0.5*2 / (1-0.5) = 2; s2 = (0.5*1 + 0.5*4) / 0.75 = 3.333; NaN kept; s3 = (0.5*2.5 + 4) / 0.875 = 6
    np.testing.assert_allclose(s[[0, 1, 3]], [2.0, 2.5 / 0.75, 5.25 / 0.875])
    assert np.isnan(s[2])
    np.testing.assert_allclose(C.ema([1.0, 5.0, 3.0], 0.0), [1.0, 5.0, 3.0])  # weight 0: the raw curve
    np.testing.assert_allclose(C.ema([7.0] * 5, 0.9), 7.0)  # debiased: a constant stays itself


def test_group_band_mean_low_high_inside_each_range():
    grid, mean, lo, hi = C.group_band([(np.array([0, 2]), np.array([0.0, 2.0])), (np.array([1, 2]), np.array([3.0, 5.0]))])
    np.testing.assert_allclose(grid, [0, 1, 2])
    np.testing.assert_allclose(mean, [0.0, 2.0, 3.5])  # x=0 only the first run; x=1: (1 + 3) / 2
    np.testing.assert_allclose(lo, [0.0, 1.0, 2.0])
    np.testing.assert_allclose(hi, [0.0, 3.0, 5.0])


def test_differing_settings_keeps_only_what_differs(root):
    runs = {e.label: e for e in C.find_runs(root)}
    df = C.differing_settings([runs["bert-s0"], runs["bert-s1"], runs["nonsp"]])
    assert list(df.columns) == ["run", "kind", "objective", "seed"]  # lr is shared, out is never shown
    assert df["objective"].tolist() == ["mlm+nsp", "mlm+nsp", "mlm"]


@pytest.mark.slow
def test_compare_page_draws_smoothed_curves_group_bands_settings_and_csv(root, plotly):
    at = AppTest.from_file(str(REPO / "pages" / "9_Compare.py"), default_timeout=60)
    at.session_state["runs_root"] = str(root)
    at.session_state["compare_runs"] = ["bert-s0", "bert-s1", "nonsp"]
    at.run()
    assert not at.exception and not at.error
    assert at.checkbox(key="compare_group").value  # two seeds of one variant: grouped by default
    at.checkbox(key="compare_group").uncheck().run()
    at.slider(key="compare_smooth").set_value(0.5).run()
    fig = json.loads(at.get("plotly_chart")[0].proto.spec)
    traces = {t["name"]: t for t in fig["data"]}
    np.testing.assert_allclose(plotly.array(traces["bert-s1"]["y"]), C.ema([18.0, 16.0, 14.0, 12.0], 0.5))
    np.testing.assert_allclose(plotly.array(traces["bert-s1 (raw)"]["y"]), [18.0, 16.0, 14.0, 12.0])
    assert traces["bert-s1 (raw)"]["opacity"] == 0.25 and list(plotly.array(traces["nonsp"]["x"])) == [2, 4, 6]
    # tokens seen on the x axis
    at.radio(key="compare_x").set_value("tokens").run()
    fig = json.loads(at.get("plotly_chart")[0].proto.spec)
    assert list(plotly.array({t["name"]: t for t in fig["data"]}["nonsp"]["x"])) == [200, 400, 600]
    assert fig["layout"]["xaxis"]["title"]["text"] == "tokens seen"
    # grouped, no smoothing: the mean of the two seeds and the band between them
    at.checkbox(key="compare_group").check().run()
    at.slider(key="compare_smooth").set_value(0.0).run()
    fig = json.loads(at.get("plotly_chart")[0].proto.spec)
    mean = {t["name"]: t for t in fig["data"]}["bert (mean of 2)"]
    np.testing.assert_allclose(plotly.array(mean["y"]), [13.5, 12.0, 10.5, 9.0])  # (9 + 18) / 2, ...
    band = {t["name"]: t for t in fig["data"]}["bert (seed band)"]
    np.testing.assert_allclose(plotly.array(band["y"]), [18, 16, 14, 12, 6, 7, 8, 9])
    # only the differing settings, and one CSV of every selected run
    table = at.dataframe[0].value
    assert list(table.columns) == ["run", "kind", "objective", "seed"]
    csv = at.get("download_button")[0].proto
    assert "3 selected run" in csv.label


def test_identical_runs_stay_two_named_curves_and_metrics_read_as_words(tmp_path, plotly):
    """Two runs with the same curve: each its own legend entry, dash and marker and its name in the hover (one was
    drawn exactly on the other and hid it); the metric picker and the axis say what a metric is, not its key."""
    from engine.records import metric_label
    root = tmp_path / "runs"
    recs = [{"step": s, "split": "eval", "eval_mlm_mask_acc": 0.1 * s, "eval_mlm_acc": 0.2} for s in (1, 2, 3)]
    for name in ("same-a", "same-b"):
        _run(root / name, "pretrain", {"objective": "mlm"}, recs)
    at = AppTest.from_file(str(REPO / "pages" / "9_Compare.py"), default_timeout=60)
    at.session_state["runs_root"] = str(root)
    at.run()
    at.selectbox(key="compare_metric").set_value("eval_mlm_mask_acc").run()
    assert not at.exception and not at.error
    fig = json.loads(at.get("plotly_chart")[0].proto.spec)
    shown = [t for t in fig["data"] if t.get("showlegend", True)]
    assert [t["name"] for t in shown] == ["same-a", "same-b"]
    assert len({(t["line"]["dash"], t["marker"]["symbol"]) for t in shown}) == 2 and all("markers" in t["mode"] for t in shown)
    assert all(t["name"] in t["hovertemplate"] for t in shown) and fig["layout"]["hovermode"] == "x unified"
    label = metric_label("eval_mlm_mask_acc")
    assert label == "held-out accuracy at [MASK]" and fig["layout"]["yaxis"]["title"]["text"] == label
    assert label in fig["layout"]["title"]["text"] and "eval_" not in fig["layout"]["title"]["text"]
    box = at.selectbox(key="compare_metric")
    assert "held-out MLM accuracy" in box.options and not any("eval_" in o for o in box.options)


def test_the_familys_runs_overlay_with_their_own_metrics_in_words(tmp_path, plotly):
    """A family study's runs (nsp-vs-sop's variants) are found beside the paper's and overlay on one chart; the
    metrics only the family's objectives record (SOP's, ELECTRA's discriminator's) are offered, in words."""
    from engine import ablations as A
    from engine.objectives import ELECTRA, MLM_SOP
    from engine.records import metric_label
    root = tmp_path / "runs"
    study = root / "studies" / "nsp-vs-sop"
    rows = [v.name for v in A.get_study("nsp-vs-sop").variants]
    jobs = []
    for i, (row, objective) in enumerate(zip(rows, ("mlm+nsp", "mlm", MLM_SOP.name))):
        recs = [{"step": s, "split": "train", "loss": 9.0 - s - i} for s in (1, 2, 3)]
        if objective == MLM_SOP.name:
            recs = [dict(r, sop_acc=0.5 + 0.1 * r["step"]) for r in recs]
        _run(study / "runs" / f"r{i}", "pretrain", {"objective": objective, "seed": 0}, recs)
        jobs.append({"key": f"pretrain/r{i}/s0", "kind": "pretrain", "argv": [], "out": f"runs/r{i}", "variant": row, "seed": 0})
    (study / "study.json").write_text(json.dumps({"jobs": jobs}))
    _run(root / "electra", "pretrain", {"objective": ELECTRA.name, "seed": 0},
         [{"step": s, "split": "train", "loss": 20.0 - s, "disc_acc": 0.8 + 0.01 * s} for s in (1, 2, 3)])
    found = {e.label for e in C.find_runs(root)}
    assert {f"nsp-vs-sop / {row} / seed 0" for row in rows} | {"electra"} <= found
    at = AppTest.from_file(str(REPO / "pages" / "9_Compare.py"), default_timeout=60)
    at.session_state["runs_root"] = str(root)
    at.session_state["compare_runs"] = sorted(found)
    at.run()
    assert not at.exception and not at.error
    box = at.selectbox(key="compare_metric")
    assert metric_label("sop_acc") in box.options and metric_label("disc_acc") in box.options
    fig = json.loads(at.get("plotly_chart")[0].proto.spec)
    names = {t["name"] for t in fig["data"]}
    assert {f"nsp-vs-sop / {row} / seed 0" for row in rows} <= names and "electra" in names
