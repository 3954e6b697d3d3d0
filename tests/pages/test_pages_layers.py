"""The Layers page (AppTest): it renders on a fresh runs folder; Launch queues `engine layers` (probes, or --heads over
every checkpoint of a run) as a job instead of computing in the page; a finished probes run draws the per-layer curves
with their control, the tasks by depth and the layer x step heatmap, a head-roles run its role map, small multiples
and Clark et al.'s findings, each with CSV and HTML downloads."""
import json
import shutil

import numpy as np
import pytest

pytestmark = pytest.mark.slow  # AppTest runs whole pages

PAGE = "10_Layers.py"


def test_the_page_renders_on_a_fresh_runs_folder(tmp_path, page_app):
    at = page_app(PAGE, tmp_path / "runs")
    assert not at.exception, at.exception
    assert at.title[0].value == "Layers"
    assert sum("No results yet" in i.value for i in at.info) == 2  # both tabs


def test_launch_queues_the_probes_and_the_head_roles_as_jobs(tmp_path, tiny_run, page_app, monkeypatch):
    import engine.jobs as Q
    calls = []
    monkeypatch.setattr(Q, "submit", lambda argv, name=None, run_dir=None, root=None: calls.append((argv, run_dir)) or {"id": "j7"})
    root = tmp_path / "runs"
    shutil.copytree(tiny_run, root / "tiny-run")
    at = page_app(PAGE, root)
    at.multiselect(key="ly_tasks").set_value(["wnut16", "bigram-shift"]).run()
    at.text_input(key="ly_name").set_value("ly-1").run()
    at.button(key="ly_launch").click().run()
    assert not at.exception, at.exception
    argv, run_dir = calls[0]
    assert argv[:5] == ["layers", "--model", "minilm", "--task", "wnut16,bigram-shift"]
    assert argv[argv.index("--corpus") + 1] == "bbc" and argv[argv.index("--out") + 1] == run_dir
    assert run_dir == str((root / "ly-1").resolve()) and "--heads" not in argv
    at.radio(key="lh_source").set_value("every checkpoint of a run").run()
    at.text_input(key="lh_name").set_value("heads-1").run()
    at.button(key="lh_launch").click().run()
    assert not at.exception, at.exception
    argv, run_dir = calls[1]
    assert argv[:3] == ["layers", "--model", str(root / "tiny-run")] and "--heads" in argv
    assert argv[argv.index("--checkpoints") + 1] == "all"
    assert any("Queued job j7" in s.value for s in at.success)


def probes_result() -> dict:
    def layers(step):
        acc = [0.5, 0.6 + step / 1000, 0.8]
        return [{"layer": l, "name": "embeddings" if l == 0 else f"layer {l}", "accuracy": a, "control_accuracy": 0.55,
                 "selectivity": a - 0.55} for l, a in enumerate(acc)]
    from engine.layers import expected_layer
    tasks = []
    for name in ("wnut16", "bbc-punct"):
        steps = [{"step": s, "model_path": f"ck/step-{s}", "layers": layers(s),
                  "expected_layer": expected_layer([r["accuracy"] for r in layers(s)])} for s in (10, 20)]
        tasks.append({"task": name, "level": "token", "labels": ["O", "B-X"], "n_train": 20, "n_dev": 10, "control": True,
                      "majority": 0.7, "control_majority": 0.6, "steps": steps, "layers": steps[-1]["layers"],
                      "expected_layer": steps[-1]["expected_layer"]})
    return {"kind": "layers", "status": "finished", "model": "runs/r", "probe": "linear", "checkpoints": [10, 20],
            "tasks": tasks, "by_depth": ["wnut16", "bbc-punct"]}


def heads_result() -> dict:
    import pandas as pd
    from engine.head_roles import findings, records_of, settled, table_from_attention
    tokens, T = ["[CLS]", "the", "cat", ".", "[SEP]"], 5
    nxt = np.zeros((T, T))
    nxt[np.arange(T - 1), np.arange(1, T)], nxt[T - 1, T - 1] = 1.0, 1.0
    att = np.stack([np.stack([nxt, np.full((T, T), 1 / T)])] * 2)  # 2 layers x 2 heads
    table = pd.concat([table_from_attention([(tokens, att, [1, 0, 0, 0, 1])], step=s) for s in (10, 20)], ignore_index=True)
    return {"kind": "layers", "analysis": "heads", "status": "finished", "model": "runs/r", "checkpoints": [10, 20], "texts": 1,
            "heads": records_of(table), "settled": settled(table), "findings": findings(table)}


def write_run(root, name, heads: bool, ev: dict):
    d = root / name
    d.mkdir(parents=True)
    (d / "run.json").write_text(json.dumps({"kind": "layers", "status": "finished", "config": {"heads": heads}}))
    (d / "eval.json").write_text(json.dumps(ev))


def test_finished_runs_draw_their_charts_and_downloads(tmp_path, page_app, plotly):
    root = tmp_path / "runs"
    write_run(root, "ly-1", False, probes_result())
    write_run(root, "heads-1", True, heads_result())
    at = page_app(PAGE, root)
    assert not at.exception, at.exception
    curves = plotly.titled(at, "wnut16: what each layer knows")[0]
    names = [t["name"] for t in curves["data"]]
    assert names[:2] == ["accuracy", "control accuracy"] and list(plotly.array(curves["data"][0]["y"])) == pytest.approx([0.5, 0.62, 0.8])
    assert plotly.titled(at, "Tasks by depth") and plotly.titled(at, "wnut16: accuracy per layer over training")
    assert plotly.titled(at, "Each head's role") and plotly.titled(at, "Where each head looks over training")
    tables = [d.value for d in at.dataframe]
    clark = next(t for t in tables if "BERT-base (Clark et al. 2019)" in t.columns)
    assert "layers 6-10" in clark["BERT-base (Clark et al. 2019)"].iloc[0]
    settle = next(t for t in tables if "settled_step" in t.columns)
    assert set(settle["role"]) == {"next token", "broad"} and set(settle["settled_step"]) == {10}
    at.selectbox(key="ly_task_pick").set_value("bbc-punct").run()
    assert not at.exception and plotly.titled(at, "bbc-punct: what each layer knows")
    labels = [b.proto.label for b in at.get("download_button")]
    assert sum("CSV" in l for l in labels) == 2 and sum("HTML" in l for l in labels) == 2
