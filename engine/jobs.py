"""The job queue: engine CLI commands run as detached processes, one at a time, surviving studio restarts.

A job is an engine command as an argv list, e.g. `["pretrain", "--corpus", "bbc", "--out", "runs/x"]`, run as
`[sys.executable, "-m", "engine", *argv]` (never through a shell). Jobs are kept in
`<runs root>/.jobs/queue.json` (atomic writes, every read-modify-write under an flock on `.jobs/queue.lock`,
so several studio sessions can share one queue). Job record fields:
id, name, argv, status (queued|running|finished|failed|cancelled), pid, pgid, proc_start, child_pid, child_start,
created, started, ended,
returncode, error (the last `error: ...` line of the log, else its last non-empty line), log, run_dir, depends_on (the ids
of the jobs it waits for: it starts only once each has finished; one that failed or was cancelled stops it unrun, with
one line naming that job and `resume_hint`, how to run it again). Queue files without the last two still load.
Each record read from the file is checked against one schema (`JobRecord.from_dict`); a damaged record (not an
object, no status or name, an id that is not a safe file name, a run folder that is not a path inside the runs
folder) is set aside into `queue.json.bad-<time>` with one warning line, and the good jobs go on.

Nothing in the queue file names a path outside the runs folder: a job's `log` is never read from the file but derived
(`<run_dir>/job.log`, else `<runs>/.jobs/logs/<id>.log`), its run folder must resolve (symlinks resolved) inside the
runs folder, and a log is opened by walking down from the runs folder without following symlinks, as a regular file
only (no FIFO or device), and read bounded (`_open_inside`).

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
import errno
import fcntl
import json
import os
import re
import secrets
import shlex
import signal
import stat
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from engine.commands import COMMANDS as _COMMANDS, PRETRAIN, kind_of, written_by
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
MAX_QUEUE_BYTES = 64 << 20  # a queue file past this is set aside unread (tens of thousands of jobs take a few MB)
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

def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _open_inside(root: Path, path: Path, write: bool = False) -> int:
    """A file descriptor of the regular file `path`, which must lie inside the folder `root`: the path is resolved,
    then opened by walking down from `root` one folder at a time without following a symlink (so a folder swapped
    for a symlink after the check is never followed), the file itself with O_NOFOLLOW and O_NONBLOCK (a FIFO never
    blocks), and anything but a regular file (a FIFO, a device such as /dev/zero) is refused. `write`: opened for
    appending, missing folders created, a file with other hard links refused. OSError when it may not be opened."""
    root_real = Path(root).resolve()
    try:
        rel = Path(path).parent.resolve().relative_to(root_real)
    except (ValueError, RuntimeError, OSError):
        raise OSError(errno.EPERM, f"it is outside the runs folder {root_real}")
    dir_flags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
    fd = os.open(root_real, dir_flags)
    try:
        for part in rel.parts:
            if write:
                try:
                    os.mkdir(part, 0o777, dir_fd=fd)  # (less the umask, as mkdir -p)
                except FileExistsError:
                    pass
            nfd = os.open(part, dir_flags | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = nfd
        flags = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
        flags |= (os.O_WRONLY | os.O_APPEND | os.O_CREAT) if write else os.O_RDONLY
        try:
            ffd = os.open(Path(path).name, flags, 0o644, dir_fd=fd)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise OSError(errno.ELOOP, "it is a symlink (never followed); remove it")
            if e.errno == errno.ENXIO:
                raise OSError(errno.ENXIO, "it is a FIFO, not a file; remove it")
            raise
    finally:
        os.close(fd)
    st = os.fstat(ffd)
    problem = "it is not a regular file; remove it" if not stat.S_ISREG(st.st_mode) else \
        "it has other hard links (it may be a file outside the runs folder); remove it" if write and st.st_nlink > 1 else None
    if problem:
        os.close(ffd)
        raise OSError(errno.EINVAL, problem)
    if write:
        fcntl.fcntl(ffd, fcntl.F_SETFL, fcntl.fcntl(ffd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    return ffd


def _read_log_tail(root: Path, path: Path, offset=None, max_bytes: int = 262144) -> str:
    """A job's part of its log `path` (from byte `offset`, its header, on), at most the last `max_bytes`; "" when the
    log is missing or may not be read (outside `root`, a symlink, not a regular file)."""
    try:
        fd = _open_inside(root, path)
    except OSError:
        return ""
    with os.fdopen(fd, "rb") as f:
        size = os.fstat(fd).st_size
        start = min(size, max(int(offset or 0), size - max_bytes))
        f.seek(start)
        data = f.read(max(0, min(max_bytes, size - start)))
    return data.decode("utf-8", "replace")


def _log_lines(text: str) -> list[str]:
    # progress bars rewrite their line with \r: keep what the terminal would show
    return [line.rsplit("\r", 1)[-1] if line.rstrip("\r") else "" for line in text.split("\n")]


# ---------------------------------------------------------------------------------------------------------
# the job record: one schema, checked on every read of the queue file

JOB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")  # a job's id names its log file: a safe file name
_POSITIVE = ("pid", "pgid", "child_pid")  # process ids: never 0 or negative (killpg(0) is our own group)
_INTS = ("proc_start", "child_start", "returncode", "log_offset")
_TEXTS = ("created", "started", "ended", "error", "resume_hint")
MAX_DEPENDENCIES = 10_000  # a study's job waits for one or two pre-trainings; a longer list is a damaged record


class BadRecord(ValueError):
    """A queue record that does not fit the schema; its message says why, in a few words."""


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def run_dir_problem(run_dir, root) -> str | None:
    """Why `run_dir` may not be a job's run folder under the runs folder `root` (None when it may): it must be an
    absolute path that resolves, symlinks resolved, to a folder strictly inside `root`."""
    if not isinstance(run_dir, str) or not run_dir or "\x00" in run_dir:
        return "is not a path"
    if not os.path.isabs(run_dir):
        return "is not an absolute path"
    root_real = Path(root).resolve()
    try:
        real = Path(run_dir).resolve()
    except (RuntimeError, OSError):  # a symlink loop (RuntimeError before Python 3.13, OSError after)
        return "is a symlink loop"
    if not _inside(real, root_real) or real == root_real:
        return f"is outside the runs folder {root_real}" + (f" (it resolves to {real})" if str(real) != run_dir else "")
    return None


@dataclass
class JobRecord:
    """One job of the queue file, checked (`from_dict`). `argv` is kept as it was: a job whose argv may not run is a
    failed job (`argv_problem`, on launch), not a damaged record. The log is derived, never read (`Jobs._log_path`)."""
    id: str
    name: str
    status: str
    argv: object = None
    pid: int | None = None
    pgid: int | None = None
    proc_start: int | None = None
    child_pid: int | None = None
    child_start: int | None = None
    created: str | None = None
    started: str | None = None
    ended: str | None = None
    returncode: int | None = None
    error: str | None = None
    log_offset: int | None = None
    run_dir: str | None = None
    cancel_requested: bool = False
    depends_on: list = field(default_factory=list)  # ids of earlier jobs that must finish before this one starts
    resume_hint: str | None = None  # how to run it again when one of those stopped (the end of its one-line error)

    @classmethod
    def from_dict(cls, raw, root: Path) -> "JobRecord":
        """The record `raw` (a dict read from the queue file of the runs folder `root`); BadRecord saying why not."""
        if not isinstance(raw, dict):
            raise BadRecord(f"{_short(raw)} is not a job record (a JSON object)")
        jid = raw.get("id")
        if not isinstance(jid, str) or not JOB_ID.fullmatch(jid):
            raise BadRecord(f"job id {_short(jid)} is not a name of letters, digits, '.', '_' and '-'")
        for key in ("name", "status"):
            if key not in raw or raw[key] is None:
                raise BadRecord(f"job {jid} has no {key}")
            if not isinstance(raw[key], str):
                raise BadRecord(f"job {jid}'s {key} {_short(raw[key])} is not text")
        if raw["status"] not in STATUSES:
            raise BadRecord(f"job {jid}'s status {_short(raw['status'])} is not one of {', '.join(STATUSES)}")
        for key in _POSITIVE + _INTS:
            v = raw.get(key)
            if v is not None and (type(v) is not int or (key in _POSITIVE and v < 1) or (key == "log_offset" and v < 0)):
                raise BadRecord(f"job {jid}'s {key} {_short(v)} is not a {'positive ' if key in _POSITIVE else ''}whole number")
        for key in _TEXTS:
            if raw.get(key) is not None and not isinstance(raw[key], str):
                raise BadRecord(f"job {jid}'s {key} {_short(raw[key])} is not text")
        if raw.get("cancel_requested") is not None and not isinstance(raw["cancel_requested"], bool):
            raise BadRecord(f"job {jid}'s cancel_requested {_short(raw['cancel_requested'])} is not true or false")
        run_dir = raw.get("run_dir")
        if run_dir is not None:
            problem = run_dir_problem(run_dir, root)
            if problem:
                raise BadRecord(f"job {jid}'s run folder {_short(run_dir)} {problem}")
        problem = dependencies_problem(raw.get("depends_on"), jid)
        if problem:
            raise BadRecord(f"job {jid}'s depends_on {_short(raw.get('depends_on'))} {problem}")
        values = {k: raw.get(k) for k in cls.__dataclass_fields__}
        values["cancel_requested"] = bool(raw.get("cancel_requested"))
        values["depends_on"] = list(raw.get("depends_on") or [])  # (a queue file older than the field: none)
        return cls(**values)

    def to_dict(self, log: Path) -> dict:
        """The record as the queue keeps it; `log` is the derived path (written for readers, ignored on read)."""
        return {**asdict(self), "log": str(log)}


def dependencies_problem(ids, job_id=None) -> str | None:
    """Why `ids` may not be a job's `depends_on` (None when it may): a list of job ids (safe file names), not the job's
    own, at most MAX_DEPENDENCIES of them. None (a record written before the field) is no dependency."""
    if ids is None:
        return None
    if not isinstance(ids, list) or len(ids) > MAX_DEPENDENCIES:
        return f"is not a list of at most {MAX_DEPENDENCIES} job ids"
    for i in ids:
        if not isinstance(i, str) or not JOB_ID.fullmatch(i):
            return f"holds {_short(i)}, not a job id of letters, digits, '.', '_' and '-'"
        if i == job_id:
            return "names the job itself"
    return None


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


def _command_of(job: dict):
    """The engine command a job runs (argv's first item), None when argv is not a list."""
    argv = job.get("argv")
    return argv[0] if isinstance(argv, list) and argv else None


def _refuse_untrusted(path: Path, st: os.stat_result) -> None:
    """A queue file's owner and mode must be this user's alone: whoever can write it chooses what runs."""
    if st.st_uid != os.geteuid():
        raise EngineError(f"refusing the job queue {path}: it belongs to user id {st.st_uid}, not to you (user id "
                          f"{os.geteuid()}), and whoever writes it chooses what runs; remove it, or chown it to yourself "
                          f"if you trust what it holds")
    if st.st_mode & 0o022:
        raise EngineError(f"refusing the job queue {path}: group or others may write it (mode {st.st_mode & 0o777:o}), "
                          f"and whoever writes it chooses what runs; run chmod go-w on it if you trust what it holds")


def _not_run(job: dict, earlier: dict):
    """(status, error) that stops the queued `job` because of a job it waits for (`earlier`: the jobs before it in the
    queue, by id), or None while each is finished or may still finish."""
    hint = job.get("resume_hint") or "retry that job, then retry this one"
    for dep_id in job["depends_on"]:
        dep = earlier.get(dep_id)
        if dep is None:
            return FAILED.name, (f"not run: the job it waits for, {dep_id}, is not an earlier job of the queue (removed, "
                                 f"or the queue file was edited); {hint}")
        if status_of(dep["status"]) in (FAILED, CANCELLED):
            was = "failed" if status_of(dep["status"]) is FAILED else "was cancelled"
            return dep["status"], f"not run: {dep['name']} {was}; {hint}"
    return None


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
        self.notices: list[str] = []  # one line each: what reading the queue file set aside or skipped

    # -- storage ------------------------------------------------------------------------------------------
    def _read_queue(self) -> bytes | None:
        """The queue file's bytes (None when there is none); EngineError for a file this user does not alone control.
        Owner and mode are those of the file opened (fstat), so a file swapped in after the check is never read.
        OSError (the caller sets the file aside) for a symlink, a FIFO or device, or a file past MAX_QUEUE_BYTES."""
        try:
            fd = os.open(self.queue_path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            _refuse_untrusted(self.queue_path, st)
            if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_QUEUE_BYTES:
                raise OSError(errno.EINVAL, f"{self.queue_path} is not a regular file of at most {MAX_QUEUE_BYTES >> 20} MB")
            return f.read(MAX_QUEUE_BYTES + 1)

    def _note(self, line: str) -> None:
        if line not in self.notices:  # a watcher reads the queue twice a second: each note once
            self.notices.append(line)

    def _log_path(self, job: dict) -> Path:
        """Where a job's output goes, derived from its (checked) run folder or id, never read from the queue file:
        `<run_dir>/job.log`, else `<runs>/.jobs/logs/<id>.log`."""
        if job.get("run_dir"):
            return Path(job["run_dir"]) / "job.log"
        return self.dir / "logs" / f"{job['id']}.log"

    def _read_log_tail(self, job: dict) -> str:
        return _read_log_tail(self.root, self._log_path(job), job.get("log_offset"))

    def _error_line(self, job: dict) -> str | None:
        """The last `error: ...` line of the job's part of its log, else its last non-empty line."""
        lines = [ln.strip() for ln in _log_lines(self._read_log_tail(job))]
        lines = [ln for ln in lines if ln and not ln.startswith(f"[job {job['id']}]")]
        for ln in reversed(lines):
            if ln.startswith("error:"):
                return ln[:500]
        return lines[-1][:500] if lines else None

    def _checked(self, records: list) -> tuple[list[dict], list, list[str]]:
        """The records that fit the schema (as the queue keeps them, each with its derived log), the raw ones that do
        not, and why not (one short reason each)."""
        good, bad, why, seen = [], [], [], set()
        for raw in records:
            try:
                rec = JobRecord.from_dict(raw, self.root)
                if rec.id in seen:
                    raise BadRecord(f"a second job with id {rec.id}")
            except BadRecord as e:
                bad.append(raw)
                why.append(str(e))
                continue
            seen.add(rec.id)
            job = rec.to_dict(self._log_path({"id": rec.id, "run_dir": rec.run_dir}))
            if isinstance(raw.get("log"), str) and raw["log"] != job["log"]:
                job["log_offset"] = None  # an offset into another file (the field is ignored): the log from its start
            good.append(job)
        return good, bad, why

    def _bad_path(self) -> Path:
        base = self.queue_path.with_name(f"queue.json.bad-{int(time.time())}")
        path, n = base, 1
        while os.path.lexists(path):
            path, n = base.with_name(f"{base.name}-{n}"), n + 1
        return path

    def _set_aside(self, bad: list, why: list[str]) -> None:
        """Keep the damaged records in `queue.json.bad-<time>` beside the queue (before the queue is saved without
        them), and say so in one line."""
        path = self._bad_path()
        doc = {"from": str(self.queue_path), "set_aside": now_iso(), "why": why, "jobs": bad}
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(doc, f, indent=1)
                f.flush()
                os.fsync(f.fileno())
        except OSError as e:
            raise EngineError(f"the job queue {self.queue_path} holds {len(bad)} damaged job record(s) ({why[0]}) and they "
                              f"could not be set aside in {path}: {e.strerror or e}; check the runs folder's permissions")
        n = len(bad)
        reasons = "; ".join(why[:3]) + (f"; and {n - 3} more" if n > 3 else "")
        self._note(f"set aside {n} damaged job record{'s' if n != 1 else ''} of {self.queue_path} in {path} "
                   f"({reasons}); the other jobs go on. Look there for what was dropped, then delete that file")

    def _parse(self, data: bytes | None):
        """The queue dict in `data` (None: no file), or None when it is not a JSON object with a `jobs` list."""
        if data is None:
            return {"version": 1, "jobs": []}
        try:
            q = json.loads(data.decode("utf-8"))
        except ValueError:
            return None
        return q if isinstance(q, dict) and isinstance(q.get("jobs"), list) else None

    def _load(self) -> tuple[dict, bool]:
        """The queue (under the lock), its damaged records set aside; True when the file must be saved without them."""
        try:
            q = self._parse(self._read_queue())
        except OSError:
            q = None
        if q is not None:
            good, bad, why = self._checked(q["jobs"])
            q["jobs"] = good
            if bad:
                self._set_aside(bad, why)
            return q, bool(bad)
        # unreadable (edited by hand?): keep it aside and start a fresh queue rather than brick the studio
        path = self._bad_path()
        try:
            os.replace(self.queue_path, path)
            self._note(f"the job queue {self.queue_path} was not a JSON object with a list of jobs; it was set "
                       f"aside as {path} and a new queue started. Look there for what was dropped, then delete that file")
        except OSError:
            pass
        return {"version": 1, "jobs": []}, False

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
            q, dirty = self._load()
            if dirty:  # damaged records were set aside: saved without them now, whatever the caller does next
                atomic_write_json(self.queue_path, q)
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
        """The queue without the lock: damaged records are skipped here (the next locked read sets them aside)."""
        try:
            q = self._parse(self._read_queue())
        except OSError:
            q = None
        if q is None:
            return {"version": 1, "jobs": []}
        q["jobs"], bad, why = self._checked(q["jobs"])
        if bad:
            self._note(f"skipped {len(bad)} damaged job record(s) of {self.queue_path} ({why[0]}); the next "
                       f"refresh of the queue sets them aside")
        return q

    def get(self, job_id: str) -> dict | None:
        job = self._find(self._load_readonly(), job_id)
        return dict(job) if job else None

    def tail_log(self, job_id: str, n: int = 50) -> str:
        """The last `n` lines of the job's log (its own part only)."""
        job = self.get(job_id)
        if job is None:
            raise EngineError(f"there is no job {job_id!r} in {self.queue_path}; refresh the job list")
        lines = _log_lines(self._read_log_tail(job))
        while lines and not lines[-1].strip():
            lines.pop()
        return "\n".join(lines[-n:]) if n > 0 else ""

    def job_progress(self, job: dict) -> float | None:
        """Fraction done in [0, 1] from the run dir (last logged step / total steps); None if unknown."""
        if status_of(job.get("status")) is FINISHED:
            return 1.0
        if status_of(job.get("status")) is QUEUED:
            return 0.0
        if not job.get("run_dir"):
            return None
        study = study_fraction_done(job["run_dir"])  # a whole study run by one job: its share of jobs done
        return study if study is not None else run_progress(job["run_dir"])["fraction"]

    # -- submitting ---------------------------------------------------------------------------------------
    def submit(self, argv, name: str | None = None, run_dir=None, depends_on=(), resume_hint: str | None = None) -> dict:
        """Queue `python -m engine *argv` and start it if a slot is free. Returns the job record.

        `run_dir` (default: the value of `--out` in argv; a relative path is taken from the repo root, the
        engine's working directory) is where job.log goes and progress is read from. One active job per run dir.
        `depends_on`: ids of jobs already in the queue that must finish before this one starts; when one of them fails
        or is cancelled this job is not run, and its error line ends with `resume_hint` (how to run it again)."""
        engine_command(argv)  # EngineError unless it is an engine command
        argv = list(argv)
        if run_dir is None:
            run_dir = _flag_value(argv, "--out")
        return self._add(argv=argv, name=name, run_dir=run_dir, depends_on=list(depends_on or ()), resume_hint=resume_hint)

    def _add(self, argv, name, run_dir, depends_on=(), resume_hint=None) -> dict:
        engine_command(argv)
        problem = dependencies_problem(list(depends_on))
        if problem or (resume_hint is not None and not isinstance(resume_hint, str)):
            raise EngineError(f"depends_on {_short(depends_on)} {problem or 'comes with a resume_hint that is not text'}; "
                              "give the ids of jobs in the queue")
        job_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
        if run_dir is not None:
            run_dir = Path(run_dir)
            run_dir = str(run_dir if run_dir.is_absolute() else (self.repo_root.absolute() / run_dir))
            problem = run_dir_problem(run_dir, self.root)
            if problem:
                raise EngineError(f"run folder {run_dir} {problem}; give an output folder (--out) inside the runs folder "
                                  f"{self.root}, or start the studio with BERT_STUDIO_RUNS set to a folder that holds it")
        rec = JobRecord(id=job_id, name=str(name or (Path(run_dir).name if run_dir else argv[0])), status=QUEUED.name,
                        argv=argv, created=now_iso(), run_dir=run_dir, depends_on=list(depends_on), resume_hint=resume_hint)
        job = rec.to_dict(self._log_path({"id": job_id, "run_dir": run_dir}))
        with self._transaction() as q:
            for other in q["jobs"]:
                if run_dir is not None and other.get("run_dir") == run_dir and status_of(other["status"]).active:
                    raise EngineError(f"run folder {run_dir} already has job {other['id']} {other['status']}; "
                               f"wait for it or cancel it, or pick another output folder")
            missing = [i for i in depends_on if self._find(q, i) is None]
            if missing:
                raise EngineError(f"job {missing[0]}, which this job would wait for, is not in the queue {self.queue_path}; "
                                  "refresh the job list and queue it again")
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
        waits = [i for i in job.get("depends_on") or [] if status_of((self.get(i) or {}).get("status")).active]
        return self._add(argv=retry_argv(job), name=job.get("name"), run_dir=job.get("run_dir"), depends_on=waits,
                         resume_hint=job.get("resume_hint"))

    def remove(self, job_id: str) -> None:
        """Forget a finished/failed/cancelled job (its log and run folder stay). A job that waited for a finished one
        no longer waits for it; one that waited for a failed or cancelled one has already been stopped."""
        with self._transaction() as q:
            job = self._find_or_fail(q, job_id)
            if job["status"] not in TERMINAL:
                raise EngineError(f"job {job_id} is still {job['status']}; cancel it before removing it")
            self._stop_dependants(q)
            q["jobs"].remove(job)
            for other in q["jobs"]:
                if job_id in other["depends_on"]:
                    other["depends_on"] = [i for i in other["depends_on"] if i != job_id]

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
            if status_of(job["status"]) is not RUNNING or _job_alive(job):
                continue
            # the runner ended without recording the exit (killed): decide from what is left
            run_status = _run_json_status(job.get("run_dir"))
            if job.get("cancel_requested"):
                status = CANCELLED
            elif status_of(run_status) is FINISHED:
                status = FINISHED
            else:
                status = FAILED
            job.update(status=status.name, ended=now_iso())
            if status is not FINISHED:
                job["error"] = self._error_line(job) if status is FAILED else "cancelled by the user"
                job["error"] = job["error"] or "the job's process ended unexpectedly (killed?)"
                _finalize_run_json(job.get("run_dir"), status.name, job["error"])

    def _schedule(self, q: dict) -> None:
        """Start queued jobs into free slots, in order; a job waiting for another (`depends_on`) starts only once each
        has finished, and is stopped unrun when one of them failed or was cancelled (`_stop_dependants`, first)."""
        self._stop_dependants(q)
        status = {j["id"]: j["status"] for j in q["jobs"]}
        running = sum(1 for j in q["jobs"] if status_of(j["status"]) is RUNNING)
        for job in q["jobs"]:
            if running >= self.max_concurrent:
                break
            if status_of(job["status"]) is QUEUED and all(status_of(status.get(i)) is FINISHED for i in job["depends_on"]):
                self._launch(job)
                running += status_of(job["status"]) is RUNNING

    @staticmethod
    def _stop_dependants(q: dict) -> None:
        """Mark each queued job that waits for a failed or cancelled job failed or cancelled, with one line naming that
        job and how to run it again (never started: it would read what that job left half done). A job it waits for
        must be an earlier job of the queue (so no cycle waits forever); one that is not fails it. In queue order, so
        a job stopped here stops those that wait for it in the same pass."""
        earlier = {}
        for job in q["jobs"]:
            if status_of(job["status"]) is QUEUED and job["depends_on"]:
                why = _not_run(job, earlier)
                if why is not None:
                    job.update(status=why[0], ended=now_iso(), error=why[1])
            earlier[job["id"]] = job


    def _launch(self, job: dict) -> None:
        """Start the detached runner for `job` (called with the queue lock held); a job whose argv may not run
        (`argv_problem`) is marked failed and nothing is started."""
        problem = argv_problem(job.get("argv"))
        if problem:
            job.update(status=FAILED.name, ended=now_iso(), error=f"refused to run this job: {problem}")
            return
        log = self._log_path(job)  # derived: the queue file's `log` field is never read
        try:
            logf = os.fdopen(_open_inside(self.root, log, write=True), "ab")
        except OSError as e:
            job.update(status=FAILED.name, ended=now_iso(), error=f"could not open the job log {log}: {e.strerror or e}")
            return
        try:
            job["log"], job["log_offset"] = str(log), os.fstat(logf.fileno()).st_size
            logf.write(f"[job {job['id']}] {now_iso()} $ {shlex.join(['python', '-m', 'engine', *job['argv']])}\n".encode())
            logf.flush()
        except OSError as e:
            logf.close()
            job.update(status=FAILED.name, ended=now_iso(), error=f"could not write the job log {log}: {e.strerror or e}")
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
            if status_of(job["status"]) is QUEUED:
                job.update(status=CANCELLED.name, ended=now_iso(), error="cancelled before it started")
                self._stop_dependants(q)
                return dict(job)
            if status_of(job["status"]) is not RUNNING:
                return dict(job)
            job["cancel_requested"] = True
            if not explicit and _command_of(job) in SAVES_ON_SIGTERM:
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
    kind = written_by(argv[0]) if argv else None  # the run kind the command writes (engine.commands.RUN_KINDS)
    if kind is not None and kind.resumes and job.get("run_dir") \
            and "--resume" not in argv and not any(a.startswith("--resume=") for a in argv):
        run_dir = job["run_dir"]
        if kind_of(_run_json(run_dir).get("kind")) is kind or (kind.checkpoints and latest_checkpoint(run_dir) is not None):
            argv.append("--resume")
    return argv


def _flag_value(argv: list[str], flag: str) -> str | None:
    for i, a in enumerate(argv):
        if a == flag and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith(flag + "="):
            return a[len(flag) + 1:]
    return None


SAVES_ON_SIGTERM = (PRETRAIN.command, "ablate")  # commands that may be pre-training (a study's job: `ablate job`, `ablate resume`)


def _run_json(run_dir) -> dict:
    return read_json_or_empty(Path(run_dir) / RUN_JSON)


def _run_json_status(run_dir) -> str | None:
    return _run_json(run_dir).get("status") if run_dir else None


def _finalize_run_json(run_dir, status: str, error: str | None) -> None:
    """If the engine died leaving run.json at `running`, record how it ended."""
    if status_of(_run_json_status(run_dir)) is not RUNNING:
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
        if job is None or status_of(job["status"]) is not RUNNING or job.get("pid") != os.getpid():
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
    if status_of(status) is FAILED and error is None:
        last = jobs._error_line(job) if job is not None else None
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
        if status_of(job["status"]) is RUNNING and not _job_alive(job):  # ("queued": the launch is not saved yet)
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
        q = Jobs(args.root)
        listed = q.refresh()
        for note in q.notices:  # damaged records set aside: one line each, the good jobs listed below
            print(f"warning: {note}", file=sys.stderr, flush=True)
        for j in listed:
            print(f"{j['id']}  {j['status']:<9}  {j['name']}  {j.get('error') or ''}")
        return 0
    except EngineError as e:  # a refused queue file, a lock held too long: one line
        print(f"error: {e}", file=sys.stderr, flush=True)
        return 2


# ---------------------------------------------------------------------------------------------------------
# module-level shortcuts on the default runs root ($BERT_STUDIO_RUNS or ./runs)

def submit(argv, name=None, run_dir=None, root=None, depends_on=(), resume_hint=None) -> dict:
    return Jobs(root).submit(argv, name=name, run_dir=run_dir, depends_on=depends_on, resume_hint=resume_hint)


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


def queue_warning(root=None) -> str | None:
    """One line when parts of the queue file were set aside (`queue.json.bad-*` beside it), else None: what the Jobs
    page shows until those files are deleted."""
    q = Jobs(root)
    try:
        found = sorted(q.dir.glob("queue.json.bad-*"))
    except OSError:
        return None
    if not found:
        return None
    more = f" (and {len(found) - 1} earlier one{'s' if len(found) > 2 else ''})" if len(found) > 1 else ""
    return (f"damaged job records (or a damaged queue file) were set aside in {found[-1]}{more}; the other jobs go on. "
            f"Look there for what was dropped, then delete {'that file' if len(found) == 1 else 'those files'} to hide this note")


def stop_run(run_dir, root=None) -> str:
    """Stop a running run: cancel the queue's job that runs it, or else SIGTERM the process proved to be its writer
    (run lock + start time). Either way the run saves a checkpoint and stops at the end of its current step.
    Returns what was done, in words."""
    run_dir = Path(run_dir).resolve()
    for job in refresh(root=root):
        if status_of(job.get("status")) is RUNNING and job.get("run_dir") and Path(job["run_dir"]).resolve() == run_dir:
            cancel(job["id"], root=root)
            return "cancelled (the run saved a checkpoint)"
    pid = run_writer_pid(run_dir)
    if pid is not None:
        os.kill(pid, signal.SIGTERM)
        return "asked the run to stop; it saves a checkpoint first"
    return "no live process is provably this run's (none holds its lock), so nothing was signalled"


if __name__ == "__main__":
    sys.exit(main())
