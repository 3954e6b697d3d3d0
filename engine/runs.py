"""Run directories: names, the one-writer lock, run.json, metrics.jsonl, checkpoint discovery, the run index.

A run lives in one folder under the runs root (`$BERT_STUDIO_RUNS`, default `./runs`):
```
runs/<name>/run.json            kind, config, status (running|finished|failed|cancelled), pid, host, times,
                                versions, error line; merge-updated atomically
runs/<name>/metrics.jsonl       one JSON object per logged step, appended + fsynced
runs/<name>/checkpoints/step-N/ complete checkpoints; each holds a COMPLETE marker written last
runs/<name>/checkpoints/.tmp-step-N/   a checkpoint being written (ignored by readers)
runs/<name>/eval.json           downstream results (fields: engine.records)
runs/<name>/run.lock            pid/host/start of the writer; held with fcntl.flock while it lives
```
Only one process writes a run at a time (`RunLock`): the lock is an OS advisory lock on an open file, so the
kernel releases it when the writer dies, however it dies; a `running` status whose writer is gone is reported
as `dead` by `effective_status`, which is what lets the studio offer Resume.

Not in the paper (infrastructure). Departures from a plain design: a crash can tear the last line of
metrics.jsonl, so readers ignore a partial last line and `append_metrics` cuts it off before appending; on
resume `truncate_metrics(run_dir, step)` drops records logged after the checkpoint so no step is duplicated.
Locks are POSIX-only (fcntl) and, like all flock locks, are not reliable on network file systems.
"""
import fcntl
import json
import os
import re
import shutil
import socket
import stat
import sys
import time
from datetime import datetime
from pathlib import Path

from engine.errors import EngineError, as_engine_error
from engine.fileio import atomic_publish_dir, atomic_save_with, atomic_write_json, open_regular, read_regular, tail_regular
from engine.procs import pid_alive, proc_start_time
from engine.records import EVAL_JSON, METRICS, METRICS_LABELS, RUN_JSON  # noqa: F401 (the file names, defined in engine.records)
from engine.status import CANCELLED, DEAD, FAILED, FINISHED, RUN_STATUSES, RUNNING, UNREADABLE, status_of

LOCK_FILE = "run.lock"
CHECKPOINTS = "checkpoints"
COMPLETE = "COMPLETE"  # marker file, written last into a checkpoint folder
STATUSES = RUN_STATUSES  # engine.status: what each means
MAX_NAME = 100
_NAME_RE = re.compile(r"[A-Za-z0-9_.+=-]+")
_STEP_DIR_RE = re.compile(r"step-(\d+)")
MAX_RUN_JSON_BYTES = 16 * 2 ** 20  # run.json is a few kB; a bigger one is not the engine's and is not read
MAX_LOCK_BYTES = 64 * 1024
MAX_METRICS_ROWS = 20_000  # read_metrics keeps at most this many records of each series (down-sampled evenly)
MAX_METRICS_LINE = 64 * 1024  # a record is a few hundred bytes; a longer line is skipped, never held whole
_MAX_SERIES = 8  # series told apart by their fields; more (a file edited by hand) share the last one


def now_iso() -> str:
    """Local time with its UTC offset, to the second, as YYYY-MM-DDTHH:MM:SS+HH:MM."""
    return datetime.now().astimezone().isoformat(timespec="seconds")


def _iso_ts(s) -> float | None:
    try:
        return datetime.fromisoformat(str(s)).timestamp()
    except (TypeError, ValueError):
        return None


# ---------------------------------------------------------------------------------------------------------
# names and folders

def runs_root() -> Path:
    """The default runs root: $BERT_STUDIO_RUNS, or ./runs (relative to the working directory)."""
    return Path(os.environ.get("BERT_STUDIO_RUNS") or "runs").absolute()


def safe_run_name(name) -> str:
    """Return `name` if it is a safe single folder name, else raise EngineError naming the rule it breaks."""
    if not isinstance(name, str) or not name.strip():
        raise EngineError("run name is empty; type a name such as bert-tiny-bbc")
    if "\x00" in name:
        raise EngineError("run name contains a NUL character; use letters, digits and - _ . + =")
    if "/" in name or "\\" in name or os.sep in name or (os.altsep and os.altsep in name):
        raise EngineError(f"run name {name!r} contains a path separator; give a plain name, not a path")
    if ".." in name:
        raise EngineError(f"run name {name!r} contains '..'; use a plain name without '..'")
    if name.startswith("."):
        raise EngineError(f"run name {name!r} starts with a dot; names starting with '.' are reserved, drop the dot")
    if len(name) > MAX_NAME:
        raise EngineError(f"run name is {len(name)} characters long; use at most {MAX_NAME}")
    if not _NAME_RE.fullmatch(name):
        bad = "".join(sorted({c for c in name if not _NAME_RE.fullmatch(c)}))
        raise EngineError(f"run name {name!r} contains {bad!r}; use only letters a-z A-Z, digits and - _ . + =")
    return name


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def resolve_run_dir(root, name) -> Path:
    """`root/name` for a safe `name`, checked after resolving symlinks to stay inside `root`."""
    name = safe_run_name(name)
    root = Path(root).resolve()
    path = root / name
    try:
        real = path.resolve()
    except (RuntimeError, OSError) as e:  # a symlink loop (RuntimeError before Python 3.13, OSError ELOOP after)
        raise EngineError(f"run folder {path} is a symlink loop ({e}); remove it or pick another name") from e
    if not _inside(real, root) or real == root:
        raise EngineError(f"run folder {path} points outside the runs folder {root} (a symlink?); remove it or pick another name")
    return path


def run_dir_for(arg, root=None) -> Path:
    """A CLI `--out`/run argument: a bare name lives under the runs root, anything with a separator is a path."""
    arg = str(arg)
    if "/" in arg or os.sep in arg or arg in (".", ".."):
        return Path(arg).absolute()
    return resolve_run_dir(root if root is not None else runs_root(), arg)


def create_run_dir(root, name) -> Path:
    """Make (or reuse) the run folder for `name` under `root` and return it."""
    path = resolve_run_dir(root, name)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise EngineError(f"could not create run folder {path}: {e.strerror or e}; check the runs folder and its permissions") from e
    return path


# ---------------------------------------------------------------------------------------------------------
# the one-writer lock

def _read_lock_info(path: Path) -> dict:
    try:
        info = json.loads(read_regular(path, MAX_LOCK_BYTES, what="lock file") or b"{}")
    except (OSError, ValueError, EngineError):
        return {}
    return info if isinstance(info, dict) else {}


class RunLock:
    """Exclusive lock for the one process that writes a run folder.

    `run.lock` records pid, host and start time (for the message a second writer gets); the lock itself is
    `fcntl.flock` on an fd held open until `release()`, so it disappears when the holder dies. Another fd, even
    in the same process, is refused. Context manager: `with RunLock(run_dir): ...`.
    """

    def __init__(self, run_dir, retries: int = 5, retry_wait: float = 0.1):
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_FILE
        self.retries = retries  # a reader's probe (`lock_holder`) holds a shared lock for an instant
        self.retry_wait = retry_wait
        self.fd = None

    @property
    def held(self) -> bool:
        return self.fd is not None

    def acquire(self) -> "RunLock":
        if self.fd is not None:
            return self
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise EngineError(f"could not open lock file {self.path}: {e.strerror or e}; check the run folder's permissions") from e
        for attempt in range(self.retries + 1):
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if attempt < self.retries:
                    time.sleep(self.retry_wait)
                    continue
                os.close(fd)
                info = _read_lock_info(self.path)
                raise EngineError(
                    f"run {self.run_dir} is in use by process {info.get('pid', '?')}"
                    f"{' on ' + info['host'] if info.get('host') and info.get('host') != socket.gethostname() else ''}"
                    f" (started {info.get('started', '?')}); wait for it, or cancel it, then retry")
            except OSError as e:
                os.close(fd)
                raise EngineError(f"could not lock {self.path}: {e.strerror or e}; the run folder must be on a local disk") from e
        info = {"pid": os.getpid(), "host": socket.gethostname(), "started": now_iso(),
                "proc_start": proc_start_time(os.getpid())}
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(info) + "\n").encode(), 0)
            os.fsync(fd)
        except OSError as e:  # a full disk: give the lock back rather than hold it with no holder info
            os.ftruncate(fd, 0)
            os.close(fd)
            raise EngineError(f"could not write {self.path}: {e.strerror or e}; free disk space or fix permissions and retry") from e
        self.fd = fd
        return self

    def release(self) -> None:
        if self.fd is None:
            return
        fd, self.fd = self.fd, None
        try:
            os.ftruncate(fd, 0)  # the file stays (deleting a flock file races with a new opener); empty = free
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()

    def __del__(self):
        try:
            self.release()
        except Exception:
            pass


def lock_holder(run_dir) -> dict | None:
    """The holder's info ({pid, host, started}) if someone holds the run's lock, else None."""
    path = Path(run_dir) / LOCK_FILE
    try:  # never blocks on a FIFO; a lock file the engine wrote is a regular file, anything else holds no lock
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read_lock_info(path) or {"pid": None}
        except OSError:
            return None
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------------------------------------
# run.json

def read_run_json(run_dir) -> dict:
    """run.json as a dict; {} when the run has none yet."""
    path = Path(run_dir) / RUN_JSON
    try:  # a regular file inside the run folder, of a bounded size (engine.fileio.read_regular)
        text = read_regular(path, MAX_RUN_JSON_BYTES, what=RUN_JSON).decode("utf-8")
    except FileNotFoundError:
        return {}
    except OSError as e:
        raise EngineError(f"could not read {path}: {e.strerror or e}; check its permissions") from e
    except UnicodeDecodeError as e:
        raise EngineError(f"{path} is not UTF-8 text ({e.reason} at byte {e.start}); fix it by hand or restore it (it holds "
                          f"the run's settings, which --resume needs)") from e
    try:
        data = json.loads(text)
    except ValueError as e:
        raise EngineError(f"{path} is not valid JSON ({e}); fix it by hand or restore it (it holds the run's settings, "
                          f"which --resume needs)") from e
    if not isinstance(data, dict):
        raise EngineError(f"{path} does not hold a JSON object; fix it by hand or restore it (it holds the run's settings, "
                          f"which --resume needs)")
    return data


def write_run_json(run_dir, **fields) -> dict:
    """Merge `fields` into run.json (atomic write; serialized by a short lock) and return the new content."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(run_dir / ".run.json.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        data = read_run_json(run_dir)
        data.update(fields)
        data["updated"] = now_iso()
        atomic_write_json(run_dir / RUN_JSON, data)
        return data
    finally:
        os.close(fd)


def _versions() -> dict:
    v = {"python": sys.version.split()[0]}
    for mod in ("torch", "tokenizers", "transformers"):
        m = sys.modules.get(mod)
        if m is not None and getattr(m, "__version__", None):
            v[mod] = str(m.__version__)
    return v


def start_run(run_dir, kind: str, config: dict | None = None, **fields) -> dict:
    """Record that this process is (re)starting the run: status running, pid, host, times, versions."""
    prev = read_run_json(run_dir)
    data = dict(kind=kind, status=RUNNING.name, pid=os.getpid(), proc_start=proc_start_time(os.getpid()),
                host=socket.gethostname(), created=prev.get("created") or now_iso(), started=now_iso(),
                ended=None, error=None, versions=_versions(), starts=int(prev.get("starts", 0)) + 1)
    if config is not None:
        data["config"] = config
    data.update(fields)
    return write_run_json(run_dir, **data)


def set_status(run_dir, status: str, error=None) -> dict:
    """Set the run's status (running|finished|failed|cancelled); the end states also stamp `ended`."""
    if status not in STATUSES:
        raise ValueError(f"unknown run status {status!r}; expected one of {STATUSES}")
    fields = {"status": status, "error": None if error is None else " ".join(str(error).split())}
    if status_of(status) is not RUNNING:
        fields["ended"] = now_iso()
    return write_run_json(run_dir, **fields)


RUN_ARTIFACTS = (RUN_JSON, METRICS, EVAL_JSON, CHECKPOINTS)  # what makes a folder hold a run


def holds_run(run_dir) -> bool:
    """True if `run_dir` holds (part of) a run: run.json, metrics.jsonl, eval.json or checkpoints/."""
    run_dir = Path(run_dir)
    return any((run_dir / name).exists() for name in RUN_ARTIFACTS)


def check_run_folder(run_dir, kind: str, config: dict, resume: bool, runtime_fields=()) -> dict:
    """Refuse, before anything is written, a command that would overwrite a run: without `resume` the folder
    must hold no run (of any kind); with `resume` it must hold a `kind` run started with the same `config`
    (keys in `runtime_fields` may differ). Returns the run's run.json ({} for a new run)."""
    run_dir = Path(run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise EngineError(f"--out {run_dir} is a file; give a folder for the run")
    if not resume:
        if holds_run(run_dir):
            what = read_run_json(run_dir).get("kind") if (run_dir / RUN_JSON).exists() else None
            raise EngineError(f"run folder {run_dir} already holds a {what + ' ' if what else ''}run; continue it with --resume "
                              f"(same command), or choose another --out")
        return {}
    info = read_run_json(run_dir) if run_dir.is_dir() else {}
    if not info:
        where = "does not exist" if not run_dir.exists() else "holds no run (no run.json)"
        raise EngineError(f"cannot resume: {run_dir} {where}; start a new run without --resume")
    if info.get("kind") != kind:
        raise EngineError(f"cannot resume: {run_dir} is a {info.get('kind') or 'unknown'} run, not a {kind} run; choose another --out")
    saved = info.get("config")
    if not isinstance(saved, dict):
        raise EngineError(f"cannot resume: {run_dir}/{RUN_JSON} does not record the run's settings; start a new run into another --out")
    for k in sorted(saved):  # a setting added since the run started is not in `saved`: it has its default there
        if k in runtime_fields or k not in config:
            continue
        if saved[k] != config[k]:
            raise EngineError(f"the run was started with {k}={saved.get(k)!r} but this resume asks for {config.get(k)!r}; "
                              f"--resume continues with the run's own settings, drop that flag or use another --out")
    return info


class RunCancelled(KeyboardInterrupt):
    """Raised in the writer's main thread when it receives SIGTERM (the studio's Cancel)."""


class Run:
    """One writer's session on a run folder: lock, run.json lifecycle, metrics.

    ```
    with Run(run_dir, kind="pretrain", config=cfg_dict, total_steps=1000) as run:
        ...; run.log({"step": step, "loss": loss})
    ```
    Entering acquires `RunLock` (EngineError if another live process holds it), then writes status running.
    Leaving sets finished / failed (with the error line) / cancelled (Ctrl-C or SIGTERM), then releases the
    lock. While inside (main thread only), SIGTERM raises `RunCancelled` so the loop unwinds cleanly.
    """

    def __init__(self, run_dir, kind: str, config: dict | None = None, handle_sigterm: bool = True, trackers=None,
                 **fields):
        self.dir = Path(run_dir)
        self.kind, self.config, self.fields = kind, config, fields
        self.trackers = trackers  # engine.trackers.Trackers: each record logged goes there too (never raises)
        self.lock = RunLock(self.dir)
        self.handle_sigterm = handle_sigterm
        self._old_handler = None

    def __enter__(self) -> "Run":
        self.lock.acquire()
        try:
            start_run(self.dir, self.kind, self.config, **self.fields)
        except BaseException:
            self.lock.release()
            raise
        if self.handle_sigterm:
            import signal
            import threading
            if threading.current_thread() is threading.main_thread():
                def on_term(signum, frame):
                    raise RunCancelled("cancelled (SIGTERM)")
                self._old_handler = signal.signal(signal.SIGTERM, on_term)
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._old_handler is not None:
            import signal
            signal.signal(signal.SIGTERM, self._old_handler)
            self._old_handler = None
        try:
            if exc_type is None:
                set_status(self.dir, FINISHED.name)
            elif issubclass(exc_type, KeyboardInterrupt):
                set_status(self.dir, CANCELLED.name, error="cancelled by the user")
            elif as_engine_error(exc) is not None:  # a user error, out of memory, a full disk: its one line
                set_status(self.dir, FAILED.name, error=str(as_engine_error(exc)))
            else:
                set_status(self.dir, FAILED.name, error=f"{exc_type.__name__}: {exc}")
        finally:
            if self.trackers is not None:
                self.trackers.close(FINISHED.name if exc_type is None else CANCELLED.name
                                    if issubclass(exc_type, KeyboardInterrupt) else FAILED.name)
            self.lock.release()

    def log(self, record: dict) -> None:
        append_metrics(self.dir, record)
        if self.trackers is not None:
            self.trackers.log_metrics(record)

    def set(self, **fields) -> dict:
        return write_run_json(self.dir, **fields)


# ---------------------------------------------------------------------------------------------------------
# metrics.jsonl

def append_metrics(run_dir, record: dict) -> None:
    """Append one JSON line, flush and fsync. A torn last line (from a crash) is cut off first."""
    path = Path(run_dir) / METRICS
    line = (json.dumps(record, default=float) + "\n").encode("utf-8")
    try:
        with open(path, "a+b") as f:
            size = f.seek(0, os.SEEK_END)
            if size:
                f.seek(size - 1)
                if f.read(1) != b"\n":
                    f.truncate(_last_newline_end(f, size))
            f.write(line)
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        raise EngineError(f"could not append to {path}: {e.strerror or e}; free disk space or fix permissions") from e


def _last_newline_end(f, size: int) -> int:
    """Offset just after the last b'\\n' in the first `size` bytes of `f` (0 when there is none)."""
    pos = size
    while pos > 0:
        start = max(0, pos - 65536)
        f.seek(start)
        chunk = f.read(pos - start)
        i = chunk.rfind(b"\n")
        if i >= 0:
            return start + i + 1
        pos = start
    return 0


def _parse_line(raw: bytes) -> dict | None:
    """One metrics.jsonl line as a record, or None (blank, torn, not an object, a step that is not a number)."""
    rec = _loads(raw)
    return None if rec is None else _clean(rec)


def _loads(raw: bytes) -> dict | None:
    """The JSON object of a line whose step (if any) is a number, as written; None for anything else."""
    try:
        rec = json.loads(raw)
    except ValueError:
        return None  # a torn line (only ever the last one, unless the file was edited by hand), or a blank one
    if type(rec) is not dict or type(rec.get("step", 0)) not in (int, float):
        return None
    return rec


def _clean(rec: dict) -> dict:
    """A value of the wrong type (a file edited by hand) is dropped, not handed to a chart or a format; the keys
    are interned, so thousands of records share one copy of each field name."""
    out = {}
    for k, v in rec.items():
        t = type(v)
        if t is float or t is int or (t is str and k in METRICS_LABELS):
            out[sys.intern(k)] = v
    return out


def _parse_lines(data: bytes) -> list[dict]:
    return [r for r in map(_parse_line, data.split(b"\n")) if r is not None]


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _complete_lines(f, max_line: int = MAX_METRICS_LINE):
    """The complete lines of a binary file, one at a time: a line longer than `max_line` is skipped a piece at a
    time (never held whole), and a last line without its newline is left out (it may still be being written)."""
    while True:
        raw = f.readline(max_line)
        if raw.endswith(b"\n"):
            yield raw
            continue
        if len(raw) < max_line:
            return  # the end of the file (after a torn or unfinished line, or none)
        while len(raw) == max_line and not raw.endswith(b"\n"):
            raw = f.readline(max_line)  # the rest of a line too long to be a record


class _Series:
    """Records of one shape (the same fields: training steps, held-out evaluations, epoch ends), down-sampled
    evenly while they stream by: every `stride`-th is kept, and when more than `cap` are kept every other one
    goes and the stride doubles. The last record is always kept."""
    __slots__ = ("stride", "seen", "kept", "last")

    def __init__(self):
        self.stride, self.seen, self.kept, self.last = 1, 0, [], None

    def add(self, i: int, rec: dict, cap: int) -> None:
        """`rec` as json.loads gave it: only a record that is kept is cleaned (`_clean`), the costly part."""
        if self.seen % self.stride == 0:
            rec = _clean(rec)
            self.kept.append((i, rec))
            if len(self.kept) > cap:
                self.kept = self.kept[::2]
                self.stride *= 2
        self.seen += 1
        self.last = (i, rec)

    def rows(self, cap: int) -> list:
        kept = self.kept
        if self.last is not None and (not kept or kept[-1][0] != self.last[0]):
            last = (self.last[0], _clean(self.last[1]))
            if len(kept) >= cap:
                kept[-1] = last
            else:
                kept.append(last)
        return kept


def read_metrics(run_dir, max_rows: int | None = MAX_METRICS_ROWS, root=None) -> list[dict]:
    """The complete records of metrics.jsonl, in file order ([] if none, or if it is not a regular file inside
    `root`, default the run folder: engine.fileio.open_regular); a partial trailing line is ignored.

    Streamed a line at a time, so memory follows what is returned, not the file: each series of records (records
    with the same fields: training steps, held-out evaluations, fine-tuning's epoch ends) keeps at most `max_rows`
    records, down-sampled evenly with its last record always kept (None: every record). A run logs a few hundred
    to a few thousand records, which all come back; a rare series (evaluations) is never thinned by a frequent one."""
    if max_rows is not None and max_rows < 2:
        raise ValueError(f"max_rows must be at least 2 (or None), got {max_rows}")
    path = Path(run_dir) / METRICS
    try:
        f = open_regular(path, root)
    except (OSError, EngineError):  # missing, unreadable, a FIFO, a device, a symlink out of the folder
        return []
    out, series, overflow = [], {}, None
    with f:
        for i, raw in enumerate(_complete_lines(f)):
            rec = _loads(raw)
            if rec is None:
                continue
            if max_rows is None:
                out.append(_clean(rec))
                continue
            key = tuple(rec)
            s = series.get(key)
            if s is None:
                if len(series) < _MAX_SERIES:
                    s = series[key] = _Series()
                else:  # a file with many shapes of record (edited by hand): the rest share one series
                    s = overflow = overflow or _Series()
            s.add(i, rec, max_rows)
    if max_rows is None:
        return out
    rows = [pair for s in [*series.values(), *([overflow] if overflow else [])] for pair in s.rows(max_rows)]
    return [rec for _, rec in sorted(rows, key=lambda pair: pair[0])]


def last_metrics(run_dir, max_bytes: int = 65536) -> dict | None:
    """The last complete record, reading only the end of the file (cheap to poll); None when there is none or the
    file is not a regular file inside the run folder."""
    path = Path(run_dir) / METRICS
    try:
        data = tail_regular(path, max_bytes)
    except (OSError, EngineError):
        return None
    recs = _parse_lines(data[:data.rfind(b"\n") + 1])
    return recs[-1] if recs else None


def truncate_metrics(run_dir, after_step: int) -> int:
    """Keep only records with step <= after_step (records without a step are kept); returns how many remain.
    The file is streamed into its replacement (engine.fileio.atomic_save_with), never held whole."""
    path = Path(run_dir) / METRICS
    if not path.exists():
        return 0
    kept = 0

    def save(tmp):
        nonlocal kept
        with open_regular(path) as src, open(tmp, "wb") as dst:
            for raw in _complete_lines(src):
                rec = _parse_line(raw)
                if rec is None or (isinstance(rec.get("step"), (int, float)) and rec["step"] > after_step):
                    continue
                dst.write((json.dumps(rec, default=float) + "\n").encode("utf-8"))
                kept += 1
    atomic_save_with(path, save)
    return kept


# ---------------------------------------------------------------------------------------------------------
# checkpoints

def checkpoint_step(path) -> int | None:
    """N for a folder named step-N, else None."""
    m = _STEP_DIR_RE.fullmatch(Path(path).name)
    return int(m.group(1)) if m else None


def list_checkpoints(run_dir) -> list[Path]:
    """Complete checkpoints (step-N folders holding the COMPLETE marker), sorted by step ascending."""
    ckdir = Path(run_dir) / CHECKPOINTS
    try:
        entries = list(ckdir.iterdir())
    except OSError:
        return []
    found = []
    for p in entries:
        step = checkpoint_step(p)
        if step is not None and p.is_dir() and (p / COMPLETE).is_file():
            found.append((step, p))
    return [p for _, p in sorted(found)]


def latest_checkpoint(run_dir) -> Path | None:
    ckpts = list_checkpoints(run_dir)
    return ckpts[-1] if ckpts else None


def mark_complete(ckpt_dir, **info) -> None:
    """Write the COMPLETE marker (call last, after every other file of the checkpoint is written)."""
    atomic_write_json(Path(ckpt_dir) / COMPLETE, {"completed": now_iso(), **info})


def new_checkpoint_dir(run_dir, step: int) -> Path:
    """A fresh, empty `checkpoints/.tmp-step-N` to write a checkpoint into (a stale one is removed first)."""
    tmp = Path(run_dir) / CHECKPOINTS / f".tmp-step-{int(step)}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    return tmp


def publish_checkpoint(tmp_dir, final_dir=None) -> Path:
    """Write COMPLETE into `tmp_dir`, then rename it to `final_dir` (default: `step-N` beside it)."""
    tmp_dir = Path(tmp_dir)
    if final_dir is None:
        if not tmp_dir.name.startswith(".tmp-"):
            raise ValueError(f"cannot infer the checkpoint name from {tmp_dir}; pass final_dir")
        final_dir = tmp_dir.with_name(tmp_dir.name[len(".tmp-"):])
    final_dir = Path(final_dir)
    mark_complete(tmp_dir, step=checkpoint_step(final_dir))
    atomic_publish_dir(tmp_dir, final_dir)
    return final_dir


def prune_checkpoints(run_dir, keep_last: int) -> list[Path]:
    """Delete all but the newest `keep_last` complete checkpoints (marker first, so none looks complete half-deleted)."""
    ckpts = list_checkpoints(run_dir)
    doomed = ckpts[:-keep_last] if keep_last > 0 else ckpts
    for p in doomed:
        (p / COMPLETE).unlink(missing_ok=True)
        shutil.rmtree(p, ignore_errors=True)
    return doomed


# ---------------------------------------------------------------------------------------------------------
# status and the index

def effective_status(run_dir, info: dict | None = None) -> str:
    """run.json's status, except a `running` run whose writer is gone is `dead` (interrupted; resumable)."""
    run_dir = Path(run_dir)
    info = read_run_json(run_dir) if info is None else info
    status = info.get("status") or "unknown"
    if status_of(status) is not RUNNING:
        return status
    host = info.get("host")
    if host and host != socket.gethostname():
        return RUNNING.name  # another machine's process: we cannot look at it
    if alive_writer(run_dir, info):
        return RUNNING.name
    # the writer may have just finished: trust a status written after our first read
    try:
        again = read_run_json(run_dir)
    except EngineError:
        return DEAD.name
    return DEAD.name if status_of(again.get("status")) is RUNNING else (again.get("status") or "unknown")


def alive_writer(run_dir, info: dict) -> bool:
    """True only when a live writer is proved: the run's flock is held (the kernel drops it when its holder dies),
    or, for a run without a lock file, run.json's pid is alive with the same kernel start time. A bare pid (no
    start time) proves nothing: it may have been reused by any process."""
    if (Path(run_dir) / LOCK_FILE).exists():
        return lock_holder(run_dir) is not None
    pid, start = info.get("pid"), info.get("proc_start")
    return bool(pid) and start is not None and pid_alive(pid, start)


def run_writer_pid(run_dir) -> int | None:
    """The pid of the process provably writing the run (it holds the run's lock and its recorded start time
    matches the live process), else None. Only this pid may be signalled: never a bare pid read from a file."""
    holder = lock_holder(run_dir)
    if not holder:
        return None
    pid, start = holder.get("pid"), holder.get("proc_start")
    if not isinstance(pid, int) or pid <= 1 or start is None or not pid_alive(pid, start):
        return None
    return pid


def run_progress(run_dir, info: dict | None = None) -> dict:
    """{step, total, fraction}: the last logged step over run.json's total_steps (fraction None if unknown)."""
    if info is None:
        try:
            info = read_run_json(run_dir)
        except EngineError:
            info = {}
    last = last_metrics(run_dir) or {}
    step = last.get("step")
    total = info.get("total_steps") or None
    frac = None
    if isinstance(step, (int, float)) and total:
        frac = max(0.0, min(1.0, step / total))
    if status_of(info.get("status")) is FINISHED:
        frac = 1.0
    return {"step": step, "total": total, "fraction": frac}


def list_runs(root=None) -> list[dict]:
    """Runs under `root` (default runs_root()) as dicts, newest first:
    name, kind, status, effective_status, step, total_steps, checkpoint_step, created, error, path."""
    root = Path(root) if root is not None else runs_root()
    try:
        entries = list(root.iterdir())
    except OSError:
        return []
    rows = []
    for d in entries:
        if d.name.startswith(".") or not d.is_dir() or not (d / RUN_JSON).is_file():
            continue
        try:
            info = read_run_json(d)
            eff = effective_status(d, info)
        except EngineError as e:
            info, eff = {"error": str(e)}, UNREADABLE.name
        prog = run_progress(d, info)
        ck = latest_checkpoint(d)
        created = info.get("created")
        ts = _iso_ts(created)
        if ts is None:
            try:
                ts = (d / RUN_JSON).stat().st_mtime
            except OSError:
                ts = 0.0
        rows.append({"name": d.name, "kind": info.get("kind"), "status": info.get("status"),
                     "effective_status": eff, "step": prog["step"], "total_steps": prog["total"],
                     "checkpoint_step": checkpoint_step(ck) if ck else None, "created": created,
                     "error": info.get("error"), "path": str(d), "_ts": ts})
    rows.sort(key=lambda r: (r["_ts"], r["name"]), reverse=True)
    for r in rows:
        del r["_ts"]
    return rows
