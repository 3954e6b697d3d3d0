"""`python -m engine class prepare | status | cancel` (engine.classroom): the three parts queued in order, skipped when
done, never queued twice, cancelled queued-first, resumed from their checkpoints, and the time left on this machine
(measured figures scaled by the speed check, or a running run's own pace). Fast tests use an in-memory queue; one
slow test runs the real queue end to end with tiny settings."""
import json
import random
import time
from pathlib import Path

import pytest

from engine import classroom, measured, recipes
from engine.ablations.timing import SpeedCheck
from engine.runs import mark_complete, write_run_json
from tests.helpers import FakeQueue


def _part(root, key):
    return next(p for p in classroom.parts(root) if p.key == key)


def _run(run_dir: Path, status: str, step=None, total=10, elapsed=None, config=None):
    write_run_json(run_dir, kind="pretrain", status=status, total_steps=total, config=config or {"objective": "mlm+nsp"})
    if step is not None:
        ck = run_dir / "checkpoints" / f"step-{step}"
        ck.mkdir(parents=True)
        mark_complete(ck, step=step)
        rec = {"step": step, "split": "train", "loss": 5.0, **({"elapsed": elapsed} if elapsed else {})}
        (run_dir / "metrics.jsonl").write_text(json.dumps(rec) + "\n")


def _cache_done(root: Path):
    """A cache record pointing at a real data folder, made tiny: the cache part is done when it opens as the run
    opens it (engine.classroom.cache_state)."""
    from engine.pretraining.prepare import build_pretraining_data
    from engine.tokenizer import train_tokenizer
    docs = [[f"Document {d} says word{d} and word{i} here." for i in range(4)] for d in range(6)]
    data = build_pretraining_data(docs, train_tokenizer([" ".join(d) for d in docs], vocab_size=100), seq_len=32,
                                  cache_dir=root / "cache-data", eval_fraction=0.0).path
    (root / classroom.STATE_DIR).mkdir(parents=True, exist_ok=True)
    (root / classroom.STATE_DIR / "cache.json").write_text(json.dumps({"data": [str(data)]}))
    return data


def test_prepare_queues_the_three_parts_in_order_and_twice_queues_nothing_more(tmp_path):
    """Offline (the suite sets HF_HUB_OFFLINE), the optional fourth part is skipped and queues no job."""
    root, q = tmp_path / "runs", FakeQueue()
    rows = classroom.prepare(root, jobs=q, speed_check=False)
    assert [j["argv"][0] for j in q.jobs] == ["class", "pretrain", "pretrain"]
    assert q.jobs[0]["argv"][:2] == ["class", "cache"]
    assert q.jobs[1]["argv"] == ["pretrain", "--recipe", "classroom", "--out", str(root.absolute() / classroom.REFERENCE_RUN),
                                 "--quiet"]
    assert q.jobs[2]["argv"] == classroom.probe_ready_argv(root.absolute())
    assert "--init" in q.jobs[2]["argv"] and "minilm" in q.jobs[2]["argv"]
    assert [r["state"] for r in rows] == ["queued"] * 3 + ["skipped"]
    q.jobs[0]["status"] = "running"
    rows = classroom.prepare(root, jobs=q, speed_check=False)  # the second press
    assert len(q.jobs) == 3 and [r["state"] for r in rows] == ["running", "queued", "queued", "skipped"]


def test_finished_parts_are_skipped(tmp_path):
    root, q = tmp_path / "runs", FakeQueue()
    _cache_done(root)
    _run(root / classroom.REFERENCE_RUN, "finished", step=10)
    rows = classroom.prepare(root, jobs=q, speed_check=False)
    assert [j["run_dir"] for j in q.jobs] == [str(_part(root, "probe_ready").run_dir)]
    assert [r["state"] for r in rows] == ["done", "done", "queued", "skipped"]
    # a cache folder removed since: the cache part is to do again
    import shutil
    shutil.rmtree(root / "cache-data")
    assert classroom.status(root, jobs=q)[0]["state"] == "todo"


def test_cancel_cancels_the_queued_parts_first_then_the_running_one(tmp_path):
    root, q = tmp_path / "runs", FakeQueue()
    classroom.prepare(root, jobs=q, speed_check=False)
    q.jobs[0]["status"] = "finished"
    _cache_done(root)
    q.jobs[1]["status"] = "running"
    rows = classroom.cancel(root, jobs=q)
    assert q.cancelled == [("j2", "queued"), ("j1", "running")]
    assert [r["state"] for r in rows] == ["done", "cancelled", "cancelled", "skipped"]


def test_a_cancelled_or_failed_run_resumes_from_its_checkpoint_and_a_failed_cache_is_built_again(tmp_path):
    root, q = tmp_path / "runs", FakeQueue()
    classroom.prepare(root, jobs=q, speed_check=False)
    for j in q.jobs:
        j["status"] = "failed" if j["argv"][0] == "class" else "cancelled"
    ref, ready = _part(root, "reference").run_dir, _part(root, "probe_ready").run_dir
    _run(ref, "cancelled", step=4)  # the run saved a checkpoint when it was cancelled
    _run(ready, "failed", step=2)
    assert [r["state"] for r in classroom.status(root, jobs=q)] == ["failed", "cancelled", "failed", "skipped"]
    classroom.prepare(root, jobs=q, speed_check=False)
    again = q.jobs[3:]
    assert again[0]["argv"] == q.jobs[0]["argv"]  # the cache: built again (whatever is cached is found)
    assert again[1]["argv"] == ["pretrain", "--out", str(ref), "--resume", "--quiet"]
    assert again[2]["argv"] == ["pretrain", "--out", str(ready), "--resume", "--quiet"]


def test_a_run_whose_process_died_counts_as_failed_and_resumes(tmp_path):
    root, q = tmp_path / "runs", FakeQueue()
    ref = _part(root, "reference").run_dir
    _run(ref, "running", step=4)  # no live writer holds its lock: dead
    assert classroom.status(root, jobs=q)[1]["state"] == "failed"
    classroom.prepare(root, jobs=q, speed_check=False)
    assert ["pretrain", "--out", str(ref), "--resume", "--quiet"] in [j["argv"] for j in q.jobs]


def test_time_left_is_each_measured_time_scaled_by_its_own_speed_check_or_the_runs_own_pace(tmp_path, monkeypatch):
    root, q = tmp_path / "runs", FakeQueue()
    import dataclasses
    ref, ready = measured.fact("classroom_run.minutes_bf16"), measured.fact("probe_ready.minutes")
    ref_ms, ready_ms = 200.0, 900.0  # the two checks' readings where the two figures were measured
    machines = dict(measured.MACHINES)
    machines[ref.machine] = dataclasses.replace(machines[ref.machine], check_ms=ref_ms)
    machines[ready.machine] = dataclasses.replace(machines[ready.machine], minilm_check_ms=ready_ms)
    monkeypatch.setattr(measured, "MACHINES", machines)
    calls = []
    import engine.ablations.timing as timing
    # this machine: the classroom step twice as slow as where the reference run was measured, MiniLM's 1.5x
    monkeypatch.setattr(timing, "speed_check", lambda: calls.append("classroom") or SpeedCheck("fp32", 2, 2 * ref_ms))
    monkeypatch.setattr(timing, "minilm_check", lambda: calls.append("minilm") or SpeedCheck("fp32", 2, 1.5 * ready_ms))
    import os
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))  # else a busy test machine marks them under load
    monkeypatch.setattr(classroom, "machine", lambda: ("bf16", "cpu"))  # (a GPU would make them upper bounds)
    rows = classroom.prepare(root, jobs=q)
    classroom.prepare(root, jobs=q)
    from engine.ablations.timing import CHECK_ROUNDS as rounds  # each timed in rounds once, recorded in <runs>/.class/prepare.json
    assert calls == ["classroom"] * rounds + ["minilm"] * rounds
    assert rows[1]["minutes_left"] == pytest.approx(2 * ref.value)
    # the probe-ready model trains as many steps as fit in its budget here (1.5x slower: fewer than the recipe's)
    base, budget = recipes.CONTINUED.settings["steps"], recipes.PROBE_READY_BUDGET
    timed = measured.fact("probe_ready.steps").value  # the steps its measured minutes trained
    steps = 50 * round(timed * budget / (1.5 * ready.value) / 50)
    assert steps != base and q.jobs[2]["argv"][q.jobs[2]["argv"].index("--steps") + 1] == str(steps)
    assert rows[2]["minutes_left"] == pytest.approx(1.5 * ready.value * steps / timed)  # not by the classroom step's 2x
    assert f"{steps} steps, what fits in {budget:g} min here" in rows[2]["how"]
    assert rows[0]["minutes_left"] is None  # the cache is inside the classroom run's measured time
    assert classroom.minutes_left(rows) == pytest.approx(2 * ref.value + 1.5 * ready.value * steps / timed)
    # a machine with no reading of a part's check: that part as measured there, and the status says so
    machines[ready.machine] = dataclasses.replace(machines[ready.machine], minilm_check_ms=None)
    row = classroom.status(root, jobs=q)[2]
    assert row["minutes_left"] == pytest.approx(ready.value * base / timed)  # the recipe's steps: no reading to fit
    assert "has no reading of this kind of step" in row["how"]
    # a running reference run: from its own pace (120 s of training for 4 of 10 steps: 3 min left)
    q.jobs[1]["status"] = "running"
    _run(_part(root, "reference").run_dir, "running", step=4, total=10, elapsed=120.0,
         config={"objective": "mlm+nsp", "phase2_seq_len": None})  # one phase: its steps are equal work
    row = classroom.status(root, jobs=q)[1]
    assert row["state"] == "running" and (row["step"], row["total"]) == (4, 10)
    assert row["minutes_left"] == pytest.approx(3.0)
    assert "4 / 10" in classroom.describe(classroom.status(root, jobs=q))
    # with a second phase of longer sequences still to come, its pace so far is weighted by each phase's FLOPs a step
    run_json = _part(root, "reference").run_dir / "run.json"
    info = json.loads(run_json.read_text())
    info["config"] = {"objective": "mlm+nsp", "seq_len": 32, "phase2_seq_len": 128, "phase2_fraction": 0.5}
    run_json.write_text(json.dumps(info))
    share = classroom.work_fraction(info["config"], 4, 10)
    assert 0.12 < share < 0.2  # 4 of 5 short steps done, 5 long ones (about 4x the work each) to come: not 0.4
    assert classroom.status(root, jobs=q)[1]["minutes_left"] == pytest.approx(2.0 * (1 - share) / share)
    # heads-first steps (the frozen encoder runs forward only) count a third of a step: 5 of them are 1/4 of the work
    assert classroom.work_fraction({"phase2_seq_len": None, "heads_first": 0.5}, 5, 10) == pytest.approx(0.25)


def test_the_probe_ready_length_fits_its_budget_by_this_machines_speed_and_a_started_run_keeps_its_own(tmp_path):
    root = tmp_path / "runs"
    base, budget = recipes.CONTINUED.settings["steps"], recipes.PROBE_READY_BUDGET
    timed = measured.fact("probe_ready.steps").value  # the steps its measured minutes trained
    assert classroom.probe_ready_steps(root) == (base, "")  # no reading: the recipe's steps, and the argv names none
    assert "--steps" not in classroom.probe_ready_argv(root)
    ready = measured.fact("probe_ready.minutes")
    ref_ms = measured.MACHINES[ready.machine].check("minilm")
    (root / classroom.STATE_DIR).mkdir(parents=True)
    for factor, within in ((0.8, True), (0.1, False), (4.0, False)):  # a little faster; far faster; far slower
        check = {"precision": "bf16", "threads": 2, "step_ms": factor * ref_ms}
        (root / classroom.STATE_DIR / "prepare.json").write_text(json.dumps({"checks": {"minilm": check}}))
        steps, how = classroom.probe_ready_steps(root)
        lo, hi = recipes.PROBE_READY_STEP_RANGE
        assert steps == min(hi, max(lo, 50 * round(timed * budget / (factor * ready.value) / 50))) and steps % 50 == 0
        assert (lo < steps < hi) is within and f"{steps} steps, what fits in {budget:g} min here" in how
        est = classroom.part_estimate(root, "probe_ready", on=("bf16", "cpu"))
        assert est.minutes == pytest.approx(factor * ready.value * steps / timed)
    assert classroom.probe_ready_steps(root)[0] == recipes.PROBE_READY_STEP_RANGE[0]  # the slow machine: the floor
    # once its run has started, its own length, whatever a later check reads; a finished run's clock is read per step
    write_run_json(root / recipes.PROBE_READY_RUN, kind="pretrain", status="running", total_steps=1234,
                   config={"steps": 1234})
    assert classroom.probe_ready_steps(root) == (1234, "1234 steps, as its run started")
    argv = classroom.probe_ready_argv(root)
    assert argv[argv.index("--steps") + 1] == "1234"


def test_no_speed_check_while_a_part_runs(tmp_path, monkeypatch):
    root, q = tmp_path / "runs", FakeQueue()
    classroom.prepare(root, jobs=q, speed_check=False)
    q.jobs[0]["status"] = "running"
    import engine.ablations.timing as timing
    monkeypatch.setattr(timing, "speed_check", lambda: pytest.fail("timed while a job runs"))
    classroom.prepare(root, jobs=q)


def test_cli_status_prints_the_parts_and_a_bad_flag_is_one_line(tmp_path, capsys):
    from engine.__main__ import run
    assert run(["class", "status", "--runs-root", str(tmp_path / "runs")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [ln.split(":")[0] for ln in out[:4]] == [f"{i}. {p.title}" for i, p in enumerate(classroom.parts(tmp_path), 1)]
    assert out[-1].startswith("about ") and out[-1].endswith("min left")  # no speed check yet: not "here"
    assert run(["class", "status", "--steps", "3"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err


def _corpus(path: Path) -> Path:
    rng = random.Random(0)
    words = [[f"w{t}x{i}" for i in range(6)] for t in range(3)]
    docs = [" ".join(" ".join(rng.choice(words[d % 3]) for _ in range(6)).capitalize() + "." for _ in range(12)) for d in range(24)]
    path.write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    return path


def _tiny_flags(tmp_path):
    return ["--corpus", str(_corpus(tmp_path / "corpus.txt")), "--cache-dir", str(tmp_path / "cache"), "--vocab-size", "120",
            "--layers", "1", "--hidden", "32", "--heads", "2", "--max-positions", "64", "--seq-len", "32",
            "--phase2-seq-len", "64", "--phase2-fraction", "0.5", "--batch-size", "4", "--steps", "4", "--save-every", "2",
            "--eval-every", "2", "--num-threads", "1"]


@pytest.mark.slow
def test_class_cache_builds_what_pretrain_then_finds_in_the_cache(tmp_path):
    from engine.cli import given
    from engine.corpora import load_corpus
    from engine.distributed import Dist
    from engine.pretraining.config import PretrainConfig
    from engine.pretraining.run import build_parser, config_from_args, tokenizer_and_data
    root, flags = tmp_path / "runs", _tiny_flags(tmp_path)
    data = classroom.build_cache(root, flags)
    assert len(data) == 2 and classroom.cache_ready(root)  # both lengths of the two-phase schedule
    cfg = config_from_args(given(PretrainConfig, build_parser(), [*flags, "--out", str(tmp_path / "run")]))
    _, caches = tokenizer_and_data(cfg, load_corpus(cfg.corpus), tmp_path / "run", Dist(), resuming=False)
    assert [str(c.path) for c in caches] == data and all(c.from_cache for c in caches)


@pytest.mark.slow
def test_prepare_end_to_end_on_the_real_queue_with_tiny_settings(tmp_path, monkeypatch):
    from engine.jobs import TERMINAL, Jobs
    root = tmp_path / "runs"
    flags = _tiny_flags(tmp_path)
    monkeypatch.setattr(classroom, "RUN_FLAGS", flags)
    ready = root / "minilm-continued"
    monkeypatch.setattr(classroom, "probe_ready_argv", lambda r, steps=None: ["pretrain", *flags, "--out", str(ready), "--quiet"])
    q = Jobs(root)
    classroom.prepare(root, jobs=q, speed_check=False)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and not all(j["status"] in TERMINAL for j in q.refresh()):
        time.sleep(0.5)
    rows = classroom.status(root, jobs=q)
    assert [r["state"] for r in rows] == ["done"] * 3 + ["skipped"], [(j["name"], j["status"], j.get("error")) for j in q.list_jobs()]
    assert "everything is ready" in classroom.describe(rows)
    n = len(q.list_jobs())
    classroom.prepare(root, jobs=q, speed_check=False)  # started twice: nothing to do
    assert len(q.list_jobs()) == n
    log = (root / classroom.STATE_DIR / "cache" / "job.log").read_text()
    assert "cached " in log and "(exit code 0)" in log


# ---------------------------------------------------------------- the one estimator
def _figure(value=10.0, machine="zen4"):
    return measured.Measured(value, "min", machine, "2026-12-02", "python -m engine pretrain")


def test_the_estimator_scales_a_figure_by_this_machines_reading_of_the_same_kind(monkeypatch):
    import dataclasses
    machines = dict(measured.MACHINES)
    machines["zen4"] = dataclasses.replace(machines["zen4"], check_ms=200.0, minilm_check_ms=800.0)
    monkeypatch.setattr(measured, "MACHINES", machines)
    fig, fp32 = _figure(10.0), _figure(30.0, "avx2")
    here = {"classroom": classroom.Reading(300.0, "read"), "minilm": classroom.Reading(400.0, "read")}
    e = classroom.estimate(fig, "classroom", here)
    assert e.minutes == pytest.approx(15.0) and e.here and e.clause() == "about 15 min here"
    assert "x 1.50" in e.how and fig.where in e.how  # the details: the figure, its machine, the ratio
    assert classroom.estimate(fig, "minilm", here).minutes == pytest.approx(5.0)  # its own kind: 400 / 800
    assert classroom.estimate(fig, "classroom", here, fp32, precision="fp32").minutes == pytest.approx(15.0)
    # no reading here yet: the figure as measured there (fp32's on a CPU that trains in fp32), not "here"
    e = classroom.estimate(fig, "classroom", {})
    assert (e.minutes, e.here, e.clause()) == (10.0, False, "about 10 min")
    assert classroom.estimate(fig, "classroom", {}, fp32, precision="fp32").minutes == 30.0
    # the figure's machine has no reading of that kind: not scaled by another kind's
    assert classroom.estimate(_figure(10.0, "avx2"), "classroom", here).minutes == 10.0
    assert classroom.estimate(fig, "classroom", here, device="cuda").clause() == "under 10 min here"
    assert classroom.Estimate(125.4, "").clause(left=True) == "about 2 h 05 min left here"
    assert classroom.Estimate(0.4, "").clause() == "under a minute here"


def test_each_speed_check_is_the_fastest_of_its_rounds(tmp_path, monkeypatch):
    """A burst of other work during one round reads the machine slow; the fastest round is kept."""
    import os
    import engine.ablations.timing as timing
    readings = iter([900.0, 300.0, 600.0, 2000.0, 1900.0, 2100.0])
    monkeypatch.setattr(timing, "speed_check", lambda: SpeedCheck("bf16", 2, next(readings)))
    monkeypatch.setattr(timing, "minilm_check", lambda: SpeedCheck("bf16", 2, next(readings)))
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    root = tmp_path / "runs"
    classroom.prepare(root, jobs=FakeQueue())
    saved = json.loads((root / classroom.STATE_DIR / "prepare.json").read_text())
    assert {k: c["step_ms"] for k, c in saved["checks"].items()} == {"classroom": 300.0, "minilm": 1900.0}


def _finished_here(part, minutes: float):
    """The part's run, finished here in one go `minutes` after it started, with its recipe's settings."""
    import socket
    from datetime import datetime, timedelta, timezone
    start = datetime(2026, 12, 7, 12, 0, tzinfo=timezone.utc)
    _run(part.run_dir, "finished", step=10)
    write_run_json(part.run_dir, config=classroom.recipe_config(part.argv), starts=1, host=socket.gethostname(),
                   started=start.isoformat(), ended=(start + timedelta(minutes=minutes)).isoformat())


def test_a_part_done_here_is_the_clock_that_scales_its_kind_and_its_error_is_shown(tmp_path, monkeypatch):
    """prepare records its estimate of each part it queues; once the reference part has finished here in one go,
    its own time is this machine's reading of the classroom kind (the speed check's is set aside), so the class's
    own run (step 2) is estimated at what the reference took, and the status sets the time taken beside the
    estimate."""
    import dataclasses
    import os
    import engine.ablations.timing as timing
    root, q = tmp_path / "runs", FakeQueue()
    ref = measured.fact("classroom_run.minutes_bf16")
    machines = dict(measured.MACHINES)
    machines[ref.machine] = dataclasses.replace(machines[ref.machine], check_ms=200.0)
    monkeypatch.setattr(measured, "MACHINES", machines)
    monkeypatch.setattr(timing, "speed_check", lambda: SpeedCheck("bf16", 2, 600.0))  # reads 3x: under a burst
    monkeypatch.setattr(timing, "minilm_check", lambda: SpeedCheck("bf16", 2, 900.0))
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    monkeypatch.setattr(classroom, "machine", lambda: ("bf16", "cpu"))
    rows = classroom.prepare(root, jobs=q)
    assert rows[1]["minutes_left"] == pytest.approx(3 * ref.value)
    saved = json.loads((root / classroom.STATE_DIR / "prepare.json").read_text())
    assert saved["estimates"]["reference"] == pytest.approx(3 * ref.value, abs=0.01)
    _finished_here(_part(root, "reference"), 0.5 * ref.value)  # it took half the figure: the clock says 100 ms
    found = classroom.readings(root)
    assert found["classroom"].step_ms == pytest.approx(100.0) and "took" in found["classroom"].said
    assert classroom.part_estimate(root, "reference").minutes == pytest.approx(0.5 * ref.value)
    row = classroom.status(root, jobs=q)[1]
    assert row["state"] == "done" and row["took"] == pytest.approx(0.5 * ref.value)
    clause, details = classroom.time_words(row)
    assert clause == f"took {0.5 * ref.value:.0f} min here" and "-83%" in details  # 0.5 against 3x the figure
    # copied from another machine (or resumed): not this machine's clock
    from engine.runs import write_run_json as w
    w(_part(root, "reference").run_dir, host="elsewhere")
    assert classroom.readings(root)["classroom"].step_ms == 600.0


# ---------------------------------------------------------------- Google's bert-base-uncased, when online
def test_offline_the_fetch_step_finds_bert_base_in_the_local_hub_cache(tmp_path, offline_hub_cache, capsys):
    """A hub cache holding a tiny BERT under bert-base-uncased's name, HF_HUB_OFFLINE set: `class fetch` finds it
    there (no download), the part is done, prepare queues no job for it, and engine.load reads it from the cache."""
    from engine import hub
    from engine.__main__ import run
    from tests.helpers import tiny_bert_in_hub_cache
    commit = tiny_bert_in_hub_cache(offline_hub_cache, hub.BERT_BASE, tmp_path)
    root, q = tmp_path / "runs", FakeQueue()
    assert commit in str(hub.cached(hub.BERT_BASE))
    line = classroom.fetch_bert_base(root)
    assert "\n" not in line and "is in the Hugging Face cache" in line and str(offline_hub_cache) in line
    rows = classroom.prepare(root, jobs=q, speed_check=False)
    assert rows[3]["key"] == classroom.BERT_BASE_PART and rows[3]["state"] == "done"
    assert not [j for j in q.jobs if j["argv"][:2] == ["class", "fetch"]]
    assert run(["class", "fetch", "--runs-root", str(root)]) == 0
    assert capsys.readouterr().out.strip() == line
    import engine
    assert engine.load(hub.BERT_BASE).info["source"] == hub.BERT_BASE


def test_with_no_cache_the_fetch_is_skipped_in_one_line_offline_or_with_no_network(tmp_path, offline_hub_cache,
                                                                                   monkeypatch, capsys):
    """Offline (HF_HUB_OFFLINE): prepare queues no job and the part says skipped in one line; the class is ready
    without it. Not flagged offline but with the Hub out of reach (a refused connection): prepare queues the fetch,
    whose job says so in one line and succeeds; the part is then skipped with that line, and nothing is an error."""
    import huggingface_hub.constants
    from engine import hub
    from engine.__main__ import run
    root, q = tmp_path / "runs", FakeQueue()
    rows = classroom.prepare(root, jobs=q, speed_check=False)
    row = rows[3]
    assert row["state"] == "skipped" and "HF_HUB_OFFLINE is set" in row["note"] and "\n" not in row["note"]
    assert not [j for j in q.jobs if j["argv"][:2] == ["class", "fetch"]]
    assert classroom.part_state_of("skipped").ready  # the class needs it not
    assert run(["class", "fetch", "--runs-root", str(root)]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and "not fetched: HF_HUB_OFFLINE is set" in out[0]
    # online by the flags, but nothing answers
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setattr(huggingface_hub.constants, "HUGGINGFACE_CO_URL_TEMPLATE",
                        "http://127.0.0.1:9/{repo_id}/resolve/{revision}/{filename}")
    assert not hub.offline()
    rows = classroom.prepare(root, jobs=q, speed_check=False)
    fetch = [j for j in q.jobs if j["argv"][:2] == ["class", "fetch"]]
    assert len(fetch) == 1 and rows[3]["state"] == "queued"
    start = time.monotonic()
    line = classroom.fetch_bert_base(root)
    assert time.monotonic() - start < 20  # one refused connection, no retries
    assert "\n" not in line and "not fetched: the Hugging Face Hub could not be reached" in line
    fetch[0]["status"] = "finished"
    row = classroom.status(root, jobs=q)[3]
    assert (row["state"], row["note"]) == ("skipped", line)
    assert classroom.describe(classroom.status(root, jobs=q)).splitlines()[3].endswith(line)


def test_the_download_reports_its_progress_in_a_log(tmp_path, offline_hub_cache, monkeypatch):
    """engine.hub.download: the megabytes written into the repository's cache folder, as engine.progress lines."""
    import io
    from engine import hub
    blobs = offline_hub_cache / "models--org--big" / "blobs"

    def slow_snapshot(repo_id):
        blobs.mkdir(parents=True)
        for i in range(3):
            (blobs / f"part{i}.incomplete").write_bytes(b"x" * 2_000_000)
            time.sleep(1.1)
        return blobs.parent
    monkeypatch.setattr(hub, "snapshot", slow_snapshot)
    monkeypatch.setattr(hub, "_download_megabytes", lambda repo_id: 6)
    out = io.StringIO()
    assert hub.download("org/big", stream=out, every=0.5) == blobs.parent
    lines = out.getvalue().splitlines()
    assert lines and lines[-1].startswith("downloading org/big: 6/6 megabytes (100%)")
