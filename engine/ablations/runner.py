"""Running a study: `launch` writes its folder and hands its jobs to the job queue (which runs them one at a time
and survives restarts) or runs them here, one after another or several at once (`run_foreground`); `job_states` reconciles what
study.json recorded with the queue's own records and the run folders.
"""
import fcntl
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from engine import jobs as queue
from engine.ablations.folders import STUDY_JSON, new_study_dir, read_study, studies_root, update_job, write_study
from engine.ablations.planner import paths_read, plan
from engine.ablations.reuse import take_over
from engine.ablations.study import Study
from engine.progress import Progress
from engine.errors import EngineError
from engine.fileio import atomic_write_json, held_flock
from engine.records import EVAL_JSON, RUN_JSON, read_json_or_empty
from engine.runs import effective_status, latest_checkpoint, now_iso, read_run_json
from engine.commands import PRETRAIN, kind_of
from engine.status import CANCELLED, DEAD, FAILED, FINISHED, QUEUED, RUNNING, status_of

REPO_ROOT = Path(__file__).resolve().parents[2]  # `python -m engine` runs from here


def _print(*a) -> None:
    print(*a, flush=True)


def launch(study: Study, runs_root=None, name: str = None, foreground: bool = False, log=_print,
           parallel: int = 1, reuse: bool = True) -> Path:
    """Write the study folder, then run its jobs: here (`foreground`, `parallel` at a time: `run_foreground`);
    else through the job queue (engine.jobs), each job queued on its own when `parallel` is 1, or as one queued
    job, `ablate resume STUDY --parallel N`, that runs them `parallel` at a time (the queue knows nothing of a
    fine-tune waiting for its model; this job does). `reuse`: a pre-training that a finished run under the runs
    folder has already done is taken over instead of trained again (engine.ablations.reuse): when its job would
    start; queued one job at a time, also now (the queue then runs `ablate job STUDY_DIR KEY`, `run_job`, which
    checks again when the job starts)."""
    root = studies_root(runs_root).parent
    study_dir = new_study_dir(study, root, name)
    jobs = plan(study, study_dir)
    mode = "foreground" if foreground else "queue" if parallel <= 1 else "parallel"
    write_study(study_dir, study, jobs, mode=mode, runs_root=str(root), reuse=reuse, parallel=parallel)
    if foreground:
        run_foreground(study_dir, log=log, parallel=parallel)
        return study_dir
    if mode == "parallel":
        queue.submit(["ablate", "resume", str(study_dir.absolute()), "--parallel", str(parallel)],
                     name=f"{study_dir.name}: {len(jobs)} jobs, {parallel} at a time", run_dir=str(study_dir),
                     root=root)  # the queue finds it by its run folder, the study folder
        log(f"queued study {study_dir.name} as one job running its {len(jobs)} jobs {parallel} at a time (its log: "
            f"{study_dir / 'job.log'}); follow it on the Jobs page or with `python -m engine ablate show {study_dir}`")
        return study_dir
    data = read_study(study_dir)
    taken = {j["key"] for j in data["jobs"] if _take_over(study_dir, j, data, log)}
    ids = queue_jobs(study_dir, [j.key for j in jobs if j.key not in taken])
    log(f"queued {len(ids)} jobs for study {study_dir.name}" + (f" ({len(taken)} job(s) reused from finished runs)" if taken else "")
        + "; follow them on the Jobs page or with "
        f"`python -m engine ablate show {study_dir}`")
    return study_dir


def resume_hint(study_dir) -> str:
    """How a study stopped part way runs on: the end of the one line a job not run because of another says."""
    return (f"resume the study with `python -m engine ablate resume {Path(study_dir).absolute()}` (or its Resume button "
            "on the Ablations page)")


def queue_jobs(study_dir, keys: list, waiting: dict = None) -> dict:
    """Queue the study's jobs `keys` (in study.json's order), each as `ablate job STUDY_DIR KEY` (`run_job`: it takes
    over a finished twin when the study allows, refuses while the pre-training it reads is not finished, else becomes
    the job's command), each waiting in the queue for the jobs whose pre-training it reads (`depends_on`): queued here
    or already queued, `waiting` ({key: queue id}). Records the ids in study.json; returns {key: queue id}."""
    study_dir = Path(study_dir)
    data = read_study(study_dir)
    needs = _dependencies(study_dir, data["jobs"])
    ids, known = {}, dict(waiting or {})
    wanted = set(keys)
    for j in (j for j in data["jobs"] if j["key"] in wanted):
        rec = queue.submit(["ablate", "job", str(study_dir.absolute()), j["key"]], name=f"{study_dir.name}: {j['key']}",
                           run_dir=str(study_dir / j["out"]), root=Path(data.get("runs_root") or studies_root().parent),
                           depends_on=[known[k] for k in needs[j["key"]] if k in known], resume_hint=resume_hint(study_dir))
        ids[j["key"]] = known[j["key"]] = rec["id"]
    data = read_study(study_dir)
    for j in data["jobs"]:
        j["job_id"] = ids[j["key"]] if j["key"] in ids else j.get("job_id")
    atomic_write_json(study_dir / STUDY_JSON, data)
    return ids


STUDY_LOCK = "study.lock"  # held (fcntl.flock) by the one process running a study's jobs here: `hold_study`


def run_foreground(study_dir, log=_print, parallel: int = 1) -> dict:
    """Run the study's unfinished jobs here; each job's output goes to <out>/job.log. One process at a time runs
    a study's jobs (`hold_study`): a second `ablate resume` of it is one line naming the first.

    `parallel`: how many jobs run at once (default 1, one after another). A job starts only once every
    pre-training run it reads (a path under that run's folder in its command line) has finished; one whose
    pre-training failed is recorded as failed without running. More than one is for a GPU, which a small model
    leaves mostly idle; on a CPU each job then gets cpu_count // parallel threads (OMP_NUM_THREADS)."""
    study_dir = Path(study_dir)
    read_study(study_dir)  # not a study folder, or a damaged one: one line before any lock file is made
    with hold_study(study_dir):
        return _run_jobs(study_dir, log, parallel)


def study_runner(study_dir):
    """Who runs the study's jobs here now (the text `hold_study` wrote: process, host, since when), or None when no
    process holds its lock."""
    path = Path(study_dir) / STUDY_LOCK
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return os.pread(fd, 500, 0).decode(errors="replace").strip() or "another process"
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def hold_study(study_dir):
    """Hold the study's lock (STUDY_LOCK in its folder, engine.fileio.held_flock) while this process runs its jobs,
    else refuse in one line naming the holder: two runners of one study would start the same jobs twice and write
    into one job.log."""
    return held_flock(Path(study_dir) / STUDY_LOCK, f"process {os.getpid()} on {socket.gethostname()} (since {now_iso()})",
                      lambda holder: f"study {study_dir} is being run by {holder or 'another process'}; wait for it to end "
                                     f"(or stop it), then `python -m engine ablate resume {study_dir}`",
                      "check the study folder's permissions")


def _run_jobs(study_dir: Path, log, parallel: int) -> dict:
    """`run_foreground`, with the study's lock held."""
    data = read_study(study_dir)
    counts = {FINISHED.name: 0, FAILED.name: 0, "skipped": 0, "reused": 0}
    todo = []
    for j in data["jobs"]:
        if status_of(_from_run(j, study_dir / j["out"])[0]) is FINISHED:  # its own records say so, whatever study.json does
            counts["skipped"] += 1
        else:
            todo.append(j)
    needs = _dependencies(study_dir, data["jobs"])
    done = {j["key"]: FINISHED.name for j in data["jobs"] if j not in todo}
    running = {}  # key -> (job, process, log file, start time)
    env = _job_env(parallel)
    progress = Progress(len(todo), f"study {study_dir.name}", "job")  # the time left at the jobs' pace so far
    first_done = len(done)
    previous = None  # a SIGTERM to this process also stops the jobs it started (else they would run on, orphaned)
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _sigterm_as_interrupt)
    try:
        while todo or running:
            for j in list(todo):
                if len(running) >= max(1, parallel):
                    break
                waiting = [k for k in needs[j["key"]] if k not in done]
                failed = [k for k in needs[j["key"]] if status_of(done.get(k)) is FAILED]
                if failed or not waiting:
                    todo.remove(j)
                    problem = (f"not run: {failed[0]} failed (fix it, then `python -m engine ablate resume {study_dir}`)"
                               if failed else unfinished_pretraining(study_dir, j, data["jobs"], missing_ok=True))
                    if problem:  # (its pre-training's own run folder is checked too, just before it would start)
                        update_job(study_dir, j["key"], status=FAILED.name, rc=None, seconds=0, error=problem)
                        done[j["key"]] = FAILED.name
                        counts[FAILED.name] += 1
                        log(f"    {j['key']}: {problem}")
                    elif _take_over(study_dir, j, data, log):
                        done[j["key"]] = FINISHED.name
                        counts["reused"] += 1
                    else:
                        running[j["key"]] = _start_job(study_dir, j, env, log)
            if todo and not running:  # every job left waits on another that waits: a study the planner cannot make
                raise EngineError(f"{todo[0]['key']} waits on {needs[todo[0]['key']]}, which never start; "
                                  "re-create the study with `python -m engine ablate run`")
            for key, (j, proc, logf, t0) in list(running.items()):
                if proc.poll() is None:
                    continue
                logf.close()
                del running[key]
                status = _finish_job(study_dir, j, proc.returncode, t0, log)
                done[key] = status
                counts[status] += 1
            progress.update(len(done) - first_done - progress.done)  # ended here: run, failed unrun or reused
            if running:
                time.sleep(0.2)
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM (a `timeout`, a scheduler's limit): stop the jobs, keep their runs
        for key, (j, proc, logf, _) in running.items():
            _stop(proc)
            logf.close()
            update_job(study_dir, key, status=CANCELLED.name)
        raise
    finally:
        progress.close(final_line=False)  # the command prints the study's summary
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    return counts


def run_job(study_dir, key: str, log=_print) -> int:
    """`ablate job STUDY_DIR KEY`: what the job queue runs for a queued study's pre-training. Takes over a finished
    pre-training with the same settings (engine.ablations.reuse) when the study allows it, and returns 0; else this
    process becomes the job's own command (`python -m engine pretrain ...`, with --resume where its run has begun:
    `job_command`), so the queue's record, its cancel (SIGTERM: the run saves a checkpoint) and its log are those of
    that command, as when the queue runs it directly."""
    study_dir = Path(study_dir)
    data = read_study(study_dir)
    job = next((j for j in data["jobs"] if j["key"] == key), None)
    if job is None:
        raise EngineError(f"study {study_dir} has no job {key!r}; its study.json lists the jobs it has (their \"key\")")
    problem = unfinished_pretraining(study_dir, job, data["jobs"])
    if problem:  # never fed a checkpoint its pre-training left half done (a cancel, a failure, a Retry too early)
        raise EngineError(problem)
    if _take_over(study_dir, job, data, log):
        return 0
    cmd = job_command(study_dir, job)
    sys.stdout.flush()
    sys.stderr.flush()
    os.chdir(REPO_ROOT)  # where the study's command lines are read from, as `_start_job` runs them
    os.execv(cmd[0], cmd)


def _take_over(study_dir: Path, job: dict, data: dict, log) -> bool:
    """Take over a finished pre-training or evaluation for `job` (engine.ablations.reuse) and record it in study.json; False when
    there is none, when the study was launched with reuse off (study.json "reuse"), or when copying it failed (the
    job then trains, as without reuse)."""
    if not data.get("reuse", True):
        return False
    try:
        src = take_over(study_dir, job, data["jobs"], Path(data.get("runs_root") or studies_root().parent))
    except (OSError, EngineError) as e:
        log(f"    {job['key']}: could not reuse a finished run ({e}); running it")
        return False
    if src is None:
        return False
    update_job(study_dir, job["key"], status=FINISHED.name, rc=0, seconds=0, error=None, reused_from=str(src))
    what = "pre-training" if kind_of(job["kind"]) is PRETRAIN else "evaluation of the same model"
    log(f"    {job['key']}: reused the finished {what} {src} (same settings)")
    return True


def _sigterm_as_interrupt(signum, frame):
    raise KeyboardInterrupt


def _stop(proc, timeout: float = 60.0) -> None:
    """SIGTERM a job (a pre-training run finishes its step and saves a checkpoint), SIGKILL it after `timeout` s."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _dependencies(study_dir: Path, jobs: list) -> dict:
    """{job key: [keys of the pre-training jobs whose run folder (or a checkpoint in it) its command line reads]}."""
    runs = {j["key"]: study_dir / j["out"] for j in jobs if kind_of(j["kind"]) is PRETRAIN}
    return {j["key"]: [k for k, run in runs.items() if k != j["key"] and paths_read(j["argv"], run)] for j in jobs}


def unfinished_pretraining(study_dir, job: dict, jobs: list, missing_ok: bool = False):
    """One line when a pre-training of the study that `job` reads (its command line names that run or a checkpoint in
    it: `_dependencies`) has not finished, as its own run folder says: the job must not start on what it left; else
    None. `missing_ok`: a run folder that says nothing of its own (no run.json status) passes (the foreground runner,
    which saw that process exit 0); one that says cancelled, failed or running never does."""
    study_dir = Path(study_dir)
    by_key = {j["key"]: j for j in jobs}
    for k in _dependencies(study_dir, jobs)[job["key"]]:
        out = study_dir / by_key[k]["out"]
        state = _from_run(by_key[k], out)[0]
        if status_of(state) is not FINISHED and not (missing_ok and state is None):
            ck = latest_checkpoint(out)
            return (f"not run: {job['key']} reads the pre-training {k}, which has not finished ("
                    + (f"{state}" if state else "not started") + (f", its last checkpoint {ck.name}" if ck else "")
                    + f"); {'wait for it' if status_of(state).active else resume_hint(study_dir)}")
    return None


def _job_env(parallel: int) -> dict:
    """The jobs' environment: with several at once on a CPU, each gets its share of the cores."""
    env = dict(os.environ)
    if parallel > 1 and "OMP_NUM_THREADS" not in env:
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // parallel))
    return env


def job_command(study_dir: Path, job: dict) -> list:
    """The command that runs `job`: `python -m engine ARGV`, with --resume where an interrupted run continues."""
    out = study_dir / job["out"]
    argv = list(job["argv"])
    if "--resume" not in argv:
        if ((out / RUN_JSON).is_file() and read_run_json(out).get("kind") == job["kind"]) or latest_checkpoint(out) is not None:
            argv.append("--resume")  # an interrupted run continues (finished checkpoints/trials are kept)
    return [sys.executable, "-m", "engine"] + argv


def _start_job(study_dir: Path, job: dict, env: dict, log) -> tuple:
    out = study_dir / job["out"]
    out.mkdir(parents=True, exist_ok=True)
    cmd = job_command(study_dir, job)
    log(f"[{time.strftime('%H:%M:%S')}] {job['key']}: {' '.join(job['argv'][:1])} ...")
    logf = open(out / "job.log", "ab")
    proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, cwd=REPO_ROOT, env=env)
    return job, proc, logf, time.time()


def _finish_job(study_dir: Path, job: dict, rc: int, t0: float, log) -> str:
    status = FINISHED.name if rc == 0 else FAILED.name
    out = study_dir / job["out"]
    err = None if rc == 0 else _run_error(job, out, t0) or _last_error_line(out / "job.log")
    update_job(study_dir, job["key"], status=status, rc=rc, seconds=round(time.time() - t0, 1), error=err)
    log(f"    {job['key']}: {status} in {time.time() - t0:.0f}s" + (f": {err}" if err else ""))
    return status


def _run_error(job: dict, out: Path, t0: float):
    """The error the job's run recorded in its run.json, when it wrote one since it started at `t0` (a refusal
    before the run began writes none; the log's `error:` line says it then)."""
    try:
        if (out / RUN_JSON).stat().st_mtime < t0 - 1:
            return None
    except OSError:
        return None
    info = read_json_or_empty(out / RUN_JSON)
    if info.get("kind") not in (None, job["kind"]) or not status_of(info.get("status")).resumable:
        return None  # (run.json holds no "dead": resumable there is failed or cancelled)
    return info.get("error") or None


def _last_error_line(log_path: Path) -> str:
    try:
        lines = [l.strip() for l in log_path.read_text(errors="replace").splitlines() if l.strip()]
    except OSError:
        return "no log"
    for l in reversed(lines):
        if l.startswith("error:") or "Error" in l:
            return l[:300]
    return lines[-1][:300] if lines else "no output"


def job_states(study_dir, data: dict = None) -> list:
    """Each job of the study with its state: finished | failed | running | queued | cancelled, from the truth first:
    the job's own run folder (`_from_run`), then the job queue's record (the newest queue job writing the job's run
    folder, so a Retry from the Jobs page counts) or the study's one queue job that runs them all (a parallel
    study), then what study.json recorded of a job that never started (`_state`).
    `data`: study.json as the caller already read it (read here when None)."""
    study_dir = Path(study_dir)
    data = read_study(study_dir) if data is None else data
    by_dir = {}
    if data.get("mode") in ("queue", "parallel"):
        try:
            for rec in reversed(queue.list_jobs(root=data.get("runs_root"))):  # oldest first: newest wins
                if rec.get("run_dir"):
                    by_dir[str(Path(rec["run_dir"]))] = rec
        except Exception:  # the queue is unreadable: fall back to the run folders
            by_dir = {}
    runner = by_dir.get(str(study_dir.absolute())) if data.get("mode") == "parallel" else None
    rows = []
    for j in data["jobs"]:
        out = study_dir / j["out"]
        rec = by_dir.get(str(out.absolute())) if data.get("mode") == "queue" else None
        state, error = _state(j, out, rec, runner)
        rows.append({"key": j["key"], "kind": j["kind"], "variant": j["variant"], "seed": j["seed"],
                     "evaluation": j.get("evaluation"), "step": j.get("step"), "state": state, "error": error,
                     "job_id": rec.get("id") if rec else j.get("job_id"), "out": str(out),
                     "reused_from": j.get("reused_from")})
    return rows


def _state(job: dict, out: Path, rec, runner) -> tuple:
    """(state, error) of one job: finished when its result is in its run folder, whatever else was recorded; else
    queued or running as its queue job `rec` is (it will run, or runs, the job); else how its run ended (its
    run.json); else how its queue job, or the study's one queue job `runner`, ended; else what study.json recorded
    (a job not run because its model failed). A job recorded finished whose result is gone is to run again."""
    state, error = _from_run(job, out)
    if status_of(state) is FINISHED:
        return state, None
    if rec is not None and status_of(rec.get("status")).active:
        return rec["status"], None
    if state is not None:
        return state, error
    for status, why in ((rec or {}).get("status"), (rec or {}).get("error")), (job.get("status"), job.get("error")):
        if status_of(status).resumable:  # failed or cancelled (a queue or study.json holds no "dead")
            return status, why
    if runner is not None and status_of(runner.get("status")).resumable:
        return runner["status"], f"not run: the study's job {runner['status']}: {runner.get('error')}"
    if FINISHED in (status_of((rec or {}).get("status")), status_of(job.get("status"))):
        return QUEUED.name, f"recorded finished, but its result is not in {out} (deleted?); `ablate resume` runs it again"
    return QUEUED.name, None


def _from_run(job: dict, out: Path) -> tuple:
    """(state, error) of a job from its own run folder: finished when its result is there (a pre-training's
    run.json says finished; an evaluation's eval.json is there and its run.json, if any, says finished), running
    while its writer lives, failed or cancelled as its run.json says (left running by a process that is gone:
    failed), else (None, None): nothing of its own yet."""
    info = read_json_or_empty(out / RUN_JSON)
    if info.get("kind") not in (None, job["kind"]):
        return None, None
    recorded = info.get("status")  # None: its run.json (if any) says nothing yet
    status = status_of(recorded)
    if status is RUNNING:
        try:
            status = status_of(effective_status(out, info))
        except EngineError:
            status = DEAD
    pretraining = kind_of(job["kind"]) is PRETRAIN
    if (status is FINISHED or recorded is None) and not pretraining and (out / EVAL_JSON).is_file():
        return FINISHED.name, None
    if status is FINISHED and pretraining:
        return FINISHED.name, None
    if status is DEAD:
        return FAILED.name, (f"interrupted: its process ended without recording how (killed?); `python -m engine "
                          f"ablate resume {out.parent.parent}` continues it")
    if status is RUNNING:
        return status.name, None
    if status.resumable:  # failed or cancelled (dead is above)
        return status.name, info.get("error")
    return None, None
