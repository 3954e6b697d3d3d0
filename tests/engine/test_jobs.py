"""The job queue (engine.jobs): detached runners, one job at a time, cancel, retry, restart survival.

Engine-free: jobs run tiny programs under a stand-in for `python -m engine` (conftest's `fake_engine`, reached only
through `Jobs(repo_root=...)`), except one test that checks the public `submit` runs the real `python -m engine ...`
without a shell.
"""
import json
import signal
import sys
import time
from pathlib import Path

import pytest

from engine import jobs as jobs_mod
from engine import procs, runs
from engine.errors import EngineError
from engine.jobs import TERMINAL, Jobs
from tests.helpers import wait_for

pytestmark = pytest.mark.slow  # every test starts detached runner processes


def wait_done(q: Jobs, job_id, timeout=20.0, refresh=False):
    def done():
        if refresh:
            q.refresh()
        job = q.get(job_id)
        return job if job["status"] in TERMINAL else None
    return wait_for(done, timeout)


@pytest.fixture
def q(tmp_path, fake_engine):
    jq = Jobs(tmp_path / "runs", cancel_timeout=2.0, repo_root=fake_engine.repo)
    yield jq
    # never leave processes behind
    for job in jq.list_jobs():
        if job["status"] not in TERMINAL:
            jq.cancel(job["id"], timeout=0.5)


def test_two_jobs_run_one_at_a_time_and_chain(q, tmp_path, fake_engine):
    stamp = tmp_path / "stamps"
    stamp.mkdir()
    prog = ("import sys, time; n = sys.argv[1]; d = sys.argv[2]\n"
            "open(f'{d}/{n}.start', 'w').write(repr(time.time()))\n"
            "print(f'hello from {n}', flush=True); time.sleep(0.6)\n"
            "open(f'{d}/{n}.end', 'w').write(repr(time.time()))\n")
    a = q.submit(fake_engine.py(prog, "a", stamp), name="a", run_dir=tmp_path / "runs" / "a")
    b = q.submit(fake_engine.py(prog, "b", stamp), name="b", run_dir=tmp_path / "runs" / "b")
    assert a["status"] == "running" and b["status"] == "queued"
    assert q.get(b["id"])["status"] == "queued"
    ids = [j["id"] for j in q.list_jobs()]
    assert ids == [b["id"], a["id"]]  # newest first
    # no refresh(): the first job's runner starts the second one itself
    ja = wait_done(q, a["id"])
    jb = wait_done(q, b["id"])
    assert ja["status"] == jb["status"] == "finished"
    assert ja["returncode"] == 0 and jb["returncode"] == 0 and ja["error"] is None
    assert float((stamp / "a.end").read_text()) <= float((stamp / "b.start").read_text())
    assert Path(ja["log"]) == tmp_path / "runs" / "a" / "job.log"
    assert "hello from a" in q.tail_log(a["id"])
    assert "hello from b" in q.tail_log(b["id"]) and "hello from a" not in q.tail_log(b["id"])
    assert q.tail_log(a["id"], n=1).startswith(f"[job {a['id']}]")  # the runner's footer
    assert q.job_progress(ja) == 1.0


def test_failed_job_error_line_and_retry(q, tmp_path, fake_engine):
    code = "import sys; print('step 1'); print('error: corpus foo not found; pass --corpus bbc', file=sys.stderr); sys.exit(2)"
    j = q.submit(fake_engine.py(code), name="bad")
    j = wait_done(q, j["id"])
    assert j["status"] == "failed" and j["returncode"] == 2
    assert j["error"] == "error: corpus foo not found; pass --corpus bbc"
    assert Path(j["log"]).parent == tmp_path / "runs" / ".jobs" / "logs"
    r = q.retry(j["id"])
    assert r["id"] != j["id"] and r["argv"] == j["argv"] and r["name"] == "bad"
    assert wait_done(q, r["id"])["status"] == "failed"
    # a crash with no error: line reports the last line / the signal
    k = wait_done(q, q.submit(fake_engine.py("import os, signal; print('working', flush=True); os.kill(os.getpid(), signal.SIGKILL)"))["id"])
    assert k["status"] == "failed" and k["returncode"] == -signal.SIGKILL and k["error"] == "killed by SIGKILL"
    with pytest.raises(EngineError):
        q.retry("nope")


def test_retry_argv_adds_resume_for_pretrain_with_checkpoint(tmp_path):
    run_dir = tmp_path / "r"
    job = {"argv": ["pretrain", "--out", str(run_dir)], "run_dir": str(run_dir)}
    assert jobs_mod.retry_argv(job) == job["argv"]  # no checkpoint yet: start over
    tmp = runs.new_checkpoint_dir(run_dir, 4)
    runs.publish_checkpoint(tmp)
    assert jobs_mod.retry_argv(job) == ["pretrain", "--out", str(run_dir), "--resume"]
    assert jobs_mod.retry_argv({**job, "argv": job["argv"] + ["--resume"]}).count("--resume") == 1
    assert jobs_mod.retry_argv({**job, "argv": ["finetune", "--out", str(run_dir)]}) == ["finetune", "--out", str(run_dir)]


def test_retry_argv_resumes_any_run_of_the_same_command(tmp_path):
    # a pre-training run killed before its first checkpoint (run.json, no checkpoint) starts again through --resume
    pre = tmp_path / "pre"
    runs.write_run_json(pre, kind="pretrain", status="running")
    job = {"argv": ["pretrain", "--out", str(pre)], "run_dir": str(pre)}
    assert jobs_mod.retry_argv(job)[-1] == "--resume"
    # a fine-tune or features run (finished or not) is continued, never started afresh over its results
    for kind in ("finetune", "features"):
        d = tmp_path / kind
        job = {"argv": [kind, "--out", str(d)], "run_dir": str(d)}
        assert jobs_mod.retry_argv(job) == job["argv"]  # nothing there yet
        runs.write_run_json(d, kind=kind, status="finished")
        assert jobs_mod.retry_argv(job) == job["argv"] + ["--resume"]
    # a folder holding another command's run gets no --resume (the command then refuses the folder)
    job = {"argv": ["finetune", "--out", str(pre)], "run_dir": str(pre)}
    assert jobs_mod.retry_argv(job) == job["argv"]


def test_cancel_kills_whole_process_group(q, tmp_path, fake_engine):
    pidfile = tmp_path / "grandchild.pid"
    code = ("import subprocess, sys, time\n"
            "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
            f"open({str(pidfile)!r}, 'w').write(str(p.pid))\n"
            "time.sleep(60)\n")
    j = q.submit(fake_engine.py(code), name="long", run_dir=tmp_path / "runs" / "long")
    wait_for(lambda: pidfile.exists() and pidfile.read_text())
    grandchild = int(pidfile.read_text())
    running = q.get(j["id"])
    assert running["status"] == "running" and procs.pid_alive(running["child_pid"]) and procs.pid_alive(grandchild)
    done = q.cancel(j["id"], timeout=15)
    assert done["status"] == "cancelled" and done["error"] == "cancelled by the user"
    assert done["returncode"] == -signal.SIGTERM  # SIGTERM was enough: the runner lived to record it
    wait_for(lambda: not procs.pid_alive(grandchild) and not procs.pid_alive(running["child_pid"]), timeout=5)
    assert not procs.pid_alive(running["pid"])


def test_cancel_escalates_to_sigkill_and_starts_next(q, tmp_path, fake_engine):
    ready = tmp_path / "ready"
    code = ("import signal, time\n"
            "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            f"open({str(ready)!r}, 'w').write('1')\n"
            "time.sleep(60)\n")
    stubborn = q.submit(fake_engine.py(code), name="stubborn")
    nxt = q.submit(fake_engine.py("print('next ran')"), name="next")
    wait_for(ready.exists)
    child = q.get(stubborn["id"])["child_pid"]
    done = q.cancel(stubborn["id"], timeout=0.5)
    assert done["status"] == "cancelled" and not procs.pid_alive(child)
    assert wait_done(q, nxt["id"], refresh=True)["status"] == "finished"


def test_cancel_queued_job(q, fake_engine):
    first = q.submit(fake_engine.py("import time; time.sleep(30)"))
    second = q.submit(fake_engine.py("print('never')"), run_dir=q.root / "x")
    with pytest.raises(EngineError, match="already has job"):
        q.submit(fake_engine.py("print('never')"), run_dir=q.root / "x")
    c = q.cancel(second["id"])
    assert c["status"] == "cancelled" and c["pid"] is None
    assert q.cancel(first["id"], timeout=1)["status"] == "cancelled"
    time.sleep(0.3)
    assert q.get(second["id"])["status"] == "cancelled"  # never started


def test_queue_survives_restart(tmp_path, fake_engine):
    root = tmp_path / "runs"
    first = Jobs(root, repo_root=fake_engine.repo)
    a = first.submit(fake_engine.py("import time; time.sleep(0.5)"), name="a")
    b = first.submit(fake_engine.py("print('b done')"), name="b")
    del first  # the studio goes away; the runner keeps going
    second = Jobs(root)
    assert {j["id"] for j in second.list_jobs()} == {a["id"], b["id"]}
    assert wait_done(second, b["id"])["status"] == "finished"
    assert second.get(a["id"])["status"] == "finished"
    assert json.loads((root / ".jobs" / "queue.json").read_text())["jobs"][0]["id"] == a["id"]


def test_refresh_reaps_dead_runner_and_starts_queued(tmp_path, fake_engine):
    root = tmp_path / "runs"
    jq = Jobs(root, repo_root=fake_engine.repo)
    p = __import__("subprocess").Popen([sys.executable, "-c", "pass"])
    p.wait()
    run_dir = root / "crashed"
    runs.write_run_json(run_dir, status="running", pid=p.pid)
    # as if the studio host rebooted: a job marked running whose processes are gone, and one queued job
    jq.queue_path.parent.mkdir(parents=True)
    ghost = {"id": "ghost", "name": "ghost", "argv": ["pretrain"], "status": "running", "pid": p.pid,
             "pgid": p.pid, "proc_start": None, "created": "x", "started": "x", "ended": None,
             "returncode": None, "error": None, "log": str(run_dir / "job.log"), "log_offset": 0,
             "run_dir": str(run_dir), "cancel_requested": False}
    waiting = dict(ghost, id="waiting", status="queued", pid=None, pgid=None, argv=fake_engine.py("print('ok')"),
                   log=str(root / "w.log"), run_dir=None)
    (run_dir / "job.log").write_text("[job ghost] start\nerror: out of memory; use a smaller batch\n")
    jq.queue_path.write_text(json.dumps({"version": 1, "jobs": [ghost, waiting]}))
    jq.refresh()
    g = jq.get("ghost")
    assert g["status"] == "failed" and g["error"] == "error: out of memory; use a smaller batch"
    assert runs.read_run_json(run_dir)["status"] == "failed"  # run.json no longer claims running
    assert wait_done(jq, "waiting")["status"] == "finished"


def test_public_submit_runs_engine_without_a_shell(tmp_path):
    pwned = tmp_path / "pwned"
    q = Jobs(tmp_path / "runs")  # the real engine
    with pytest.raises(EngineError):
        q.submit("pretrain --corpus bbc")
    for bad in ([], ["--corpus"], ["pretrain", 3], ["pre train"], ["pretrain", "a\x00b"], ["no-such-command"],
                [sys.executable, "-c", "print(1)"]):
        with pytest.raises(EngineError):
            q.submit(bad)
    assert q.list_jobs() == []  # nothing refused was queued
    out = tmp_path / "runs" / "inj"
    j = q.submit(["pretrain", f"; touch {pwned}", f"$(touch {pwned})", "--out", str(out)])
    assert j["run_dir"] == str(out) and j["name"] == "inj"
    j = wait_done(q, j["id"], timeout=60)
    assert j["status"] == "failed" and j["returncode"] == 2 and j["error"].startswith("error:")
    header = Path(j["log"]).read_text().splitlines()[0]
    assert "python -m engine pretrain" in header
    assert not pwned.exists()


def test_progress_and_tail(q, tmp_path, fake_engine):
    run_dir = tmp_path / "runs" / "p"
    runs.write_run_json(run_dir, status="running", total_steps=10)
    runs.append_metrics(run_dir, {"step": 4})
    assert q.job_progress({"status": "running", "run_dir": str(run_dir)}) == pytest.approx(0.4)
    assert q.job_progress({"status": "queued", "run_dir": None}) == 0.0
    assert q.job_progress({"status": "running", "run_dir": None}) is None
    # the job that runs a whole study (`ablate resume STUDY --parallel N`): its share of the study's jobs done
    study = tmp_path / "runs" / "studies" / "s"
    study.mkdir(parents=True)
    (study / "study.json").write_text(json.dumps({"jobs": [{"status": "finished"}, {"status": "failed"}, {}, {}]}))
    assert q.job_progress({"status": "running", "run_dir": str(study)}) == pytest.approx(0.25)
    j = wait_done(q, q.submit(fake_engine.py("import sys\nfor i in range(100): print('line', i)\n"
                                      "sys.stdout.write('bar 10%\\rbar 50%\\rbar 100%\\n')"))["id"])
    tail = q.tail_log(j["id"], n=3).splitlines()
    assert tail[0] == "line 99" and tail[1] == "bar 100%" and tail[2].startswith(f"[job {j['id']}]")


def test_stop_run_signals_only_the_proved_writer(tmp_path):
    """The Pre-train page's Cancel: no queued job runs this run, so the process holding its run lock gets SIGTERM;
    a run nobody holds is left alone."""
    import subprocess
    root, d = tmp_path / "runs", tmp_path / "runs" / "r"
    assert "nothing was signalled" in jobs_mod.stop_run(d, root=str(root))
    holder = subprocess.Popen([sys.executable, "-c",
                               "import sys, time; from engine.runs import RunLock; "
                               "l = RunLock(sys.argv[1]).acquire(); print('held', flush=True); time.sleep(60)", str(d)],
                              cwd=Path(__file__).resolve().parents[2], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert "asked the run to stop" in jobs_mod.stop_run(d, root=str(root))
        assert holder.wait(timeout=10) == -signal.SIGTERM
    finally:
        if holder.poll() is None:
            holder.kill()


# ------------------------------------------------------------------------------------- jobs that wait for other jobs
def _stamping(stamp: Path, name: str, seconds: float = 0.0, rc: int = 0) -> str:
    """A job program that records when it started and ended (`stamp`/NAME.start, .end) and exits with `rc`."""
    return (f"import sys, time; open({str(stamp / (name + '.start'))!r}, 'w').write(repr(time.time()))\n"
            f"time.sleep({seconds})\nopen({str(stamp / (name + '.end'))!r}, 'w').write(repr(time.time())); sys.exit({rc})\n")


@pytest.mark.parametrize("how", ["cancelled", "failed"])
def test_a_dependant_never_starts_after_its_dependency_is_cancelled_or_fails(q, tmp_path, fake_engine, how):
    """B and C wait for A (C through B too); D waits for nothing. A cancelled while it runs, or failing: B and C end
    as A did, unrun, with one line naming A and the hint they were queued with; D runs."""
    stamp = tmp_path / "stamps"
    stamp.mkdir()
    a = q.submit(fake_engine.py(_stamping(stamp, "a", 30 if how == "cancelled" else 0.2, rc=3)), name="study: pretrain/a")
    b = q.submit(fake_engine.py(_stamping(stamp, "b")), name="b", depends_on=[a["id"]], resume_hint="resume the study")
    c = q.submit(fake_engine.py(_stamping(stamp, "c")), name="c", depends_on=[a["id"], b["id"]])
    d = q.submit(fake_engine.py(_stamping(stamp, "d")), name="d")
    assert b["depends_on"] == [a["id"]] and b["resume_hint"] == "resume the study" and d["depends_on"] == []
    if how == "cancelled":
        wait_for((stamp / "a.start").exists)
        q.cancel(a["id"], timeout=5)
    assert wait_done(q, d["id"])["status"] == "finished"
    for job in (b, c):
        rec = q.get(job["id"])
        assert rec["status"] == how and rec["started"] is None and rec["pid"] is None
    was = "was cancelled" if how == "cancelled" else "failed"
    assert q.get(b["id"])["error"] == f"not run: study: pretrain/a {was}; resume the study"
    assert q.get(c["id"])["error"] == f"not run: study: pretrain/a {was}; retry that job, then retry this one"
    time.sleep(0.3)
    assert sorted(p.name for p in stamp.iterdir()) == sorted(["a.start", "d.start", "d.end"] + (["a.end"] if how == "failed" else []))


def test_a_dependant_starts_only_after_its_dependency_finishes(q, tmp_path, fake_engine):
    """B waits for A although B was queued first in a free slot's turn; D, queued after B with no dependency, does
    not jump A's run (one at a time); B starts after A ended."""
    stamp = tmp_path / "stamps"
    stamp.mkdir()
    a = q.submit(fake_engine.py(_stamping(stamp, "a", 0.5)), name="a")
    b = q.submit(fake_engine.py(_stamping(stamp, "b")), name="b", depends_on=[a["id"]])
    assert q.get(b["id"])["status"] == "queued"
    assert wait_done(q, b["id"])["status"] == "finished"
    assert float((stamp / "a.end").read_text()) <= float((stamp / "b.start").read_text())
    # a job may only wait for jobs the queue holds
    with pytest.raises(EngineError) as e:
        q.submit(fake_engine.py("pass"), depends_on=["20990101-000000-abcdef"])
    assert "\n" not in str(e.value) and "20990101-000000-abcdef" in str(e.value) and "not in the queue" in str(e.value)
    with pytest.raises(EngineError, match="not a job id"):
        q.submit(fake_engine.py("pass"), depends_on=["../../etc"])


def test_retry_and_remove_keep_dependencies_true(q, tmp_path, fake_engine):
    """A Retry waits only for what is still to run; removing a finished job frees those that waited for it."""
    hold = q.submit(fake_engine.py("import time; time.sleep(30)"), name="hold")
    done = q.submit(fake_engine.py("pass"), name="done")
    failed = q.submit(fake_engine.py("raise SystemExit(1)"), name="failed")
    q.cancel(hold["id"], timeout=1)
    wait_done(q, failed["id"])
    waiter = q.submit(fake_engine.py("import time; time.sleep(30)"), name="waiter")
    after = q.submit(fake_engine.py("pass"), name="after", depends_on=[done["id"], waiter["id"]])
    q.cancel(after["id"])
    retried = q.retry(after["id"])
    assert retried["depends_on"] == [waiter["id"]]  # the finished one is no longer waited for
    q.cancel(retried["id"])
    q.cancel(waiter["id"], timeout=1)
    loose = q.submit(fake_engine.py("import time; time.sleep(30)"), name="loose")
    late = q.submit(fake_engine.py("pass"), name="late", depends_on=[done["id"], loose["id"]])
    q.remove(done["id"])
    assert q.get(late["id"])["depends_on"] == [loose["id"]]
    q.cancel(loose["id"], timeout=1)
    assert q.get(late["id"])["status"] == "cancelled"


def test_old_queue_files_load_and_bad_dependencies_are_set_aside(tmp_path, fake_engine):
    """A queue file written before jobs could wait for others (no depends_on, no resume_hint) loads and runs as it
    did; a record whose depends_on is not a list of job ids, or names the job itself, is set aside in one line."""
    root = tmp_path / "runs"
    jq = Jobs(root, repo_root=fake_engine.repo)
    jq.queue_path.parent.mkdir(parents=True)
    old = {"id": "old", "name": "old", "argv": fake_engine.py("print('old ran')"), "status": "queued", "pid": None,
           "pgid": None, "proc_start": None, "created": "x", "started": None, "ended": None, "returncode": None,
           "error": None, "log": str(root / "old.log"), "log_offset": 0, "run_dir": None, "cancel_requested": False}
    bad = [dict(old, id="b1", depends_on="old"), dict(old, id="b2", depends_on=["../x"]), dict(old, id="b3", depends_on=["b3"]),
           dict(old, id="b4", depends_on=[1]), dict(old, id="b5", resume_hint=["not", "text"])]
    jq.queue_path.write_text(json.dumps({"version": 1, "jobs": [old, *bad]}))
    listed = jq.list_jobs()
    assert [j["id"] for j in listed] == ["old"] and listed[0]["depends_on"] == [] and listed[0]["resume_hint"] is None
    jq.refresh()
    assert "set aside 5 damaged job records" in jq.notices[-1] and "names the job itself" in jq.notices[-1]
    assert wait_done(jq, "old")["status"] == "finished" and "old ran" in jq.tail_log("old")
    # a dependency that is not an earlier job of the queue (a hand edit: removed, or a loop) stops the job unrun
    saved = json.loads(jq.queue_path.read_text())
    saved["jobs"] += [dict(old, id="x", name="x", depends_on=["y"]), dict(old, id="y", name="y", depends_on=["x"])]
    jq.queue_path.write_text(json.dumps(saved))
    jq.refresh()
    assert jq.get("x")["status"] == "failed" and "not an earlier job of the queue" in jq.get("x")["error"]
    assert jq.get("y")["status"] == "failed" and jq.get("y")["error"].startswith("not run: x failed")
