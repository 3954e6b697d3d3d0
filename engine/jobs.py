"""The job queue: engine CLI commands run as detached processes, one at a time, surviving studio restarts.

A job is an engine command as an argv list, e.g. `["pretrain", "--corpus", "bbc", "--out", "runs/x"]`, run as
`[sys.executable, "-m", "engine", *argv]` (never through a shell). Jobs are kept in
`<runs root>/.jobs/queue.json` (atomic writes, every read-modify-write under an flock on `.jobs/queue.lock`,
so several studio sessions can share one queue). Job record fields:
id, name, argv, status (queued|running|finished|failed|cancelled), pid, pgid, proc_start, child_pid, child_start,
created, started, ended,
returncode, error (the last `error: ...` line of the log, else its last non-empty line), log, run_dir.

Design (chosen over a long-lived worker): every job is started as a detached *runner*,
`[sys.executable, "-m", "engine.jobs", "run", "--root", ROOT, JOB_ID]`, with `start_new_session=True`
(its own session and process group, stdout/stderr appended to `runs/<job>/job.log`, cwd the repo root).
The runner runs the engine command as its child in the same process group, waits, records the exit
(returncode, status, error line; fixes run.json if the engine died without finalizing it), and then starts
the next queued job itself. So a page reload, a closed tab or a studio restart loses nothing, and the queue
keeps draining with no studio open. `refresh()`, which pages call on every poll, is the safety net: it reaps
jobs whose runner died (pid gone, or a zombie, or a reused pid: start times are compared) and starts queued
jobs while fewer than `max_concurrent` (default 1: one job at a time on a CPU box) are running. Beside each
runner a *watcher* (`python -m engine.jobs watch`, its own session, stdlib only) polls the job twice a second
and does the same when the job's whole process group is killed, so the queue advances with no studio open.
Only processes proved to be the job's (pid plus kernel start time, recorded for the runner and its engine
child) are ever signalled: a pid or process group read from the queue file alone may have been reused.
`cancel()` sends SIGTERM to the job's whole process group, then SIGKILL after `cancel_timeout` seconds.

Whoever can write the queue file chooses what runs, so nothing in it is ever a command: a job only ever runs
`[sys.executable, "-m", "engine", *argv]` with `argv` checked (`argv_problem`: a list of strings starting with one of
the engine's commands) when it is queued, when it is launched and by the runner; a job that fails the check is
marked failed without starting anything. A queue file that another user owns, or that group or others may write,
is refused with one line (`_read_queue`); nothing is read from it.

This module and what it imports (engine.runs, engine.procs, engine.fileio, engine.errors) use the standard library
only, and `engine/__init__` imports lazily, so the runner starts in tens of milliseconds without torch
(tests/repo/test_layering.py checks it). The studio's pages and the ablation studies (`engine.ablations`) queue their
jobs here. Linux/POSIX only (fcntl, process groups, /proc).
"""
import argparse
import fcntl
import json
import os
import secrets
import shlex
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from engine.commands import COMMANDS as _COMMANDS
from engine.errors import EngineError
from engine.fileio import atomic_write_json
from engine.procs import killpg, proc_stat, proven_alive
from engine.records import RUN_JSON, read_json_or_empty, study_fraction_done
from engine.runs import latest_checkpoint, now_iso, run_progress, run_writer_pid, runs_root, set_status
from engine.status import CANCELLED, FAILED, FINISHED, JOB_STATUSES, QUEUED, RUNNING, status_of

REPO_ROOT = Path(__file__).resolve().parents[1]
STATUSES = JOB_STATUSES  # engine.status: what each means
TERMINAL = tuple(n for n in JOB_STATUSES if status_of(n).terminal)
ENGINE_COMMANDS = tuple(_COMMANDS)  # the names `python -m engine` dispatches (engine/commands.py)
_LAUNCHED: dict[int, subprocess.Popen] = {}  # runners started by this process, polled so none stays a zombie


# ---------------------------------------------------------------------------------------------------------
# processes (liveness itself is engine.procs)

def _job_alive(job: dict) -> bool:
    """The job's runner, or its engine child (the runner killed, the child living on), provably alive. A pid or
    process group read from the queue file alone proves nothing (it may have been reused): it is never signalled."""
    if proven_alive(job.get("pid"), job.get("proc_start")):
        return True
    return bool(job.get("pgid")) and proven_alive(job.get("child_pid"), job.get("child_start"), job["pgid"])


def _poll_launched() -> None:
    for pid, p in list(_LAUNCHED.items()):
        if p.poll() is not None:
            del _LAUNCHED[pid]


# ---------------------------------------------------------------------------------------------------------
# logs

def _read_log_tail(job: dict, max_bytes: int = 262144) -> str:
    """This job's part of its log (from its header on), at most the last `max_bytes`."""
    path = job.get("log")
    if not path:
        return ""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            start = max(int(job.get("log_offset") or 0), size - max_bytes)
            f.seek(start)
            data = f.read()
    except OSError:
        return ""
    return data.decode("utf-8", "replace")


def _log_lines(text: str) -> list[str]:
    # progress bars rewrite their line with \r: keep what the terminal would show
    return [line.rsplit("\r", 1)[-1] if line.rstrip("\r") else "" for line in text.split("\n")]


def _error_line(job: dict) -> str | None:
    lines = [ln.strip() for ln in _log_lines(_read_log_tail(job))]
    lines = [ln for ln in lines if ln and not ln.startswith(f"[job {job['id']}]")]
    for ln in reversed(lines):
        if ln.startswith("error:"):
            return ln[:500]
    return lines[-1][:500] if lines else None


# ---------------------------------------------------------------------------------------------------------
# what a job may run

def argv_problem(argv) -> str | None:
    """Why `argv` may not run as `python -m engine *argv` (None when it may): a job is a list of strings that starts
    with one of the engine's commands. Checked on submit, on launch and in the runner, whatever the queue file says."""
    if isinstance(argv, (str, bytes)) or not isinstance(argv, (list, tuple)) or not argv:
        return "a job is an engine command as a list of arguments, e.g. ['pretrain', '--corpus', 'bbc']"
    if not all(isinstance(a, str) for a in argv):
        return "every job argument must be a string; convert numbers with str()"
    if any("\x00" in a for a in argv):
        return "a job argument contains a NUL character; remove it"
    if argv[0] not in ENGINE_COMMANDS:
        return f"{str(argv[0])[:80]!r} is not an engine command; start the list with one of {', '.join(ENGINE_COMMANDS)}"
    return None


def engine_command(argv) -> list[str]:
    """The one command line a job runs (EngineError when `argv` may not run)."""
    problem = argv_problem(argv)
    if problem:
        raise EngineError(problem)
    return [sys.executable, "-m", "engine", *argv]


def _refuse_untrusted(path: Path, st: os.stat_result) -> None:
    """A queue file's owner and mode must be this user's alone: whoever can write it chooses what runs."""
    if st.st_uid != os.geteuid():
        raise EngineError(f"refusing the job queue {path}: it belongs to user id {st.st_uid}, not to you (user id "
                          f"{os.geteuid()}), and whoever writes it chooses what runs; remove it, or chown it to yourself "
                          f"if you trust what it holds")
    if st.st_mode & 0o022:
        raise EngineError(f"refusing the job queue {path}: group or others may write it (mode {st.st_mode & 0o777:o}), "
                          f"and whoever writes it chooses what runs; run chmod go-w on it if you trust what it holds")


# ---------------------------------------------------------------------------------------------------------
# the queue

class Jobs:
    """The job queue under `root` (a runs root). Cheap to construct; all state lives in files."""

    def __init__(self, root=None, max_concurrent: int = 1, repo_root=None, cancel_timeout: float = 10.0,
                 lock_timeout: float = 30.0):
        """`repo_root`: the engine commands' working directory, where `python -m engine` is found (default: this
        repository; the runners this object starts are given it on their command line, never by the queue file)."""
        self.root = Path(root).absolute() if root is not None else runs_root()
        self.dir = self.root / ".jobs"
        self.queue_path = self.dir / "queue.json"
        self.max_concurrent = max(1, int(max_concurrent))
        self.repo_root = Path(repo_root) if repo_root is not None else REPO_ROOT
        self.cancel_timeout = cancel_timeout
        self.lock_timeout = lock_timeout

    # -- storage ------------------------------------------------------------------------------------------
    def _read_queue(self) -> bytes | None:
        """The queue file's bytes (None when there is none); EngineError for a file this user does not alone control.
        Owner and mode are those of the file opened (fstat), so a file swapped in after the check is never read."""
        try:
            fd = os.open(self.queue_path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        with os.fdopen(fd, "rb") as f:
            _refuse_untrusted(self.queue_path, os.fstat(f.fileno()))
            return f.read()

    def _load(self) -> dict:
        try:
            data = self._read_queue()
            if data is None:
                return {"version": 1, "jobs": []}
            q = json.loads(data.decode("utf-8"))
            if isinstance(q, dict) and isinstance(q.get("jobs"), list):
                return q
        except (OSError, ValueError):
            pass
        # unreadable (edited by hand?): keep it aside and start a fresh queue rather than brick the studio
        try:
            os.replace(self.queue_path, self.queue_path.with_name(f"queue.json.bad-{int(time.time())}"))
        except OSError:
            pass
        return {"version": 1, "jobs": []}

    @contextmanager
    def _transaction(self):
        """Hold the queue lock; yield the queue dict; save it if it changed."""
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.dir / "queue.lock", os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise EngineError(f"could not open the job queue in {self.dir}: {e.strerror or e}; check the runs folder's permissions")
        try:
            deadline = time.monotonic() + self.lock_timeout
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise EngineError(f"the job queue {self.queue_path} stayed locked for {self.lock_timeout:.0f} s; retry, or restart the studio")
                    time.sleep(0.02)
            q = self._load()
            before = json.dumps(q, sort_keys=True)
            yield q
            if json.dumps(q, sort_keys=True) != before:
                atomic_write_json(self.queue_path, q)
        finally:
            os.close(fd)  # releases the flock

    @staticmethod
    def _find(q: dict, job_id: str) -> dict | None:
        for job in q["jobs"]:
            if job.get("id") == job_id:
                return job
        return None

    def _find_or_fail(self, q: dict, job_id: str) -> dict:
        job = self._find(q, job_id)
        if job is None:
            raise EngineError(f"there is no job {job_id!r} in {self.queue_path}; refresh the job list")
        return job

    # -- reading ------------------------------------------------------------------------------------------
    def list_jobs(self) -> list[dict]:
        """All jobs, newest first (a lock-free read of the atomically written queue file)."""
        return [dict(j) for j in reversed(self._load_readonly()["jobs"])]

    def _load_readonly(self) -> dict:
        try:
            q = json.loads((self._read_queue() or b"{}").decode("utf-8"))
            if isinstance(q, dict) and isinstance(q.get("jobs"), list):
                return q
        except (OSError, ValueError):
            pass
        return {"version": 1, "jobs": []}

    def get(self, job_id: str) -> dict | None:
        job = self._find(self._load_readonly(), job_id)
        return dict(job) if job else None

    def tail_log(self, job_id: str, n: int = 50) -> str:
        """The last `n` lines of the job's log (its own part only)."""
        job = self.get(job_id)
        if job is None:
            raise EngineError(f"there is no job {job_id!r} in {self.queue_path}; refresh the job list")
        lines = _log_lines(_read_log_tail(job))
        while lines and not lines[-1].strip():
            lines.pop()
        return "\n".join(lines[-n:]) if n > 0 else ""

    def job_progress(self, job: dict) -> float | None:
        """Fraction done in [0, 1] from the run dir (last logged step / total steps); None if unknown."""
        if job.get("status") == FINISHED.name:
            return 1.0
        if job.get("status") == QUEUED.name:
            return 0.0
        if not job.get("run_dir"):
            return None
        study = study_fraction_done(job["run_dir"])  # a whole study run by one job: its share of jobs done
        return study if study is not None else run_progress(job["run_dir"])["fraction"]

    # -- submitting ---------------------------------------------------------------------------------------
    def submit(self, argv, name: str | None = None, run_dir=None) -> dict:
        """Queue `python -m engine *argv` and start it if a slot is free. Returns the job record.

        `run_dir` (default: the value of `--out` in argv; a relative path is taken from the repo root, the
        engine's working directory) is where job.log goes and progress is read from. One active job per run dir."""
        engine_command(argv)  # EngineError unless it is an engine command
        argv = list(argv)
        if run_dir is None:
            run_dir = _flag_value(argv, "--out")
        return self._add(argv=argv, name=name, run_dir=run_dir)

    def _add(self, argv, name, run_dir) -> dict:
        engine_command(argv)
        job_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
        if run_dir is not None:
            run_dir = Path(run_dir)
            run_dir = str(run_dir if run_dir.is_absolute() else (self.repo_root / run_dir))
            log = str(Path(run_dir) / "job.log")
        else:
            log = str(self.dir / "logs" / f"{job_id}.log")
        job = {"id": job_id, "name": name or (Path(run_dir).name if run_dir else argv[0]), "argv": argv,
               "status": QUEUED.name, "pid": None, "pgid": None, "proc_start": None, "child_pid": None, "child_start": None,
               "created": now_iso(), "started": None, "ended": None, "returncode": None, "error": None,
               "log": log, "log_offset": None, "run_dir": run_dir, "cancel_requested": False}
        with self._transaction() as q:
            for other in q["jobs"]:
                if run_dir is not None and other.get("run_dir") == run_dir and status_of(other["status"]).active:
                    raise EngineError(f"run folder {run_dir} already has job {other['id']} {other['status']}; "
                               f"wait for it or cancel it, or pick another output folder")
            q["jobs"].append(job)
            self._reap(q)
            self._schedule(q)
            return dict(self._find(q, job_id))

    def retry(self, job_id: str) -> dict:
        """A new job with the same command; a pretrain job whose run has a checkpoint gets `--resume`."""
        job = self.get(job_id)
        if job is None:
            raise EngineError(f"there is no job {job_id!r} in {self.queue_path}; refresh the job list")
        if job["status"] not in TERMINAL:
            raise EngineError(f"job {job_id} is still {job['status']}; cancel it first, then retry")
        engine_command(job.get("argv"))  # a job the queue refused is refused again
        return self._add(argv=retry_argv(job), name=job.get("name"), run_dir=job.get("run_dir"))

    def remove(self, job_id: str) -> None:
        """Forget a finished/failed/cancelled job (its log and run folder stay)."""
        with self._transaction() as q:
            job = self._find_or_fail(q, job_id)
            if job["status"] not in TERMINAL:
                raise EngineError(f"job {job_id} is still {job['status']}; cancel it before removing it")
            q["jobs"].remove(job)

    # -- scheduling ---------------------------------------------------------------------------------------
    def refresh(self) -> list[dict]:
        """Reap jobs whose process died, start queued jobs into free slots; returns the jobs, newest first."""
        with self._transaction() as q:  # _reap polls this process's runners first
            self._reap(q)
            self._schedule(q)
        return [dict(j) for j in reversed(q["jobs"])]  # the queue as just saved: no second read of the file

    def _reap(self, q: dict) -> None:
        _poll_launched()
        for job in q["jobs"]:
            if job["status"] != RUNNING.name or _job_alive(job):
                continue
            # the runner ended without recording the exit (killed): decide from what is left
            run_status = _run_json_status(job.get("run_dir"))
            if job.get("cancel_requested"):
                status = CANCELLED.name
            elif run_status == FINISHED.name:
                status = FINISHED.name
            else:
                status = FAILED.name
            job.update(status=status, ended=now_iso())
            if status != FINISHED.name:
                job["error"] = _error_line(job) if status == FAILED.name else "cancelled by the user"
                job["error"] = job["error"] or "the job's process ended unexpectedly (killed?)"
                _finalize_run_json(job.get("run_dir"), status, job["error"])

    def _schedule(self, q: dict) -> None:
        running = sum(1 for j in q["jobs"] if j["status"] == RUNNING.name)
        for job in q["jobs"]:
            if running >= self.max_concurrent:
                break
            if job["status"] == QUEUED.name:
                self._launch(job)
                running += job["status"] == RUNNING.name

    def _launch(self, job: dict) -> None:
        """Start the detached runner for `job` (called with the queue lock held); a job whose argv may not run
        (`argv_problem`) is marked failed and nothing is started."""
        problem = argv_problem(job.get("argv"))
        if problem or not isinstance(job.get("log"), str):
            job.update(status=FAILED.name, ended=now_iso(), error=f"refused to run this job: {problem or 'it names no log file'}")
            return
        log = Path(job["log"])
        try:
            log.parent.mkdir(parents=True, exist_ok=True)
            with open(log, "ab") as f:
                job["log_offset"] = f.seek(0, os.SEEK_END)
                f.write(f"[job {job['id']}] {now_iso()} $ {shlex.join(['python', '-m', 'engine', *job['argv']])}\n".encode())
            logf = open(log, "ab")
        except OSError as e:
            job.update(status=FAILED.name, ended=now_iso(), error=f"could not open the job log {log}: {e.strerror or e}")
            return
        try:
            env = dict(os.environ, PYTHONUNBUFFERED="1")
            p = subprocess.Popen(
                [sys.executable, "-m", "engine.jobs", "run", "--root", str(self.root), "--repo-root", str(self.repo_root),
                 "--max-concurrent", str(self.max_concurrent), job["id"]],
                cwd=REPO_ROOT, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                start_new_session=True, close_fds=True, env=env)
        except OSError as e:
            job.update(status=FAILED.name, ended=now_iso(), error=f"could not start the job: {e.strerror or e}")
            return
        finally:
            logf.close()
        _LAUNCHED[p.pid] = p
        st = proc_stat(p.pid)
        job.update(status=RUNNING.name, pid=p.pid, pgid=p.pid, proc_start=st[2] if st else None, started=now_iso())
        try:  # the watcher, outside the job's process group, notices when the whole group is killed
            w = subprocess.Popen([sys.executable, "-m", "engine.jobs", "watch", "--root", str(self.root),
                                  "--repo-root", str(self.repo_root), "--max-concurrent", str(self.max_concurrent), job["id"]],
                                 cwd=REPO_ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True)
            _LAUNCHED[w.pid] = w
        except OSError:
            pass  # refresh() from a page is then the only safety net

    # -- cancelling ---------------------------------------------------------------------------------------
    def cancel(self, job_id: str, timeout: float | None = None) -> dict:
        """Cancel a job: a queued one is just marked; a running one gets SIGTERM to its process group,
        then SIGKILL after `timeout` (default `cancel_timeout`; at least 60 s for a job that may be pre-training,
        SAVES_ON_SIGTERM, which finishes its step and saves a checkpoint on SIGTERM) seconds. Returns the job
        record. It returns as soon as the process is gone."""
        explicit = timeout is not None
        timeout = self.cancel_timeout if timeout is None else timeout
        with self._transaction() as q:
            job = self._find_or_fail(q, job_id)
            if job["status"] == QUEUED.name:
                job.update(status=CANCELLED.name, ended=now_iso(), error="cancelled before it started")
                return dict(job)
            if job["status"] != RUNNING.name:
                return dict(job)
            job["cancel_requested"] = True
            if not explicit and (job.get("argv") or [None])[0] in SAVES_ON_SIGTERM:
                timeout = max(timeout, 60.0)
            pgid = job["pgid"]
            snapshot = dict(job)
        if not _job_alive(snapshot):  # nothing provably ours is left to signal (the group id may be reused)
            self.refresh()
            return self.get(job_id)
        killpg(pgid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while _job_alive(snapshot) and time.monotonic() < deadline:
            _poll_launched()
            time.sleep(0.05)
        if _job_alive(snapshot):
            killpg(pgid, signal.SIGKILL)
            deadline = time.monotonic() + 5.0
            while _job_alive(snapshot) and time.monotonic() < deadline:
                _poll_launched()
                time.sleep(0.05)
        self.refresh()
        return self.get(job_id)


def retry_argv(job: dict) -> list[str]:
    """The argv a retry runs: the same, plus `--resume` when its run folder already holds a run of that command
    (pre-training continues from its last checkpoint, or starts again when it died before the first one;
    fine-tune and features keep their finished trials/combinations, and a finished run stays as it is).
    A retry never starts a command afresh over an existing run's results."""
    argv = list(job["argv"])
    if argv and argv[0] in RESUMABLE and job.get("run_dir") \
            and "--resume" not in argv and not any(a.startswith("--resume=") for a in argv):
        run_dir = job["run_dir"]
        if _run_json(run_dir).get("kind") == argv[0] or (argv[0] == "pretrain" and latest_checkpoint(run_dir) is not None):
            argv.append("--resume")
    return argv


def _flag_value(argv: list[str], flag: str) -> str | None:
    for i, a in enumerate(argv):
        if a == flag and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith(flag + "="):
            return a[len(flag) + 1:]
    return None


RESUMABLE = ("pretrain", "finetune", "features")  # commands whose run folders `--resume` continues
SAVES_ON_SIGTERM = ("pretrain", "ablate")  # commands that may be pre-training (a study's job: `ablate job`, `ablate resume`)


def _run_json(run_dir) -> dict:
    return read_json_or_empty(Path(run_dir) / RUN_JSON)


def _run_json_status(run_dir) -> str | None:
    return _run_json(run_dir).get("status") if run_dir else None


def _finalize_run_json(run_dir, status: str, error: str | None) -> None:
    """If the engine died leaving run.json at `running`, record how it ended."""
    if _run_json_status(run_dir) != RUNNING.name:
        return
    try:
        set_status(run_dir, status, error=error)
    except Exception:
        pass


# ---------------------------------------------------------------------------------------------------------
# the runner: python -m engine.jobs run --root ROOT JOB_ID

def _run_job(root: str, job_id: str, max_concurrent: int, repo_root=None) -> int:
    stop = {"sig": None}

    def on_signal(signum, frame):
        stop["sig"] = signum  # the engine child got the same signal (same process group); wait for it

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    jobs = Jobs(root, max_concurrent=max_concurrent, repo_root=repo_root)
    rc, error, cmd = None, None, None
    with jobs._transaction() as q:
        job = jobs._find(q, job_id)
        if job is None or job["status"] != RUNNING.name or job.get("pid") != os.getpid():
            print(f"[job {job_id}] runner {os.getpid()} does not own this job; exiting", flush=True)
            return 1
        try:  # checked again here: the file may have changed since the launch
            cmd = engine_command(job.get("argv"))
        except EngineError as e:
            error = f"refused to run this job: {e}"
        early_cancel = job.get("cancel_requested")
    if cmd is not None and not early_cancel and stop["sig"] is None:
        env = dict(os.environ, PYTHONUNBUFFERED="1", BERT_STUDIO_RUNS=str(jobs.root), BERT_STUDIO_JOB=job_id)
        try:
            child = subprocess.Popen(cmd, cwd=jobs.repo_root, stdin=subprocess.DEVNULL, env=env)
        except OSError as e:
            error = f"could not start {cmd[0]}: {e.strerror or e}"
        else:
            with jobs._transaction() as q:
                rec = jobs._find(q, job_id)
                if rec is not None:
                    st = proc_stat(child.pid)
                    rec["child_pid"], rec["child_start"] = child.pid, st[2] if st else None
            if stop["sig"] is not None:  # cancelled while we were starting it
                child.terminate()
            rc = child.wait()
    with jobs._transaction() as q:
        job = jobs._find(q, job_id)
        cancelled = bool(stop["sig"] is not None or (job and job.get("cancel_requested")))
    if rc == 0:
        status = FINISHED.name
    elif cancelled:
        status, error = CANCELLED.name, "cancelled by the user"
    else:
        status = FAILED.name
    if status == FAILED.name and error is None:
        last = _error_line(job) if job is not None else None
        if last and last.startswith("error:"):
            error = last
        elif rc is not None and rc < 0:
            try:
                error = f"killed by {signal.Signals(-rc).name}"
            except ValueError:
                error = f"killed by signal {-rc}"
        else:
            error = last or f"exited with code {rc}"
    print(f"[job {job_id}] {now_iso()} {status} (exit code {rc})", flush=True)
    if job is not None:
        _finalize_run_json(job.get("run_dir"), status, error)
    with jobs._transaction() as q:
        job = jobs._find(q, job_id)
        if job is not None:
            job.update(status=status, returncode=rc, ended=now_iso(), error=error)
        jobs._reap(q)
        jobs._schedule(q)  # chain: start the next queued job, detached from us
    return 0


def _watch_job(root: str, job_id: str, max_concurrent: int, repo_root=None, interval: float = 0.5) -> int:
    """Wait until job `job_id` ends. If its runner recorded the end, it also started the next job: nothing to do.
    If the job's processes are gone with the job still `running` (its whole process group was killed), reap it
    and start the next queued job, so the queue advances with no studio open."""
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    jobs = Jobs(root, max_concurrent=max_concurrent, repo_root=repo_root)
    while True:
        job = jobs.get(job_id)
        if job is None or job["status"] in TERMINAL:
            return 0
        if job["status"] == RUNNING.name and not _job_alive(job):  # ("queued": the launch is not saved yet)
            jobs.refresh()
            return 0
        time.sleep(interval)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m engine.jobs", description="BERT Studio job runner (internal)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run one queued job (started by the studio; not for direct use)")
    r.add_argument("--root", required=True, help="runs root holding .jobs/queue.json")
    r.add_argument("--repo-root", default=None, help="the engine's working directory (default: this repository)")
    r.add_argument("--max-concurrent", type=int, default=1)
    r.add_argument("job_id")
    w = sub.add_parser("watch", help="advance the queue if this job's processes are killed (started by the studio)")
    w.add_argument("--root", required=True)
    w.add_argument("--repo-root", default=None)
    w.add_argument("--max-concurrent", type=int, default=1)
    w.add_argument("job_id")
    ls = sub.add_parser("list", help="print the queue")
    ls.add_argument("--root", default=None)
    args = ap.parse_args(argv)
    try:
        if args.cmd == "run":
            return _run_job(args.root, args.job_id, args.max_concurrent, args.repo_root)
        if args.cmd == "watch":
            return _watch_job(args.root, args.job_id, args.max_concurrent, args.repo_root)
        for j in Jobs(args.root).refresh():
            print(f"{j['id']}  {j['status']:<9}  {j['name']}  {j.get('error') or ''}")
        return 0
    except EngineError as e:  # a refused queue file, a lock held too long: one line
        print(f"error: {e}", file=sys.stderr, flush=True)
        return 2


# ---------------------------------------------------------------------------------------------------------
# module-level shortcuts on the default runs root ($BERT_STUDIO_RUNS or ./runs)

def submit(argv, name=None, run_dir=None, root=None) -> dict:
    return Jobs(root).submit(argv, name=name, run_dir=run_dir)


def list_jobs(root=None) -> list[dict]:
    return Jobs(root).list_jobs()


def get(job_id, root=None) -> dict | None:
    return Jobs(root).get(job_id)


def cancel(job_id, root=None, timeout=None) -> dict:
    return Jobs(root).cancel(job_id, timeout=timeout)


def retry(job_id, root=None) -> dict:
    return Jobs(root).retry(job_id)


def tail_log(job_id, n=50, root=None) -> str:
    return Jobs(root).tail_log(job_id, n)


def refresh(root=None) -> list[dict]:
    return Jobs(root).refresh()


def job_progress(job) -> float | None:
    return Jobs().job_progress(job)


def stop_run(run_dir, root=None) -> str:
    """Stop a running run: cancel the queue's job that runs it, or else SIGTERM the process proved to be its writer
    (run lock + start time). Either way the run saves a checkpoint and stops at the end of its current step.
    Returns what was done, in words."""
    run_dir = Path(run_dir).resolve()
    for job in refresh(root=root):
        if job.get("status") == RUNNING.name and job.get("run_dir") and Path(job["run_dir"]).resolve() == run_dir:
            cancel(job["id"], root=root)
            return "cancelled (the run saved a checkpoint)"
    pid = run_writer_pid(run_dir)
    if pid is not None:
        os.kill(pid, signal.SIGTERM)
        return "asked the run to stop; it saves a checkpoint first"
    return "no live process is provably this run's (none holds its lock), so nothing was signalled"


if __name__ == "__main__":
    sys.exit(main())
