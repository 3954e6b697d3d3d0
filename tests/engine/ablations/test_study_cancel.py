"""A study as one (engine.ablations.control, and the dependencies runner.queue_jobs gives the queue): a fine-tune never
starts on a pre-training that was cancelled or failed, and starts once it finished; `ablate cancel` cancels every job
of a study; `ablate resume` queues the unfinished ones again, each after the pre-training it reads; `ablate job`
refuses while its pre-training is unfinished; the study's state in words.

Through the real queue, runners and watchers and the real `ablate job` (runner.run_job), with quick fake commands in
place of pre-training and fine-tuning: a fake `engine` package (`study_engine`) whose `ablate job` is the real one
and whose job commands are small Python programs written into study.json."""
import json
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from engine import ablations as A
from engine import jobs as Q
from engine.ablations import runner
from engine.ablations.planner import Job
from engine.errors import EngineError
from engine.jobs import TERMINAL, Jobs
from tests.helpers import wait_for

pytestmark = pytest.mark.slow  # detached runner processes

REAL_ENGINE = Path(runner.__file__).resolve().parents[1]

# `python -m engine ...` in the fake repo: `ablate job DIR KEY` is the real runner.run_job (its exec lands back here);
# `bench CODE ARGS...` runs CODE as `python -c CODE ARGS...`
FAKE_MAIN = """import sys
args = sys.argv[1:]
if args[:2] == ["ablate", "job"]:
    from engine.ablations import runner
    from engine.errors import EngineError
    runner.REPO_ROOT = REPO
    try:
        sys.exit(runner.run_job(args[2], args[3]))
    except EngineError as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        sys.exit(2)
sys.argv = ["-c", *args[2:]]
exec(compile(args[1], "<job>", "exec"))
"""

# a pre-training: run.json running; "--resume" or "ok" finishes at once, "fail" fails, "hang" trains until SIGTERM,
# then saves checkpoints/step-3 and records cancelled (as engine.pretraining does)
PRETRAIN = """import json, os, signal, sys, time
out, how = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
def status(s, **kw):
    json.dump({"kind": "pretrain", "status": s, **kw}, open(os.path.join(out, "run.json"), "w"))
open(os.path.join(out, "started-%d" % time.time_ns()), "w").close()
if "--resume" in sys.argv or how == "ok":
    status("finished"); open(os.path.join(out, "ended"), "w").write(repr(time.time())); sys.exit(0)
if how == "fail":
    status("failed", error="error: out of memory"); print("error: out of memory", file=sys.stderr); sys.exit(1)
stop = []
signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
status("running")
while not stop:
    time.sleep(0.05)
os.makedirs(os.path.join(out, "checkpoints", "step-3"), exist_ok=True)
open(os.path.join(out, "checkpoints", "step-3", "COMPLETE"), "w").write("ok")
status("cancelled", error="cancelled by SIGTERM at step 3; continue with --resume")
sys.exit(130)
"""

# a fine-tune of the model at --model: records that it started and what it read, then finishes
FINETUNE = """import json, os, sys, time
out, model = sys.argv[1], sys.argv[3]
os.makedirs(out, exist_ok=True)
info = json.load(open(os.path.join(model, "run.json")))
open(os.path.join(out, "started"), "w").write(json.dumps({"t": time.time(), "model_status": info.get("status")}))
json.dump({"kind": "finetune", "status": "finished", "score": 0.5}, open(os.path.join(out, "eval.json"), "w"))
json.dump({"kind": "finetune", "status": "finished"}, open(os.path.join(out, "run.json"), "w"))
"""


@pytest.fixture
def study_engine(tmp_path, monkeypatch):
    """.root (a runs folder whose queue runs the fake engine), .make(name, {variant: how}) -> a study folder queued
    one job at a time with a pre-training and two fine-tunes per variant (not yet queued: .queue(d) queues them as
    `launch` does), .q (the queue)."""
    repo = tmp_path / "fake-repo"
    (repo / "engine").mkdir(parents=True)
    (repo / "engine" / "__init__.py").write_text(f"__path__.append({str(REAL_ENGINE)!r})\n")  # the real modules too
    (repo / "engine" / "__main__.py").write_text(f"REPO = {str(repo)!r}\n" + FAKE_MAIN)
    root = tmp_path / "runs"
    q = Jobs(root, repo_root=repo, cancel_timeout=5.0)
    monkeypatch.setattr(Q, "submit", lambda argv, name=None, run_dir=None, root=None, **kw:
                        Jobs(root, repo_root=repo).submit(argv, name=name, run_dir=run_dir, **kw))
    monkeypatch.setattr(Q, "cancel", lambda job_id, root=None, timeout=None:
                        Jobs(root, repo_root=repo, cancel_timeout=5.0).cancel(job_id, timeout=timeout))

    def make(name, hows):
        d = root / "studies" / name
        d.mkdir(parents=True)
        jobs = []
        for variant, how in hows.items():
            pre = f"runs/{variant}"
            jobs.append(Job(f"pretrain/{variant}", "pretrain", ["bench", PRETRAIN, str(d / pre), how], pre, variant, 0))
            for task in ("t1", "t2"):
                out = f"runs/{variant}-{task}"
                jobs.append(Job(f"eval/{variant}/{task}", "finetune", ["bench", FINETUNE, str(d / out), "--model", str(d / pre)],
                                out, variant, 0, task))
        A.write_study(d, A.get_study("pretraining-tasks", scale="classroom"), jobs, mode="queue", runs_root=str(root),
                      reuse=False)
        return d

    def queue(d):
        return runner.queue_jobs(d, [j["key"] for j in A.read_study(d)["jobs"]])

    yield SimpleNamespace(root=root, q=q, make=make, queue=queue)
    for job in q.list_jobs():  # never leave processes behind
        if job["status"] not in TERMINAL:
            q.cancel(job["id"], timeout=1.0)


def all_ended(q):
    return wait_for(lambda: (lambda js: js if all(j["status"] in TERMINAL for j in js) else None)(q.list_jobs()))


def by_key(d, q):
    """{job key: its newest queue record}."""
    recs = {j["run_dir"]: j for j in reversed(q.list_jobs())}
    return {j["key"]: recs.get(str(d / j["out"])) for j in A.read_study(d)["jobs"]}


def running_pretraining(d, variant):
    return wait_for(lambda: (d / "runs" / variant / "run.json").is_file()
                    and json.loads((d / "runs" / variant / "run.json").read_text())["status"] == "running")


def test_a_finetune_never_starts_after_its_pretraining_is_cancelled_and_starts_after_it_finishes(study_engine):
    """The teacher's fault: the running pre-training cancelled from the Jobs page (its job alone). Its fine-tunes are
    cancelled unrun with one line naming it and the resume command; the other variant's jobs run (its fine-tunes
    after its pre-training finished); the study says "cancelled"; a Retry of one of them refuses in `ablate job`. Resume queues the three unfinished jobs, each
    fine-tune waiting for the pre-training, which continues from its checkpoint: every fine-tune read a finished model."""
    se = study_engine
    d = se.make("t5", {"a": "hang", "b": "ok"})
    ids = se.queue(d)
    recs = {r["id"]: r for r in se.q.list_jobs()}
    assert recs[ids["eval/a/t1"]]["depends_on"] == [ids["pretrain/a"]] and recs[ids["pretrain/b"]]["depends_on"] == []
    assert recs[ids["eval/b/t2"]]["depends_on"] == [ids["pretrain/b"]]
    running_pretraining(d, "a")
    se.q.cancel(ids["pretrain/a"])
    all_ended(se.q)
    rec = by_key(d, se.q)
    assert rec["pretrain/a"]["status"] == "cancelled" and (d / "runs/a/checkpoints/step-3/COMPLETE").is_file()
    for k in ("eval/a/t1", "eval/a/t2"):
        assert rec[k]["status"] == "cancelled" and rec[k]["started"] is None and not (d / f"runs/{k[5:].replace('/', '-')}").exists()
        assert rec[k]["error"] == (f"not run: t5: pretrain/a was cancelled; resume the study with "
                                   f"`python -m engine ablate resume {d}` (or its Resume button on the Ablations page)")
    assert [rec[k]["status"] for k in ("pretrain/b", "eval/b/t1", "eval/b/t2")] == ["finished"] * 3
    assert json.loads((d / "runs/b-t1/started").read_text())["model_status"] == "finished"
    assert A.study_state(A.job_states(d)) == "cancelled"
    # a Retry of one fine-tune from the Jobs page: `ablate job` itself refuses, in one line, to read the half-trained model
    retry = se.q.retry(ids["eval/a/t1"])
    retried = wait_for(lambda: (lambda r: r if r["status"] in TERMINAL else None)(se.q.get(retry["id"])))
    assert retried["status"] == "failed" and not (d / "runs/a-t1/started").exists()
    assert retried["error"].startswith("error: not run: eval/a/t1 reads the pre-training pretrain/a, which has not "
                                       "finished (cancelled, its last checkpoint step-3); resume the study with")

    assert A.main(["resume", "t5", "--runs-root", str(se.root)]) == 0
    new = by_key(d, se.q)
    assert {k for k, r in new.items() if r["id"] != rec[k]["id"]} == {"pretrain/a", "eval/a/t1", "eval/a/t2"}
    assert new["eval/a/t1"]["depends_on"] == [new["pretrain/a"]["id"]]
    all_ended(se.q)
    assert A.study_state(A.job_states(d)) == "6 of 6 done"
    ended = float((d / "runs/a/ended").read_text())
    for t in ("t1", "t2"):
        started = json.loads((d / f"runs/a-{t}/started").read_text())
        assert started["model_status"] == "finished" and started["t"] >= ended
    assert [r["job_id"] for r in A.read_study(d)["jobs"][:3]] == [new[k]["id"] for k in ("pretrain/a", "eval/a/t1", "eval/a/t2")]


def test_a_failed_pretraining_fails_its_finetunes_unrun(study_engine):
    se = study_engine
    d = se.make("t5", {"a": "fail"})
    se.queue(d)
    all_ended(se.q)
    rec = by_key(d, se.q)
    assert rec["pretrain/a"]["status"] == "failed" and rec["pretrain/a"]["error"] == "error: out of memory"
    for k in ("eval/a/t1", "eval/a/t2"):
        assert rec[k]["status"] == "failed" and rec[k]["started"] is None
        assert rec[k]["error"].startswith("not run: t5: pretrain/a failed; resume the study with")
    assert not (d / "runs/a-t1").exists() and not (d / "runs/a-t2").exists()
    assert A.study_state(A.job_states(d)) == "failed at pretrain/a"


def test_ablate_cancel_cancels_every_job_of_the_study(study_engine, capsys):
    """`ablate cancel NAME` while the first pre-training runs: every job of the study ends cancelled, nothing but that
    pre-training ever started, and it saved its checkpoint, which the command names."""
    se = study_engine
    d = se.make("t5", {"a": "hang", "b": "ok"})
    se.queue(d)
    running_pretraining(d, "a")
    assert A.is_active(d)
    assert A.main(["cancel", "t5", "--runs-root", str(se.root)]) == 0
    out = capsys.readouterr().out
    assert "stopped t5: pretrain/a; it saved its checkpoint step-3" in out and "cancelled 6 job(s) of study t5" in out
    rec = by_key(d, se.q)
    assert all(r["status"] == "cancelled" for r in rec.values()), {k: r["status"] for k, r in rec.items()}
    assert [k for k, r in rec.items() if r["started"]] == ["pretrain/a"]
    assert not A.is_active(d) and A.study_state(A.job_states(d)) == "cancelled"
    assert A.main(["cancel", str(d)]) == 0  # again: nothing left to cancel, said in one line
    assert "nothing of study t5 is queued or running" in capsys.readouterr().out


def test_the_study_job_refuses_while_its_pretraining_is_unfinished(tmp_path, monkeypatch):
    """`ablate job` of a fine-tune whose pre-training was cancelled (a Retry from the Jobs page, a queue file without
    dependencies) refuses in one line naming the pre-training, its checkpoint and the resume command; so does the
    foreground runner, which records the job failed without running it."""
    d = tmp_path / "runs" / "studies" / "s"
    d.mkdir(parents=True)
    pre, ft = f"{d}/runs/a", f"{d}/runs/a-t1"
    jobs = [Job("pretrain/a", "pretrain", ["pretrain", "--out", pre], "runs/a", "a", 0),
            Job("eval/a/t1", "finetune", ["finetune", "--model", pre, "--out", ft], "runs/a-t1", "a", 0, "t1")]
    A.write_study(d, A.get_study("pretraining-tasks", scale="classroom"), jobs, mode="queue", runs_root=str(tmp_path / "runs"))
    (d / "runs/a/checkpoints/step-358").mkdir(parents=True)
    (d / "runs/a/checkpoints/step-358/COMPLETE").write_text("ok")
    (d / "runs/a/run.json").write_text(json.dumps({"kind": "pretrain", "status": "cancelled"}))
    with pytest.raises(EngineError) as e:
        runner.run_job(d, "eval/a/t1", log=lambda *a: None)
    assert str(e.value) == (f"not run: eval/a/t1 reads the pre-training pretrain/a, which has not finished (cancelled, "
                            f"its last checkpoint step-358); resume the study with `python -m engine ablate resume {d}` "
                            "(or its Resume button on the Ablations page)")
    assert runner.unfinished_pretraining(d, A.read_study(d)["jobs"][0], A.read_study(d)["jobs"]) is None
    (d / "runs/a/run.json").write_text(json.dumps({"kind": "pretrain", "status": "finished"}))
    assert runner.unfinished_pretraining(d, A.read_study(d)["jobs"][1], A.read_study(d)["jobs"]) is None

    # the foreground runner: a pre-training that exits 0 but stopped part way (`--stop-after` does) is not fine-tuned
    started = []

    def start(study_dir, job, env, log):
        started.append(job["key"])
        (d / "runs/a/run.json").write_text(json.dumps({"kind": "pretrain", "status": "cancelled"}))
        return job, SimpleNamespace(poll=lambda: 0, returncode=0), open(tmp_path / "log", "wb"), time.time()
    monkeypatch.setattr(runner, "_start_job", start)
    (d / "runs/a/run.json").unlink()
    counts = runner.run_foreground(d, log=lambda *a: None)
    assert started == ["pretrain/a"] and counts["failed"] == 1
    ft = A.read_study(d)["jobs"][1]
    assert ft["status"] == "failed" and ft["error"].startswith("not run: eval/a/t1 reads the pre-training pretrain/a, which has not finished (cancelled")


def test_resume_of_a_study_run_jobs_at_once_queues_its_one_job(tmp_path, monkeypatch):
    """A study run several jobs at a time is resumed as one queue job, `ablate resume STUDY --parallel N` (N as it was
    launched); while a job of it is still queued or running, Resume is one line saying so."""
    calls, active = [], []
    monkeypatch.setattr(Q, "submit", lambda argv, name=None, run_dir=None, root=None, **kw:
                        calls.append((argv, run_dir)) or {"id": "r1"})
    monkeypatch.setattr(Q, "list_jobs", lambda root=None: active)
    d = A.launch(A.get_study("pretraining-tasks", scale="classroom"), runs_root=tmp_path, log=lambda *a: None, parallel=3)
    calls.clear()
    assert A.resume_study(d, log=lambda *a: None) == ["r1"]
    assert calls == [(["ablate", "resume", str(d.absolute()), "--parallel", "3"], str(d))]
    active.append({"id": "r1", "status": "running", "run_dir": str(d.absolute()), "name": "t5"})
    with pytest.raises(EngineError) as e:
        A.resume_study(d)
    assert "\n" not in str(e.value) and "still running as job r1" in str(e.value)
    with pytest.raises(EngineError) as e:
        A.main(["cancel", "no-such-study", "--runs-root", str(tmp_path)])
    assert "no study 'no-such-study'" in str(e.value) and "ablate list" in str(e.value)


def test_a_studys_state_in_words():
    def rows(*states, error=None):
        return [{"key": f"job{i}", "state": s, "error": error if s == "failed" else None} for i, s in enumerate(states)]
    assert A.study_state(rows("finished", "running", "queued")) == "running job1 (1 of 3 done)"
    assert A.study_state(rows("finished", "queued", "queued")) == "1 of 3 done"
    assert A.study_state(rows("finished", "finished")) == "2 of 2 done"
    assert A.study_state(rows("cancelled", "cancelled", "finished")) == "cancelled"
    failed = [{"key": "pretrain/a", "state": "failed", "error": "error: out of memory"},
              {"key": "eval/a", "state": "failed", "error": "not run: t5: pretrain/a failed; ..."}]
    assert A.study_state(list(reversed(failed))) == "failed at pretrain/a"
    assert A.study_state(failed + rows("queued")) == "0 of 3 done; failed at pretrain/a"
