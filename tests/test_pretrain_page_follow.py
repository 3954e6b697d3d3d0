"""The Pre-train page (AppTest): a launched run shows as queued at once and is picked once its job writes it;
the training curves against steps, tokens seen or training time, with debiased EMA smoothing."""
import json
import sys
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_pretrain_page import PAGE, _app, runs_root  # noqa: E402,F401  (runs_root: the module's tiny finished run)

from engine import runs  # noqa: E402
from studio.compare import ema  # noqa: E402

pytestmark = pytest.mark.slow  # AppTest runs whole pages


def test_launched_run_shows_queued_at_once_then_is_picked(tmp_path, monkeypatch):
    from engine import jobs
    monkeypatch.setattr(jobs, "submit", lambda argv, name=None, run_dir=None, root=None: {"id": "j9", "status": "queued"})
    monkeypatch.setattr(jobs, "get", lambda job_id, root=None: {"id": job_id, "status": "queued"})
    root = tmp_path / "runs"
    at = AppTest.from_file(PAGE, default_timeout=60)
    at.session_state["runs_root"] = str(root)
    at.run()
    assert any("No pre-training runs" in i.value for i in at.info)
    [t for t in at.text_input if t.label == "Run name"][0].input("fresh")
    [b for b in at.button if b.label == "Launch"][0].click().run()
    assert not at.exception and not at.error
    infos = [i.value for i in at.info]
    assert any(i.startswith("**fresh** is queued") for i in infos) and not any("No pre-training runs" in i for i in infos)
    # the job starts and writes the run: the page lists it and picks it
    runs.write_run_json(root / "fresh", kind="pretrain", status="running", total_steps=10, config={"objective": "mlm"})
    runs.write_run_json(root / "older", kind="pretrain", status="finished", total_steps=10, created="2000-01-01T00:00:00+00:00",
                        config={"objective": "mlm"})
    at.run()
    assert not at.exception
    assert at.selectbox(key="pretrain_run").value == "fresh"
    assert not any("is queued" in i.value for i in at.info)


def test_curves_against_tokens_and_time_with_smoothing(runs_root):  # noqa: F811
    at = _app(runs_root)
    at.selectbox(key="pretrain_run").set_value("tiny-done").run()
    recs = runs.read_metrics(runs_root / "tiny-done")
    train = [r for r in recs if r["split"] == "train"]
    evals = [r for r in recs if r["split"] == "eval"]
    at.slider(key="pretrain_smooth").set_value(0.5).run()
    at.radio(key="pretrain_x").set_value("tokens").run()
    assert not at.exception and not at.error
    fig = json.loads(at.get("plotly_chart")[0].proto.spec)
    tr = {t["name"]: t for t in fig["data"] if t.get("xaxis", "x") == "x"}
    assert list(tr["train loss"]["x"]) == [r["tokens"] for r in train]
    assert tr["train loss"]["opacity"] == 0.3
    assert tr["train loss (smoothed)"]["y"] == pytest.approx(ema([r["mlm_loss"] for r in train], 0.5).tolist())
    assert fig["layout"]["xaxis"]["title"]["text"] == "tokens seen"
    # training time: held-out points sit at the training time of their step
    at.radio(key="pretrain_x").set_value("elapsed").run()
    fig = json.loads(at.get("plotly_chart")[0].proto.spec)
    held = [t for t in fig["data"] if t["name"] == "held-out loss"][0]
    at_step = {r["step"]: r["elapsed"] for r in train}
    assert list(held["x"]) == [at_step[r["step"]] for r in evals]
    assert fig["layout"]["xaxis"]["title"]["text"] == "training time (s)"
