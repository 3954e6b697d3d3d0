"""--report-to: TensorBoard and MLflow read back what each run wrote (every metric at its step, every setting, the
tags), a study's job in its study's experiment, a resumed run's points once each, a tracker that fails mid-run
warning once without changing the run, and a tracker that is not installed as one line naming the pip command.

The libraries are optional (requirements-trackers.txt): the tests that read them back skip without them, except under
CI=true, where .ci/run installs them and their absence fails."""
import importlib.util
import json
import math
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from engine import runs, trackers
from engine.errors import EngineError
from engine.pretraining.config import PretrainConfig, config_dict, validate
from engine.pretraining.run import _pretrain

TIMING = ("tokens_per_s", "elapsed")  # a record's wall-clock fields: the only ones two equal runs differ in


@pytest.fixture
def installed(missing_resource, monkeypatch):
    """TensorBoard and MLflow's SQLite store are importable (else skip, or fail under CI=true); the default store."""
    missing = [m for m in ("tensorboard", "mlflow", "sqlalchemy", "alembic") if importlib.util.find_spec(m) is None]
    if missing:
        missing_resource(f"{', '.join(missing)} not installed: {trackers.PIP}")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, bbc_docs, bbc_tokenizer):
    root = tmp_path_factory.mktemp("trackers")
    path = root / "corpus.txt"
    path.write_text("\n\n".join(" ".join(d) for d in bbc_docs[:60]) + "\n", encoding="utf-8")
    bbc_tokenizer.save(root / "tok")
    return {"corpus": str(path), "tok": str(root / "tok"), "cache": str(root / "cache")}


def _config(corpus, out, **kw) -> PretrainConfig:
    return PretrainConfig.classroom(corpus=corpus["corpus"], tokenizer=corpus["tok"], cache_dir=corpus["cache"], preset="tiny",
                          layers=2, hidden=64, heads=2, max_positions=64, seq_len=32, phase2_seq_len=None, batch_size=8,
                          steps=6, log_every=1, eval_every=3, save_every=2, eval_max_instances=32, quiet=True,
                          num_threads=1, out=str(out), **kw)


def _tensorboard(run_dir: Path):
    """({tag: [(step, value)]}, {setting: value}) of the event files in `run_dir`, read by TensorBoard's own reader."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2
    ea = EventAccumulator(str(run_dir), size_guidance={"scalars": 0, "tensors": 0})
    ea.Reload()
    scalars = {tag: [(e.step, e.value) for e in ea.Scalars(tag)] for tag in ea.Tags()["scalars"]}
    content = ea.PluginTagToContent("hparams")["_hparams_/session_start_info"]
    hp = plugin_data_pb2.HParamsPluginData.FromString(content).session_start_info.hparams
    return scalars, {k: getattr(v, v.WhichOneof("kind")) for k, v in hp.items()}


def _mlflow(uri: str, experiment: str):
    """(the one MLflow run of `experiment` in the store `uri`, {key: [(step, value)]})."""
    from mlflow.tracking import MlflowClient
    client = MlflowClient(tracking_uri=uri)
    [run] = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
    history = {k: [(m.step, m.value) for m in sorted(client.get_metric_history(run.info.run_id, k), key=lambda m: m.step)]
               for k in run.data.metrics}
    return run, history


def _expected(run_dir: Path) -> dict:
    """{tracker key: [(step, value)]} of every number in the run's metrics.jsonl."""
    out = {}
    for rec in runs.read_metrics(run_dir):
        for k, v in trackers.record_scalars(rec).items():
            out.setdefault(k, []).append((rec["step"], v))
    return out


def _same_points(got: dict, want: dict, steps_only: tuple = ()) -> None:
    assert set(got) == set(want)
    for k in want:
        assert [s for s, _ in got[k]] == [s for s, _ in want[k]], k
        for (_, a), (_, b) in zip(got[k], want[k]) if k.split("/")[-1] not in steps_only else ():
            assert (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=1e-6, abs=1e-6), k


def _check_run(run_dir: Path, config: dict, kind: str, resumed: bool = False) -> None:
    """Both trackers hold every metric at its step and every setting of the run in `run_dir` (runs root: its parent);
    `resumed`: MLflow keeps the first attempt's points of the steps trained again, equal but for the wall-clock fields."""
    want = _expected(run_dir)
    scalars, hparams = _tensorboard(run_dir)
    _same_points(scalars, want)
    settings = trackers.flat_settings(config)
    assert hparams == settings
    run, history = _mlflow(f"sqlite:///{run_dir.parent}/mlflow.db", trackers.EXPERIMENT)
    _same_points(history, want, TIMING if resumed else ())
    assert run.data.params == {k: str(v) for k, v in settings.items()}
    assert run.data.tags["kind"] == kind and run.data.tags["run_dir"] == str(run_dir.absolute())
    assert run.info.status == "FINISHED" and run.info.run_name == run_dir.name


@pytest.mark.slow
def test_pretraining_sends_every_metric_and_setting_to_tensorboard_and_mlflow(installed, corpus, tmp_path):
    out = tmp_path / "runs" / "bert"
    cfg = _config(corpus, out, report_to="mlflow,tensorboard")
    assert cfg.report_to == "mlflow,tensorboard" and validate(cfg) is None
    assert _pretrain(cfg)["status"] == "finished"
    want = _expected(out)
    assert {"train/loss", "train/mlm_acc", "train/lr", "eval/eval_mlm_acc", "eval/eval_nsp_acc"} <= set(want)
    assert [s for s, _ in want["train/loss"]] == [1, 2, 3, 4, 5, 6] and [s for s, _ in want["eval/eval_loss"]] == [3, 6]
    _check_run(out, config_dict(cfg), "pretrain")
    run, _ = _mlflow(f"sqlite:///{out.parent}/mlflow.db", trackers.EXPERIMENT)
    assert run.data.tags["checkpoint"] == str((out / "checkpoints" / "step-6").absolute())


@pytest.mark.slow
def test_a_resumed_run_holds_each_step_once_in_both_trackers(installed, corpus, tmp_path):
    """A crash after step 5 was logged loses the checkpoint of step 6: the resume continues from step 4, cuts
    metrics.jsonl back and logs 5 and 6 again; TensorBoard purges its later events, MLflow keeps one run and skips
    the points it has."""
    out = tmp_path / "runs" / "bert"
    cfg = _config(corpus, out, report_to="tensorboard,mlflow")
    _pretrain(cfg)
    shutil.rmtree(out / "checkpoints" / "step-6")
    assert _pretrain(replace(cfg, resume=True))["status"] == "finished"
    assert [r["step"] for r in runs.read_metrics(out) if r["split"] == "train"] == [1, 2, 3, 4, 5, 6]
    _check_run(out, config_dict(cfg), "pretrain", resumed=True)  # the settings it started with (MLflow's params stay)


def _glue(tmp_path: Path) -> tuple:
    rows = [(f"the {w} news about {w} film", i % 2) for i, w in enumerate(["good", "bad"] * 12)]
    for name, part in (("train", rows[:16]), ("dev", rows[16:])):
        (tmp_path / f"{name}.tsv").write_text("sentence\tlabel\n" + "".join(f"{s}\t{y}\n" for s, y in part))
    return str(tmp_path / "train.tsv"), str(tmp_path / "dev.tsv")


@pytest.mark.slow
def test_finetuning_and_features_send_every_record_and_setting(installed, tiny_checkpoint, tmp_path):
    from dataclasses import asdict

    from engine.features import FeaturesConfig, run_features
    from engine.finetune import FinetuneConfig, finetune
    train, dev = _glue(tmp_path)
    files = dict(model=str(tiny_checkpoint), task="glue", train=train, dev=dev, num_threads=1, report_to="tensorboard,mlflow")
    ft = FinetuneConfig(**files, lr=(1e-4,), batch_size=(8,), epochs=(2,), log_every=1, out=str(tmp_path / "ft" / "run"))
    finetune(ft)
    _check_run(Path(ft.out), ft.to_dict(), "finetune")
    fe = FeaturesConfig(**files, layers=(-1, -2), combine=("concat", "last"), out=str(tmp_path / "fe" / "run"))
    run_features(fe)
    config = {**asdict(fe), "layers": [-1, -2], "combine": ["concat", "last"]}
    del config["resume"]  # run.json's settings: what the features command records
    _check_run(Path(fe.out), config, "features")


def test_a_study_job_is_a_run_of_its_study_experiment_tagged_with_its_variant_and_seed(installed, tmp_path, monkeypatch):
    """MLFLOW_TRACKING_URI, when set, is the store; a study's job (<root>/studies/<study>/runs/<job>) reports to the
    experiment named after its study folder, tagged with its variant and seed."""
    study = tmp_path / "runs" / "studies" / "t5"
    job = {"key": "pretrain/mlm/s1", "kind": "pretrain", "argv": [], "out": "runs/mlm-s1", "variant": "MLM", "seed": 1}
    (study / "runs" / "mlm-s1").mkdir(parents=True)
    (study / "study.json").write_text(json.dumps({"study": {"name": "t5"}, "jobs": [job]}))
    uri = f"sqlite:///{tmp_path / 'elsewhere.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    t = trackers.open_trackers("mlflow", study / "runs" / "mlm-s1", {"lr": 1e-3, "layers": None}, {"kind": "pretrain"})
    t.log_metrics({"step": 2, "split": "train", "loss": 3.5})
    t.close("cancelled")
    run, history = _mlflow(uri, "t5")
    assert history == {"train/loss": [(2, 3.5)]} and run.data.params == {"lr": "0.001", "layers": "None"}
    assert {k: run.data.tags[k] for k in ("study", "variant", "seed", "job")} == {"study": "t5", "variant": "MLM", "seed": "1",
                                                                                 "job": "pretrain/mlm/s1"}
    assert run.info.status == "KILLED" and not (tmp_path / "runs" / "mlflow.db").exists()
    assert trackers.open_commands(tmp_path / "runs") == [f"tensorboard --logdir {tmp_path / 'runs'}", f"mlflow ui --backend-store-uri {uri}"]


def test_ablate_run_puts_report_to_on_every_job_and_reuse_ignores_it(tmp_path):
    from engine.ablations.paper import get_study
    from engine.ablations.planner import plan
    from engine.ablations.reuse import evaluation_key
    study = get_study("pretraining-tasks", scale="classroom")
    jobs = plan(replace(study, base=replace(study.base, report_to="tensorboard,mlflow")), tmp_path)
    assert jobs and all(j.argv[j.argv.index("--report-to") + 1] == "tensorboard,mlflow" for j in jobs)
    plain = {j.key: j for j in plan(study, tmp_path)}
    for j in jobs[1:3]:
        assert evaluation_key(vars(j), tmp_path, [], model=str) == evaluation_key(vars(plain[j.key]), tmp_path, [], model=str)


class FailingTracker:
    """A tracker whose disk fills up at its second record: every call is counted."""
    pip = "nothing"
    calls = []

    @staticmethod
    def needs() -> tuple:
        return ()

    def __init__(self, **_):
        pass

    def log_params(self, params):
        FailingTracker.calls.append("params")

    def set_tags(self, tags):
        FailingTracker.calls.append("tags")

    def log_metrics(self, step, metrics):
        FailingTracker.calls.append(step)
        if len([c for c in FailingTracker.calls if isinstance(c, int)]) == 2:
            raise OSError(28, "No space left on device")

    def close(self, status):
        FailingTracker.calls.append("close")
        raise OSError(28, "No space left on device")


@pytest.mark.slow
def test_a_tracker_failing_mid_run_warns_once_and_the_run_is_unchanged(corpus, tmp_path, monkeypatch, capfd):
    monkeypatch.setitem(trackers.TRACKERS, "tensorboard", FailingTracker)
    monkeypatch.setattr(FailingTracker, "calls", [])
    plain = _pretrain(_config(corpus, tmp_path / "plain"))
    capfd.readouterr()
    tracked = _pretrain(_config(corpus, tmp_path / "tracked", report_to="tensorboard"))
    err = capfd.readouterr().err
    assert plain["status"] == tracked["status"] == "finished"
    assert err.count("warning: the tensorboard tracker failed") == 1 and "No space left on device" in err
    assert FailingTracker.calls == ["params", "tags", 1, 2, "close"]  # dropped at the failure, closed quietly once
    strip = [{k: v for k, v in r.items() if k not in TIMING} for r in runs.read_metrics(tmp_path / "plain")]
    assert strip == [{k: v for k, v in r.items() if k not in TIMING} for r in runs.read_metrics(tmp_path / "tracked")]
    assert runs.read_run_json(tmp_path / "tracked")["status"] == "finished"


@pytest.mark.parametrize("name,module", [("tensorboard", "tensorboard"), ("mlflow", "mlflow")])
def test_a_tracker_that_is_not_installed_is_one_line_naming_the_pip_command(name, module, monkeypatch, tmp_path,
                                                                           engine_cli, one_line_error):
    monkeypatch.setitem(__import__("sys").modules, module, None)  # as if the package were not installed
    with pytest.raises(EngineError) as e:
        validate(PretrainConfig.classroom(out=str(tmp_path / "x"), report_to=name))
    assert "\n" not in str(e.value) and f"--report-to {name} needs {module}" in str(e.value) and trackers.PIP in str(e.value)
    for argv in (["pretrain", "--out", tmp_path / "p"], ["finetune", "--model", "minilm", "--task", "bbc-topic", "--out", tmp_path / "f"],
                 ["features", "--model", "minilm", "--task", "bbc-topic",
                  "--out", tmp_path / "e"], ["ablate", "run", "pretraining-tasks", "--classroom", "--dry-run"]):
        code, _, err = engine_cli([*argv, "--report-to", name])
        one_line_error(code, err, trackers.PIP)
    assert not any((tmp_path / d).exists() for d in ("p", "f", "e"))  # refused before anything is written
    code, _, err = engine_cli(["pretrain", "--out", tmp_path / "p", "--report-to", "wandb"])
    one_line_error(code, err, "use tensorboard, mlflow, or both")
