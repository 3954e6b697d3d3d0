"""Fault injection on the job queue, round 4: nothing in a runs folder names a path outside it, and a damaged
queue file loses only its damaged records.

- A job record's `log` field is never read: a job's log is derived from its id (`<runs>/.jobs/logs/<id>.log`) or
  from its run folder (`<run_dir>/job.log`), and a run folder must resolve (symlinks resolved) inside the runs
  folder. Logs are opened without following symlinks, regular files only, and read bounded.
- An error line never echoes a user's argument unquoted: the corpus name is shell-quoted.
- Damaged records (not objects, no status or name, a bad id, a run folder that is not a path inside the runs folder)
  are set aside into `queue.json.bad-*` with one warning line; the good jobs go on, and new jobs can be submitted.
Each test here is a row of RELIABILITY.md."""
import json
import os
import shlex
import subprocess
import time
from pathlib import Path

import pytest

from engine import jobs as jobs_mod
from engine.errors import EngineError
from engine.jobs import TERMINAL, Jobs

REPO = Path(__file__).resolve().parents[2]
EVIL_CORPUS = "x' ; touch {marker} ; echo '"


def _job(jid: str, argv, **kw) -> dict:
    rec = {"id": jid, "name": jid, "argv": argv, "status": "queued", "pid": None, "pgid": None, "proc_start": None,
           "created": "x", "started": None, "ended": None, "returncode": None, "error": None,
           "log": None, "log_offset": 0, "run_dir": None, "cancel_requested": False}
    rec.update(kw)
    return rec


def _write_queue(root: Path, *jobs) -> Path:
    path = root / ".jobs" / "queue.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"version": 1, "jobs": list(jobs)}))
    os.chmod(path, 0o600)
    return path


def _wait_terminal(q: Jobs, jid: str, timeout=60.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = q.get(jid)
        if job and job["status"] in TERMINAL:
            return job
        time.sleep(0.1)
    raise AssertionError(f"job {jid} did not end")


def _bad_files(root: Path) -> list:
    return sorted((root / ".jobs").glob("queue.json.bad-*"))


# ------------------------------------------------------------------ 1. a job's log is derived, never read from the file
@pytest.mark.slow
@pytest.mark.parametrize("target", ["file", "dev-zero"])
def test_a_planted_log_outside_the_runs_folder_is_never_written(tmp_path, fake_engine, target):
    """A queued job whose `log` names a shell start-up file outside the runs folder (or /dev/zero): its output goes
    to the log derived from its id inside the runs folder; the outside file is untouched."""
    root = tmp_path / "runs"
    if target == "file":
        outside = tmp_path / "home" / ".bashrc"
        outside.parent.mkdir()
        outside.write_text("export PS1='$ '\n")
        planted = str(outside)
    else:
        outside, planted = None, "/dev/zero"
    _write_queue(root, _job("planted", fake_engine.py("print('hello from the job')"), log=planted))
    q = Jobs(root, repo_root=fake_engine.repo)
    q.refresh()
    job = _wait_terminal(q, "planted")
    derived = root / ".jobs" / "logs" / "planted.log"
    assert Path(job["log"]) == derived  # checked before any tail is read (a tail of /dev/zero never ends)
    assert job["status"] == "finished", job
    assert "hello from the job" in derived.read_text()
    assert "hello from the job" in q.tail_log("planted")
    if outside is not None:
        assert outside.read_text() == "export PS1='$ '\n"


def test_tail_log_never_reads_outside_the_runs_folder(tmp_path):
    """A finished job whose `log` names a secret outside the runs folder, one whose run folder's job.log is a symlink
    to it, and one whose derived log is a FIFO: the tail shows none of the secret, and never blocks."""
    root = tmp_path / "runs"
    secret = tmp_path / "shadow"
    secret.write_text("root:$6$secret-hash:19000:0:99999:7:::\n")
    run_dir = root / "linked"
    run_dir.mkdir(parents=True)
    (run_dir / "job.log").symlink_to(secret)
    (root / ".jobs" / "logs").mkdir(parents=True)
    os.mkfifo(root / ".jobs" / "logs" / "fifo.log")
    _write_queue(root,
                 _job("planted", ["pretrain"], status="finished", log=str(secret)),
                 _job("linked", ["pretrain"], status="finished", log=str(run_dir / "job.log"), run_dir=str(run_dir)),
                 _job("fifo", ["pretrain"], status="finished"),
                 _job("zero", ["pretrain"], status="failed", log="/dev/zero"))
    q = Jobs(root)
    for jid in ("planted", "linked", "fifo", "zero"):
        assert "secret-hash" not in q.tail_log(jid)
        assert "secret-hash" not in (q._error_line(q.get(jid)) or "")
    assert q.get("planted")["log"] == str(root / ".jobs" / "logs" / "planted.log")
    assert _bad_files(root) == []  # those records are sound: only their log field was ignored


def test_a_launch_never_writes_through_a_symlinked_log(tmp_path, fake_engine):
    """The derived log itself a symlink to a file outside the runs folder: the job fails to start with one line, the
    outside file stays as it was."""
    root = tmp_path / "runs"
    outside = tmp_path / "profile"
    outside.write_text("# mine\n")
    (root / ".jobs" / "logs").mkdir(parents=True)
    (root / ".jobs" / "logs" / "sym.log").symlink_to(outside)
    _write_queue(root, _job("sym", fake_engine.py("print('x')")))
    q = Jobs(root, repo_root=fake_engine.repo)
    q.refresh()
    job = q.get("sym")
    assert job["status"] == "failed" and job["pid"] is None and "could not open the job log" in job["error"]
    assert "\n" not in job["error"]
    assert outside.read_text() == "# mine\n"


def test_a_run_folder_outside_the_runs_folder_is_refused_on_submit(tmp_path, fake_engine):
    q = Jobs(tmp_path / "runs", repo_root=fake_engine.repo)
    with pytest.raises(EngineError, match="outside the runs folder"):
        q.submit(fake_engine.py("print(1)"), run_dir=tmp_path / "elsewhere")
    with pytest.raises(EngineError, match="outside the runs folder"):
        q.submit(["pretrain", "--out", str(tmp_path / "runs" / ".." / "up")])
    assert q.list_jobs() == []


# ------------------------------------------------------------------ 1b. error lines quote the user's arguments
def _assert_quoted(line: str, name: str) -> None:
    tokens = shlex.split(line)
    assert name in tokens, (line, tokens)  # one token, as the user typed it
    assert ";" not in tokens and "touch" not in tokens, tokens


@pytest.mark.parametrize("loader", ["load_corpus", "corpus_files"])
def test_a_corpus_name_is_shell_quoted_in_its_error_line(tmp_path, loader):
    from engine import corpora
    marker = tmp_path / "PWN"
    name = EVIL_CORPUS.format(marker=marker)
    with pytest.raises(EngineError, match="not found") as e:
        getattr(corpora, loader)(name)
    line = f"error: {e.value}"
    assert "\n" not in line
    _assert_quoted(line, name)
    subprocess.run(["bash", "-c", line], cwd=tmp_path, capture_output=True, timeout=30)
    assert not marker.exists()  # the line run as a shell command runs no command of the name's


def test_other_error_lines_quote_what_the_user_typed(tmp_path):
    """The same quoting wherever an error line echoes a typed path: a run folder that does not exist (the Probe and
    Attention pages' checkpoint list) and a one-document corpus for NSP."""
    from engine import probes
    from engine.pretraining.config import PretrainConfig
    from engine.pretraining.run import pretrain
    marker = tmp_path / "PWN"
    name = EVIL_CORPUS.format(marker=marker)
    with pytest.raises(EngineError, match="does not exist") as e:
        probes.checkpoint_steps(str(tmp_path / name))
    _assert_quoted(f"error: {e.value}", str(tmp_path / name))
    one = tmp_path / name
    one.parent.mkdir(parents=True, exist_ok=True)
    one.write_text("one document only . it has two sentences .\n", encoding="utf-8")
    with pytest.raises(EngineError, match="single document") as e:
        pretrain(PretrainConfig.classroom(corpus=str(one), out=str(tmp_path / "runs" / "x"), steps=1, quiet=True))
    _assert_quoted(f"error: {e.value}", str(one))
    subprocess.run(["bash", "-c", f"error: {e.value}"], cwd=tmp_path, capture_output=True, timeout=30)
    assert not marker.exists()


def test_a_plain_corpus_name_still_reads_as_before(tmp_path):
    from engine import corpora
    with pytest.raises(EngineError, match=r"corpus 'nope' not found"):
        corpora.load_corpus("nope")


@pytest.mark.slow
def test_a_malicious_corpus_through_the_queue_writes_a_quoted_line_to_the_derived_log(tmp_path):
    """The issue's exploit, end to end on the real engine: a planted job whose corpus name is a shell command and
    whose log is a shell start-up file. The start-up file is untouched; the derived log's error line is quoted."""
    root = tmp_path / "runs"
    marker = tmp_path / "PWN"
    bashrc = tmp_path / "home" / ".bashrc"
    bashrc.parent.mkdir()
    bashrc.write_text("# start-up\n")
    name = EVIL_CORPUS.format(marker=marker)
    _write_queue(root, _job("evil", ["pretrain", "--corpus", name, "--out", str(root / "evil")], log=str(bashrc),
                            run_dir=str(root / "evil")))
    q = Jobs(root)
    q.refresh()
    job = _wait_terminal(q, "evil", timeout=120)
    assert job["status"] == "failed" and job["error"].startswith("error: corpus")
    assert Path(job["log"]) == root / "evil" / "job.log"
    assert bashrc.read_text() == "# start-up\n"
    _assert_quoted(job["error"], name)
    err_lines = [ln for ln in Path(job["log"]).read_text().splitlines() if ln.startswith("error:")]
    assert err_lines and all(name in shlex.split(ln) for ln in err_lines)
    assert not marker.exists()


# ------------------------------------------------------------------ 2. a damaged queue loses only its damaged records
DAMAGED = {
    "not-objects": [1, "x", None],
    "no-status": [{"id": "nostatus", "name": "n", "argv": ["pretrain"]}],
    "no-name": [{"id": "noname", "status": "finished", "argv": ["pretrain"]}],
    "run-dir-number": [{"id": "rd5", "name": "n", "status": "finished", "argv": ["pretrain"], "run_dir": 5}],
    "run-dir-up": [{"id": "rdup", "name": "n", "status": "finished", "argv": ["pretrain"], "run_dir": "../../etc"}],
    "run-dir-outside": [{"id": "rdout", "name": "n", "status": "failed", "argv": ["pretrain"], "run_dir": "/etc"}],
    "bad-id": [{"id": "../../x", "name": "n", "status": "finished", "argv": ["pretrain"]}],
    "bad-types": [{"id": "types", "name": "n", "status": "running", "argv": ["pretrain"], "pid": "12", "pgid": 0}],
    "unknown-status": [{"id": "st", "name": "n", "status": "done", "argv": ["pretrain"]}],
    "duplicate-id": [{"id": "good", "name": "again", "status": "finished", "argv": ["pretrain"]}],
}


def _damaged_queue(root: Path, kind: str) -> Path:
    good = _job("good", ["pretrain", "--corpus", "bbc"], status="finished", returncode=0)
    return _write_queue(root, good, *DAMAGED[kind])


def _list(root: Path, capsys) -> tuple:
    assert jobs_mod.main(["list", "--root", str(root)]) == 0
    return capsys.readouterr()


@pytest.mark.parametrize("kind", sorted(DAMAGED))
def test_a_damaged_queue_record_is_set_aside_and_the_rest_goes_on(tmp_path, capsys, kind):
    """`python -m engine.jobs list` (in process) on a queue holding a damaged record: exit 0, one warning line naming
    the `.bad-*` file that now holds the record as it was, the good job listed, the queue file left with it alone."""
    root = tmp_path / "runs"
    queue = _damaged_queue(root, kind)
    # lock-free reads skip the damaged records (nothing is moved without the lock)
    assert [j["id"] for j in Jobs(root).list_jobs()] == ["good"]
    assert Jobs(root).get("good")["status"] == "finished"
    out, err = _list(root, capsys)
    assert out.split()[0] == "good" and "Traceback" not in err
    lines = err.strip().splitlines()
    bad = _bad_files(root)
    assert len(lines) == 1 and lines[0].startswith("warning: ") and len(bad) == 1 and str(bad[0]) in lines[0], err
    assert "the other jobs go on" in lines[0]
    kept = json.loads(bad[0].read_text())
    assert kept["jobs"] == DAMAGED[kind]  # the damaged records, as they were
    assert [j["id"] for j in json.loads(queue.read_text())["jobs"]] == ["good"]
    out, err = _list(root, capsys)  # said once: the next listing has nothing more to say
    assert err == "" and out.split()[0] == "good" and len(_bad_files(root)) == 1


@pytest.mark.slow
def test_a_new_job_runs_after_a_damaged_queue(tmp_path, fake_engine, capsys):
    """Nothing has to be fixed by hand: the first submit on a damaged queue sets the damage aside and runs."""
    root = tmp_path / "runs"
    _write_queue(root, _job("good", ["pretrain"], status="finished", returncode=0), 1, "x", None,
                 *DAMAGED["no-status"], *DAMAGED["run-dir-up"])
    q = Jobs(root, repo_root=fake_engine.repo)
    rec = q.submit(fake_engine.py("print('after')"), name="after")
    assert len(q.notices) == 1 and "set aside 5 damaged job records" in q.notices[0]
    assert _wait_terminal(q, rec["id"])["status"] == "finished" and "after" in q.tail_log(rec["id"])
    out, err = _list(root, capsys)
    assert err == "" and [ln.split()[0] for ln in out.splitlines()] == [rec["id"], "good"]
    assert len(json.loads(_bad_files(root)[0].read_text())["jobs"]) == 5


def test_a_run_folder_symlinked_outside_is_set_aside(tmp_path):
    root = tmp_path / "runs"
    (tmp_path / "etc").mkdir()
    root.mkdir()
    (root / "sneaky").symlink_to(tmp_path / "etc")
    good = _job("good", ["pretrain"], status="finished")
    sneaky = _job("sneaky", ["pretrain"], status="running", run_dir=str(root / "sneaky"), pid=1, pgid=1)
    _write_queue(root, good, sneaky)
    assert [j["id"] for j in Jobs(root).refresh()] == ["good"]
    assert json.loads(_bad_files(root)[0].read_text())["jobs"] == [sneaky]
    assert not (tmp_path / "etc" / "run.json").exists()  # the reaper never wrote a run.json there


@pytest.mark.parametrize("kind", ["fifo", "symlink"])
def test_a_queue_file_that_is_not_a_regular_file_is_set_aside_unread(tmp_path, kind):
    """queue.json a FIFO (a read would block forever) or a symlink to a file outside the runs folder: never read;
    the next locked read sets it aside with one line and starts a new queue."""
    root = tmp_path / "runs"
    queue = root / ".jobs" / "queue.json"
    queue.parent.mkdir(parents=True)
    outside = tmp_path / "elsewhere.json"
    outside.write_text(json.dumps({"version": 1, "jobs": [_job("far", ["pretrain"], status="finished")]}))
    os.chmod(outside, 0o600)
    os.mkfifo(queue, 0o600) if kind == "fifo" else queue.symlink_to(outside)
    assert Jobs(root).list_jobs() == []
    q = Jobs(root)
    assert q.refresh() == []
    assert len(q.notices) == 1 and "set aside" in q.notices[0] and not os.path.lexists(queue)
    assert str(_bad_files(root)[0]) in jobs_mod.queue_warning(root)
    assert len(_bad_files(root)) == 1 and os.path.lexists(_bad_files(root)[0])
    assert json.loads(outside.read_text())["jobs"][0]["id"] == "far"  # the outside file is as it was


def test_an_old_queue_file_stays_readable(tmp_path):
    """A record written by an earlier version (its `log` the derived one, extra fields, no child_pid) is kept."""
    root = tmp_path / "runs"
    run_dir = root / "a"
    run_dir.mkdir(parents=True)
    (run_dir / "job.log").write_text("[job a] start\nstep 1\n")
    old = {"id": "a", "name": "a", "argv": ["pretrain", "--out", str(run_dir)], "status": "finished", "pid": 5,
           "pgid": 5, "proc_start": 1, "created": "2025-01-01T00:00:00", "started": None, "ended": None,
           "returncode": 0, "error": None, "log": str(run_dir / "job.log"), "log_offset": 0, "run_dir": str(run_dir)}
    queue = _write_queue(root, old)
    jobs = Jobs(root).refresh()
    assert [j["id"] for j in jobs] == ["a"] and jobs[0]["log"] == str(run_dir / "job.log")
    assert "step 1" in Jobs(root).tail_log("a") and _bad_files(root) == []
    assert json.loads(queue.read_text())["jobs"][0]["run_dir"] == str(run_dir)


def test_the_classroom_reads_a_damaged_queue(tmp_path):
    from engine import classroom
    root = tmp_path / "runs"
    _damaged_queue(root, "not-objects")
    rows = classroom.status(root)
    assert rows and all("state" in r for r in rows)


@pytest.mark.slow
def test_the_jobs_page_renders_a_damaged_queue(tmp_path):
    from streamlit.testing.v1 import AppTest
    root = tmp_path / "runs"
    _write_queue(root, _job("good", ["pretrain", "--corpus", "bbc"], status="finished", returncode=0),
                 1, "x", None, {"id": "nostatus", "name": "n"}, {"id": "rd", "name": "n", "status": "failed", "run_dir": 5},
                 _job("weird", 5, status="failed"))
    at = AppTest.from_file(str(REPO / "pages" / "8_Jobs.py"), default_timeout=60)
    at.session_state["runs_root"] = str(root)
    at.run()
    assert not at.exception, at.exception
    assert not [e.value for e in at.error if "failed" in e.value and "Error" in e.value], [e.value for e in at.error]
    assert set(at.dataframe[0].value["id"]) == {"good", "weird"}
    bad = _bad_files(root)
    assert len(bad) == 1 and any(str(bad[0]) in w.value for w in at.warning), [w.value for w in at.warning]
