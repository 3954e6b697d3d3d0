"""Fault injection on the job queue, the task-file reader and fine-tuning's run folder: a queue file that tries to
run a command of its own, task files that expand past memory or hold binary, and a fine-tune that failed before
training and is started again with the fix. Each test here is a row of RELIABILITY.md."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine import jobs as jobs_mod
from engine.errors import EngineError
from engine.jobs import TERMINAL, Jobs

REPO = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------ the queue file is never a command
def _job(root: Path, jid: str, argv, **kw) -> dict:
    rec = {"id": jid, "name": jid, "argv": argv, "status": "queued", "pid": None, "pgid": None, "proc_start": None,
           "created": "x", "started": None, "ended": None, "returncode": None, "error": None,
           "log": str(root / f"{jid}.log"), "log_offset": 0, "run_dir": None, "cancel_requested": False}
    rec.update(kw)
    return rec


def _write_queue(root: Path, *jobs, mode=0o600) -> Path:
    path = root / ".jobs" / "queue.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"version": 1, "jobs": list(jobs)}))
    os.chmod(path, mode)
    return path


def _pwn(marker: Path) -> list:
    return [sys.executable, "-c", f"open({str(marker)!r}, 'w').write('pwned')"]


def _wait_terminal(root: Path, jid: str, timeout=60.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = Jobs(root).get(jid)
        if job and job["status"] in TERMINAL:
            return job
        time.sleep(0.1)
    raise AssertionError(f"job {jid} did not end")


def _open_jobs_page(root: Path):
    from streamlit.testing.v1 import AppTest
    at = AppTest.from_file(str(REPO / "pages" / "8_Jobs.py"), default_timeout=60)
    at.session_state["runs_root"] = str(root)
    return at.run()


@pytest.mark.slow
@pytest.mark.parametrize("how", ["refresh", "cli", "page"])
def test_a_cmd_field_in_the_queue_file_is_never_run(tmp_path, how):
    """A queued job whose record carries a `cmd` (a shell-free command of the writer's choice): refreshing the
    queue, `python -m engine.jobs list` and merely opening the Jobs page run `python -m engine ARGV` only."""
    root, marker = tmp_path / "runs", tmp_path / "pwned"
    _write_queue(root, _job(root, "evil", ["pretrain", "--no-such-flag"], cmd=_pwn(marker)))
    if how == "refresh":
        Jobs(root).refresh()
    elif how == "cli":
        r = subprocess.run([sys.executable, "-m", "engine.jobs", "list", "--root", str(root)], cwd=REPO,
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
    else:
        at = _open_jobs_page(root)
        assert not at.exception, at.exception
    job = _wait_terminal(root, "evil")
    assert not marker.exists()
    assert job["status"] == "failed" and job["error"].startswith("error:")  # the engine's own one line
    assert "$ python -m engine pretrain --no-such-flag" in Path(job["log"]).read_text().splitlines()[0]


@pytest.mark.slow
@pytest.mark.parametrize("argv", [None, "pretrain", [], ["pretrain", 3], ["no-such-command"], "PWN"])
def test_a_queued_job_that_is_not_an_engine_command_is_refused_unstarted(tmp_path, argv):
    root, marker = tmp_path / "runs", tmp_path / "pwned"
    argv = _pwn(marker) if argv == "PWN" else argv  # the layout the old test hook wrote: a whole command as argv
    _write_queue(root, _job(root, "bad", argv), _job(root, "next", ["bench", "--no-such-flag"]))
    Jobs(root).refresh()
    job = Jobs(root).get("bad")
    assert job["status"] == "failed" and job["pid"] is None and "refused to run this job" in job["error"]
    assert "\n" not in job["error"]
    assert _wait_terminal(root, "next")["pid"] is not None  # the queue goes on with the next job
    assert not marker.exists()
    with pytest.raises(EngineError, match="refused|not an engine command|list of arguments|string"):
        Jobs(root).retry("bad")


def test_the_runner_checks_the_argv_again(tmp_path, monkeypatch):
    """The queue file changed between the launch and the runner's read: the runner runs nothing it may not."""
    root, marker = tmp_path / "runs", tmp_path / "pwned"
    _write_queue(root, _job(root, "late", _pwn(marker), cmd=_pwn(marker), status="running", pid=os.getpid()))
    monkeypatch.setattr(jobs_mod.signal, "signal", lambda *a: None)  # in-process: leave pytest's handlers alone
    assert jobs_mod._run_job(str(root), "late", 1) == 0
    job = Jobs(root).get("late")
    assert job["status"] == "failed" and "refused to run this job" in job["error"] and job.get("child_pid") is None
    assert not marker.exists()


def _refused(root: Path, queue: Path, before: bytes, marker: Path) -> None:
    """Every way into the queue refuses the file with one line; the file stays as it is and nothing runs."""
    for call in (lambda: Jobs(root).refresh(), lambda: Jobs(root).list_jobs(), lambda: Jobs(root).get("evil"),
                 lambda: Jobs(root).submit(["pretrain", "--out", str(root / "x")])):
        with pytest.raises(EngineError, match="refusing the job queue") as e:
            call()
        assert "\n" not in str(e.value) and str(queue) in str(e.value)
    assert queue.read_bytes() == before and sorted(p.name for p in queue.parent.iterdir() if p.name.startswith("queue.json")) == ["queue.json"]
    time.sleep(0.3)
    assert not marker.exists()


@pytest.mark.slow
@pytest.mark.parametrize("mode", [0o666, 0o620, 0o602])
def test_a_queue_file_others_may_write_is_refused(tmp_path, mode):
    root, marker = tmp_path / "runs", tmp_path / "pwned"
    queue = _write_queue(root, _job(root, "evil", ["pretrain", "--no-such-flag"], cmd=_pwn(marker)), mode=mode)
    before = queue.read_bytes()
    _refused(root, queue, before, marker)
    r = subprocess.run([sys.executable, "-m", "engine.jobs", "list", "--root", str(root)], cwd=REPO,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.startswith("error: refusing the job queue") and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    at = _open_jobs_page(root)
    assert not at.exception, at.exception
    assert [e.value for e in at.error] and all("refusing the job queue" in e.value for e in at.error)
    assert not [i for i in at.info if "No jobs yet" in i.value]
    assert queue.read_bytes() == before and not marker.exists()


def test_a_queue_file_of_another_user_is_refused(tmp_path, monkeypatch):
    root, marker = tmp_path / "runs", tmp_path / "pwned"
    queue = _write_queue(root, _job(root, "evil", ["pretrain", "--no-such-flag"], cmd=_pwn(marker)))
    before = queue.read_bytes()
    if os.geteuid() == 0:
        os.chown(queue, 65534, 65534)  # a real other owner
    else:
        monkeypatch.setattr(jobs_mod.os, "geteuid", lambda: os.getuid() + 1)
    _refused(root, queue, before, marker)
    if os.geteuid() == 0:
        with pytest.raises(EngineError, match="belongs to user id 65534"):
            Jobs(root).refresh()
