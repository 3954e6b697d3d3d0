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

REPO = Path(__file__).resolve().parents[2]


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


# ------------------------------------------------------------------ task files: streamed, capped, binary refused
def _rows(n: int) -> bytes:
    return b"".join(b"a fine sentence number %d\t%d\n" % (i, i % 2) for i in range(n))


@pytest.fixture
def counted(monkeypatch):
    """Small chunks, and a count of the bytes the reader decompressed or read."""
    from engine.tasks import tables
    monkeypatch.setattr(tables, "CHUNK", 64 * 1024)
    seen = {"bytes": 0}

    class Counting:
        def __init__(self, f):
            self.f = f

        def read(self, n=-1):
            data = self.f.read(n)
            seen["bytes"] += len(data)
            return data
    for ext, opener in list(tables.COMPRESSED.items()):
        monkeypatch.setitem(tables.COMPRESSED, ext, lambda raw, opener=opener: Counting(opener(raw)))
    return seen


@pytest.mark.parametrize("ext", [".gz", ".bz2"])
def test_a_compressed_task_file_is_refused_past_the_cap_while_it_is_read(tmp_path, monkeypatch, counted, ext):
    import bz2
    import gzip
    from engine.tasks import tables
    monkeypatch.setattr(tables, "MAX_TASK_FILE_MB", 1)
    data = _rows(200_000)  # ~5.4 MB of text, a few hundred kB compressed
    path = tmp_path / f"train.tsv{ext}"
    path.write_bytes((gzip.compress if ext == ".gz" else bz2.compress)(data))
    assert path.stat().st_size < 2**20 < len(data)
    with pytest.raises(EngineError, match=r"more than 1 MB of text once decompressed") as e:
        tables.read_text(path)
    assert "--max-task-file-mb" in str(e.value) and "\n" not in str(e.value)
    assert counted["bytes"] <= 2**20 + tables.CHUNK  # stopped at the cap, not decompressed whole
    with tables.text_cap(8):  # the flag's setting lifts it
        assert tables.read_text(path) == data.decode()


def test_a_huge_plain_task_file_is_refused_before_it_is_read(tmp_path, monkeypatch):
    from engine.tasks import tables
    monkeypatch.setattr(tables, "MAX_TASK_FILE_MB", 1)
    path = tmp_path / "train.tsv"
    with open(path, "wb") as f:
        f.truncate(3 * 2**20)  # sparse: costs no disk
    opened = []
    monkeypatch.setattr(tables, "_read_chunks", lambda *a: opened.append(1))
    with pytest.raises(EngineError, match=r"more than 1 MB of text") as e:
        tables.read_text(path)
    assert "--max-task-file-mb" in str(e.value) and not opened


def test_a_binary_task_file_is_refused_at_its_first_nul_byte(tmp_path, monkeypatch, counted):
    from engine.tasks import tables
    monkeypatch.setattr(tables, "MAX_TASK_FILE_MB", 64)
    plain = tmp_path / "train.tsv"
    with open(plain, "wb") as f:
        f.write(_rows(10))
        f.truncate(32 * 2**20)  # then 32 MB of NUL bytes (sparse)
    seen = []
    real_open = open

    def spy_open(p, mode="r", *a, **k):
        f = real_open(p, mode, *a, **k)
        if "b" in mode:
            read = f.read
            f.read = lambda n=-1: seen.append(len(d := read(n))) or d
        return f
    monkeypatch.setattr("builtins.open", spy_open)
    with pytest.raises(EngineError, match=rf"not a text file \(a NUL byte at byte {len(_rows(10))}:") as e:
        tables.read_text(plain)
    monkeypatch.setattr("builtins.open", real_open)
    assert "\n" not in str(e.value) and sum(seen) <= 3 + tables.CHUNK  # the head, then one chunk
    import gzip
    packed = tmp_path / "dev.tsv.gz"
    packed.write_bytes(gzip.compress(b"\x00" * (8 * 2**20)))
    with pytest.raises(EngineError, match="NUL byte at byte 0 of its decompressed text"):
        tables.read_text(packed)
    assert counted["bytes"] <= tables.CHUNK


def test_finetune_names_the_cap_and_its_flag_lifts_it(tmp_path, monkeypatch, tiny_checkpoint, engine_cli, one_line_error):
    import gzip
    from engine.finetune import FinetuneConfig, load_task
    from engine.tasks import tables
    train, dev = tmp_path / "train.tsv.gz", tmp_path / "dev.tsv"
    train.write_bytes(gzip.compress(b"sentence\tlabel\n" + _rows(60_000)))  # ~1.6 MB of text
    dev.write_bytes(b"sentence\tlabel\n" + _rows(8))
    code, _, err = engine_cli(["finetune", "--model", tiny_checkpoint, "--task", "glue", "--train", train, "--dev", dev,
                               "--max-task-file-mb", "1", "--out", tmp_path / "ft"])
    one_line_error(code, err, "more than 1 MB of text once decompressed")
    assert "--max-task-file-mb" in err.strip().splitlines()[-1]
    assert len(load_task(FinetuneConfig(task="glue", train=str(train), dev=str(dev), max_task_file_mb=2)).train) == 60_000
    monkeypatch.setattr(tables, "MAX_TASK_FILE_MB", 1)  # the default cap: what the Fine-tune page's preview reads under
    with pytest.raises(EngineError, match="more than 1 MB"):
        load_task(FinetuneConfig(task="glue", train=str(train), dev=str(dev)))
    with pytest.raises(EngineError, match="--max-task-file-mb 0 must be at least 1"):
        FinetuneConfig(task="glue", train=str(train), dev=str(dev), max_task_file_mb=0)


def _command_module(command: str) -> str:
    """The module whose main() `python -m engine COMMAND` calls (engine/commands.py, which the dispatch reads)."""
    from engine.commands import COMMANDS
    return COMMANDS[command][0]


@pytest.mark.parametrize("command", jobs_mod.ENGINE_COMMANDS)
def test_memory_error_is_one_line_in_every_command(command, monkeypatch, engine_cli, one_line_error):
    import importlib

    def out_of_memory(argv):
        raise MemoryError()
    monkeypatch.setattr(importlib.import_module(_command_module(command)), "main", out_of_memory)
    code, _, err = engine_cli([command, "--whatever"])
    one_line_error(code, err, "out of memory (MemoryError); give smaller input files")


def test_an_upload_holding_nul_bytes_is_refused(tmp_path):
    from studio.uploads import save_upload
    with pytest.raises(EngineError, match="not a text file"):
        save_upload(tmp_path, "train.tsv", "sentence\tlabel\n".encode("utf-16"), ("tsv",), "glue file")
    assert not (tmp_path / "uploads").exists()
    assert save_upload(tmp_path, "train.tsv", b"sentence\tlabel\nfine\t1\n", ("tsv",), "glue file").is_file()


# ------------------------------------------------------------------ a one-column file: advice that works
def test_a_one_column_task_file_gets_advice_that_works(tmp_path):
    import re
    from engine.finetune import build_parser
    from engine.tasks.registry import load_task_files
    train, dev = tmp_path / "train.tsv", tmp_path / "dev.tsv"
    lines = [f"a sentence about thing {i}" for i in range(12)]
    for p in (train, dev):
        p.write_text("\n".join(lines) + "\n")
    with pytest.raises(EngineError) as e:
        load_task_files("glue", train, dev, None, None, None)
    msg = str(e.value)
    assert "single column" in msg and "TAB" in msg
    flags = set(build_parser()._option_string_actions)
    assert all(f in flags for f in re.findall(r"--[a-z][a-z-]*", msg)), msg  # no advice names a flag that does not exist
    assert "--text-cols 1" not in msg  # there is no column 1 in a one-column file
    for p in (train, dev):  # following it: a TAB and a label on every line, under a header naming the columns
        p.write_text("sentence\tlabel\n" + "".join(f"{s}\t{i % 2}\n" for i, s in enumerate(lines)))
    task = load_task_files("glue", train, dev, None, None, None)
    assert len(task.train) == 12 and {ex.label for ex in task.train} <= {0, 1, "0", "1"}


# ------------------------------------------------------------------ a fine-tune that failed before training
def _small_task(folder: Path) -> tuple:
    folder.mkdir(parents=True, exist_ok=True)
    words = "the a market film team shares match song rose fell won lost good bad".split()
    rows = [(" ".join(words[(i * 7 + j) % len(words)] for j in range(6)) + (" good" if i % 2 else " bad"), i % 2) for i in range(40)]
    train, dev = folder / "train.tsv", folder / "dev.tsv"
    train.write_text("sentence\tlabel\n" + "".join(f"{s}\t{l}\n" for s, l in rows[:32]))
    dev.write_text("sentence\tlabel\n" + "".join(f"{s}\t{l}\n" for s, l in rows[32:]))
    return train, dev


def _ft(*args) -> list:
    return ["finetune", "--task", "glue", "--lr", "1e-3", "--batch-size", "8", "--epochs", "1", "--max-seq-len", "32",
            "--num-threads", "1", *args]


@pytest.mark.slow
def test_a_finetune_that_failed_before_training_starts_again_with_the_fix(tmp_path, tiny_checkpoint, engine_cli, one_line_error):
    from engine import runs
    train, dev = _small_task(tmp_path / "task")
    one_col = tmp_path / "task" / "one.tsv"
    one_col.write_text("just text\nmore text\n")
    # a missing --dev, then the corrected command into the same folder
    out = tmp_path / "no-dev"
    code, _, err = engine_cli(_ft("--model", tiny_checkpoint, "--train", train, "--out", out))
    assert code == 2 and runs.read_run_json(out)["status"] == "failed", err
    code, _, err = engine_cli(_ft("--model", tiny_checkpoint, "--train", train, "--dev", dev, "--out", out))
    assert code == 0, err
    assert "starting" in err and "again" in err
    assert runs.read_run_json(out)["status"] == "finished" and runs.read_run_json(out)["config"]["dev"] == str(dev)
    assert json.loads((out / "eval.json").read_text())["status"] == "finished"
    assert runs.read_run_json(out / ".failed-start")["status"] == "failed"  # the failed start's record, kept aside
    # a missing model, then --resume with the fix (the rest of the settings are the run's own)
    out = tmp_path / "no-model"
    code, _, err = engine_cli(_ft("--model", tmp_path / "nowhere", "--train", train, "--dev", dev, "--out", out))
    assert code == 2 and runs.read_run_json(out)["status"] == "failed", err
    code, _, err = engine_cli(["finetune", "--out", out, "--resume", "--model", tiny_checkpoint])
    assert code == 0, err
    info = runs.read_run_json(out)
    assert info["status"] == "finished" and info["config"]["model"] == str(tiny_checkpoint) and info["config"]["lr"] == [0.001]
    # a bad file, then --resume with the right one
    out = tmp_path / "bad-file"
    code, _, err = engine_cli(_ft("--model", tiny_checkpoint, "--train", one_col, "--dev", dev, "--out", out))
    one_line_error(code, err, "single column")
    code, _, err = engine_cli(["finetune", "--out", out, "--resume", "--train", train])
    assert code == 0, err
    assert runs.read_run_json(out)["status"] == "finished"


def test_a_finetune_with_a_finished_trial_stays_protected(tmp_path, engine_cli, one_line_error):
    """A failed run that finished a trial keeps it: a new command is refused and --resume keeps its settings."""
    from engine import runs
    train, dev = _small_task(tmp_path / "task")
    out = tmp_path / "ft"
    config = {"model": "minilm", "task": "glue", "train": str(train), "dev": str(dev), "lr": [0.001], "batch_size": [8],
              "epochs": [1]}
    runs.write_run_json(out, kind="finetune", status="failed", error="error: boom", config=config)
    (out / "eval.json").write_text(json.dumps({"status": "running", "trials": [{"trial": 0, "score": 0.5}]}))
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    code, _, err = engine_cli(_ft("--model", "minilm", "--train", train, "--dev", dev, "--lr", "5e-4", "--out", out))
    one_line_error(code, err, "already holds a finetune run")
    code, _, err = engine_cli(["finetune", "--out", out, "--resume", "--lr", "5e-4"])
    one_line_error(code, err, "was started with lr=[0.001]")
    for damaged in (b"{not json", None):  # an eval.json that cannot be read, or a saved model: kept, not judged
        if damaged is None:
            (out / "eval.json").write_text(json.dumps({"trials": []}))
            (out / "best").mkdir()
        else:
            (out / "eval.json").write_bytes(damaged)
        code, _, err = engine_cli(_ft("--model", "minilm", "--train", train, "--dev", dev, "--out", out))
        one_line_error(code, err, "already holds a finetune run")
    assert not (out / ".failed-start").exists()
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and p.name != "eval.json"} == \
        {k: v for k, v in before.items() if k != "eval.json"}
