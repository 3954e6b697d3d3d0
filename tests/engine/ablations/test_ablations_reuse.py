"""A study's pre-training that a finished run has already done is taken over, not trained again
(engine/ablations/reuse.py): what counts as the same run, what is copied, and what is never reused."""
import json
import os
import sys
from dataclasses import asdict, replace
from pathlib import Path

import pytest

from engine import ablations as A
from engine import cli
from engine.ablations import reuse
from engine.pretraining.config import TRAINING_VERSION, PretrainConfig

FINGERPRINT = "f" * 64


def finished_run(run: Path, argv: list, checkpoints=(), status="finished", fingerprint=FINGERPRINT,
                 version=TRAINING_VERSION, **config) -> Path:
    """A pre-training run folder as `pretrain` leaves it: run.json, the tokenizer, checkpoints (COMPLETE, weights)."""
    cfg = {**reuse.config_of(argv), **config, "out": str(run)}
    (run / "tokenizer").mkdir(parents=True)
    (run / "tokenizer" / "vocab.txt").write_text("[PAD]\n")
    for step in checkpoints:
        ck = run / "checkpoints" / f"step-{step}"
        ck.mkdir(parents=True)
        (ck / "model.safetensors").write_bytes(b"w" * 64)
        (ck / "COMPLETE").write_text("ok")
    (run / "metrics.jsonl").write_text('{"step": 1, "split": "train", "loss": 9.0}\n')
    (run / "run.json").write_text(json.dumps({"kind": "pretrain", "status": status, "config": cfg,
                                              "total_steps": cfg["steps"], "tokenizer": str(run / "tokenizer"),
                                              "corpus_fingerprint": fingerprint, "training_version": version}))
    return run


def pretrain_jobs(study, study_dir):
    return {j.variant: j for j in A.plan(study, study_dir) if j.kind == "pretrain"}


def replace_job_commands(tmp_path, monkeypatch, files_of):
    """Each job's command replaced by a short process that records its key in the returned trace file and writes
    `files_of(job, out)` ({file name: JSON}) into its run folder; the corpus fingerprint fixed (no BBC read)."""
    from engine.ablations import runner
    trace = tmp_path / "trace.txt"
    trace.write_text("")

    def fake_command(study_dir, job):
        out = Path(study_dir) / job["out"]
        files = files_of(job, out)
        code = (f"import json, pathlib; pathlib.Path({str(trace)!r}).open('a').write({job['key']!r} + '\\n'); "
                f"[(pathlib.Path({str(out)!r}, n).parent.mkdir(parents=True, exist_ok=True), "
                f"pathlib.Path({str(out)!r}, n).write_text(json.dumps(v))) for n, v in {files!r}.items()]")
        return [sys.executable, "-c", code]
    monkeypatch.setattr(runner, "job_command", fake_command)
    monkeypatch.setattr(reuse, "_fingerprint", lambda key: FINGERPRINT)
    return trace


@pytest.fixture
def fake_jobs(tmp_path, monkeypatch):
    """A finished job leaves an empty run.json (pre-training) or eval.json (evaluation): nothing another study takes over."""
    return replace_job_commands(tmp_path, monkeypatch, lambda job, out: {"run.json" if job["kind"] == "pretrain" else "eval.json": {}})


def test_the_training_key_ignores_where_and_how_often_but_not_what():
    base = PretrainConfig.classroom(seed=0)
    key = reuse.training_key(asdict(base))
    same = [replace(base, out="/elsewhere", save_every=750, keep=2, num_threads=1, eval_every=100, log_every=1,
                    precision="fp32", device="cpu", prefetch=0, quiet=True),
            replace(base, layers=2, hidden=128, heads=2)]  # the tiny preset spelled out: one model
    for cfg in same:
        assert reuse.training_key(asdict(cfg)) == key
    other = [replace(base, seed=1), replace(base, lr=2e-3), replace(base, mask_ratios=(1.0, 0.0, 0.0)),
             replace(base, objective="ltr"), replace(base, layers=4), replace(base, steps=1500),
             replace(base, max_minutes=10.0), replace(base, corpus="wiki"), replace(base, dupe_factor=5)]
    for cfg in other:
        assert reuse.training_key(asdict(cfg)) != key


def test_every_study_saves_the_checkpoints_figure5_reads():
    """One cadence at classroom and lab scale (an eighth of the steps when a quarter is even), so any study's run
    holds Figure 5's checkpoints and the pre-training command lines of the studies agree but for their folders."""
    assert [A.study.checkpoint_cadence(n) for n in (3000, 5000, 20, 1000, 2)] == [375, 625, 5, 125, 1]
    for scale, steps in (("classroom", 3000), ("lab", 5000)):
        fig5 = A.get_study("training-steps", scale=scale)
        assert all(k % A.study.checkpoint_cadence(steps) == 0 for k in fig5.checkpoint_steps)
        for name in ("pretraining-tasks", "model-size", "masking", "training-steps"):
            study = A.get_study(name, scale=scale)
            assert study.base.save_every == A.study.checkpoint_cadence(study.base.steps), (name, scale)
            # Table 5's classroom default is 6,000 steps (its runs cannot stand in for Figure 5's 3,000: another
            # schedule); every other study at a scale shares the scale's steps
            assert study.base.steps == (6000 if (name, scale) == ("pretraining-tasks", "classroom") else steps)
    assert A.get_study("pretraining-tasks").base.save_every == PretrainConfig.save_every  # its own scale: unchanged
    # the 3,000-step lesson (equal steps): Table 5's BERT and LTR runs are Figure 5's two
    t5 = pretrain_jobs(A.get_lesson("table5-3k").build(), Path("/s/t5"))
    f5 = pretrain_jobs(A.get_study("training-steps", scale="classroom"), Path("/s/f5"))
    strip = lambda argv: [a for a in argv if not a.startswith("/s/")]
    assert strip(t5["BERT (MLM + NSP)"].argv) == strip(f5["MLM (BERT)"].argv)
    assert strip(t5["LTR & No NSP"].argv) == strip(f5["LTR"].argv)


def test_a_second_study_takes_over_a_finished_pretraining_and_trains_the_rest(tmp_path, fake_jobs):
    """Figure 5 after Table 5 at 3,000 equal steps (the table5-3k lesson): its MLM row is Table 5's BERT run (copied in with the checkpoints it reads, the
    weights hard-linked, run.json naming its source); its LTR row, with no finished twin, is trained; the
    fine-tunes of both run; deleting the source study afterwards loses nothing."""
    fig5 = A.get_study("training-steps", scale="classroom", evaluations=(A.BBC,))
    t5_dir = tmp_path / "studies" / "pretraining-tasks"
    t5_argv = pretrain_jobs(A.get_lesson("table5-3k").build(), t5_dir)["BERT (MLM + NSP)"].argv
    src = finished_run(t5_dir / "runs" / "bert-mlm-nsp-s0", t5_argv, checkpoints=(375, 750, 1500, 2250, 3000))
    lines = []
    d = A.launch(fig5, runs_root=tmp_path, foreground=True, log=lines.append)
    jobs = {j["variant"] + "/" + j["kind"]: j for j in A.read_study(d)["jobs"] if j["kind"] == "pretrain"}
    mlm, ltr = jobs["MLM (BERT)/pretrain"], jobs["LTR/pretrain"]
    trained = set(fake_jobs.read_text().split())
    assert mlm["status"] == "finished" and mlm["reused_from"] == str(src) and mlm["seconds"] == 0
    assert mlm["key"] not in trained and ltr["key"] in trained and "reused_from" not in ltr
    assert all(j["status"] == "finished" for j in A.read_study(d)["jobs"])
    assert len([k for k in trained if k.startswith("eval/")]) == 6  # every checkpoint of both rows fine-tuned
    copy = d / mlm["out"]
    info = json.loads((copy / "run.json").read_text())
    assert info["reused_from"] == str(src) and info["config"]["out"] == str(copy.absolute())
    assert info["tokenizer"] == str(copy.absolute() / "tokenizer")  # its own folder, not the source's
    weights = copy / "checkpoints" / "step-750" / "model.safetensors"
    assert os.stat(weights).st_ino == os.stat(src / "checkpoints" / "step-750" / "model.safetensors").st_ino
    (copy / "metrics.jsonl").write_text("")  # copied, not linked: the two runs' records stay apart
    assert (src / "metrics.jsonl").read_text()
    assert any("reused the finished pre-training" in str(x) for x in lines)
    res = A.collect_results(d)
    assert res.progress["reused"] == 1
    from engine.ablations.cli import results_json
    assert results_json(d, res)["reused"] == {mlm["key"]: str(src)}
    import shutil
    shutil.rmtree(t5_dir)
    assert weights.read_bytes() == b"w" * 64


@pytest.mark.parametrize("why", ["running", "checkpoint missing", "other seed", "other text", "older code", "mixed", "no-reuse"])
def test_what_is_never_taken_over(tmp_path, fake_jobs, why):
    """An unfinished run, one without a checkpoint the study reads, other settings, another corpus text, a run of
    code that trained these settings otherwise (or partly), or `--no-reuse`: the pre-training is trained."""
    fig5 = A.get_study("training-steps", scale="classroom", evaluations=(A.BBC,))
    argv = pretrain_jobs(fig5, tmp_path / "x")["MLM (BERT)"].argv
    kw = {"running": dict(status="running"), "other seed": dict(seed=7), "other text": dict(fingerprint="0" * 64),
          "older code": dict(version=None), "mixed": dict(version="mixed"),
          "checkpoint missing": dict(checkpoints=(750, 3000))}.get(why, {})
    finished_run(tmp_path / "plain-run", argv, **{"checkpoints": (750, 1500, 3000), **kw})
    d = A.launch(fig5, runs_root=tmp_path, foreground=True, log=lambda *a: None, reuse=why != "no-reuse")
    data = A.read_study(d)
    assert data["reuse"] is (why != "no-reuse")
    assert not any(j.get("reused_from") for j in data["jobs"])
    assert sum(k.startswith("pretrain/") for k in fake_jobs.read_text().split()) == 2


def test_a_queued_study_takes_over_what_is_finished_when_it_is_queued(tmp_path, monkeypatch):
    """Queued one job at a time (the page's default), the finished twin is taken over at launch: its job is not
    queued, study.json says finished and where from; the fine-tunes of it are queued."""
    import engine.jobs as Q
    calls = []
    monkeypatch.setattr(Q, "submit", lambda argv, name=None, run_dir=None, root=None, **kw: calls.append(argv) or {"id": f"q{len(calls)}"})
    monkeypatch.setattr(Q, "list_jobs", lambda root=None: [])
    monkeypatch.setattr(reuse, "_fingerprint", lambda key: FINGERPRINT)
    t5 = A.get_study("pretraining-tasks", scale="classroom", evaluations=(A.BBC,))
    bert = pretrain_jobs(t5, tmp_path / "x")["BERT (MLM + NSP)"]
    src = finished_run(tmp_path / "classroom-bert", bert.argv, checkpoints=(3000,))
    d = A.launch(t5, runs_root=tmp_path, log=lambda *a: None)
    data = A.read_study(d)
    job = next(j for j in data["jobs"] if j["key"] == bert.key)
    assert job["reused_from"] == str(src) and job["job_id"] is None
    assert len(calls) == len(data["jobs"]) - 1 and bert.argv not in calls
    assert {s["key"]: s["state"] for s in A.job_states(d)}[bert.key] == "finished"
    others = [j["key"] for j in data["jobs"] if j["key"] != bert.key]
    assert calls == [["ablate", "job", str(d.absolute()), k] for k in others]  # each job checks again when it starts


def queued_table5(tmp_path, monkeypatch, reuse_on=True):
    """Table 5 queued one job at a time (the queue itself replaced by a list) with nothing to take over at launch."""
    import engine.jobs as Q
    calls = []
    monkeypatch.setattr(Q, "submit", lambda argv, name=None, run_dir=None, root=None, **kw: calls.append(argv) or {"id": f"q{len(calls)}"})
    monkeypatch.setattr(reuse, "_fingerprint", lambda key: FINGERPRINT)
    t5 = A.get_study("pretraining-tasks", scale="classroom", evaluations=(A.BBC,))
    d = A.launch(t5, runs_root=tmp_path, log=lambda *a: None, reuse=reuse_on)
    bert = next(j for j in A.read_study(d)["jobs"] if j["variant"] == "BERT (MLM + NSP)" and j["kind"] == "pretrain")
    return d, bert, calls


def test_a_queued_pretraining_takes_over_a_run_that_finished_after_launch(tmp_path, monkeypatch):
    """Queued one job at a time, the check is made again when the job starts (`ablate job`, runner.run_job): a twin
    that finished while the study waited in the queue is taken over; the queue's log, already in the job's folder
    and open, stays there; nothing is trained."""
    from engine.ablations import runner
    from engine.ablations.cli import main
    d, bert, calls = queued_table5(tmp_path, monkeypatch)
    assert ["ablate", "job", str(d.absolute()), bert["key"]] in calls and not bert.get("reused_from")
    src = finished_run(tmp_path / "classroom-bert", bert["argv"], checkpoints=(375, 3000))  # finished after launch
    out = d / bert["out"]
    out.mkdir(parents=True)
    with open(out / "job.log", "a") as log:  # what the queue writes before it starts the job, and keeps open
        log.write("[job q1] header\n")
        log.flush()
        monkeypatch.setattr(runner.os, "execv", lambda *a: pytest.fail("trained although a twin had finished"))
        assert main(["job", str(d), bert["key"]]) == 0
        log.write("after\n")
    job = next(j for j in A.read_study(d)["jobs"] if j["key"] == bert["key"])
    assert job["status"] == "finished" and job["reused_from"] == str(src)
    assert json.loads((out / "run.json").read_text())["reused_from"] == str(src)
    assert (out / "checkpoints" / "step-3000" / "COMPLETE").is_file()
    assert (out / "job.log").read_text() == "[job q1] header\nafter\n"  # the same file, moved with the folder
    assert not out.with_name(out.name + ".reusing").exists()


@pytest.mark.parametrize("case", ["nothing finished", "reuse off", "begun"])
def test_a_queued_pretraining_with_nothing_to_take_over_becomes_its_command(tmp_path, monkeypatch, case):
    """No twin, a study launched with reuse off, or a run folder holding a start of its own (a retry): `ablate job`
    becomes the job's own command (exec: the queue's pid, cancel and log are the pre-training's), from the repo
    root, with --resume where its run has begun; nothing is copied."""
    from engine.ablations import runner
    d, bert, calls = queued_table5(tmp_path, monkeypatch, reuse_on=case != "reuse off")
    assert ["ablate", "job", str(d.absolute()), bert["key"]] in calls  # with reuse off too: it checks its model
    if case != "nothing finished":
        finished_run(tmp_path / "classroom-bert", bert["argv"], checkpoints=(375, 3000))
    out = d / bert["out"]
    if case == "begun":
        ck = out / "checkpoints" / "step-375"
        ck.mkdir(parents=True)
        (ck / "COMPLETE").write_text("ok")
    seen = {}
    monkeypatch.setattr(runner.os, "chdir", lambda p: seen.setdefault("cwd", p))

    def execv(path, args):
        seen["cmd"] = args
        raise SystemExit(0)
    monkeypatch.setattr(runner.os, "execv", execv)
    with pytest.raises(SystemExit):
        runner.run_job(d, bert["key"], log=lambda *a: None)
    assert seen["cwd"] == runner.REPO_ROOT
    assert seen["cmd"][:3] == [sys.executable, "-m", "engine"] and seen["cmd"][3:3 + len(bert["argv"])] == bert["argv"]
    assert ("--resume" in seen["cmd"]) is (case == "begun")
    assert not any(j.get("reused_from") for j in A.read_study(d)["jobs"])
    from engine.errors import EngineError
    with pytest.raises(EngineError, match="has no job 'pretrain/nope'"):
        runner.run_job(d, "pretrain/nope")


def test_the_real_corpus_text_decides(tmp_path):
    """The fingerprint is the one pre-training records (its data folder's key; a run from before the one data builder:
    engine.tokenizer.corpus_fingerprint of the corpus), against the corpus as it reads now: a corpus folder edited
    since the run is not the same text."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(4):
        (corpus / f"d{i}.txt").write_text(f"Sentence one of document {i}. Sentence two of it.\n")
    cfg = PretrainConfig.classroom(corpus=str(corpus), out=str(tmp_path / "new"))
    argv = cli.argv(cfg)
    from engine.corpora import load_corpus
    from engine.tokenizer import corpus_fingerprint
    run = finished_run(tmp_path / "runs" / "old", argv, fingerprint=corpus_fingerprint(load_corpus(str(corpus))))
    assert reuse.matching_run(argv, [""], tmp_path / "runs", tmp_path / "study") == run
    # a run of today records its data folder's key (engine.pretraining.run.data_fingerprint), made with its vocabulary
    from engine.pretraining.run import data_fingerprint
    from engine.tokenizer import train_tokenizer
    new = finished_run(tmp_path / "today" / "new", argv, fingerprint="prepared-0")
    tok = train_tokenizer([" ".join(d) for d in load_corpus(str(corpus))], vocab_size=100, min_frequency=1)
    tok.save(new / "tokenizer")
    fp = data_fingerprint("prepared-0", PretrainConfig(**reuse.config_of(argv)), corpus_fingerprint(load_corpus(str(corpus))),
                          new / "tokenizer")
    assert fp.startswith("prepared-") and fp != "prepared-0"
    info = json.loads((new / "run.json").read_text())
    (new / "run.json").write_text(json.dumps({**info, "corpus_fingerprint": fp}))
    assert reuse.matching_run(argv, [""], tmp_path / "today", tmp_path / "study") == new
    (corpus / "d0.txt").write_text("Another text entirely. With two sentences.\n")
    assert reuse.matching_run(argv, [""], tmp_path / "runs", tmp_path / "study") is None
    assert reuse.matching_run(argv, [""], tmp_path / "today", tmp_path / "study") is None


def test_the_cli_flag_and_a_half_copied_run(tmp_path, capsys, monkeypatch):
    """`ablate run --no-reuse` is a flag of its own; a copy that fails part-way leaves the job's folder empty and
    the job trains (a failure to reuse is never a lost study)."""
    from engine.ablations.cli import main
    assert main(["run", "pretraining-tasks", "--classroom", "--no-reuse", "--dry-run", "--runs-root", str(tmp_path)]) == 0
    assert "--save-every 750" in capsys.readouterr().out  # an eighth of Table 5's 6,000 classroom steps
    src = finished_run(tmp_path / "src", ["pretrain"], checkpoints=(10,))
    monkeypatch.setattr(reuse.shutil, "copy2", lambda *a, **k: (_ for _ in ()).throw(OSError("disk full")))
    with pytest.raises(OSError, match="disk full"):
        reuse.adopt(src, tmp_path / "dst")
    assert not (tmp_path / "dst").exists() and not (tmp_path / "dst.reusing").exists() and (src / "run.json").is_file()


@pytest.mark.slow
def test_a_real_finished_run_matches_and_a_resume_across_code_versions_does_not(tmp_path, bbc_docs, monkeypatch):
    """A real pre-training run: run.json records this code's training_version and the corpus fingerprint, and the
    run matches its own command line (no fake fields); resumed after its record lost the version (a run of older
    code), it becomes "mixed" and is never taken over."""
    import engine
    from engine import runs
    monkeypatch.setenv("BERT_STUDIO_CACHE", str(tmp_path / "cache"))
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n\n".join(" ".join(d) for d in bbc_docs[::50]), encoding="utf-8")
    cfg = PretrainConfig.classroom(corpus=str(corpus), vocab_size=600, hidden=32, heads=2, layers=1, seq_len=32, batch_size=8,
                         steps=3, eval_every=0, save_every=0, num_threads=1, quiet=True, out=str(tmp_path / "runs" / "pre"))
    run_dir = engine.pretrain(cfg)
    assert runs.read_run_json(run_dir)["training_version"] == TRAINING_VERSION
    argv = cli.argv(replace(cfg, out=str(tmp_path / "study" / "runs" / "x"), save_every=375, num_threads=2))
    assert reuse.matching_run(argv, [""], tmp_path / "runs", tmp_path / "study") == run_dir
    runs.write_run_json(run_dir, training_version=None)
    engine.pretrain(replace(cfg, steps=4, resume=True))
    assert runs.read_run_json(run_dir)["training_version"] == "mixed"
    assert reuse.matching_run(cli.argv(replace(cfg, steps=4)), [""], tmp_path / "runs", tmp_path / "study") is None


def test_the_estimate_counts_what_is_done_already(tmp_path, monkeypatch):
    """`ablate estimate` and the page: a pre-training a finished run has done is taken off the study's estimate (that
    run's own training time); nothing under the runs folder, the estimate of the study alone."""
    from engine.ablations.timing import SpeedCheck
    monkeypatch.setattr(reuse, "_fingerprint", lambda key: FINGERPRINT)
    check = SpeedCheck("fp32", 2, A.timing.REFERENCE_STEP_MS * 3)  # a machine 3x slower than the reference
    fig5 = A.get_study("training-steps", scale="classroom")
    alone = A.estimate(fig5, check, runs_root=tmp_path)
    assert alone["reused"] == [] and alone["minutes"] == pytest.approx(24.5 * 3)
    argv = pretrain_jobs(fig5, tmp_path / "x")["MLM (BERT)"].argv
    run = finished_run(tmp_path / "bert", argv, checkpoints=(750, 1500, 3000))
    (run / "metrics.jsonl").write_text('{"step": 3000, "split": "train", "elapsed": 900.0}\n'
                                       '{"step": 3000, "split": "eval", "eval_loss": 5.0}\n')
    est = A.estimate(fig5, check, runs_root=tmp_path)
    assert [r["run"] for r in est["reused"]] == [str(run)] and est["reused"][0]["minutes"] == pytest.approx(15.0)
    # what is taken off is what it would train here (its FLOPs at the check's rate), not the run's own 15 minutes
    here = A.timing.training_seconds(PretrainConfig.classroom(**reuse.config_of(argv)), check) / 60
    assert est["reused"][0]["here_minutes"] == pytest.approx(here) and 5 < here < 100
    assert est["minutes"] == pytest.approx(24.5 * 3 - here)
    assert "1 of its pre-trainings needs no training of its own (1 done already by finished runs" in est["text"]
    assert f"less the {here:.0f} min it would train here" in est["text"]


def test_training_seconds_follows_the_flops_of_each_phase():
    """The modelled training time: the speed check's step (tiny, 64 x 128, MLM at 25%) is one check-step of time;
    the two-phase classroom run splits its steps as the training loop does; a left-to-right run, its projection onto
    the vocabulary at every position, costs more; a time budget caps it."""
    from engine.ablations.timing import SpeedCheck, training_seconds
    check = SpeedCheck("fp32", 2, 500.0)
    step = PretrainConfig.classroom(preset="tiny", vocab_size=8000, batch_size=64, seq_len=128, mask_rate=0.25, objective="mlm",
                          steps=10)
    assert training_seconds(step, check) == pytest.approx(10 * 0.5)
    assert training_seconds(replace(step, steps=20), replace(check, step_ms=250.0)) == pytest.approx(10 * 0.5)
    two = replace(step, seq_len=32, phase2_seq_len=128, phase2_fraction=0.3, steps=1000)
    short = training_seconds(replace(two, phase2_seq_len=None, steps=700), check)
    assert training_seconds(two, check) == pytest.approx(short + 300 * 0.5)
    assert 0.2 * 0.5 < short / 700 < 0.3 * 0.5  # a quarter of the tokens, a little more than a quarter of the FLOPs
    assert training_seconds(replace(two, objective="ltr"), check) > 1.8 * training_seconds(two, check)
    assert training_seconds(replace(two, max_minutes=0.5), check) == pytest.approx(30.0)
    # a generator's step takes the measured time per FLOP over BERT's on top of its FLOPs (ELECTRA's run)
    from engine.ablations.planner import run_flops
    from engine.measured import fact
    for name in ("electra", "replace-mlm", "all-tokens-mlm"):
        gen = replace(two, objective=name)
        assert training_seconds(gen, check) / training_seconds(two, check) == pytest.approx(
            fact("estimate.generator_step_cost").value * run_flops(gen) / run_flops(two))
    assert training_seconds(replace(two, objective="mlm+sop"), check) == pytest.approx(training_seconds(two, check), rel=0.02)


def queue_file(root: Path, jobs: list) -> None:
    """The job queue under `root` as engine.jobs writes it, with these (id, name, argv, status) jobs."""
    (root / ".jobs").mkdir(parents=True, exist_ok=True)
    (root / ".jobs" / "queue.json").write_text(json.dumps({"version": 1, "jobs": [
        {"id": i, "name": n, "argv": argv, "status": st} for i, n, argv, st in jobs]}))


def test_the_estimate_counts_what_jobs_queued_ahead_will_do(tmp_path):
    """A class queues Table 5 at 3,000 equal steps (the table5-3k lesson), then asks how long Figure 5 will take:
    Table 5's two pre-trainings it shares (BERT,
    LTR), queued as `ablate job`, are taken off; so is one queued as a plain `pretrain` job that saves the
    checkpoints Figure 5 reads, or one a study run with jobs at once (`ablate resume`) has still to train; not a job
    that has ended, one that would not save step 750, or a study folder deleted since."""
    from engine.ablations.folders import write_study
    from engine.ablations.timing import SpeedCheck, queued_twins
    check = SpeedCheck("fp32", 2, A.timing.REFERENCE_STEP_MS * 3)
    fig5 = A.get_study("training-steps", scale="classroom")
    t5 = A.get_lesson("table5-3k").build()
    d = tmp_path / "studies" / "pretraining-tasks"
    d.mkdir(parents=True)
    jobs = A.plan(t5, d)
    write_study(d, t5, jobs, mode="queue", runs_root=str(tmp_path), reuse=True)
    t5pre = {j.variant: j for j in jobs if j.kind == "pretrain"}
    queue_file(tmp_path, [("a", "t5: bert", ["ablate", "job", str(d), t5pre["BERT (MLM + NSP)"].key], "running"),
                          ("b", "t5: ltr", ["ablate", "job", str(d), t5pre["LTR & No NSP"].key], "queued")])
    est = A.estimate(fig5, check, runs_root=tmp_path)
    here = {k: A.timing.training_seconds(PretrainConfig.classroom(**reuse.config_of(j.argv)), check) / 60
            for k, j in ((j.key, j) for j in A.plan(fig5, tmp_path / "x") if j.kind == "pretrain")}
    assert sorted(q["job"] for q in est["queued"]) == ["a", "b"] and est["reused"] == []
    assert est["minutes"] == pytest.approx(24.5 * 3 - sum(here.values()))
    assert "2 to be done by jobs queued ahead of it with the same settings (t5: bert, t5: ltr)" in est["text"]
    # ended jobs are not ahead; a Jobs-at-once study's unfinished pre-trainings are
    queue_file(tmp_path, [("a", "t5", ["ablate", "resume", str(d), "--parallel", "2"], "queued"),
                          ("b", "old", ["ablate", "job", str(d), t5pre["LTR & No NSP"].key], "finished")])
    assert len(queued_twins(fig5, tmp_path)) == 2
    assert queued_twins(fig5, tmp_path, skip={q["key"] for q in est["queued"]}) == []
    # a plain pretrain job: a twin only where it saves the checkpoints Figure 5 reads (750, 1,500, 3,000)
    mlm = PretrainConfig.classroom(**reuse.config_of(pretrain_jobs(fig5, tmp_path / "x")["MLM (BERT)"].argv))
    for every, twin in ((375, True), (400, False)):
        argv = cli.argv(replace(mlm, out=str(tmp_path / "r"), save_every=every))
        queue_file(tmp_path, [("p", "plain", argv, "queued")])
        assert [q["job"] for q in queued_twins(fig5, tmp_path)] == (["p"] if twin else []), every
    argv = cli.argv(replace(mlm, out=str(tmp_path / "r"), seed=1))  # another seed: another model
    queue_file(tmp_path, [("p", "plain", argv, "queued"), ("g", "gone", ["ablate", "job", str(tmp_path / "gone"), "k"], "queued"),
                          ("w", "typo", ["pretrain", "--stepz", "3"], "queued")])  # fails when it runs; no error here
    assert queued_twins(fig5, tmp_path) == []


@pytest.mark.slow
def test_the_real_queue_runs_the_check_when_the_job_starts(tmp_path):
    """End to end through the job queue (detached runner, `python -m engine ablate job`, the real BBC fingerprint):
    the queued pre-training takes over a twin that finished after the study was written; the queue records the
    job finished, study.json where from, and the job's log says so."""
    import time
    from engine.ablations.folders import write_study
    from engine.jobs import TERMINAL, Jobs
    t5 = A.get_study("pretraining-tasks", scale="classroom", evaluations=(A.BBC,))
    d = tmp_path / "studies" / "pretraining-tasks"
    d.mkdir(parents=True)
    jobs = A.plan(t5, d)
    write_study(d, t5, jobs, mode="queue", runs_root=str(tmp_path), reuse=True)
    bert = next(j for j in jobs if j.kind == "pretrain" and j.variant == "BERT (MLM + NSP)")
    src = finished_run(tmp_path / "classroom-bert", bert.argv, checkpoints=(375, 750),
                       fingerprint=reuse._read_fingerprint("bbc"))
    q = Jobs(tmp_path)
    rec = q.submit(["ablate", "job", str(d.absolute()), bert.key], name="t5: bert", run_dir=str(d / bert.out))
    deadline = time.monotonic() + 120
    while q.get(rec["id"])["status"] not in TERMINAL and time.monotonic() < deadline:
        time.sleep(0.2)
    done = q.get(rec["id"])
    assert done["status"] == "finished", q.tail_log(rec["id"])
    assert "reused the finished pre-training" in q.tail_log(rec["id"])
    assert {s["key"]: (s["state"], s["reused_from"]) for s in A.job_states(d)}[bert.key] == ("finished", str(src))
    assert json.loads((d / bert.out / "run.json").read_text())["reused_from"] == str(src)


@pytest.mark.slow
def test_a_queued_study_pretraining_cancelled_keeps_its_checkpoint_and_its_retry_resumes(tmp_path, bbc_docs):
    """A real fault through the queue: the study's pre-training runs as `ablate job`, which becomes `pretrain` (no
    twin to take over); Cancel gives it the pre-training's grace (it saves a checkpoint; the queue's own timeout
    here is 10 ms), and the Jobs page's Retry of the same `ablate job` resumes it to the end."""
    import time
    from engine import runs
    from engine.jobs import TERMINAL, Jobs
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n\n".join(" ".join(d) for d in bbc_docs[::37]), encoding="utf-8")
    d = tmp_path / "studies" / "mine"
    out = d / "runs" / "bert"
    argv = ["pretrain", "--corpus", str(corpus), "--preset", "tiny", "--hidden", "32", "--heads", "2", "--vocab-size",
            "500", "--seq-len", "32", "--batch-size", "4", "--steps", "400", "--save-every", "0", "--log-every", "1",
            "--eval-every", "0", "--num-threads", "1", "--quiet", "--out", str(out)]
    job = {"key": "pretrain/bert/s0", "kind": "pretrain", "variant": "BERT", "seed": 0, "argv": argv, "out": "runs/bert"}
    d.mkdir(parents=True)
    (d / "study.json").write_text(json.dumps({"study": {"name": "mine"}, "jobs": [job], "mode": "queue",
                                              "runs_root": str(tmp_path), "reuse": True}))
    q = Jobs(tmp_path, cancel_timeout=0.01)

    def wait(pred, timeout=120):
        deadline = time.monotonic() + timeout
        while not pred() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert pred()
    rec = q.submit(["ablate", "job", str(d), job["key"]], name="mine: bert", run_dir=str(out))
    wait(lambda: (runs.run_progress(out)["step"] or 0) >= 5)
    assert q.cancel(rec["id"])["status"] == "cancelled"
    info = runs.read_run_json(out)  # the run's own record of the cancel, and its checkpoint (none saved before)
    assert info["status"] == "cancelled" and "cancelled by SIGTERM at step" in info["error"], info
    assert runs.latest_checkpoint(out) is not None
    again = q.retry(rec["id"])
    wait(lambda: q.get(again["id"])["status"] in TERMINAL, timeout=300)
    assert q.get(again["id"])["status"] == "finished", q.tail_log(again["id"])
    info = runs.read_run_json(out)
    assert info["status"] == "finished" and "reused_from" not in info
    assert runs.checkpoint_step(runs.latest_checkpoint(out)) == 400


@pytest.fixture
def recording_jobs(tmp_path, monkeypatch):
    """A finished job leaves what the real command does for reuse to read: a pre-training's run.json (finished, its
    config, fingerprint and training version) and its last checkpoint, whose weights are what it trained (the same
    settings, the same weights, as one machine trains them), an evaluation's run.json (finished, its model, the
    evaluation version) and eval.json (the model's path)."""
    from engine.records import EVALUATION_VERSION

    def files_of(job, out):
        if job["kind"] == "pretrain":
            cfg = {**reuse.config_of(job["argv"]), "out": str(out)}
            ck = f"checkpoints/step-{cfg['steps']}"
            return {"run.json": {"kind": "pretrain", "status": "finished", "config": cfg,
                                 "corpus_fingerprint": FINGERPRINT, "training_version": TRAINING_VERSION},
                    f"{ck}/model.safetensors": reuse.training_key(cfg), f"{ck}/COMPLETE": {}}
        model = job["argv"][job["argv"].index("--model") + 1]
        return {"run.json": {"kind": job["kind"], "status": "finished", "model": model, "evaluation_version": EVALUATION_VERSION,
                             "config": {"model": model, "out": str(out)}},
                "eval.json": {"model_path": model, "score": 0.5, "key": job["key"]}}
    return replace_job_commands(tmp_path, monkeypatch, files_of)


@pytest.mark.slow  # several seconds: processes, a real speed check or a full preparation
def test_a_second_seed_takes_over_the_first_seeds_pretrainings_and_finetunings(tmp_path, recording_jobs):
    """`ablate run pretraining-tasks --classroom --seeds 2` after the one-seed study: seed 0's pre-trainings and
    fine-tunings (the + BiLSTM row's too, which reads the LTR run) are copied in, their paths moved to the new
    study's folders; only seed 1 runs. A third study with other fine-tuning settings takes over the pre-trainings
    only."""
    one = A.launch(A.get_study("pretraining-tasks", scale="classroom", evaluations=(A.BBC,)), runs_root=tmp_path,
                   foreground=True, log=lambda *a: None)
    recording_jobs.write_text("")
    # the estimate says so first: seed 0's pre-trainings and fine-tunings are taken off, at what they would take here
    study_two = A.get_study("pretraining-tasks", scale="classroom", evaluations=(A.BBC,), seeds=2)
    check = A.SpeedCheck("fp32", 2, A.timing.REFERENCE_STEP_MS * 2)
    est = A.estimate(study_two, check, runs_root=tmp_path)
    seed0 = {j.key for j in A.plan(study_two, tmp_path / "x") if j.seed == 0}
    assert {r["key"] for r in est["reused"] + est["reused_evaluations"]} == seed0 and len(est["reused_evaluations"]) == 4
    assert est["minutes"] == pytest.approx(sum(m for k, m in est["jobs"].items() if k not in seed0))
    assert "4 of its evaluations are done already by another study's finished jobs" in est["text"]
    other = A.estimate(A.get_study("pretraining-tasks", scale="classroom", evaluations=(A.BBC,), epochs=2), check, runs_root=tmp_path)
    assert len(other["reused"]) == 3 and other["reused_evaluations"] == []  # other epochs: the fine-tunings run
    two = A.launch(study_two, runs_root=tmp_path, name="two-seeds", foreground=True, log=lambda *a: None)
    ran = recording_jobs.read_text().split()
    jobs = A.read_study(two)["jobs"]
    assert sorted(ran) == sorted(j["key"] for j in jobs if j["seed"] == 1) and len(ran) == 7  # 3 pre-trainings, 4 fine-tunes
    for j in (j for j in jobs if j["seed"] == 0):
        assert j["status"] == "finished" and j["reused_from"] == str((one / j["out"]).absolute()), j["key"]
        if j["kind"] != "pretrain":
            info = json.loads((two / j["out"] / "run.json").read_text())
            ev = json.loads((two / j["out"] / "eval.json").read_text())
            model = [a for a in j["argv"] if a.startswith(str(two))][0]  # the model it reads: this study's run
            assert info["model"] == info["config"]["model"] == ev["model_path"] == model != str(one)
            assert info["config"]["out"] == str((two / j["out"]).absolute()) and ev["key"] == j["key"]
    assert A.collect_results(two).progress["reused"] == 7
    recording_jobs.write_text("")
    three = A.launch(A.get_study("pretraining-tasks", scale="classroom", evaluations=(A.BBC,), epochs=2), runs_root=tmp_path,
                     name="two-epochs", foreground=True, log=lambda *a: None)
    evals = [j["key"] for j in A.read_study(three)["jobs"] if j["kind"] != "pretrain"]
    assert sorted(recording_jobs.read_text().split()) == sorted(evals) and len(evals) == 4, "other epochs: fine-tuned"


@pytest.mark.parametrize("why", ["older code", "not finished", "data file", "no-reuse", "other model"])
def test_what_evaluation_is_never_taken_over(tmp_path, recording_jobs, why):
    """A fine-tuning of code before EVALUATION_VERSION (or none recorded), one that did not finish, one that reads a
    data file, `--no-reuse`, or one of another training of its model (the same settings, trained twice) is run again."""
    t5 = A.get_study("pretraining-tasks", scale="classroom", evaluations=(A.BBC,))
    one = A.launch(t5, runs_root=tmp_path, foreground=True, log=lambda *a: None)
    data = A.read_study(one)
    ft = next(j for j in data["jobs"] if j["variant"] == "BERT (MLM + NSP)" and j["kind"] == "finetune")
    run = json.loads((one / ft["out"] / "run.json").read_text())
    if why == "older code":
        run.pop("evaluation_version")
    if why == "not finished":
        run["status"] = "failed"
    (one / ft["out"] / "run.json").write_text(json.dumps(run))
    if why == "data file":
        for j in data["jobs"]:
            j["argv"] += ["--train", "/tmp/mine.tsv"]
        (one / "study.json").write_text(json.dumps(data))
    if why == "other model":  # the next study takes over another training of its BERT row (a plain run, found first)
        finished_run(tmp_path / "a-plain-bert", next(j for j in data["jobs"] if j["key"] == "pretrain/bert-mlm-nsp/s0")["argv"],
                     checkpoints=(3000,))
    recording_jobs.write_text("")
    two = A.launch(t5, runs_root=tmp_path, name="again", foreground=True, log=lambda *a: None, reuse=why != "no-reuse")
    ran = recording_jobs.read_text().split()
    assert ft["key"] in ran
    others = [j["key"] for j in A.read_study(two)["jobs"] if j["kind"] == "finetune" and j["variant"] != "BERT (MLM + NSP)"]
    assert all((k in ran) == (why in ("no-reuse", "data file")) for k in others), ran


def test_origin_is_the_weights_content_not_the_folder(tmp_path):
    """The model a run holds is named by its latest checkpoint's weights: a copy names the same model, another
    training in the same folder another one, a run without a checkpoint none."""
    a = finished_run(tmp_path / "a", ["pretrain", "--steps", "4"], checkpoints=(2, 4))
    first = reuse.origin(a)
    assert first is not None and reuse.origin(a) == first
    reuse.adopt(a, tmp_path / "copy")
    assert reuse.origin(tmp_path / "copy") == first
    (a / "checkpoints" / "step-4" / "model.safetensors").write_bytes(b"v" * 65)  # trained again, other weights
    assert reuse.origin(a) not in (None, first)
    assert reuse.origin(finished_run(tmp_path / "b", ["pretrain"])) is None


def test_a_run_recorded_before_a_setting_existed_keeps_its_key_at_that_settings_default():
    """A run.json written before span masking existed records no span_mask: it trained without spans, so its
    training key equals that of today's config at the default, and differs from one with spans."""
    from dataclasses import asdict
    from engine.ablations.reuse import training_key
    from engine.pretraining.config import PretrainConfig
    today = asdict(PretrainConfig.classroom())
    old = {k: v for k, v in today.items() if k != "span_mask"}
    assert training_key(old) == training_key(today)
    assert training_key(old) != training_key(dict(today, span_mask=True))
