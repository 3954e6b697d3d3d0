"""Fault injection, round four (`class prepare` trusting what it finds, engine/classroom.py): a damaged cache, a
finished run of other settings in a part's folder, its own damaged state files, and two prepares (or a prepare and
another job) at once. Each test is a row of RELIABILITY.md. Real data, made tiny: a 24-document corpus, the cache
`class cache` builds from it and a 4-step run of a 1-layer BERT (a few seconds in all); the job queue is an
in-memory stand-in (its interface as classroom uses it), the speed checks stand-ins too."""
import json
import random
import shutil
import threading
from pathlib import Path

import pytest

from engine import classroom
from engine.ablations.timing import SpeedCheck
from engine.errors import EngineError
from engine.pretraining.config import PROBE_READY_RUN
from tests.helpers import FakeQueue


def _corpus(path: Path) -> Path:
    rng = random.Random(0)
    words = [[f"w{t}x{i}" for i in range(6)] for t in range(3)]
    docs = [" ".join(" ".join(rng.choice(words[d % 3]) for _ in range(6)).capitalize() + "." for _ in range(12))
            for d in range(24)]
    path.write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    return path


def _tiny_flags(folder: Path) -> list:
    """A classroom run made tiny: 1 layer, hidden 32, 4 steps, two phases of 32 and 64 tokens."""
    return ["--corpus", str(_corpus(folder / "corpus.txt")), "--cache-dir", str(folder / "cache"), "--vocab-size", "120",
            "--layers", "1", "--hidden", "32", "--heads", "2", "--max-positions", "64", "--seq-len", "32",
            "--phase2-seq-len", "64", "--phase2-fraction", "0.5", "--batch-size", "4", "--steps", "4", "--save-every", "2",
            "--eval-every", "2", "--num-threads", "1"]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """(flags, a finished 4-step run of the tiny classroom settings), made once."""
    from engine.__main__ import run
    d = tmp_path_factory.mktemp("tiny")
    flags = _tiny_flags(d)
    assert run(["pretrain", *flags, "--out", str(d / "run"), "--quiet"]) == 0
    return flags, d / "run"


@pytest.fixture(autouse=True)
def idle_machine(monkeypatch):
    """A load average of 0: a speed check here is not taken under load unless a test says so (the machine running
    the tests may be busy)."""
    import os
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))


def _one_line_each(text: str, n: int) -> list:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert len(lines) == n, text
    return lines


# ---------------------------------------------------------------- 7. a damaged cache reported done
def test_a_truncated_cached_array_is_damaged_not_done_and_prepare_rebuilds_it(tmp_path, monkeypatch, engine_cli):
    """tokens.npy of the cached classroom data cut in half: status says damaged (the loader's own reason, naming the
    file), prepare queues the cache part first, and that job sets the damaged folder aside and builds it again."""
    from engine.pretraining.prepare import open_prepared
    from studio import start
    root, flags = tmp_path / "runs", _tiny_flags(tmp_path)
    monkeypatch.setattr(classroom, "RUN_FLAGS", flags)
    data = [Path(p) for p in classroom.build_cache(root, flags)]
    q = FakeQueue()
    assert classroom.status(root, jobs=q)[0]["state"] == classroom.DONE.name
    tokens = data[0] / "part-0-of-1" / "shard-000000" / "train" / "tokens.npy"
    tokens.write_bytes(tokens.read_bytes()[:len(tokens.read_bytes()) // 2])

    rows = classroom.status(root, jobs=q)
    assert rows[0]["state"] == classroom.DAMAGED.name and not classroom.cache_ready(root)
    assert str(tokens) in rows[0]["note"] and "truncated" in rows[0]["note"]
    line = classroom.describe(rows).splitlines()[0]
    assert line.split(": ", 1)[1].startswith("damaged") and str(tokens) in line
    assert "damaged" in start.prepare_lines(rows)[0][0]  # the Start page's panel says so too

    rows = classroom.prepare(root, jobs=q, speed_check=False)
    assert [j["argv"][0] for j in q.jobs] == ["class", "pretrain", "pretrain"] and q.jobs[0]["argv"][:2] == ["class", "cache"]
    assert rows[0]["state"] == "queued"
    # the queued job itself (what the queue would run): the damaged folder set aside, the data built again
    code, out, err = engine_cli(q.jobs[0]["argv"])
    assert code == 0, err
    assert classroom.status(root, jobs=FakeQueue())[0]["state"] == classroom.DONE.name
    assert open_prepared(data[0]).train.num_instances > 0  # what the reference run opens
    assert len(list(data[0].parent.glob(f"{data[0].name}.bad-*"))) == 1  # kept, never deleted


# ---------------------------------------------------------------- 8. any finished run in the folder counts as done
def test_a_finished_run_of_other_settings_in_a_part_folder_is_foreign_not_done(tmp_path, tiny_run, monkeypatch):
    """A finished 4-step tiny BERT in minilm-continued: not the probe-ready model (not done), one line naming the
    folder and a setting that differs, nothing queued into it, the folder untouched; the same run in the reference
    folder when the classroom run is those tiny settings is done."""
    from studio import start
    flags, run = tiny_run
    root, q = tmp_path / "runs", FakeQueue()
    ready = root / PROBE_READY_RUN
    shutil.copytree(run, ready)
    before = (ready / "run.json").read_bytes()
    rows = classroom.status(root, jobs=q)
    assert rows[2]["state"] == classroom.FOREIGN.name
    assert str(ready) in rows[2]["note"] and "move it away" in rows[2]["note"]
    assert "init" in rows[2]["note"] or "steps" in rows[2]["note"]
    line = classroom.describe(rows).splitlines()[2]
    assert str(ready) in line and line.split(": ", 1)[1].startswith(classroom.FOREIGN.words)
    assert "everything is ready" not in classroom.describe(rows)
    assert str(ready) in start.prepare_lines(rows)[0][2]

    classroom.prepare(root, jobs=q, speed_check=False)
    assert str(ready) not in [j["run_dir"] for j in q.jobs] and len(q.jobs) == 2  # cache and reference only
    assert (ready / "run.json").read_bytes() == before

    monkeypatch.setattr(classroom, "RUN_FLAGS", flags)  # the classroom run is the tiny one: that run is its recipe
    shutil.copytree(run, root / classroom.REFERENCE_RUN)
    assert classroom.status(root, jobs=FakeQueue())[1]["state"] == classroom.DONE.name


# ---------------------------------------------------------------- 9. its own damaged state files
def test_damaged_state_files_are_set_aside_in_one_line_each_and_recomputed(tmp_path, engine_cli, monkeypatch):
    """prepare.json `{"checks": {"classroom": {}}}` and cache.json `{"data": [1]}`: `class status` works, one
    line per file on stderr, each file renamed .bad-*; prepare then times the machine again and records it."""
    root = tmp_path / "runs"
    state = root / classroom.STATE_DIR
    state.mkdir(parents=True)
    (state / "prepare.json").write_text(json.dumps({"checks": {"classroom": {}}}))
    (state / "cache.json").write_text(json.dumps({"data": [1]}))
    code, out, err = engine_cli(["class", "status", "--runs-root", root])
    assert code == 0, err
    lines = _one_line_each(err, 2)
    assert any("prepare.json" in ln for ln in lines) and any("cache.json" in ln for ln in lines)
    assert not (state / "prepare.json").exists() and not (state / "cache.json").exists()
    assert len(list(state.glob("prepare.json.bad-*"))) == 1 and len(list(state.glob("cache.json.bad-*"))) == 1
    assert "1. " in out and "to do" in out.splitlines()[0]
    code, out, err = engine_cli(["class", "status", "--runs-root", root])
    assert code == 0 and err == ""  # set aside once

    import engine.ablations.timing as timing
    monkeypatch.setattr(timing, "speed_check", lambda: SpeedCheck("fp32", 2, 400.0))
    monkeypatch.setattr(timing, "minilm_check", lambda: SpeedCheck("fp32", 2, 1200.0))
    (state / "prepare.json").write_text('{"checks": {"classroom": {"precision": "fp32", "threads": 2, "step_ms": -1}}}')
    rows = classroom.prepare(root, jobs=FakeQueue())
    assert [r["state"] for r in rows] == ["queued"] * 3 + ["skipped"]  # (offline: the optional part)
    assert set(json.loads((state / "prepare.json").read_text())["checks"]) == {"classroom", "minilm"}


# ---------------------------------------------------------------- 10. two prepares at once
def _blocking_check(monkeypatch, entered: threading.Event, release: threading.Event, kind="classroom", during=None):
    """The speed check of `kind` waits for `release` (after setting `entered`, then running `during`) and reads
    900 ms; the other kind reads 1000 ms at once."""
    import engine.ablations.timing as timing

    def check():
        entered.set()
        assert release.wait(30)
        if during:
            during()
        return SpeedCheck("fp32", 2, 900.0)
    other = lambda: SpeedCheck("fp32", 2, 1000.0)  # noqa: E731
    monkeypatch.setattr(timing, "speed_check", check if kind == "classroom" else other)
    monkeypatch.setattr(timing, "minilm_check", check if kind == "minilm" else other)


def test_a_second_prepare_while_one_runs_refuses_in_one_line_and_queues_nothing(tmp_path, monkeypatch, engine_cli,
                                                                                 one_line_error):
    """The first prepare is timing the machine; a second (`--no-speed-check`, in-process and on the command line)
    refuses naming the first one's pid and queues nothing; the first then queues the three parts once."""
    import os
    root, q = tmp_path / "runs", FakeQueue()
    entered, release = threading.Event(), threading.Event()
    _blocking_check(monkeypatch, entered, release)
    first = threading.Thread(target=classroom.prepare, args=(root,), kwargs={"jobs": q})
    first.start()
    try:
        assert entered.wait(30)
        with pytest.raises(EngineError, match=f"pid {os.getpid()}") as e:
            classroom.prepare(root, jobs=q, speed_check=False)
        assert "\n" not in str(e.value)
        code, _, err = engine_cli(["class", "prepare", "--runs-root", root, "--no-speed-check"])
        one_line_error(code, err, "another `class prepare`")
        assert q.jobs == []
        from engine.jobs import Jobs
        assert Jobs(root).list_jobs() == []  # the command line's queue: nothing either
    finally:
        release.set()
        first.join(30)
    assert [j["argv"][0] for j in q.jobs] == ["class", "pretrain", "pretrain"]
    classroom.prepare(root, jobs=q, speed_check=False)  # the lock is free again
    assert len(q.jobs) == 3


def test_a_speed_check_taken_while_a_job_ran_is_marked_under_load_and_not_saved(tmp_path, monkeypatch, tiny_run):
    """A job of the runs folder starts while the probe-ready recipe's check runs (and the reference run finishes
    meanwhile): the reading is recorded under_load, not used (the status says so), the machine's good reading of the
    other check kept; the parts are decided after the check (the finished reference is not queued). A load average
    far above the cores' share marks a reading under load too; a later idle prepare times it again and saves it."""
    import os
    flags, run = tiny_run
    monkeypatch.setattr(classroom, "RUN_FLAGS", flags)
    root, q = tmp_path / "runs", FakeQueue()
    state = root / classroom.STATE_DIR
    state.mkdir(parents=True)
    good = {"precision": "fp32", "threads": 2, "step_ms": 1100.0, "gpu": False}
    (state / "prepare.json").write_text(json.dumps({"checks": {"classroom": good}}))

    def meanwhile():
        if (root / classroom.REFERENCE_RUN).exists():
            return  # once
        q.jobs.append({"id": "other", "argv": ["pretrain", "--out", "x"], "name": "another run", "run_dir": str(root / "x"),
                       "status": "running"})
        shutil.copytree(run, root / classroom.REFERENCE_RUN)  # finished while the machine was timed
    entered, release = threading.Event(), threading.Event()
    release.set()
    _blocking_check(monkeypatch, entered, release, kind="minilm", during=meanwhile)
    rows = classroom.prepare(root, jobs=q)
    saved = json.loads((state / "prepare.json").read_text())
    assert saved["checks"] == {"classroom": good}  # the loaded reading is not the machine's speed
    assert saved["loaded"]["minilm"]["under_load"] is True and saved["loaded"]["minilm"]["step_ms"] == 900.0
    assert "another run" in saved["loaded"]["minilm"]["why"]
    assert [j["run_dir"] for j in q.jobs if j["id"] != "other"] == [str(state / "cache"), str(root / PROBE_READY_RUN)]
    assert rows[1]["state"] == classroom.DONE.name  # decided after the check
    assert "under load" in rows[2]["how"] and "no reading of this machine yet" in rows[2]["how"]

    q.jobs[0]["status"] = "finished"  # the other job ended; now a load average far above the cores: under load again
    for j in q.jobs[1:]:
        j["status"] = "cancelled"
    monkeypatch.setattr(os, "getloadavg", lambda: (50.0 * (os.cpu_count() or 1), 0.0, 0.0))
    classroom.prepare(root, jobs=q)
    saved = json.loads((state / "prepare.json").read_text())
    assert "minilm" not in saved["checks"] and "load average" in saved["loaded"]["minilm"]["why"]
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))  # idle: timed again and saved
    for j in q.jobs:
        j["status"] = "cancelled" if j["status"] == "queued" else j["status"]
    classroom.prepare(root, jobs=q)
    saved = json.loads((state / "prepare.json").read_text())
    assert saved["checks"]["minilm"]["step_ms"] == 900.0 and "minilm" not in saved.get("loaded", {})
