"""Running a study: `launch` writes its folder and hands its jobs to the job queue (which runs them one at a time
and survives restarts) or runs them here one after another (`run_foreground`); `job_states` reconciles what
study.json recorded with the queue's own records and the run folders.
"""
import subprocess
import sys
import time
from pathlib import Path

from engine import jobs as queue
from engine.ablations.folders import STUDY_JSON, new_study_dir, read_study, studies_root, update_job, write_study
from engine.ablations.planner import plan
from engine.ablations.study import Study
from engine.fileio import atomic_write_json
from engine.records import EVAL_JSON, RUN_JSON, read_json_or_empty
from engine.runs import latest_checkpoint, read_run_json

REPO_ROOT = Path(__file__).resolve().parents[2]  # `python -m engine` runs from here


def _print(*a) -> None:
    print(*a, flush=True)


def launch(study: Study, runs_root=None, name: str = None, foreground: bool = False, log=_print) -> Path:
    """Write the study folder and queue its jobs (engine.jobs), or run them here one by one (`foreground`)."""
    root = studies_root(runs_root).parent
    study_dir = new_study_dir(study, root, name)
    jobs = plan(study, study_dir)
    write_study(study_dir, study, jobs, mode="foreground" if foreground else "queue", runs_root=str(root))
    if foreground:
        run_foreground(study_dir, log=log)
        return study_dir
    ids = {}
    for j in jobs:
        rec = queue.submit(j.argv, name=f"{study_dir.name}: {j.key}", run_dir=str(study_dir / j.out), root=root)
        ids[j.key] = rec["id"]
    data = read_study(study_dir)
    for j in data["jobs"]:
        j["job_id"] = ids.get(j["key"])
    atomic_write_json(study_dir / STUDY_JSON, data)
    log(f"queued {len(jobs)} jobs for study {study_dir.name}; follow them on the Jobs page or with "
        f"`python -m engine ablate show {study_dir}`")
    return study_dir


def run_foreground(study_dir, log=_print) -> dict:
    """Run the study's unfinished jobs here, one at a time; each job's output goes to <out>/job.log."""
    study_dir = Path(study_dir)
    data = read_study(study_dir)
    counts = {"finished": 0, "failed": 0, "skipped": 0}
    for j in data["jobs"]:
        out = study_dir / j["out"]
        if j.get("status") == "finished" and _job_output_ok(j, out):
            counts["skipped"] += 1
            continue
        out.mkdir(parents=True, exist_ok=True)
        argv = list(j["argv"])
        if "--resume" not in argv:
            if ((out / RUN_JSON).is_file() and read_run_json(out).get("kind") == j["kind"]) or latest_checkpoint(out) is not None:
                argv.append("--resume")  # an interrupted run continues (finished checkpoints/trials are kept)
        cmd = [sys.executable, "-m", "engine"] + argv
        log(f"[{time.strftime('%H:%M:%S')}] {j['key']}: {' '.join(j['argv'][:1])} ...")
        t0 = time.time()
        with open(out / "job.log", "ab") as logf:
            try:
                rc = subprocess.call(cmd, stdout=logf, stderr=subprocess.STDOUT, cwd=REPO_ROOT)
            except KeyboardInterrupt:
                update_job(study_dir, j["key"], status="cancelled")
                raise
        status = "finished" if rc == 0 else "failed"
        err = None if rc == 0 else _last_error_line(out / "job.log")
        update_job(study_dir, j["key"], status=status, rc=rc, seconds=round(time.time() - t0, 1), error=err)
        counts[status] += 1
        log(f"    {status} in {time.time() - t0:.0f}s" + (f": {err}" if err else ""))
    return counts


def _job_output_ok(job: dict, out: Path) -> bool:
    if job["kind"] == "pretrain":
        return (out / RUN_JSON).is_file()
    return (out / EVAL_JSON).is_file()


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
    """Each job of the study with its state: finished | failed | running | queued | cancelled.

    A queued study asks the job queue (the newest queue job writing the job's run folder, so a Retry from the
    Jobs page counts); a foreground study uses what study.json recorded, else the job's own run folder.
    `data`: study.json as the caller already read it (read here when None)."""
    study_dir = Path(study_dir)
    data = read_study(study_dir) if data is None else data
    by_dir = {}
    if data.get("mode") == "queue":
        try:
            for rec in reversed(queue.list_jobs(root=data.get("runs_root"))):  # oldest first: newest wins
                if rec.get("run_dir"):
                    by_dir[str(Path(rec["run_dir"]))] = rec
        except Exception:  # the queue is unreadable: fall back to the run folders
            by_dir = {}
    rows = []
    for j in data["jobs"]:
        out = study_dir / j["out"]
        state, error = j.get("status"), j.get("error")
        rec = by_dir.get(str(out.absolute()))
        if rec is not None:
            state, error = rec.get("status"), rec.get("error")
        if not state:
            state = _state_from_run(j, out)
        rows.append({"key": j["key"], "kind": j["kind"], "variant": j["variant"], "seed": j["seed"],
                     "evaluation": j.get("evaluation"), "step": j.get("step"), "state": state, "error": error,
                     "job_id": rec.get("id") if rec else j.get("job_id"), "out": str(out)})
    return rows


def _state_from_run(job: dict, out: Path) -> str:
    info = read_json_or_empty(out / RUN_JSON)
    if job["kind"] != "pretrain" and (out / EVAL_JSON).is_file() and info.get("status") in (None, "finished"):
        return "finished"
    return info.get("status") or "queued"
