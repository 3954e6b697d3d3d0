"""The Features page (AppTest): Launch queues `engine features` with the chosen layers and combinations; the
comparison tab puts a (fake) feature-based run next to fine-tuning of the same model; the projection tab draws
a real PCA of tiny-checkpoint features of BBC articles, coloured by topic with hover text."""
import json
import os
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

pytestmark = pytest.mark.slow  # AppTest runs whole pages

REPO = Path(__file__).resolve().parents[2]

PAGE = str(REPO / "pages" / "4_Features.py")


def app(root) -> AppTest:
    at = AppTest.from_file(PAGE, default_timeout=120)
    at.session_state["runs_root"] = str(root)
    return at


def test_launch_queues_features_job(tmp_path, monkeypatch):
    import engine.jobs as Q
    calls = []
    monkeypatch.setattr(Q, "submit", lambda argv, name=None, run_dir=None, root=None: calls.append((argv, run_dir)) or {"id": "j9"})
    root = tmp_path / "runs"
    at = app(root).run()
    assert not at.exception, at.exception
    at.selectbox(key="fx_task").set_value("wnut16").run()
    at.multiselect(key="fx_combine").set_value(["concat", "last", "embeddings"]).run()
    at.text_input(key="fx_layers").set_value("-1,-2").run()
    at.text_input(key="fx_name").set_value("fx-wnut").run()
    at.number_input(key="fx_epochs").set_value(20).run()
    at.number_input(key="fx_lr").set_value(0.003).run()
    at.button(key="fx_launch").click().run()
    assert not at.exception, at.exception
    argv, run_dir = calls[0]
    assert argv[argv.index("--epochs") + 1] == "20" and argv[argv.index("--lr") + 1] == "0.003"
    assert argv[:5] == ["features", "--model", "minilm", "--task", "wnut16"]
    assert argv[argv.index("--combine") + 1] == "concat,last,embeddings"
    assert argv[argv.index("--layers") + 1] == "-1,-2"
    assert argv[argv.index("--out") + 1] == run_dir == str((root / "fx-wnut").resolve())
    assert any("Queued job j9" in s.value for s in at.success)
    # a bad layer list is one line, nothing queued
    at.text_input(key="fx_layers").set_value("-1,two").run()
    at.text_input(key="fx_name").set_value("fx-2").run()
    at.button(key="fx_launch").click().run()
    assert len(calls) == 1 and any("comma-separated integers" in e.value for e in at.error)


def write_run(root: Path, name: str, kind: str, ev: dict):
    d = root / name
    d.mkdir(parents=True)
    (d / "run.json").write_text(json.dumps({"kind": kind, "status": "finished", "config": {}}))
    (d / "eval.json").write_text(json.dumps(ev))


def test_compare_feature_based_with_fine_tuning(tmp_path):
    root = tmp_path / "runs"
    results = [{"combine": "concat", "layers": [3, 4, 5, 6], "dims": 1536, "classifier": "bilstm", "metric": "f1", "score": 0.31, "dev": {"f1": 0.31}},
               {"combine": "embeddings", "layers": [0], "dims": 384, "classifier": "bilstm", "metric": "f1", "score": 0.05, "dev": {"f1": 0.05}}]
    write_run(root, "fx-1", "features", {"kind": "features", "model": "minilm", "task": "wnut16", "metric": "f1", "results": results,
                                         "combine": "concat", "score": 0.31})
    write_run(root, "ft-1", "finetune", {"kind": "finetune", "model": "minilm", "task": "wnut16", "metric": "f1", "score": 0.42,
                                         "best": {"dev": {"f1": 0.42, "precision": 0.5}}, "dev": {"f1": 0.42}})
    at = app(root).run()
    assert not at.exception, at.exception
    assert at.selectbox(key="fx_pick").value == "fx-1"
    assert at.selectbox(key="fx_ft_pick").value == "ft-1"  # same model and task, found by itself
    table = next(d.value for d in at.dataframe if "approach" in d.value.columns)
    assert list(table["approach"]) == ["fine-tuning (all parameters)", "feature-based: concat", "feature-based: embeddings"]
    assert list(table["f1"]) == pytest.approx([0.42, 0.31, 0.05])
    fig = json.loads(next(c for c in at.get("plotly_chart") if "Feature-based vs" in c.proto.spec).proto.spec)
    assert fig["data"][0]["y"] == pytest.approx([42.0, 31.0, 5.0])
    assert not at.warning


def test_projection_of_bbc_features(tmp_path, tiny_checkpoint):
    at = app(tmp_path / "runs").run()
    at.text_input(key="fx_model_path").set_value(str(tiny_checkpoint)).run()
    at.slider(key="fx_proj_n").set_value(40).run()
    at.button(key="fx_proj_go").click().run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    fig = json.loads(next(c for c in at.get("plotly_chart") if "PCA of last features" in c.proto.spec).proto.spec)
    names = [t["name"] for t in fig["data"]]
    assert set(names) <= {"business", "entertainment", "politics", "sport", "tech"} and len(names) >= 4
    assert sum(len(t["x"]) for t in fig["data"]) == 40
    assert all(len(t["text"]) == len(t["x"]) for t in fig["data"])
    assert fig["data"][0]["text"][0].startswith(f"<b>{names[0]}</b>")


def test_running_run_shows_live_progress_then_results(tmp_path):
    root = tmp_path / "runs"
    d = root / "fx-live"
    d.mkdir(parents=True)
    # the writer is provably alive: this test's own process (pid and kernel start time), as a real run records it
    from engine.procs import proc_start_time
    (d / "run.json").write_text(json.dumps({"kind": "features", "status": "running", "n_combinations": 2, "total_steps": 3,
                                            "pid": os.getpid(), "proc_start": proc_start_time(os.getpid()),
                                            "config": {"combine": ["last", "concat"]}}))
    lines = [{"step": 1, "phase": "extracted", "seconds": 1.0}]
    lines += [{"step": 2, "combine": "last", "epoch": e, "loss": 0.3, "score": f} for e, f in ((1, 0.0), (2, 0.05), (3, 0.12))]
    lines += [{"step": 2, "combine": "last", "score": 0.12}, {"step": 3, "combine": "concat", "epoch": 1, "loss": 0.4, "score": 0.02}]
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    partial = [{"combine": "last", "layers": [2], "dims": 128, "classifier": "bilstm", "metric": "f1", "score": 0.12}]
    (d / "eval.json").write_text(json.dumps({"kind": "features", "model": "m", "task": "wnut16", "metric": "f1", "results": partial}))
    at = app(root).run()
    assert not at.exception, at.exception
    assert any("1 of 2 classifiers trained" in str(p.proto.text) for p in at.get("progress"))
    assert sum("dev entity F1 per epoch" in c.proto.spec for c in at.get("plotly_chart")) == 1  # the live one only
    fig = json.loads(next(c for c in at.get("plotly_chart") if "dev entity F1 per epoch" in c.proto.spec).proto.spec)
    assert [t["name"] for t in fig["data"]] == ["last", "concat"]
    assert fig["data"][0]["y"] == pytest.approx([0.0, 5.0, 12.0])
    # the run finishes: results, no progress bar, the per-epoch curves stay
    (d / "run.json").write_text(json.dumps({"kind": "features", "status": "finished", "config": {}}))
    results = partial + [{"combine": "concat", "layers": [1, 2], "dims": 256, "classifier": "bilstm", "metric": "f1", "score": 0.0,
                          "warning": "the BiLSTM tagger on 'concat' features predicted no correct entity in 1 epochs; raise --epochs"}]
    (d / "eval.json").write_text(json.dumps({"kind": "features", "model": "m", "task": "wnut16", "metric": "f1", "results": results}))
    at.run()
    assert not at.exception, at.exception
    assert not at.get("progress")
    assert [w.value for w in at.warning] == [results[1]["warning"]]
    assert any("dev entity F1 per epoch" in c.proto.spec for c in at.get("plotly_chart"))


def test_a_just_queued_run_is_announced_until_it_starts(tmp_path, monkeypatch):
    import engine.jobs as Q
    root = tmp_path / "runs"
    jobs = {"j1": {"status": "queued", "error": None}}
    monkeypatch.setattr(Q, "get", lambda job_id, root=None: jobs.get(job_id))
    write_run(root, "fx-old", "features", {"kind": "features", "model": "m", "task": "wnut16", "metric": "f1", "results": []})
    at = app(root).run()
    assert at.selectbox(key="fx_pick").value == "fx-old"
    at.session_state["fx_show"], at.session_state["fx_show_job"] = "fx-new", "j1"  # what Launch leaves behind
    at.run()
    assert not at.exception, at.exception
    assert any("fx-new** is queued" in i.value for i in at.info)
    # the job starts and writes its run: the page lists it and the picker moves to it (once)
    write_run(root, "fx-new", "features", {"kind": "features", "model": "m", "task": "wnut16", "metric": "f1", "results": []})
    at.run()
    assert at.selectbox(key="fx_pick").value == "fx-new" and not any("is queued" in i.value for i in at.info)
    at.selectbox(key="fx_pick").set_value("fx-old").run()
    assert at.selectbox(key="fx_pick").value == "fx-old"
    # a job that failed before creating its run says why
    at.session_state["fx_show"], at.session_state["fx_show_job"] = "fx-bad", "j2"
    jobs["j2"] = {"status": "failed", "error": "error: the checkpoint folder /nope does not exist"}
    at.run()
    assert any("fx-bad: its job failed before the run started: error: the checkpoint folder /nope" in e.value for e in at.error)


def test_a_model_that_is_not_there_is_one_line_and_queues_nothing(tmp_path, monkeypatch):
    import engine.jobs as Q
    calls = []
    monkeypatch.setattr(Q, "submit", lambda argv, name=None, run_dir=None, root=None: calls.append(argv) or {"id": "j9"})
    at = app(tmp_path / "runs").run()
    at.text_input(key="fx_model_path").input(str(tmp_path / "nowhere")).run()
    at.button(key="fx_launch").click().run()
    assert not at.exception, at.exception
    errs = [e.value for e in at.error]
    assert not calls and len(errs) == 1 and "does not exist" in errs[0], errs


def test_the_forms_defaults_are_the_configs(tmp_path, monkeypatch):
    """The layers, the tagger's epochs and learning rate the form offers are FeaturesConfig's defaults: changed on the
    field, the form follows, and Launch left as it is queues them."""
    import dataclasses
    import engine.jobs as Q
    from engine.features import FeaturesConfig
    fields = {f.name: f for f in dataclasses.fields(FeaturesConfig)}
    monkeypatch.setattr(fields["layers"], "default", (-1, -3))
    monkeypatch.setattr(fields["epochs"], "default", 9)
    monkeypatch.setattr(fields["lr"], "default", 0.002)
    calls = []
    monkeypatch.setattr(Q, "submit", lambda argv, name=None, run_dir=None, root=None: calls.append(argv) or {"id": "j1"})
    at = app(tmp_path / "runs").run()
    assert not at.exception, at.exception
    assert at.text_input(key="fx_layers").value == "-1,-3"
    assert at.number_input(key="fx_epochs").value == 9 and at.number_input(key="fx_lr").value == 0.002
    at.selectbox(key="fx_task").set_value("wnut16").run()
    at.button(key="fx_launch").click().run()
    assert not at.exception, at.exception
    argv = calls[0]
    assert argv[argv.index("--epochs") + 1] == "9" and argv[argv.index("--lr") + 1] == "0.002"
