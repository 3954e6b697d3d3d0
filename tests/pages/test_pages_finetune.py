"""The Fine-tune page (AppTest): an upload is saved under <runs>/uploads with a sanitised name and previewed with
the columns detected; Launch queues the right `engine finetune` command; the Results tab shows a (fake) run's
trials table, best score, charts and the SQuAD v2.0 threshold curve. No real fine-tuning runs here."""
import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

pytestmark = pytest.mark.slow  # AppTest runs whole pages

REPO = Path(__file__).resolve().parents[2]

PAGE = str(REPO / "pages" / "3_Finetune.py")
TRAIN = "sentence1\tsentence2\tlabel\n" + "the cat sat\ta cat sat\tentailment\nit rains\tthe sun shines\tnot_entailment\n" * 5
DEV = "sentence1\tsentence2\tlabel\na dog ran\tthe dog ran\tentailment\nno way\tyes way\tnot_entailment\n"


def app(root) -> AppTest:
    at = AppTest.from_file(PAGE, default_timeout=60)
    at.session_state["runs_root"] = str(root)
    return at


@pytest.fixture
def fake_submit(monkeypatch):
    import engine.jobs as Q
    calls = []

    def submit(argv, name=None, run_dir=None, root=None):
        calls.append({"argv": argv, "name": name, "run_dir": run_dir, "root": root})
        return {"id": "job-1"}
    monkeypatch.setattr(Q, "submit", submit)
    return calls


def test_upload_preview_and_launch(tmp_path, fake_submit):
    root = tmp_path / "runs"
    at = app(root).run()
    assert not at.exception, at.exception
    at.radio(key="ft_source").set_value("Upload files").run()
    at.selectbox(key="ft_kind").set_value("glue").run()
    at.file_uploader(key="ft_up_train").upload("../../etc/My Train!.tsv", TRAIN.encode(), "text/tab-separated-values")
    at.file_uploader(key="ft_up_dev").upload("dev.tsv", DEV.encode(), "text/tab-separated-values")
    at.run()
    assert not at.exception, at.exception
    saved = sorted(p.name for p in (root / "uploads").iterdir())
    assert len(saved) == 2 and all(n.endswith(".tsv") for n in saved)
    assert any(n.startswith("My-Train-") for n in saved) and not any(".." in n or "/" in n or " " in n for n in saved)
    preview = " ".join(m.value for m in at.markdown if "Task preview" in m.value)
    assert "train examples: **10**" in preview and "dev examples: **2**" in preview
    assert "entailment (5), not_entailment (5)" in preview and "sentence1" in preview  # labels with counts, columns
    assert "type: **classification**" in preview and "selection metric: **accuracy**" in preview
    frame = next(d.value for d in at.dataframe if "text_a" in d.value.columns)
    assert frame.iloc[0]["text_a"] == "the cat sat" and frame.iloc[0]["label"] == "entailment"
    # the grid: 2 lr x 1 batch x 1 epoch x 2 restarts
    at.text_input(key="ft_lr").set_value("1e-4, 5e-5").run()
    at.multiselect(key="ft_bs").set_value([32]).run()
    at.multiselect(key="ft_epochs").set_value([3]).run()
    at.number_input(key="ft_restarts").set_value(2).run()
    at.selectbox(key="ft_precision").set_value("fp32").run()
    assert any("4 trials" in m.value for m in at.markdown)
    at.text_input(key="ft_name").set_value("my-rte").run()
    at.button(key="ft_launch").click().run()
    assert not at.exception, at.exception
    assert len(fake_submit) == 1
    argv = fake_submit[0]["argv"]
    assert argv[:5] == ["finetune", "--model", "minilm", "--task", "glue"]
    assert argv[argv.index("--train") + 1].startswith(str(root / "uploads"))
    assert argv[argv.index("--lr") + 1] == "0.0001,5e-05" and argv[argv.index("--restarts") + 1] == "2"
    assert argv[argv.index("--precision") + 1] == "fp32"
    assert argv[argv.index("--out") + 1] == str((root / "my-rte").resolve()) == fake_submit[0]["run_dir"]
    assert any("Queued job job-1" in s.value for s in at.success)


def test_bad_upload_and_bad_name_are_one_line_errors(tmp_path, fake_submit):
    root = tmp_path / "runs"
    at = app(root).run()
    at.radio(key="ft_source").set_value("Upload files").run()
    at.selectbox(key="ft_kind").set_value("glue").run()
    at.file_uploader(key="ft_up_train").upload("train.tsv", b"sentence\tlabel\nhello\n", "text/plain")  # a row without its label
    at.file_uploader(key="ft_up_dev").upload("dev.tsv", DEV.encode(), "text/plain")
    at.run()
    assert not at.exception
    errs = [e.value for e in at.error]
    assert errs and "train-" in errs[0] and ":2" in errs[0]  # names the file and the line
    at.radio(key="ft_source").set_value("Built-in task").run()
    at.text_input(key="ft_name").set_value("../escape").run()
    at.button(key="ft_launch").click().run()
    assert not at.exception
    assert any("path separator" in e.value for e in at.error) and not fake_submit


def write_fake_run(root: Path, name="ft-bbc", squad=False):
    d = root / name
    d.mkdir(parents=True)
    cfg = {"model": "minilm", "task": "squad" if squad else "bbc-topic", "lr": [5e-5, 3e-5], "batch_size": [32], "epochs": [2], "restarts": 1}
    (d / "run.json").write_text(json.dumps({"kind": "finetune", "status": "finished", "config": cfg, "total_steps": 20}))
    metric = "f1" if squad else "accuracy"
    trials = []
    for i, (lr, score) in enumerate([(5e-5, 0.91), (3e-5, 0.95)]):
        dev = {metric: score, "exact": score - 0.1} if squad else {"accuracy": score, "f1_macro": score - 0.01}
        trials.append({"trial": i, "lr": lr, "batch_size": 32, "epochs": 2, "restart": 0, "seed": 0, "best_epoch": 2,
                       "score": score, "dev": dev, "epochs_log": [], "seconds": 3.0})
    ev = {"kind": "finetune", "status": "finished", "metric": metric, "score": 0.95, "dev": dict(trials[1]["dev"], tau=-1.5),
          "best": {k: v for k, v in trials[1].items() if k != "epochs_log"}, "trials": trials, "grid": [], "precision": "bf16"}
    if squad:
        ev["threshold_curve"] = [{"tau": t, "exact": 0.5, "f1": 0.6 + 0.01 * t} for t in (-3.0, -1.5, 0.0, 2.0)]
    (d / "eval.json").write_text(json.dumps(ev))
    recs = [{"step": s, "trial": s // 11, "epoch": 1 + (s % 11) // 6, "loss": 1.0 / s} for s in range(1, 21)]
    recs += [{"step": 10, "trial": 0, "epoch": 1, "score": 0.8, "dev_accuracy": 0.8}, {"step": 20, "trial": 0, "epoch": 2, "score": 0.91},
             {"step": 30, "trial": 1, "epoch": 1, "score": 0.9}, {"step": 40, "trial": 1, "epoch": 2, "score": 0.95}]
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    return d


def test_results_tab_shows_trials_and_charts(tmp_path):
    root = tmp_path / "runs"
    write_fake_run(root)
    at = app(root).run()
    assert not at.exception, at.exception
    assert at.selectbox(key="ft_pick").value == "ft-bbc"
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["best dev accuracy"] == "95.0" and metrics["trials finished"] == "2"
    assert metrics["best trial"] == "#1: lr 3e-05"
    assert any("task `bbc-topic` · bf16" in m.value for m in at.markdown)  # the precision the run really used
    trials = next(d.value for d in at.dataframe if "best epoch" in d.value.columns)
    assert list(trials["accuracy"]) == [0.91, 0.95]
    charts = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    titles = [c["layout"]["title"]["text"] for c in charts]
    assert titles == ["Dev accuracy per trial", "Dev accuracy per epoch", "Training loss"]
    bars = charts[0]["data"][0]
    assert bars["y"] == pytest.approx([91.0, 95.0]) and bars["marker"]["color"] == ["#1f77b4", "#d62728"]
    assert len(charts[1]["data"]) == 2 and charts[1]["data"][1]["y"] == pytest.approx([90.0, 95.0])


def test_squad_v2_threshold_curve(tmp_path):
    root = tmp_path / "runs"
    write_fake_run(root, "ft-squad", squad=True)
    at = app(root).run()
    assert not at.exception, at.exception
    charts = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    tau = next(c for c in charts if "null threshold" in c["layout"]["title"]["text"])
    assert tau["data"][0]["x"] == [-3.0, -1.5, 0.0, 2.0] and tau["data"][0]["name"] == "F1"
    assert any("τ = -1.50" in a["text"] for a in tau["layout"]["annotations"])


def test_preview_warns_about_the_data_and_passes_header_and_metric(tmp_path, fake_submit):
    """What was parsed (labels with counts) and its warnings before training; --header/--metric queued."""
    root = tmp_path / "runs"
    at = app(root).run()
    at.radio(key="ft_source").set_value("Upload files").run()
    at.selectbox(key="ft_kind").set_value("glue").run()
    train = "id\tsentence\tlabel\n" + "".join(f"{i}\ttext {i}\t{i % 2}\n" for i in range(30))
    at.file_uploader(key="ft_up_train").upload("train.tsv", train.encode(), "text/plain")
    at.file_uploader(key="ft_up_dev").upload("dev.tsv", train.encode(), "text/plain")
    at.text_input(key="ft_text_cols").set_value("sentence").run()
    at.text_input(key="ft_label_col").set_value("id").run()  # an id column taken as the label
    assert not at.exception, at.exception
    assert any("30 distinct values in 30 training rows" in w.value for w in at.warning), [w.value for w in at.warning]
    at.text_input(key="ft_label_col").set_value("label").run()
    at.selectbox(key="ft_header").set_value("yes").run()
    at.selectbox(key="ft_metric").set_value("mcc").run()
    preview = " ".join(m.value for m in at.markdown if "Task preview" in m.value)
    assert "0 (15), 1 (15)" in preview and "selection metric: **mcc**" in preview and not at.warning
    at.button(key="ft_launch").click().run()
    argv = fake_submit[0]["argv"]
    assert argv[argv.index("--header") + 1] == "yes" and argv[argv.index("--metric") + 1] == "mcc"


def test_default_grid_is_classroom_sized_and_its_time_is_not_guessed(tmp_path, fake_submit):
    from studio import finetune_plan as plan
    G = plan.grid("classroom")
    at = app(tmp_path / "runs").run()
    assert not at.exception and not at.error
    n = plan.n_trials(G["lr"].split(","), G["batch_size"], G["epochs"], G["restarts"])
    assert n < 18 and any(m.value.startswith(f"**{n} trials**") for m in at.markdown)
    assert any("not measured" in c.value for c in at.caption)  # nothing timed: no figure
    at.button(key="ft_launch").click().run()
    argv = fake_submit[0]["argv"]
    assert [float(x) for x in argv[argv.index("--lr") + 1].split(",")] == [float(x) for x in G["lr"].split(",")]
    assert argv[argv.index("--batch-size") + 1] == ",".join(map(str, G["batch_size"]))
    assert argv[argv.index("--epochs") + 1] == ",".join(map(str, G["epochs"]))


def test_timing_one_step_gives_the_grids_time_from_that_step(tmp_path, tiny_checkpoint, fake_submit):
    from studio import finetune_plan as plan
    at = app(tmp_path / "runs").run()
    at.text_input(key="ft_model_path").input(str(tiny_checkpoint)).run()
    at.radio(key="ft_source").set_value("Upload files").run()
    at.selectbox(key="ft_kind").set_value("glue").run()
    at.file_uploader(key="ft_up_train").upload("train.tsv", TRAIN.encode(), "text/tab-separated-values")
    at.file_uploader(key="ft_up_dev").upload("dev.tsv", DEV.encode(), "text/tab-separated-values")
    at.selectbox(key="ft_max_len").set_value(64).run()
    at.button(key="ft_time").click().run()
    assert not at.exception and not at.error
    timed = at.session_state["ft_timed"]
    assert timed["n_train"] == 10 and set(timed["steps"]) == {32} and timed["steps"][32]["seq_len"] == 64

    def shown(epochs):
        by_batch = plan.train_steps(10, [5e-5, 3e-5], [32], epochs, 1)
        seconds = plan.estimate(by_batch, {32: timed["steps"][32]["seconds"]})
        return [c.value for c in at.caption if plan.minutes_text(seconds) in c.value
                and f"{sum(by_batch.values()):,} steps on 10 examples" in c.value]
    assert shown([3])
    at.multiselect(key="ft_epochs").set_value([2, 3]).run()  # the grid changes: the same timing, new steps
    assert shown([2, 3]) and not shown([3])
    at.multiselect(key="ft_bs").set_value([16, 32]).run()  # a batch size never timed: no figure for it
    assert not shown([2, 3]) and any("not timed yet" in c.value for c in at.caption)


@pytest.mark.parametrize("bad", ["/no/such/model", "{tmp}/afile.txt", "{tmp}/emptydir", "no-such-org/no-such-bert"])
def test_a_model_that_is_not_there_is_one_line_and_queues_nothing(tmp_path, fake_submit, monkeypatch, bad):
    """Launch on a model path that cannot load: the loader's one-line error on the page, no job in the queue (a Hub
    id offline and not cached included)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    (tmp_path / "afile.txt").write_text("x")
    (tmp_path / "emptydir").mkdir()
    at = app(tmp_path / "runs").run()
    at.text_input(key="ft_model_path").input(bad.format(tmp=tmp_path)).run()
    at.button(key="ft_launch").click().run()
    assert not at.exception, at.exception
    errs = [e.value for e in at.error]
    assert not fake_submit and len(errs) == 1 and "\n" not in errs[0].strip(), errs
    assert any(w in errs[0] for w in ("does not exist", "is a file", "no config.json", "not (completely) in")), errs


def test_a_task_file_known_to_be_missing_is_refused_at_once(tmp_path, fake_submit):
    """Files on the server: a dev path that does not exist (the preview already says so) makes Launch refuse in one
    line naming the file; no job is queued for it."""
    (tmp_path / "train.tsv").write_text(TRAIN)
    at = app(tmp_path / "runs").run()
    at.radio(key="ft_source").set_value("Files on the server").run()
    at.selectbox(key="ft_kind").set_value("glue").run()
    at.text_input(key="ft_path_train").input(str(tmp_path / "train.tsv"))
    at.text_input(key="ft_path_dev").input(str(tmp_path / "gone.tsv")).run()
    at.button(key="ft_launch").click().run()
    assert not at.exception and not fake_submit
    refused = [e.value for e in at.error if "was queued" in e.value]
    assert len(refused) == 1 and "the dev file" in refused[0] and "gone.tsv" in refused[0] and "\n" not in refused[0]
    assert not at.success


def test_launch_confirms_with_the_job_id_and_a_link_to_the_jobs_page(tmp_path, fake_submit, routed_app):
    """Through the router (as served): the confirmation names the job and links to the Jobs page, and it stays
    on the page's next reruns (following the queued run reruns the page)."""
    at = routed_app("3_Finetune.py", tmp_path / "runs")
    at.text_input(key="ft_name").set_value("confirmed").run()
    at.button(key="ft_launch").click().run()
    assert not at.exception and len(fake_submit) == 1
    for _ in range(2):
        assert any("Queued job job-1 for run **confirmed**" in s.value for s in at.success)
        assert [(l.proto.label, l.proto.page) for l in at.get("page_link")] == [("Follow job job-1 live on the Jobs page", "Jobs")]
        at.run()
