"""Run directories: safe names, the one-writer lock, run.json, metrics.jsonl, checkpoint discovery, list_runs."""
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import procs, runs
from engine.errors import EngineError


# ------------------------------------------------------------------------------------------------- names

@pytest.mark.parametrize("bad", ["", "   ", "..", ".", "../x", "x/..", "a/b", "a\\b", "/etc", "/tmp/x",
                                 "a\x00b", ".hidden", ".jobs", "x" * 101, "a..b", "a b", "a:b", "~", "$(id)",
                                 "caf\u00e9", "a\nb", None, 3])
def test_safe_run_name_rejects(bad):
    with pytest.raises(EngineError):
        runs.safe_run_name(bad)


@pytest.mark.parametrize("good", ["bert-tiny", "run_1.0", "a+b=c", "x" * 100, "A9", "step-1.2"])
def test_safe_run_name_accepts(good, tmp_path):
    assert runs.safe_run_name(good) == good
    assert runs.resolve_run_dir(tmp_path, good) == tmp_path.resolve() / good


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.one_of(st.text(), st.text(alphabet=st.sampled_from(list("./\\\x00ab-_+=~ \u00e9$")), max_size=12)))
def test_accepted_names_stay_inside_root(tmp_path, name):
    try:
        path = runs.resolve_run_dir(tmp_path, name)
    except EngineError:
        return
    root = tmp_path.resolve()
    assert path.parent == root
    assert path.resolve().parent == root
    assert path.name == name


def test_symlink_escape_is_rejected(tmp_path):
    root = tmp_path / "runs"
    outside = tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "evil").symlink_to(outside)
    with pytest.raises(EngineError, match="outside"):
        runs.resolve_run_dir(root, "evil")
    (root / "real").mkdir()
    (root / "alias").symlink_to(root / "real")  # a symlink that stays inside is fine
    assert runs.resolve_run_dir(root, "alias") == root.resolve() / "alias"
    assert runs.resolve_run_dir(root, "new") == root.resolve() / "new"


def test_runs_root_env(monkeypatch, tmp_path):
    monkeypatch.setenv("BERT_STUDIO_RUNS", str(tmp_path / "r"))
    assert runs.runs_root() == tmp_path / "r"
    monkeypatch.delenv("BERT_STUDIO_RUNS")
    assert runs.runs_root() == Path.cwd() / "runs"


def test_run_dir_for(tmp_path):
    assert runs.run_dir_for("abc", root=tmp_path) == tmp_path.resolve() / "abc"
    assert runs.run_dir_for(str(tmp_path / "x" / "y")) == tmp_path / "x" / "y"
    with pytest.raises(EngineError):
        runs.run_dir_for(".hidden", root=tmp_path)


# ------------------------------------------------------------------------------------------------- lock

def _hold_lock(run_dir, ready):
    lock = runs.RunLock(run_dir)
    lock.acquire()
    runs.write_run_json(run_dir, status="running", pid=os.getpid(), host=__import__("socket").gethostname())
    ready.set()
    time.sleep(60)


@pytest.mark.slow
def test_lock_held_by_live_process_is_refused_and_freed_by_sigkill(tmp_path):
    run_dir = tmp_path / "r1"
    ctx = multiprocessing.get_context("fork")
    ready = ctx.Event()
    p = ctx.Process(target=_hold_lock, args=(run_dir, ready), daemon=True)
    p.start()
    try:
        assert ready.wait(20)
        assert runs.lock_holder(run_dir)["pid"] == p.pid
        with pytest.raises(EngineError, match=f"in use by process {p.pid}"):
            runs.RunLock(run_dir, retries=1, retry_wait=0.01).acquire()
        assert runs.effective_status(run_dir) == "running"
        os.kill(p.pid, signal.SIGKILL)
        p.join(10)
        assert runs.lock_holder(run_dir) is None
        assert runs.effective_status(run_dir) == "dead"
        with runs.RunLock(run_dir) as lock:  # free again
            assert lock.held
            assert runs.lock_holder(run_dir)["pid"] == os.getpid()
            with pytest.raises(EngineError):  # a second fd in the same process is refused too
                runs.RunLock(run_dir, retries=0).acquire()
        assert runs.lock_holder(run_dir) is None
    finally:
        if p.is_alive():
            p.kill()
            p.join()


@pytest.mark.slow
def test_pid_alive():
    assert procs.pid_alive(os.getpid())
    assert procs.pid_alive(os.getpid(), procs.proc_start_time(os.getpid()))
    assert not procs.pid_alive(os.getpid(), -5)  # a reused pid is another process
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    assert not procs.pid_alive(p.pid)
    assert not procs.pid_alive(None) and not procs.pid_alive(0) and not procs.pid_alive("x")
    z = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.time() + 10
    while procs.proc_stat(z.pid) and procs.proc_stat(z.pid)[0] != "Z" and time.time() < deadline:
        time.sleep(0.02)
    assert not procs.pid_alive(z.pid)  # a zombie (exited, not yet reaped) is dead
    z.wait()


def test_proven_alive():
    me = os.getpid()
    assert procs.proven_alive(me, procs.proc_start_time(me))
    assert procs.proven_alive(me, procs.proc_start_time(me), os.getpgid(0))  # in its recorded process group
    assert not procs.proven_alive(me, procs.proc_start_time(me), os.getpgid(0) + 1)  # moved to another group
    assert not procs.proven_alive(me, None)  # a bare pid proves nothing (it may have been reused)
    assert not procs.proven_alive(me, -5) and not procs.proven_alive(None, 1)


# ------------------------------------------------------------------------------------------------- run.json

def test_run_json_merge_and_status(tmp_path):
    d = tmp_path / "r"
    assert runs.read_run_json(d) == {}
    runs.write_run_json(d, kind="pretrain", config={"lr": 1e-4})
    runs.write_run_json(d, status="running", pid=1)
    info = runs.read_run_json(d)
    assert info["kind"] == "pretrain" and info["config"] == {"lr": 1e-4} and info["status"] == "running"
    runs.set_status(d, "failed", error="boom\nsecond line")
    info = runs.read_run_json(d)
    assert info["status"] == "failed" and info["error"] == "boom second line" and info["ended"]
    with pytest.raises(ValueError):
        runs.set_status(d, "weird")
    (d / "run.json").write_text("{not json")
    with pytest.raises(EngineError, match="not valid JSON"):
        runs.read_run_json(d)


def test_run_context_manager(tmp_path):
    d = tmp_path / "r"
    with runs.Run(d, kind="pretrain", config={"x": 1}, total_steps=10) as run:
        info = runs.read_run_json(d)
        assert info["status"] == "running" and info["pid"] == os.getpid() and info["total_steps"] == 10
        assert runs.lock_holder(d)["pid"] == os.getpid()
        run.log({"step": 1, "loss": 2.0})
    info = runs.read_run_json(d)
    assert info["status"] == "finished" and info["created"] and info["starts"] == 1
    assert runs.lock_holder(d) is None

    with pytest.raises(EngineError):
        with runs.Run(d, kind="pretrain"):
            raise EngineError("corpus is empty; pick another")
    info = runs.read_run_json(d)
    assert info["status"] == "failed" and info["error"] == "corpus is empty; pick another" and info["starts"] == 2

    with pytest.raises(ZeroDivisionError):
        with runs.Run(d, kind="pretrain"):
            1 / 0
    assert runs.read_run_json(d)["error"].startswith("ZeroDivisionError")

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(runs.RunCancelled):
        with runs.Run(d, kind="pretrain"):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # interrupted by the handler
    assert runs.read_run_json(d)["status"] == "cancelled"
    assert signal.getsignal(signal.SIGTERM) is before
    assert runs.lock_holder(d) is None


# ------------------------------------------------------------------------------------------------- metrics

def test_metrics_torn_line_and_truncate(tmp_path):
    d = tmp_path / "r"
    d.mkdir()
    assert runs.read_metrics(d) == [] and runs.last_metrics(d) is None
    for s in range(1, 6):
        runs.append_metrics(d, {"step": s, "loss": 1.0 / s})
    with open(d / "metrics.jsonl", "ab") as f:
        f.write(b'{"step": 6, "lo')  # a crash mid-write
    assert [r["step"] for r in runs.read_metrics(d)] == [1, 2, 3, 4, 5]
    assert runs.last_metrics(d)["step"] == 5
    runs.append_metrics(d, {"step": 6, "loss": 0.1})  # the torn fragment is cut off first
    lines = (d / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(ln)["step"] for ln in lines] == [1, 2, 3, 4, 5, 6]
    assert runs.truncate_metrics(d, 3) == 3
    assert [r["step"] for r in runs.read_metrics(d)] == [1, 2, 3]
    runs.append_metrics(d, {"step": 4})
    assert [r["step"] for r in runs.read_metrics(d)] == [1, 2, 3, 4]
    # a torn file with no newline at all
    (d / "metrics.jsonl").write_bytes(b'{"step": 1')
    assert runs.read_metrics(d) == []
    runs.append_metrics(d, {"step": 1})
    assert runs.read_metrics(d) == [{"step": 1}]


# ------------------------------------------------------------------------------------------------- checkpoints

def _write_ckpt(run_dir, step):
    tmp = runs.new_checkpoint_dir(run_dir, step)
    assert tmp.name == f".tmp-step-{step}"
    (tmp / "model.safetensors").write_bytes(b"x" * 10)
    return runs.publish_checkpoint(tmp)


def test_checkpoint_discovery_ignores_half_written(tmp_path):
    d = tmp_path / "r"
    assert runs.list_checkpoints(d) == [] and runs.latest_checkpoint(d) is None
    _write_ckpt(d, 10)
    _write_ckpt(d, 5)
    _write_ckpt(d, 100)
    ck = d / "checkpoints"
    (ck / "step-200").mkdir()  # no COMPLETE marker: half written
    (ck / "step-200" / "config.json").write_text("{}")
    half = runs.new_checkpoint_dir(d, 300)  # still being written
    runs.mark_complete(half)  # even with the marker, a .tmp- dir is not a checkpoint
    (ck / "step-x").mkdir()
    (ck / "notes.txt").write_text("hi")
    (ck / "step-7").write_text("a file, not a folder")
    assert [p.name for p in runs.list_checkpoints(d)] == ["step-5", "step-10", "step-100"]
    assert runs.latest_checkpoint(d) == ck / "step-100"
    assert runs.checkpoint_step(runs.latest_checkpoint(d)) == 100
    # republishing a step replaces it
    again = _write_ckpt(d, 100)
    assert again == ck / "step-100" and (again / "COMPLETE").is_file()
    assert not (ck / ".tmp-step-100").exists()
    removed = runs.prune_checkpoints(d, keep_last=2)
    assert [p.name for p in removed] == ["step-5"]
    assert [p.name for p in runs.list_checkpoints(d)] == ["step-10", "step-100"]


# ------------------------------------------------------------------------------------------------- index

def _dead_pid():
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


@pytest.mark.slow
def test_list_runs_marks_dead_and_sorts(tmp_path):
    root = tmp_path / "runs"
    a = runs.create_run_dir(root, "old-finished")
    runs.write_run_json(a, kind="pretrain", status="finished", created="2024-01-01T00:00:00+00:00", total_steps=10)
    runs.append_metrics(a, {"step": 10})
    b = runs.create_run_dir(root, "crashed")
    runs.write_run_json(b, kind="pretrain", status="running", pid=_dead_pid(),
                        host=__import__("socket").gethostname(), created="2024-06-01T00:00:00+00:00",
                        total_steps=8)
    runs.append_metrics(b, {"step": 2})
    _write_ckpt(b, 2)
    c = runs.create_run_dir(root, "live")
    with runs.Run(c, kind="finetune", created="2025-01-01T00:00:00+00:00"):
        (root / ".jobs").mkdir()  # hidden folders and folders without run.json are not runs
        (root / "not-a-run").mkdir()
        rows = runs.list_runs(root)
    assert [r["name"] for r in rows] == ["live", "crashed", "old-finished"]
    by = {r["name"]: r for r in rows}
    assert by["live"]["effective_status"] == "running" and by["live"]["kind"] == "finetune"
    assert by["crashed"]["status"] == "running" and by["crashed"]["effective_status"] == "dead"
    assert by["crashed"]["step"] == 2 and by["crashed"]["total_steps"] == 8 and by["crashed"]["checkpoint_step"] == 2
    assert by["old-finished"]["effective_status"] == "finished" and by["old-finished"]["path"] == str(a)
    assert runs.run_progress(b)["fraction"] == pytest.approx(0.25)
    assert runs.run_progress(a)["fraction"] == 1.0
    assert runs.list_runs(tmp_path / "missing") == []
    # a live pid whose lock is free (the writer never took it / released it) is dead too
    runs.write_run_json(b, pid=os.getpid())
    (b / "run.lock").write_text("")
    assert runs.effective_status(b) == "dead"


def test_a_run_json_that_is_not_utf8_is_one_engine_error(tmp_path):
    (tmp_path / runs.RUN_JSON).write_bytes(b'{"kind": "pretrain", "status": "\xff"}')
    with pytest.raises(EngineError, match="not UTF-8"):
        runs.read_run_json(tmp_path)
