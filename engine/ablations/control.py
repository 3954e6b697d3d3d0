"""A study as one: its state in words (`study_state`), Cancel (`cancel_study`: every queued or running job of it) and
Resume (`resume_study`: its unfinished jobs queued again, each waiting for the pre-training it reads), for
`python -m engine ablate cancel / resume` and the Ablations page's buttons.

A study queued one job at a time (`launch`, mode "queue") is many queue jobs; one run jobs-at-once (mode
"parallel") is one queue job, `ablate resume STUDY --parallel N`, that runs them; one run in a terminal
(`--foreground`) is the process holding its lock (`runner.study_runner`), which only that terminal stops.
"""
from pathlib import Path

from engine import jobs as queue
from engine.ablations.folders import STUDY_JSON, read_study, studies_root
from engine.ablations.runner import job_states, queue_jobs, study_runner
from engine.errors import EngineError
from engine.runs import latest_checkpoint
from engine.status import CANCELLED, FAILED, FINISHED, QUEUED, RUNNING, status_of


def _print(*a) -> None:
    print(*a, flush=True)


def find_study(name_or_dir, runs_root=None) -> Path:
    """The study folder `name_or_dir` names: a folder holding study.json, else `<runs>/studies/NAME`."""
    given = Path(str(name_or_dir))
    if (given / STUDY_JSON).is_file():
        return given
    named = studies_root(runs_root) / str(name_or_dir)
    if given.name == str(name_or_dir) and (named / STUDY_JSON).is_file():
        return named
    raise EngineError(f"no study {str(name_or_dir)!r}: it is neither a study folder nor a study's name under "
                      f"{studies_root(runs_root)}; `python -m engine ablate list` lists them (add --runs-root DIR "
                      "for another runs folder)")


def _runs_root(data: dict) -> Path:
    return Path(data.get("runs_root") or studies_root().parent)


def queued_jobs(study_dir, data: dict = None) -> list:
    """The study's queue jobs that are queued or running, oldest first: those writing one of its jobs' run folders,
    and the one job that runs a jobs-at-once study (its run folder is the study folder)."""
    study_dir = Path(study_dir).absolute()
    data = read_study(study_dir) if data is None else data
    folders = {str(study_dir)} | {str(study_dir / j["out"]) for j in data["jobs"]}
    found = [r for r in queue.list_jobs(root=_runs_root(data)) if status_of(r.get("status")).active
             and r.get("run_dir") and str(Path(r["run_dir"])) in folders]
    return list(reversed(found))


def is_active(study_dir, data: dict = None) -> bool:
    """Whether something still runs the study or will: a queue job of it, or a process holding its lock."""
    return bool(queued_jobs(study_dir, data)) or study_runner(study_dir) is not None


def cancel_study(study_dir, log=_print) -> list:
    """Cancel every queued or running job of the study: the queued ones first (so none starts in the gap), then the
    running one (SIGTERM: a pre-training finishes its step and saves a checkpoint; waited for). Returns the queue
    records cancelled. A study run in a terminal (its lock held, nothing of it queued) is one line saying so."""
    study_dir = Path(study_dir)
    data = read_study(study_dir)
    root = _runs_root(data)
    cancelled = []
    for _ in range(5):  # a job the queue started while these were cancelled is cancelled in the next round
        active = queued_jobs(study_dir, data)
        if not active:
            break
        for rec in sorted(active, key=lambda r: status_of(r["status"]) is RUNNING):
            cancelled.append(queue.cancel(rec["id"], root=root))
    holder = study_runner(study_dir)
    if not cancelled and holder:
        raise EngineError(f"study {study_dir} is run outside the job queue by {holder}; stop it there (Ctrl-C: its "
                          f"pre-training saves a checkpoint), then `python -m engine ablate resume {study_dir}`")
    for rec in cancelled:
        if status_of(rec.get("status")).terminal and rec.get("started"):  # it was running: what it kept
            ck = latest_checkpoint(rec["run_dir"]) if rec.get("run_dir") else None
            log(f"stopped {rec['name']}" + (f"; it saved its checkpoint {ck.name}" if ck else ""))
    log(f"cancelled {len(cancelled)} job(s) of study {study_dir.name}" if cancelled else
        f"nothing of study {study_dir.name} is queued or running")
    if cancelled:
        log(f"resume it with `python -m engine ablate resume {study_dir}` (or its Resume button on the Ablations page)")
    return cancelled


def resume_study(study_dir, parallel: int = None, log=_print) -> list:
    """Queue what the study has not finished. Queued one job at a time: each unfinished job again, each waiting in
    the queue for the pre-training it reads (queued here or still queued); run jobs-at-once or in a terminal: one
    queue job, `ablate resume STUDY --parallel N`, that runs them. Returns the new queue ids. One line when it still
    runs."""
    study_dir = Path(study_dir)
    data = read_study(study_dir)
    holder = study_runner(study_dir)
    if holder:
        raise EngineError(f"study {study_dir} is being run by {holder}; wait for it to end (or stop it), then resume it")
    active = queued_jobs(study_dir, data)
    if data.get("mode") != "queue":
        if active:
            raise EngineError(f"study {study_dir} is still {active[0]['status']} as job {active[0]['id']}; wait for it "
                              "or cancel it, then resume it")
        n = int(parallel or data.get("parallel") or 1)
        rec = queue.submit(["ablate", "resume", str(study_dir.absolute()), "--parallel", str(n)], root=_runs_root(data),
                           name=f"{study_dir.name}: its unfinished jobs, {n} at a time", run_dir=str(study_dir))
        log(f"queued study {study_dir.name}'s unfinished jobs as one job, {n} at a time")
        return [rec["id"]]
    waiting = {str(Path(r["run_dir"])): r["id"] for r in active}
    waiting = {j["key"]: waiting[str((study_dir / j["out"]).absolute())] for j in data["jobs"]
               if str((study_dir / j["out"]).absolute()) in waiting}
    todo = [r["key"] for r in job_states(study_dir, data) if status_of(r["state"]) is not FINISHED and r["key"] not in waiting]
    ids = queue_jobs(study_dir, todo, waiting)
    log(f"queued {len(ids)} unfinished job(s) of study {study_dir.name}, each after the pre-training it reads"
        if ids else f"every job of study {study_dir.name} is finished or already queued")
    return list(ids.values())


def study_state(rows: list) -> str:
    """The study's state in words, from its jobs' states (`job_states`): "running <job> (N of M done)", "cancelled",
    "failed at <job>" (the first job that failed of itself, not one not run because of it), else "N of M done"."""
    states = [status_of(r["state"]) for r in rows]
    done = f"{states.count(FINISHED)} of {len(rows)} done"
    running = [r for r, s in zip(rows, states) if s is RUNNING]
    if running:
        return f"running {running[0]['key']} ({done})"
    if CANCELLED in states:
        return CANCELLED.name
    failed = [r for r, s in zip(rows, states) if s is FAILED]
    if failed:
        first = next((r for r in failed if not str(r.get("error") or "").startswith("not run:")), failed[0])
        waiting = QUEUED in states
        return f"{done}; failed at {first['key']}" if waiting else f"failed at {first['key']}"
    return done
