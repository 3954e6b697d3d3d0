"""Faults in the ablation studies (engine/ablations/): an evaluation taken over from another model trained in the
same folder, a study's status that contradicts its jobs' own records, two `ablate resume` of one study at once, and
a damaged study.json."""
import hashlib
import io
import os
import json
import shutil
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from engine import ablations as A
from engine.ablations import reuse, runner
from engine.errors import EngineError
from engine.pretraining.config import TRAINING_VERSION
from engine.records import EVALUATION_VERSION


# --------------------------------------------------------------------------------------------- in-process fake jobs
class Done:
    """A finished process, as run_foreground polls it."""

    def __init__(self, rc: int):
        self.returncode = rc

    def poll(self):
        return self.returncode


def fake_job(out: Path, job: dict, fail: bool = False, log: str = "") -> None:
    """What the job's real command leaves in its run folder: a pre-training's run.json (finished, its config, the
    corpus fingerprint, the training version) and a checkpoint whose weights depend on what it trained (its steps:
    another training, other weights); an evaluation's run.json and eval.json, whose score is read from the weights
    of the model it evaluated (so an evaluation of another model has another score)."""
    out.mkdir(parents=True, exist_ok=True)
    if log:
        (out / "job.log").write_text(log)
    if fail:
        (out / "run.json").write_text(json.dumps({"kind": job["kind"], "status": "failed", "error": "ValueError: the real cause"}))
        return
    if job["kind"] == "pretrain":
        cfg = {**reuse.config_of(job["argv"]), "out": str(out)}
        ck = out / "checkpoints" / f"step-{cfg['steps']}"
        ck.mkdir(parents=True)
        (ck / "model.safetensors").write_bytes(json.dumps(reuse.training_key(cfg), sort_keys=True).encode())
        (ck / "COMPLETE").write_text("{}")
        (out / "run.json").write_text(json.dumps({"kind": "pretrain", "status": "finished", "config": cfg,
                                                  "corpus_fingerprint": "f" * 64, "training_version": TRAINING_VERSION}))
        return
    model = Path(job["argv"][job["argv"].index("--model") + 1])
    weights = next(model.glob("checkpoints/step-*/model.safetensors")).read_bytes()
    score = int(hashlib.sha256(weights).hexdigest()[:6], 16) / 16 ** 6
    (out / "run.json").write_text(json.dumps({"kind": job["kind"], "status": "finished", "model": str(model),
                                              "evaluation_version": EVALUATION_VERSION,
                                              "config": {"model": str(model), "out": str(out)}}))
    (out / "eval.json").write_text(json.dumps({"model_path": str(model), "score": score, "metric": "f1",
                                               "dev": {"f1": score}}))


@pytest.fixture
def in_process_jobs(monkeypatch):
    """Each job of a study run here (launch --foreground, ablate resume) is `fake_job`, in this process; returns the
    .ran: the keys run, in order; .fail: keys that fail (their run.json says why; their log ends in a progress
    bar)."""
    jobs = SimpleNamespace(ran=[], fail=set())

    def start(study_dir, job, env, log):
        jobs.ran.append(job["key"])
        bad = job["key"] in jobs.fail
        fake_job(Path(study_dir) / job["out"], job, fail=bad,
                 log="loading\nstep 3/8 loss 2.10 | 40%|████      | 3/8 [00:01<00:02]\n" if bad else "")
        return job, Done(1 if bad else 0), io.BytesIO(), time.time()
    monkeypatch.setattr(runner, "_start_job", start)
    monkeypatch.setattr(reuse, "_fingerprint", lambda key: "f" * 64)
    return jobs


def small_study(steps: int):
    """Table 6 at classroom scale, its first row only, evaluated on WNUT-16 for one epoch: one pre-training and
    one fine-tuning."""
    study = A.get_study("model-size", scale="classroom", evaluations=(A.WNUT,), epochs=1)
    return A.with_steps(replace(study, variants=study.variants[:1]), steps)


# --------------------------------------------------------------------------------------------- a damaged study.json
def damage(d: Path, how: str) -> None:
    data = json.loads((d / "study.json").read_text())
    if how == "no jobs":
        del data["jobs"]
    elif how == "a job without out":
        del data["jobs"][1]["out"]
    elif how == "study null":
        data["study"] = None
    elif how == "study without base":
        del data["study"]["base"]
    (d / "study.json").write_text(json.dumps(data))


@pytest.mark.parametrize("how", ["no jobs", "a job without out", "study null", "study without base"])
def test_a_damaged_study_is_one_line_and_the_others_still_list(tmp_path, in_process_jobs, monkeypatch, capsys, how):
    """study.json without `jobs`, a job without `out`, `"study": null`, a study without its base settings:
    `ablate show` and `resume` of it are one line naming the file; `ablate list` and list_studies list the good
    study and the bad one as one line saying what is wrong."""
    good = A.launch(small_study(4), runs_root=tmp_path, name="good", foreground=True, log=lambda *a: None)
    bad = A.launch(small_study(4), runs_root=tmp_path, name="bad", foreground=True, log=lambda *a: None)
    damage(bad, how)
    for cmd in (["show", str(bad)], ["show", str(bad), "--json"], ["resume", str(bad)]):
        with pytest.raises(EngineError) as e:
            A.main(cmd)
        msg = str(e.value)
        assert "\n" not in msg and str(bad / "study.json") in msg and "damaged" in msg, (cmd, msg)
    listed = {s["name"]: s for s in A.list_studies(tmp_path)}
    assert set(listed) == {"good", "bad"}
    assert listed["good"]["error"] is None and listed["good"]["jobs"] == 2 and listed["good"]["study"] == "model-size"
    assert str(bad / "study.json") in listed["bad"]["error"] and "\n" not in listed["bad"]["error"]
    monkeypatch.setenv("BERT_STUDIO_RUNS", str(tmp_path))
    capsys.readouterr()
    assert A.main(["list"]) == 0
    lines = [l for l in capsys.readouterr().out.splitlines() if str(tmp_path) in l]
    assert len(lines) == 2 and any(str(good) in l and "2 jobs" in l for l in lines)
    assert any(str(bad) in l and "damaged" in l for l in lines)
    # the good study is still taken over from, and reads, as before
    assert A.collect_results(good).progress["finished"] == 2


# --------------------------------------------------------------------------------------------- model identity
def launch(root: Path, name: str, steps: int) -> Path:
    return A.launch(small_study(steps), runs_root=root, name=name, foreground=True, log=lambda *a: None)


def test_a_new_training_in_a_deleted_studys_folder_is_another_model(tmp_path, in_process_jobs):
    """`ablate run model-size --classroom --steps 4 --name A`, the same `--name B` (takes over both jobs), A's folder
    deleted, then `--steps 8 --name A`: A's new pre-training lies in the folder B's was taken over from, but it is
    another model, so A's fine-tuning runs on it instead of taking over B's evaluation of the 4-step model. A study
    of the 8-step model then takes over both of A's jobs (the same weights)."""
    a = launch(tmp_path, "A", 4)
    assert len(in_process_jobs.ran) == 2
    b = launch(tmp_path, "B", 4)
    assert len(in_process_jobs.ran) == 2 and all(j["reused_from"] for j in A.read_study(b)["jobs"])  # both taken over
    shutil.rmtree(a)
    in_process_jobs.ran.clear()
    a = launch(tmp_path, "A", 8)
    jobs = {j["kind"]: j for j in A.read_study(a)["jobs"]}
    assert in_process_jobs.ran == [jobs["pretrain"]["key"], jobs["finetune"]["key"]]  # nothing taken over
    assert jobs["finetune"].get("reused_from") is None
    ev = json.loads((a / jobs["finetune"]["out"] / "eval.json").read_text())
    ck = next((a / jobs["pretrain"]["out"]).glob("checkpoints/step-*"))
    assert ck.name == "step-8" and ev["model_path"] == str(a / jobs["pretrain"]["out"])
    own = int(hashlib.sha256((ck / "model.safetensors").read_bytes()).hexdigest()[:6], 16) / 16 ** 6
    b_ev = json.loads((b / jobs["finetune"]["out"] / "eval.json").read_text())
    assert ev["score"] == own != b_ev["score"]  # its own model's score, not the 4-step model's
    in_process_jobs.ran.clear()
    c = launch(tmp_path, "C", 8)
    assert in_process_jobs.ran == []
    assert {j["kind"]: j["reused_from"] for j in A.read_study(c)["jobs"]} == {
        k: str((a / j["out"]).absolute()) for k, j in jobs.items()}


# --------------------------------------------------------------------------------------------- status from the truth
def test_a_studys_status_is_its_jobs_own_records(tmp_path, in_process_jobs, monkeypatch, capsys):
    """A queued study whose queue jobs were cancelled, then finished by `ablate resume --foreground`: `ablate show --json` says
    every job finished (its run folder has the result), not cancelled beside a full table. With the run folders
    deleted, a foreground study says none finished (over its empty table), where study.json still says finished;
    `ablate resume` runs them again."""
    import engine.jobs as Q
    submitted = []
    monkeypatch.setattr(Q, "submit", lambda argv, name=None, run_dir=None, root=None, **kw:
                        submitted.append(run_dir) or {"id": f"q{len(submitted)}"})
    monkeypatch.setattr(Q, "list_jobs", lambda root=None: [
        {"id": f"q{i + 1}", "status": "cancelled", "run_dir": r, "error": "cancelled by the user"}
        for i, r in enumerate(submitted)])
    d = A.launch(small_study(4), runs_root=tmp_path, name="queued", log=lambda *a: None)
    assert len(submitted) == 2 and in_process_jobs.ran == []
    assert A.collect_results(d).progress["cancelled"] == 2
    assert A.main(["resume", str(d), "--foreground"]) == 0 and len(in_process_jobs.ran) == 2
    capsys.readouterr()
    A.main(["show", str(d), "--json"])
    shown = json.loads(capsys.readouterr().out)
    assert shown["progress"]["finished"] == 2 and shown["progress"]["cancelled"] == 0
    assert len(shown["table"]) == 1  # the fine-tuning's score
    f = A.launch(small_study(5), runs_root=tmp_path, name="fg", foreground=True, log=lambda *a: None)  # nothing to take over
    assert A.collect_results(f).progress["finished"] == 2
    for j in A.read_study(f)["jobs"]:
        shutil.rmtree(f / j["out"])
    assert all(j["status"] == "finished" for j in A.read_study(f)["jobs"])  # what study.json recorded
    res = A.collect_results(f)
    assert res.progress["finished"] == 0 and res.progress["queued"] == 2 and len(res.summary) == 0
    assert all("deleted?" in r["error"] for r in res.jobs)
    in_process_jobs.ran.clear()
    assert A.main(["resume", str(f)]) == 0 and len(in_process_jobs.ran) == 2
    assert A.collect_results(f).progress["finished"] == 2


def test_a_failed_jobs_error_is_its_runs_not_the_logs_last_line(tmp_path, in_process_jobs):
    """A job that fails with a progress bar as the last line of its job.log: the error recorded is the one its
    run.json says."""
    study = small_study(4)
    pre = next(j.key for j in A.plan(study, tmp_path) if j.kind == "pretrain")
    in_process_jobs.fail.add(pre)
    d = A.launch(study, runs_root=tmp_path, name="x", foreground=True, log=lambda *a: None)
    rows = {r["key"]: r for r in A.job_states(d)}
    assert A.read_study(d)["jobs"][0]["error"] == rows[pre]["error"] == "ValueError: the real cause"
    assert rows[pre]["state"] == "failed"


def test_two_resumes_of_one_study_run_one_at_a_time(tmp_path, in_process_jobs, monkeypatch):
    """While one `ablate resume` runs a study's jobs, a second is refused in one line naming the first's process
    (two would start the same jobs and write into one job.log); once the first ends, the study can be resumed."""
    import threading
    study = small_study(4)
    pre = next(j.key for j in A.plan(study, tmp_path) if j.kind == "pretrain")
    in_process_jobs.fail.add(pre)
    d = A.launch(study, runs_root=tmp_path, name="x", foreground=True, log=lambda *a: None)
    in_process_jobs.fail.clear()
    in_process_jobs.ran.clear()
    started, release = threading.Event(), threading.Event()

    class Running:
        returncode = 0

        def poll(self):
            return 0 if release.is_set() else None
    real_start = runner._start_job

    def start(study_dir, job, env, log):
        real_start(study_dir, job, env, log)
        started.set()
        return job, Running(), io.BytesIO(), time.time()
    monkeypatch.setattr(runner, "_start_job", start)
    first = threading.Thread(target=A.main, args=(["resume", str(d)],))
    first.start()
    try:
        assert started.wait(30)
        with pytest.raises(EngineError) as e:
            A.main(["resume", str(d)])
        assert f"process {os.getpid()}" in str(e.value) and "\n" not in str(e.value)
        assert in_process_jobs.ran == [pre]  # the second started nothing
    finally:
        release.set()
        first.join(30)
    assert A.collect_results(d).progress["finished"] == 2
    assert A.main(["resume", str(d)]) == 0  # the lock went with the first


@pytest.mark.slow
def test_the_ablations_page_lists_the_good_studies_beside_a_damaged_one(tmp_path, monkeypatch, fake_runs):
    """The Ablations page (AppTest) with one study whose study.json says `"study": null`: the other study is listed
    and shown with its table; the bad one is listed as what is wrong, and picking it is one error line."""
    from streamlit.testing.v1 import AppTest
    root = tmp_path / "runs"
    monkeypatch.setenv("BERT_STUDIO_RUNS", str(root))
    study = A.get_study("pretraining-tasks", seeds=1, evaluations=(A.BBC,))
    for name in ("good", "bad"):
        d = root / "studies" / name
        d.mkdir(parents=True)
        jobs = A.plan(study, d)
        A.write_study(d, study, jobs, mode="foreground")
        fake_runs.fill_table5(d, jobs)
    damage(root / "studies" / "bad", "study null")
    at = AppTest.from_file(str(Path(__file__).resolve().parents[3] / "pages" / "7_Ablations.py"), default_timeout=60)
    at.session_state["runs_root"] = str(root)
    at.session_state["abl_show"] = "good"
    at.run()
    assert not at.exception, at.exception
    assert not any("listing studies failed" in e.value for e in at.error)
    pick = next(s for s in at.selectbox if s.key == "abl_pick")
    assert len(pick.options) == 2 and pick.value == "good"
    assert [o.startswith("bad — ") and "damaged" in o for o in sorted(pick.options)] == [True, False]
    assert at.dataframe[0].value.loc["BERT (MLM + NSP)", A.BBC.name] == "90.0 ± 0.0 (n=1)"
    pick.set_value("bad").run()
    assert not at.exception, at.exception
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and "damaged" in errors[0] and "\n" not in errors[0]
