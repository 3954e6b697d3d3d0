"""Fault injection, round two: no command destroys a finished result, no signal reaches a stranger,
no foreign page drives the studio, and bad input or a full disk gives one line instead of a traceback.
Each test here is a row of RELIABILITY.md."""
import importlib
import json
import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import engine
from engine import runs
from engine.errors import EngineError

pytestmark = pytest.mark.slow  # fault injection with real processes, training and pages

REPO = Path(__file__).resolve().parents[2]


def _snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def task_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("task")
    rng = random.Random(0)
    words = "the a market film team shares match song rose fell won lost good bad".split()
    rows = [(" ".join(rng.choice(words) for _ in range(6)) + (" good" if i % 2 else " bad"), i % 2) for i in range(40)]
    (d / "train.tsv").write_text("sentence\tlabel\n" + "".join(f"{s}\t{l}\n" for s, l in rows[:32]))
    (d / "dev.tsv").write_text("sentence\tlabel\n" + "".join(f"{s}\t{l}\n" for s, l in rows[32:]))
    return d


def _ft_args(ck, files, out, lrs="1e-3,5e-4,3e-4"):
    return ["finetune", "--model", ck, "--task", "glue", "--train", files / "train.tsv", "--dev", files / "dev.tsv",
            "--lr", lrs, "--batch-size", "8", "--epochs", "1", "--max-seq-len", "32", "--num-threads", "1", "--seed", "1",
            "--out", out]


def _feat_args(ck, files, out, combine="last,mean"):
    return ["features", "--model", ck, "--task", "glue", "--train", files / "train.tsv", "--dev", files / "dev.tsv",
            "--combine", combine, "--layers", "-1,-2", "--max-seq-len", "32", "--num-threads", "1", "--no-save-features", "--out", out]


# ------------------------------------------------------------------ 1. no command overwrites another run
def test_finetune_and_features_refuse_a_folder_that_holds_a_run(tmp_path, tiny_checkpoint, task_files, engine_cli, one_line_error):
    pre = tmp_path / "pre"
    pre.mkdir()
    runs.write_run_json(pre, kind="pretrain", status="finished", config={"seq_len": 64, "mask_ratios": [0.8, 0.1, 0.1]})
    runs.append_metrics(pre, {"step": 1, "loss": 5.0})
    before = _snapshot(pre)
    for args in (_ft_args(tiny_checkpoint, task_files, pre, "1e-3"), _feat_args(tiny_checkpoint, task_files, pre, "last"),
                 _ft_args(tiny_checkpoint, task_files, pre, "1e-3") + ["--resume"]):
        code, _, err = engine_cli(args)
        one_line_error(code, err, "pretrain")
        assert _snapshot(pre) == before  # nothing written, not even a lock file
    # a second fine-tune into a finished fine-tune's folder keeps the first one's results
    ft = tmp_path / "ft"
    code, _, err = engine_cli(_ft_args(tiny_checkpoint, task_files, ft, "1e-3"))
    assert code == 0, err
    before = _snapshot(ft)
    code, _, err = engine_cli(_ft_args(tiny_checkpoint, task_files, ft, "5e-4"))
    one_line_error(code, err, "already holds a finetune run; continue it with --resume")
    assert _snapshot(ft) == before
    # resuming it with other settings is refused too
    code, _, err = engine_cli(_ft_args(tiny_checkpoint, task_files, ft, "5e-4") + ["--resume"])
    one_line_error(code, err, "was started with lr=[0.001]")
    assert _snapshot(ft) == before
    code, _, err = engine_cli(["finetune", "--out", tmp_path / "nothing", "--resume"])
    one_line_error(code, err, "--model is required")


# ------------------------------------------------------------------ 2, 3. resume at trial granularity; Retry keeps results
class _Kill(KeyboardInterrupt):
    pass


def test_finetune_resumes_at_trial_granularity_and_retry_never_destroys(tmp_path, tiny_checkpoint, task_files, monkeypatch, engine_cli):
    from engine.finetune import build_parser, config_from_args, finetune
    from engine.jobs import retry_argv

    straight = tmp_path / "straight"
    code, _, err = engine_cli(_ft_args(tiny_checkpoint, task_files, straight))
    assert code == 0, err
    full = json.loads((straight / "eval.json").read_text())

    # kill the run in the middle of its second trial (after the first finished)
    out = tmp_path / "killed"
    cfg = config_from_args(build_parser().parse_args([str(a) for a in _ft_args(tiny_checkpoint, task_files, out)[1:]]))

    def progress(info):
        if info["trial"] == 1 and "dev" not in info and info["step"] % 4 == 2:
            raise _Kill()
    with pytest.raises(_Kill):
        finetune(cfg, progress=progress)
    assert runs.read_run_json(out)["status"] == "cancelled"
    first = json.loads((out / "eval.json").read_text())
    assert [t["trial"] for t in first["trials"]] == [0]
    # the Jobs page's Retry of this job resumes it (same command + --resume) instead of starting over
    job = {"argv": [str(a) for a in _ft_args(tiny_checkpoint, task_files, out)], "run_dir": str(out)}
    argv = retry_argv(job)
    assert argv[-1] == "--resume"
    code, _, err = engine_cli(argv)
    assert code == 0, err
    assert "1 of 3 trials finished" in err
    ev = json.loads((out / "eval.json").read_text())
    assert ev["status"] == "finished" and len(ev["trials"]) == 3
    assert ev["trials"][0] == first["trials"][0]  # kept, not re-run
    for a, b in zip(ev["trials"], full["trials"]):  # the restarted trials equal an uninterrupted run's
        assert a["score"] == b["score"] and a["epochs_log"][0]["train_loss"] == pytest.approx(b["epochs_log"][0]["train_loss"], rel=1e-5)
    steps = [r["step"] for r in runs.read_metrics(out) if "loss" in r]
    assert steps == sorted(set(steps))  # every step logged once
    # Retry of the finished job changes nothing: eval.json and metrics.jsonl stay
    before = {k: v for k, v in _snapshot(out).items() if k in ("eval.json", "metrics.jsonl")}
    code, _, err = engine_cli(retry_argv(job))
    assert code == 0, err
    after = {k: v for k, v in _snapshot(out).items() if k in ("eval.json", "metrics.jsonl")}
    assert json.loads(after["eval.json"])["trials"] == json.loads(before["eval.json"])["trials"]
    assert after["metrics.jsonl"] == before["metrics.jsonl"]


def test_features_resume_keeps_finished_combinations(tmp_path, tiny_checkpoint, task_files, monkeypatch, engine_cli):
    from engine.jobs import retry_argv
    FE = importlib.import_module("engine.features")  # the module (engine.extract_features is its function)

    out = tmp_path / "feat"
    real, calls = FE.logreg_eval, []

    def dying(*a, **k):
        calls.append(1)
        if len(calls) == 2:
            raise _Kill()
        return real(*a, **k)
    monkeypatch.setattr(FE, "logreg_eval", dying)
    code, _, err = engine_cli(_feat_args(tiny_checkpoint, task_files, out))
    assert code == 130, err
    first = json.loads((out / "eval.json").read_text())
    assert [r["combine"] for r in first["results"]] == ["last"]
    monkeypatch.setattr(FE, "logreg_eval", real)
    argv = retry_argv({"argv": [str(a) for a in _feat_args(tiny_checkpoint, task_files, out)], "run_dir": str(out)})
    # a damaged eval.json: one line that says what to do, and the file is left for the user to look at
    good = (out / "eval.json").read_bytes()
    for bad in (b"{not json", b'{"results": 5}', b"[1, 2]"):
        (out / "eval.json").write_bytes(bad)
        code, _, err = engine_cli(argv)
        assert code != 0 and "cannot resume" in err and "move it away" in err and "Traceback" not in err, err
        assert (out / "eval.json").read_bytes() == bad
    (out / "eval.json").write_bytes(good)
    code, _, err = engine_cli(argv)
    assert code == 0, err
    ev = json.loads((out / "eval.json").read_text())
    assert [r["combine"] for r in ev["results"]] == ["last", "mean"] and ev["results"][0] == first["results"][0]
    assert ev["status"] == "finished" and runs.read_run_json(out)["status"] == "finished"


@pytest.mark.parametrize("page,kind", [("3_Finetune.py", "finetune"), ("4_Features.py", "features")])
def test_pages_offer_resume_for_a_stopped_finetune_or_features_run(tmp_path, monkeypatch, page, kind):
    from streamlit.testing.v1 import AppTest

    import engine.jobs as Q
    calls = []
    monkeypatch.setattr(Q, "submit", lambda argv, name=None, run_dir=None, root=None: calls.append(argv) or {"id": "job-1"})
    root = tmp_path / "runs"
    d = root / "stopped"
    runs.write_run_json(d, kind=kind, status="cancelled", error="cancelled by the user", config={"model": "minilm", "task": "bbc-topic"})
    (d / "eval.json").write_text(json.dumps({"kind": kind, "status": "running", "trials": [], "results": [], "metric": "accuracy"}))
    at = AppTest.from_file(str(REPO / "pages" / page), default_timeout=60)
    at.session_state["runs_root"] = str(root)
    at.run()
    assert not at.exception, at.exception
    at.button(key=f"resume-{kind}-stopped").click().run()
    assert not at.exception, at.exception
    assert calls == [[kind, "--out", str(d), "--resume"]]


# ------------------------------------------------------------------ 7. Retry of a pre-training run that died before its first checkpoint
@pytest.fixture(scope="module")
def small_corpus(tmp_path_factory, bbc_docs):
    p = tmp_path_factory.mktemp("corpus") / "bbc60.txt"
    p.write_text("\n\n".join(" ".join(d) for d in bbc_docs[::37]), encoding="utf-8")
    return p


def _pretrain_args(corpus, out, steps=6, extra=()):
    return ["pretrain", "--corpus", corpus, "--preset", "tiny", "--hidden", "32", "--heads", "2", "--vocab-size", "500",
            "--seq-len", "32", "--phase2-seq-len", "0", "--batch-size", "4", "--steps", steps, "--save-every", "3",
            "--log-every", "1",
            "--eval-every", "6", "--eval-max-instances", "8", "--num-threads", "1", "--seed", "3", "--quiet", *extra, "--out", out]


def test_retry_of_a_pretrain_run_killed_before_its_first_checkpoint_starts_it_again(tmp_path, small_corpus, monkeypatch, engine_cli):
    from engine.jobs import retry_argv
    import engine.pretraining.run_folder as P  # the run folder's save (RunFolder.save) writes through its checkpoint()
    out = tmp_path / "early"
    real = P.checkpoint

    def crash(*a, **k):
        raise RuntimeError("killed before the first checkpoint")
    monkeypatch.setattr(P, "checkpoint", crash)
    args = [str(a) for a in _pretrain_args(small_corpus, out)]
    with pytest.raises(RuntimeError):
        engine_cli(args)
    assert runs.latest_checkpoint(out) is None and runs.read_run_json(out)["status"] == "failed"
    monkeypatch.setattr(P, "checkpoint", real)
    code, _, err = engine_cli(retry_argv({"argv": args[:], "run_dir": str(out)}))
    assert code == 0, err
    assert runs.read_run_json(out)["status"] == "finished" and runs.checkpoint_step(runs.latest_checkpoint(out)) == 6


# ------------------------------------------------------------------ 9. DNS rebinding: a foreign Host header cannot open the websocket
def _ws_handshake(port: int, host: str) -> int:
    """The HTTP status of a websocket upgrade to the studio's stream with this Host header."""
    import base64
    import socket
    key = base64.b64encode(os.urandom(16)).decode()
    req = (f"GET /_stcore/stream HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
           f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: streamlit\r\n\r\n")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(req.encode())
        status_line = s.recv(4096).split(b"\r\n", 1)[0].decode()
    return int(status_line.split()[1])


def test_studio_refuses_a_foreign_host_header(tmp_path):
    import socket
    import urllib.request
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, BERT_STUDIO_RUNS=str(tmp_path / "runs"))
    proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", "streamlit_app.py", "--server.port", str(port)],
                            cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(300):  # up to about a minute for a cold start
            assert proc.poll() is None, "the studio exited"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.2)
        assert _ws_handshake(port, f"127.0.0.1:{port}") == 101
        assert _ws_handshake(port, f"localhost:{port}") == 101
        assert _ws_handshake(port, f"evil.example:{port}") == 403
        assert _ws_handshake(port, "127.0.0.1.evil.example") == 403
    finally:
        proc.terminate()
        proc.wait(timeout=30)


# ------------------------------------------------------------------ 8, 17. signal only provable processes; the queue advances alone
def _stranger():
    """An unrelated process in its own process group (as a reused pid / pgid would be)."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)


def test_a_run_whose_writer_cannot_be_proved_is_dead_and_never_signalled(tmp_path):
    from streamlit.testing.v1 import AppTest
    stranger = _stranger()
    try:
        root = tmp_path / "runs"
        d = root / "orphan"
        # run.json names a live pid but no start time, and no lock is held: nothing proves it is the run's
        runs.write_run_json(d, kind="pretrain", status="running", pid=stranger.pid, host=__import__("socket").gethostname(),
                            config={"objective": "mlm"})
        assert runs.effective_status(d) == "dead" and runs.run_writer_pid(d) is None
        at = AppTest.from_file(str(REPO / "pages" / "2_Pretrain.py"), default_timeout=60)
        at.session_state["runs_root"] = str(root)
        at.run()
        assert not at.exception, at.exception
        assert not [b for b in at.button if b.label == "Cancel"]  # no Cancel for a run not provably alive
        assert stranger.poll() is None
        # a real writer (holding the run's lock) is found, with its own pid
        with runs.Run(tmp_path / "live", kind="pretrain"):
            assert runs.run_writer_pid(tmp_path / "live") == os.getpid()
            assert runs.effective_status(tmp_path / "live") == "running"
    finally:
        stranger.kill()
        stranger.wait()


def test_job_cancel_never_signals_a_reused_process_group(tmp_path, fake_engine):
    from engine.jobs import Jobs
    stranger = _stranger()
    try:
        q = Jobs(tmp_path / "runs", cancel_timeout=1.0, repo_root=fake_engine.repo)
        job = q.submit(fake_engine.py("import time; time.sleep(60)"), name="a")
        # as if the runner had died long ago and its pid/pgid now belonged to another process group
        os.killpg(job["pgid"], 9)
        with q._transaction() as queue:
            rec = q._find(queue, job["id"])
            rec.update(pid=stranger.pid, pgid=stranger.pid, proc_start=12345, child_pid=None, child_start=None)
        q.cancel(job["id"], timeout=0.5)
        time.sleep(0.3)
        assert stranger.poll() is None  # still alive: it was never signalled
        assert q.get(job["id"])["status"] == "cancelled"
    finally:
        stranger.kill()
        stranger.wait()


def test_queue_advances_without_a_browser_when_a_jobs_process_group_is_killed(tmp_path, fake_engine):
    from engine.jobs import Jobs
    root = tmp_path / "runs"
    q = Jobs(root, repo_root=fake_engine.repo)
    a = q.submit(fake_engine.py("import time; time.sleep(60)"), name="a")
    b = q.submit(fake_engine.py("print('b done')"), name="b")
    for _ in range(200):  # the runner has started its engine child
        if (q.get(a["id"]) or {}).get("child_pid"):
            break
        time.sleep(0.05)
    os.killpg(a["pgid"], 9)  # the whole group: runner and child, so no runner records the end
    del q  # no studio: nobody calls refresh()
    reader = Jobs(root)
    for _ in range(400):
        if reader.get(b["id"])["status"] == "finished":  # lock-free reads only, no refresh
            break
        time.sleep(0.05)
    assert reader.get(b["id"])["status"] == "finished"
    assert reader.get(a["id"])["status"] == "failed"


# ------------------------------------------------------------------ 13. a real full disk, and the fakes
@pytest.fixture
def tiny_fs(tmp_path):
    """A 3 MB tmpfs (root only; skipped where mounting is not allowed), unmounted afterwards."""
    mnt = tmp_path / "full"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"could not mount a tmpfs: {r.stderr.strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_a_real_full_disk_gives_one_line_and_keeps_what_was_saved(tiny_fs, small_corpus, monkeypatch, engine_cli, one_line_error):
    monkeypatch.setenv("BERT_STUDIO_CACHE", str(tiny_fs / "cache"))  # the pre-training cache fills the disk too
    out = tiny_fs / "run"
    args = _pretrain_args(small_corpus, out, steps=30, extra=["--hidden", "64", "--vocab-size", "1000"])
    code, _, err = engine_cli(args)
    one_line_error(code, err, "No space left on device")
    info = runs.read_run_json(out)
    assert info["status"] == "failed" and "No space left on device" in info["error"]
    assert runs.lock_holder(out) is None  # the lock was given back
    assert not list((out / "checkpoints").glob(".tmp*"))  # no half-written checkpoint left
    for ck in runs.list_checkpoints(out):  # what was saved before still loads
        engine.load(ck)
    # a completely full disk: the lock, run.json and the fine-tune's folder give the same line
    with open(tiny_fs / "filler", "wb", buffering=0) as f:  # unbuffered: closing it has nothing left to flush
        for size in (65536, 4096, 512, 1):
            try:
                while True:
                    f.write(b"\0" * size)
            except OSError:
                pass
    for args in (["finetune", "--model", "minilm", "--task", "bbc-topic", "--out", tiny_fs / "ft"],
                 _pretrain_args(small_corpus, tiny_fs / "run2")):
        code, _, err = engine_cli(args)
        one_line_error(code, err, "No space left on device")


def test_faked_full_disk_in_every_writer_gives_one_line(tmp_path, small_corpus, monkeypatch, engine_cli, one_line_error):
    """Where no tmpfs can be mounted: the libraries' own wordings of ENOSPC, raised where they write."""
    import safetensors.torch
    # safetensors wraps the OS error in its own exception type
    class SafetensorError(Exception):
        pass

    def no_room(*a, **k):
        raise SafetensorError("Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: \"No space left on device\" })")
    monkeypatch.setattr(safetensors.torch, "save_file", no_room)
    code, _, err = engine_cli(_pretrain_args(small_corpus, tmp_path / "a"))
    one_line_error(code, err, "No space left on device")
    assert "No space left on device" in runs.read_run_json(tmp_path / "a")["error"]
    monkeypatch.undo()
    # torch.save of the optimizer state (written after the weights)
    real = torch.save

    def torch_no_room(obj, f, *a, **k):
        if "training_state" in str(f):
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 987456 vs 987344: No space left on device")
        return real(obj, f, *a, **k)
    monkeypatch.setattr(torch, "save", torch_no_room)
    code, _, err = engine_cli(_pretrain_args(small_corpus, tmp_path / "b"))
    one_line_error(code, err, "No space left on device")
    assert not list((tmp_path / "b" / "checkpoints").glob(".tmp*"))


# ------------------------------------------------------------------ 18. out of memory: one line naming the fix
def test_out_of_memory_is_one_line_naming_the_fix(tmp_path, tiny_checkpoint, task_files, monkeypatch, engine_cli, one_line_error):
    from engine.heads import TaskModel
    real = TaskModel.forward

    def greedy(self, *a, **k):  # a batch that wants a petabyte: the real allocator's failure
        torch.empty(1 << 50, dtype=torch.uint8)
        return real(self, *a, **k)
    monkeypatch.setattr(TaskModel, "forward", greedy)
    out = tmp_path / "oom"
    code, _, err = engine_cli(_ft_args(tiny_checkpoint, task_files, out, "1e-3"))
    one_line_error(code, err, "out of memory")
    assert "--batch-size" in err and "--grad-accum" in err
    info = runs.read_run_json(out)
    assert info["status"] == "failed" and info["error"].startswith("out of memory") and "\n" not in info["error"]


# ------------------------------------------------------------------ 11. typed special tokens are text
def test_typed_special_tokens_in_probe_text_are_text(tiny_checkpoint):
    from engine.probes import attention, fill_mask, next_sentence
    bundle = engine.load(tiny_checkpoint)
    res = fill_mask(bundle, "shares [SEP] rose [MASK] [CLS] [PAD] [UNK] .")
    assert res.tokens.count("[SEP]") == 1 and res.tokens[-1] == "[SEP]"  # only the one the encoder adds
    assert res.tokens.count("[CLS]") == 1 and res.tokens[0] == "[CLS]"
    assert "[PAD]" not in res.tokens and "[UNK]" not in res.tokens and res.tokens.count("[MASK]") == 1
    assert res.tokens[1:3] == ["shares", "["]  # "[SEP]" as words: "[", the pieces of "sep", "]"
    assert res.tokens[:res.tokens.index("rose")] == bundle.tokenizer.encode("shares [ SEP ]").tokens[:-1]
    nsp = next_sentence(bundle, "markets fell [SEP] investors sold", "prices [CLS] rose")
    assert nsp.tokens.count("[SEP]") == 2 and nsp.tokens.count("[CLS]") == 1
    tokens, _ = attention(bundle, "a [SEP] b")
    assert tokens.count("[SEP]") == 1


# ------------------------------------------------------------------ 12. the run-folder box does bounded work
def test_model_cache_key_never_walks_a_typed_folder(tmp_path, tiny_checkpoint):
    import shutil

    from studio.common import list_model_choices, mtime_key
    big = tmp_path / "usr"
    for i in range(30):
        (big / f"d{i}" / "sub").mkdir(parents=True)
        for j in range(20):
            (big / f"d{i}" / "sub" / f"f{j}").write_text("x")
    future = time.time() + 10_000
    os.utime(big / "d7" / "sub" / "f3", (future, future))
    assert mtime_key(str(big)) < future  # the deep file was never looked at
    # a re-saved checkpoint still changes the key
    ck = tmp_path / "ck"
    shutil.copytree(tiny_checkpoint, ck)
    before = mtime_key(str(ck))
    os.utime(ck / "model.safetensors", (future, future))
    assert mtime_key(str(ck)) == future > before
    # the model list of a typed runs folder looks at a bounded number of entries
    many = tmp_path / "many"
    for i in range(700):
        (many / f"r{i:03d}").mkdir(parents=True)
    assert list_model_choices(many) == ["minilm"]


# ------------------------------------------------------------------ 10, 15. config.json and the weights checked before use
def _copy_ck(src, dst, config=None, tensors=None):
    import shutil

    from safetensors.torch import load_file, save_file
    shutil.copytree(src, dst)
    if config is not None:
        cfg = json.loads((dst / "config.json").read_text())
        cfg.update(config)
        (dst / "config.json").write_text(json.dumps(cfg))
    if tensors is not None:
        sd = load_file(str(dst / "model.safetensors"))
        tensors(sd)
        save_file(sd, str(dst / "model.safetensors"))
    return dst


@pytest.mark.parametrize("change,pattern", [
    ({"num_hidden_layers": "2"}, "num_hidden_layers is '2'"),
    ({"hidden_size": [64]}, "hidden_size is [64]"),
    ({"num_attention_heads": None}, "num_attention_heads is None"),
    ({"intermediate_size": 2.5}, "intermediate_size is 2.5"),
    ({"layer_norm_eps": -1e-5}, "layer_norm_eps is -1e-05"),
    ({"hidden_dropout_prob": float("nan")}, "hidden_dropout_prob is nan"),
    ({"num_hidden_layers": True}, "num_hidden_layers is True"),
    # a crafted config: a huge model the weights do not describe is refused before anything is allocated
    ({"num_hidden_layers": 900, "intermediate_size": 9_000_000}, "does not match the weights"),
    ({"num_hidden_layers": 1}, "says 1 layers but the weights have 2"),
    ({"max_position_embeddings": 4096}, "does not match the weights"),
])
def test_bad_config_json_is_one_line_before_any_allocation(tmp_path, tiny_checkpoint, monkeypatch, change, pattern, engine_cli, one_line_error):
    from engine import model as M
    bad = _copy_ck(tiny_checkpoint, tmp_path / "bad", config=change)
    built = []
    monkeypatch.setattr(M.BertForPreTraining, "__init__", lambda self, *a, **k: built.append(1) or (_ for _ in ()).throw(AssertionError("built")))
    with pytest.raises(EngineError, match=re.escape(pattern)):
        engine.load(bad)
    assert not built  # refused before the model was constructed
    code, _, err = engine_cli(["probe", "--model", bad, "--fill", "the [MASK] rose"])
    one_line_error(code, err, pattern)


@pytest.mark.parametrize("damage,pattern", [
    (lambda sd: sd.__setitem__("bert.encoder.layer.0.output.dense.weight",
                               sd["bert.encoder.layer.0.output.dense.weight"] * float("nan")), "NaN or inf"),
    (lambda sd: sd.__setitem__("bert.embeddings.LayerNorm.weight", sd["bert.embeddings.LayerNorm.weight"].to(torch.int64)),
     "not floating point"),
    (lambda sd: sd["bert.pooler.dense.weight"].view(-1)[7:8].view(torch.int32).bitwise_or_(1 << 30), "far beyond"),
])
def test_damaged_weights_are_refused_at_load(tmp_path, tiny_checkpoint, damage, pattern, engine_cli, one_line_error):
    bad = _copy_ck(tiny_checkpoint, tmp_path / "bad", tensors=damage)
    with pytest.raises(EngineError, match=pattern):
        engine.load(bad)
    code, _, err = engine_cli(["probe", "--model", bad, "--fill", "the [MASK] rose"])
    one_line_error(code, err, pattern)


# ------------------------------------------------------------------ 14 (flags), 16. bad input: one line, nothing created
@pytest.mark.parametrize("cmd,flags,pattern", [
    ("pretrain", ["--warmup", "nan"], "--warmup nan is not a finite number"),
    ("pretrain", ["--warmup", "inf"], "--warmup inf is not a finite number"),
    ("pretrain", ["--lr", "nan"], "--lr nan is not a finite number"),
    ("pretrain", ["--lr", "1e30"], "--lr 1e+30 must be between 0 and 1"),
    ("pretrain", ["--weight-decay", "nan"], "--weight-decay nan is not a finite number"),
    ("pretrain", ["--max-grad-norm", "nan"], "--max-grad-norm nan is not a finite number"),
    ("pretrain", ["--num-threads", "-1"], "--num-threads -1 must be at least 1"),
    ("pretrain", ["--seed", "99999999999999999999999"], "--seed 99999999999999999999999 must be a whole number"),
    ("finetune", ["--num-threads", "-1"], "--num-threads -1 must be at least 1"),
    ("finetune", ["--seed", "-3"], "--seed -3 must be a whole number"),
    ("finetune", ["--lr", "nan"], "--lr (nan,) is not a finite number"),
    ("finetune", ["--task", "nope"], "argument --task: invalid choice"),
    ("features", ["--lr", "inf"], "--lr inf is not a finite number"),
    ("features", ["--num-threads", "0"], "--num-threads 0 must be at least 1"),
])
def test_bad_numbers_are_one_line_and_create_nothing(tmp_path, small_corpus, cmd, flags, pattern, engine_cli, one_line_error):
    out = tmp_path / "out"
    base = {"pretrain": ["pretrain", "--corpus", small_corpus, "--steps", "3"],
            "finetune": ["finetune", "--model", "minilm", "--task", "bbc-topic"],
            "features": ["features", "--model", "minilm", "--task", "bbc-topic"]}[cmd]
    code, _, err = engine_cli(base + flags + ["--out", out])
    one_line_error(code, err, pattern)
    assert not out.exists()


def test_non_utf8_probe_text_and_a_symlink_loop_name_are_one_line(tmp_path, tiny_checkpoint, small_corpus, monkeypatch, engine_cli, one_line_error):
    code, _, err = engine_cli(["probe", "--model", tiny_checkpoint, "--fill", "caf\udce9 [MASK] ."])  # bytes b"caf\xe9" under a UTF-8 locale
    one_line_error(code, err, "is not valid UTF-8")
    root = tmp_path / "runs"
    root.mkdir()
    (root / "loop").symlink_to("loop")
    monkeypatch.setenv("BERT_STUDIO_RUNS", str(root))
    code, _, err = engine_cli(["pretrain", "--corpus", small_corpus, "--name", "loop"])
    one_line_error(code, err, "symlink loop")


def test_hand_edited_metrics_and_an_unreadable_run_json_keep_the_pretrain_page_working(tmp_path):
    from streamlit.testing.v1 import AppTest
    root = tmp_path / "runs"
    d = root / "edited"
    runs.write_run_json(d, kind="pretrain", status="finished", config={"objective": "mlm"}, total_steps=3)
    runs.append_metrics(d, {"step": 1, "split": "train", "loss": "abc", "lr": 0.1, "tokens_per_s": [1]})
    runs.append_metrics(d, {"step": 2, "split": "train", "loss": 2.0, "mlm_acc": {"x": 1}})
    runs.append_metrics(d, {"step": 2, "split": "eval", "eval_mlm_acc": "bad", "eval_mlm_ppl": None})
    runs.append_metrics(d, {"step": "three", "split": "train", "loss": 1.0})
    recs = runs.read_metrics(d)
    assert recs == [{"step": 1, "split": "train", "lr": 0.1}, {"step": 2, "split": "train", "loss": 2.0}, {"step": 2, "split": "eval"}]
    broken = root / "broken"
    (broken / "tokenizer").mkdir(parents=True)
    (broken / "run.json").write_text("{not json")
    at = AppTest.from_file(str(REPO / "pages" / "2_Pretrain.py"), default_timeout=60)
    at.session_state["runs_root"] = str(root)
    at.run()
    assert not at.exception, at.exception
    assert set(at.selectbox(key="pretrain_run").options) == {"edited", "broken"}  # the unreadable run is still listed
    at.selectbox(key="pretrain_run").set_value("edited").run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    at.selectbox(key="pretrain_run").set_value("broken").run()
    assert any("run.json is not valid JSON" in e.value and "--resume needs" in e.value for e in at.error)


# ------------------------------------------------------------------ 4. a second signal does not abort the cancel checkpoint
def test_a_second_sigterm_while_saving_keeps_the_cancel_checkpoint(tmp_path, small_corpus, monkeypatch, engine_cli):
    import signal as sig

    import engine.pretraining.run_folder as P  # the run folder's save (RunFolder.save) writes through its checkpoint()
    real, calls = P.checkpoint, []

    def signalling_checkpoint(*a, **k):
        calls.append(1)
        if len(calls) == 1:
            os.kill(os.getpid(), sig.SIGTERM)  # the Cancel: arrives while the step-3 checkpoint is written
        elif len(calls) == 2:
            os.kill(os.getpid(), sig.SIGTERM)  # a second Cancel 50 ms later, while the cancel checkpoint is written
        return real(*a, **k)
    monkeypatch.setattr(P, "checkpoint", signalling_checkpoint)
    out = tmp_path / "twice"
    code, _, err = engine_cli(_pretrain_args(small_corpus, out, steps=12))
    assert code == 130, err
    info = runs.read_run_json(out)
    assert info["status"] == "cancelled" and "cancelled by SIGTERM at step 4; continue with --resume" in info["error"]
    assert runs.checkpoint_step(runs.latest_checkpoint(out)) == 4  # the cancel checkpoint was written
    monkeypatch.setattr(P, "checkpoint", real)
    code, _, err = engine_cli(["pretrain", "--out", out, "--resume"])
    assert code == 0, err
    assert runs.read_run_json(out)["status"] == "finished"


# ------------------------------------------------------------------ 5. resume checks the corpus and its settings
def test_resume_refuses_a_changed_corpus_or_lost_settings(tmp_path, small_corpus, bbc_docs, engine_cli, one_line_error):
    from studio.uploads import save_upload
    corpus = tmp_path / "corpus.txt"
    corpus.write_bytes(small_corpus.read_bytes())
    out = tmp_path / "run"
    code, _, err = engine_cli(_pretrain_args(corpus, out, steps=6, extra=["--stop-after", "3"]))
    assert code == 0, err
    # the corpus file is overwritten in place (an upload of the same name did that on the Pre-train page)
    corpus.write_text("\n\n".join(" ".join(d) for d in bbc_docs[1::41]), encoding="utf-8")
    code, _, err = engine_cli(["pretrain", "--out", out, "--resume"])
    one_line_error(code, err, "changed since the run started")
    corpus.write_bytes(small_corpus.read_bytes())
    # run.json deleted (the old advice for an unreadable one): the settings cannot be established
    saved = (out / "run.json").read_bytes()
    (out / "run.json").unlink()
    code, _, err = engine_cli(["pretrain", "--out", out, "--resume"])
    one_line_error(code, err, "settings")
    assert runs.checkpoint_step(runs.latest_checkpoint(out)) == 3  # nothing trained on defaults
    (out / "run.json").write_bytes(saved)
    code, _, err = engine_cli(["pretrain", "--out", out, "--resume"])
    assert code == 0, err
    # uploads are content-addressed: same name, other text, another file
    root = tmp_path / "studio"
    a = save_upload(root, "corpus.txt", b"one text\n", ("txt",))
    b = save_upload(root, "corpus.txt", b"another text\n", ("txt",))
    assert a != b and a.read_bytes() == b"one text\n"


# ------------------------------------------------------------------ 6. a corrupt latest checkpoint: resume from the one before
def test_resume_falls_back_from_a_corrupt_latest_checkpoint(tmp_path, small_corpus, engine_cli):
    out = tmp_path / "run"
    code, _, err = engine_cli(_pretrain_args(small_corpus, out, steps=12, extra=["--stop-after", "6"]))
    assert code == 0, err
    latest = runs.latest_checkpoint(out)
    assert runs.checkpoint_step(latest) == 6
    weights = latest / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])  # truncated
    code, outp, err = engine_cli(["pretrain", "--out", out, "--resume"])
    assert code == 0, err
    assert "step-6" in err and "resuming from step-3 instead" in err
    info = runs.read_run_json(out)
    assert info["status"] == "finished" and info["resumed_from"].endswith("step-3")
    steps = [r["step"] for r in runs.read_metrics(out) if r.get("split") == "train"]
    assert steps == list(range(1, 13))  # the steps after 3 were trained again, each logged once


# ------------------------------------------------------------------ 14. a diverging run stops as failed, keeping its finite checkpoint
def test_non_finite_loss_fails_the_run_and_keeps_the_last_finite_checkpoint(tmp_path, small_corpus, monkeypatch, engine_cli, one_line_error):
    import engine.pretraining.loop as P
    real = P.forward_loss

    def diverging(model, batch, obj, device, amp_ctx):
        loss, sums = real(model, batch, obj, device, amp_ctx)
        if P_state["step"] >= 4:  # from the 5th step on the loss is NaN (as --lr 1e30 gave)
            loss, sums = loss * float("nan"), sums * float("nan")
        P_state["step"] += 1
        return loss, sums
    P_state = {"step": 0}
    monkeypatch.setattr(P, "forward_loss", diverging)
    out = tmp_path / "nan"
    code, _, err = engine_cli(_pretrain_args(small_corpus, out, steps=12))
    one_line_error(code, err, "loss became NaN or inf at step 5")
    info = runs.read_run_json(out)
    assert info["status"] == "failed" and "lower --lr" in info["error"]
    assert runs.checkpoint_step(runs.latest_checkpoint(out)) == 3
    engine.load(runs.latest_checkpoint(out))  # finite: it loads (loading refuses NaN weights)


def test_non_finite_finetune_loss_is_one_line(tmp_path, tiny_checkpoint, task_files, monkeypatch, engine_cli, one_line_error):
    from engine.heads import TaskModel
    real = TaskModel.loss
    monkeypatch.setattr(TaskModel, "loss", lambda self, logits, batch: real(self, logits, batch) * float("nan"))
    out = tmp_path / "nan"
    code, _, err = engine_cli(_ft_args(tiny_checkpoint, task_files, out, "1e-3"))
    one_line_error(code, err, "loss became NaN or inf at step 1")
    assert runs.read_run_json(out)["status"] == "failed"
