"""Fault injection: killed runs, failed writes, corrupt files, locks, traversal, bad input via the CLI.

Each case does the fault for real and checks the outcome: the message, the exit code, and that nothing that
existed before was lost or overwritten.
"""
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import engine
from engine import runs

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def small_corpus(tmp_path_factory, bbc_docs):
    p = tmp_path_factory.mktemp("corpus") / "bbc60.txt"
    p.write_text("\n\n".join(" ".join(d) for d in bbc_docs[::37]), encoding="utf-8")  # 61 documents
    return p


@pytest.fixture(scope="module")
def small_tokenizer(tmp_path_factory, small_corpus):
    # one vocabulary for every run here: WordPiece training in `tokenizers` breaks frequency ties in hash order,
    # so two processes can train different vocabularies from the same corpus
    d = tmp_path_factory.mktemp("tok")
    engine.train_tokenizer(engine.load_corpus(small_corpus), vocab_size=1000).save(d)
    return d


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    e = dict(os.environ)
    e["BERT_STUDIO_CACHE"] = str(tmp_path_factory.mktemp("cache"))
    e["PYTHONPATH"] = str(REPO) + os.pathsep + e.get("PYTHONPATH", "")
    e["HF_HUB_OFFLINE"] = "1"
    return e


def _pretrain_args(corpus, out, steps=24, tokenizer=None):
    vocab = ["--tokenizer", tokenizer] if tokenizer else ["--vocab-size", "1000"]
    return ["pretrain", "--corpus", corpus, "--preset", "tiny", "--hidden", "64", "--heads", "2", *vocab,
            "--seq-len", "64", "--batch-size", "8", "--steps", steps, "--save-every", "3", "--log-every", "1",
            "--eval-every", "12", "--eval-max-instances", "16", "--num-threads", "1", "--seed", "7", "--quiet", "--out", out]


def _weights(run_dir):
    ck = runs.latest_checkpoint(run_dir)
    return runs.checkpoint_step(ck), load_file(str(Path(ck) / "model.safetensors"))


# --------------------------------------------------------------------------- SIGKILL and resume
@pytest.mark.slow
def test_sigkill_at_random_moments_then_resume_to_completion(tmp_path, small_corpus, small_tokenizer, env):
    steps = 36
    straight = tmp_path / "straight"
    r = subprocess.run([sys.executable, "-m", "engine", *map(str, _pretrain_args(small_corpus, straight, steps, small_tokenizer))],
                       env=env, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]

    killed = tmp_path / "killed"
    rng = random.Random(2024)
    # kill points are defined by training progress, not by wall time, so a fast machine cannot finish the run
    # before the kill: once the metrics show the target step, wait a random few milliseconds and SIGKILL
    targets = [rng.randint(4, 8), rng.randint(13, 17), rng.randint(22, 26)]
    kills, attempts = 0, 0
    args = _pretrain_args(small_corpus, killed, steps, small_tokenizer)
    while True:
        attempts += 1
        assert attempts < 12, "the run never finished"
        cmd = [sys.executable, "-m", "engine", *map(str, args + (["--resume"] if attempts > 1 else []))]
        p = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if kills < len(targets):
            deadline = time.time() + 300
            while time.time() < deadline and p.poll() is None:
                last = [m["step"] for m in runs.read_metrics(killed) if m.get("split", "train") == "train"]
                if last and last[-1] >= targets[kills]:
                    break
                time.sleep(0.005)
            time.sleep(rng.uniform(0.0, 0.03))
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
                p.wait()
                info = runs.read_run_json(killed)
                if info["status"] == "finished":  # the kill landed while the process was exiting: nothing to resume
                    break
                kills += 1
                assert info["status"] == "running"  # it had no chance to say otherwise
                assert runs.effective_status(killed, info) == "dead"  # ...and the studio sees it died
                continue
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-2000:]
        break
    assert kills >= 2
    info = runs.read_run_json(killed)
    assert info["status"] == "finished"
    # metrics: every step exactly once, in order; held-out evaluations at the same steps as the straight run
    train = [m["step"] for m in runs.read_metrics(killed) if m.get("split", "train") == "train"]
    assert train == list(range(1, steps + 1))
    ev = [m["step"] for m in runs.read_metrics(killed) if m.get("split") == "eval"]
    ev_ref = [m["step"] for m in runs.read_metrics(straight) if m.get("split") == "eval"]
    assert ev == ev_ref
    # the last checkpoint is complete, loads, and equals the uninterrupted run's weights
    step_k, w_k = _weights(killed)
    step_s, w_s = _weights(straight)
    assert step_k == step_s == steps
    for k in w_s:
        torch.testing.assert_close(w_k[k], w_s[k], atol=1e-5, rtol=1e-5)
    ref_loss = [m["loss"] for m in runs.read_metrics(straight) if m.get("split", "train") == "train"]
    got_loss = [m["loss"] for m in runs.read_metrics(killed) if m.get("split", "train") == "train"]
    assert got_loss == pytest.approx(ref_loss, rel=1e-4, abs=1e-5)
    engine.load(killed)  # a run folder loads as its latest complete checkpoint
    assert not list((killed / "checkpoints").glob(".tmp*"))


# --------------------------------------------------------------------------- failed writes
@pytest.mark.slow
def test_disk_full_during_a_checkpoint_marks_the_run_failed_and_keeps_the_previous_one(tmp_path, small_corpus, monkeypatch):
    import safetensors.torch as st

    from engine.pretraining.run import config_from_args, build_parser, pretrain

    out = tmp_path / "full"
    args = vars(build_parser().parse_args([str(a) for a in _pretrain_args(small_corpus, out, steps=9)[1:]]))
    cfg = config_from_args(args)
    monkeypatch.setenv("BERT_STUDIO_CACHE", str(tmp_path / "cache"))
    real_save, calls = st.save_file, {"n": 0}

    def flaky(*a, **k):
        calls["n"] += 1
        if calls["n"] >= 2:  # the first checkpoint (step 3) is written, the second (step 6) hits a full disk
            raise OSError(28, "No space left on device")
        return real_save(*a, **k)

    monkeypatch.setattr(st, "save_file", flaky)
    with pytest.raises(engine.EngineError, match="No space left on device"):
        pretrain(cfg)
    info = runs.read_run_json(out)
    assert info["status"] == "failed"
    assert "No space left on device" in info["error"]
    ck = runs.latest_checkpoint(out)
    assert runs.checkpoint_step(ck) == 3
    monkeypatch.setattr(st, "save_file", real_save)
    b = engine.load(ck)  # intact and loadable
    assert b.config.hidden_size == 64
    assert not list((out / "checkpoints").glob(".tmp*")), "a half-written checkpoint was left behind"


@pytest.mark.slow
def test_truncated_checkpoint_in_a_run_is_reported(tmp_path, tiny_checkpoint, engine_cli, one_line_error):
    import shutil

    run_dir = tmp_path / "r"
    tmp = runs.new_checkpoint_dir(run_dir, 5)
    shutil.copytree(tiny_checkpoint, tmp, dirs_exist_ok=True)
    final = runs.publish_checkpoint(tmp, run_dir / "checkpoints" / "step-5") or (run_dir / "checkpoints" / "step-5")
    f = Path(final) / "model.safetensors"
    f.write_bytes(f.read_bytes()[:1000])
    code, _, err = engine_cli(["probe", "--model", run_dir, "--nsp", "a", "b"])
    one_line_error(code, err, "corrupt or truncated")


# --------------------------------------------------------------------------- locks and names
@pytest.mark.slow
def test_run_directory_locked_by_a_live_process_and_by_a_dead_one(tmp_path, small_corpus, engine_cli, one_line_error):
    d = tmp_path / "locked"
    holder = subprocess.Popen([sys.executable, "-c",
                               "import sys, time; from engine.runs import RunLock; "
                               "l = RunLock(sys.argv[1]).acquire(); print('held', flush=True); time.sleep(60)", str(d)],
                              cwd=REPO, stdout=subprocess.PIPE, text=True)  # `python -c` imports from its cwd
    try:
        assert holder.stdout.readline().strip() == "held"
        code, _, err = engine_cli(_pretrain_args(small_corpus, d))
        one_line_error(code, err, "in use by process")
        assert not (d / "run.json").exists()  # nothing was written
    finally:
        holder.kill()
        holder.wait()
    # the holder died (SIGKILL): its lock is free again, nothing is stuck
    assert runs.lock_holder(d) is None
    with runs.RunLock(d):
        pass


@pytest.mark.slow
@pytest.mark.parametrize("name", ["../escape", "/etc/passwd", "a/../../b", "..", ".hidden", "x\0y"])
def test_path_traversal_run_names_are_refused(tmp_path, name, monkeypatch, small_corpus, engine_cli):
    monkeypatch.setenv("BERT_STUDIO_RUNS", str(tmp_path / "runs"))
    code, _, err = engine_cli(["pretrain", "--corpus", small_corpus, "--name", name, "--steps", "1"])
    assert code == 2 and "error:" in err and "Traceback" not in err
    assert not (tmp_path / "escape").exists()
    with pytest.raises(engine.EngineError):
        runs.resolve_run_dir(tmp_path / "runs", name)


def test_symlink_run_dir_cannot_escape(tmp_path):
    root = tmp_path / "runs"
    root.mkdir()
    (tmp_path / "outside").mkdir()
    (root / "link").symlink_to(tmp_path / "outside")
    with pytest.raises(engine.EngineError):
        runs.resolve_run_dir(root, "link")


# --------------------------------------------------------------------------- bad input through the CLI
@pytest.mark.slow
def test_bad_pretrain_inputs_are_one_line_errors_and_overwrite_nothing(tmp_path, small_corpus, engine_cli, one_line_error):
    existing = tmp_path / "existing"
    existing.mkdir()
    (existing / "run.json").write_text(json.dumps({"kind": "pretrain", "status": "finished"}))
    before = (existing / "run.json").read_text()
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    one = tmp_path / "one.txt"
    one.write_text("Just one document. It has two sentences.")
    short = tmp_path / "short.txt"
    short.write_text("Hi.\n\nYo.\n\nOk.")
    base = ["pretrain", "--preset", "tiny", "--steps", "2", "--batch-size", "4", "--quiet"]
    cases = [
        (["--corpus", tmp_path / "missing.txt", "--out", tmp_path / "a"], "not found"),
        (["--corpus", empty, "--out", tmp_path / "b"], "is empty"),
        (["--corpus", one, "--objective", "mlm+nsp", "--out", tmp_path / "c"], "single document"),
        (["--corpus", small_corpus, "--preset", "gigantic", "--out", tmp_path / "d"], "gigantic"),
        (["--corpus", small_corpus, "--objective", "nsp-only", "--out", tmp_path / "e"], "nsp-only"),
        (["--corpus", small_corpus, "--mask-ratios", "0.8,0.1,0.2", "--out", tmp_path / "f"], "sum to 1"),
        (["--corpus", small_corpus, "--mask-rate", "1.5", "--out", tmp_path / "g"], "rate"),
        (["--corpus", small_corpus, "--seq-len", "1024", "--out", tmp_path / "h"], "512"),
        (["--corpus", small_corpus, "--out", existing], "--resume"),
        (["--corpus", small_corpus, "--resume", "--out", tmp_path / "nothing"], "cannot resume"),
        (["--corpus", short, "--objective", "mlm", "--vocab-size", "100", "--seq-len", "64", "--batch-size", "64", "--out", tmp_path / "i"], ""),
    ]
    for extra, pattern in cases:
        code, _, err = engine_cli(base + extra)
        one_line_error(code, err, pattern)
    assert (existing / "run.json").read_text() == before
    for letter in "abcdefghi":
        assert not (tmp_path / letter / "run.json").exists()


@pytest.mark.slow
def test_bad_probe_and_finetune_inputs(tmp_path, tiny_checkpoint, engine_cli, one_line_error):
    import shutil

    # a checkpoint whose vocabulary does not match its embeddings
    bad = tmp_path / "bad"
    shutil.copytree(tiny_checkpoint, bad)
    lines = (bad / "vocab.txt").read_text().splitlines()
    (bad / "vocab.txt").write_text("\n".join(lines[:100]) + "\n")
    code, _, err = engine_cli(["probe", "--model", bad, "--fill", "the [MASK] rose"])
    one_line_error(code, err, "vocab.txt has 100 tokens")
    # MiniLM has no MLM head
    code, _, err = engine_cli(["probe", "--model", "minilm", "--fill", "the [MASK] rose"])
    one_line_error(code, err, "no MLM head")
    # probe text over the model's positions is truncated, and the output says so
    long_text = "the [MASK] rose . " + " ".join(["word"] * 300)
    code, out, err = engine_cli(["probe", "--model", tiny_checkpoint, "--fill", long_text, "--json"])
    assert code == 0, err
    assert "truncat" in (out + err).lower()
    # a task file with the wrong columns names the file and what was expected
    train = tmp_path / "train.tsv"
    train.write_text("id\ttext\tgold\n1\tgood movie\t1\n2\tbad movie\t0\n")
    code, _, err = engine_cli(["finetune", "--model", tiny_checkpoint, "--task", "glue", "--train", train, "--dev", train,
                         "--epochs", "1", "--out", tmp_path / "ft"])
    one_line_error(code, err, "train.tsv")
    # an unknown dev label names the line
    dev = tmp_path / "dev.tsv"
    train.write_text("sentence\tlabel\ngood movie\t1\nbad movie\t0\n")
    dev.write_text("sentence\tlabel\nfine movie\t1\nodd movie\tmaybe\n")
    code, _, err = engine_cli(["finetune", "--model", tiny_checkpoint, "--task", "glue", "--train", train, "--dev", dev,
                         "--epochs", "1", "--out", tmp_path / "ft2"])
    one_line_error(code, err, "maybe")


@pytest.mark.slow
def test_cli_shows_traceback_only_with_debug(tmp_path):
    r = subprocess.run([sys.executable, "-m", "engine", "tokenizer", "--corpus", tmp_path / "missing", "--out", tmp_path / "t"],
                       cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.strip().startswith("error: ") and "Traceback" not in r.stderr
    r = subprocess.run([sys.executable, "-m", "engine", "tokenizer", "--corpus", tmp_path / "missing", "--out", tmp_path / "t", "--debug"],
                       cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "Traceback" in r.stderr
