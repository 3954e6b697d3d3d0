"""Fault injection, round four (reads): one long line in a task file, a runs folder holding a FIFO, a device, a
symlink out of it or a huge metrics.jsonl, and `measured --write` on a full disk, reversed or repeated markers, a
README that is not UTF-8 or not writable. Each test here is a row of RELIABILITY.md.

Whatever could allocate gigabytes or block on today's code runs in a child Python that caps its own address space
(RLIMIT_AS, a few hundred MB above its size after its imports) under a timeout, so a regression fails instead of
eating the machine or hanging the suite."""
import builtins
import errno
import io
import json
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest

from engine import measured, runs
from engine.errors import EngineError
from engine.tasks import tables
from engine.tasks.tables import read_table

REPO = Path(__file__).resolve().parents[2]

LIMIT = '''
import resource, sys
def limit(mb):
    """Cap this process's address space `mb` MB above its present size."""
    vm = next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmSize"))
    resource.setrlimit(resource.RLIMIT_AS, (vm + mb * 2 ** 20, resource.getrlimit(resource.RLIMIT_AS)[1]))
'''


def _child(code: str, *args, timeout: int = 120) -> subprocess.CompletedProcess:
    """Run `code` (after LIMIT's helper) in a child Python; a child still running after `timeout` s fails the test."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "RAYON_NUM_THREADS": "1",
           "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
    try:
        return subprocess.run([sys.executable, "-c", LIMIT + code, *map(str, args)], capture_output=True, text=True,
                              env=env, timeout=timeout, cwd=str(REPO))
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the child blocked for {timeout} s (stdout: {e.stdout!r}, stderr: {e.stderr!r})")


def _one_line(text: str) -> str:
    lines = [l for l in text.strip().splitlines() if l.strip()]
    assert len(lines) == 1 and "Traceback" not in text, text
    return lines[0]


# ================================================================ 4. one long line in a task file
def _long_line_tsv(path: Path, nbytes: int, label: str = "1") -> Path:
    """A header, one row (line 2) whose sentence is `nbytes` of words (no TAB, no newline inside), then 16 short rows."""
    words = ("market film team shares match song rose fell won lost good bad " * 4).split()
    chunk = " ".join(words) + " "
    with open(path, "w", encoding="utf-8") as f:
        f.write("sentence\tlabel\n")
        n = 0
        while n < nbytes:
            f.write(chunk)
            n += len(chunk)
        f.write(f"\t{label}\n")
        f.write("".join(f"short sentence {i}\t{i % 2}\n" for i in range(16)))  # two labels, for a task to be
    return path


def _small_tsv(path: Path, n: int = 24, extra: str = "") -> Path:
    words = "the a market film team shares match song rose fell won lost good bad".split()
    rows = "".join(f"{words[i % 14]} {words[(3 * i) % 14]} {words[(5 * i) % 14]} {'good' if i % 2 else 'bad'}\t{i % 2}\n"
                   for i in range(n))
    path.write_text("sentence\tlabel\n" + rows + extra, encoding="utf-8")
    return path


def test_a_line_over_the_cap_is_refused_naming_file_line_cap_and_flag_without_reading_it_whole(tmp_path):
    big = _long_line_tsv(tmp_path / "train.tsv", 12 * 2 ** 20)
    tracemalloc.start()
    try:
        with pytest.raises(EngineError) as e:
            read_table(big)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    msg = str(e.value)
    assert "\n" not in msg and f"{big}:2" in msg and "--max-line-bytes" in msg and "1 MB" in msg, msg
    assert peak < 8 * 2 ** 20, f"refusing a 12 MB line took {peak / 2 ** 20:.1f} MB: the line was read whole"
    # the cap is a setting: a smaller one refuses a short line, a larger one reads the file
    with tables.text_cap(None, 64), pytest.raises(EngineError, match=r"train2\.tsv:6: the line is longer than 64 bytes.*--max-line-bytes"):
        read_table(_small_tsv(tmp_path / "train2.tsv", 4, extra="x" * 100 + "\t1\n"))
    with tables.text_cap(None, 20 * 2 ** 20):
        assert len(read_table(big).rows) == 17


def test_max_line_bytes_is_a_finetune_setting_with_its_flag(tmp_path):
    from engine import cli
    from engine.finetune import RUNTIME_FIELDS, FinetuneConfig, load_task
    assert tables.MAX_LINE_BYTES == 2 ** 20
    tr = _small_tsv(tmp_path / "train.tsv", 8, extra="y" * 300 + "\t0\n")
    cfg = dict(task="glue", train=str(tr), dev=str(tr), out=str(tmp_path / "o"))
    with pytest.raises(EngineError, match=r"train\.tsv:10: .*--max-line-bytes"):
        load_task(FinetuneConfig(**cfg, max_line_bytes=200))
    assert len(load_task(FinetuneConfig(**cfg)).train) == 9
    assert "max_line_bytes" in RUNTIME_FIELDS  # a resume may lift it
    with pytest.raises(EngineError, match="--max-line-bytes 0 must be at least 1"):
        FinetuneConfig(**cfg, max_line_bytes=0)
    from engine.finetune import build_parser
    given = cli.given(FinetuneConfig, build_parser(), ["--task", "glue", "--train", str(tr), "--out", "o", "--max-line-bytes", "4096"])
    assert given["max_line_bytes"] == 4096


def test_tagging_and_jsonl_files_have_the_line_cap_and_a_one_line_squad_json_does_not(tmp_path):
    from engine.tasks.squad import load_squad
    from engine.tasks.tagging import read_bio
    bio = tmp_path / "ner.txt"
    bio.write_text("John\tB-PER\nlives\tO\n\n" + "w" * 5000 + "\tO\n", encoding="utf-8")
    with tables.text_cap(None, 1000), pytest.raises(EngineError, match=r"ner\.txt:4: .*--max-line-bytes"):
        read_bio(bio)
    jl = tmp_path / "t.jsonl"
    jl.write_text(json.dumps({"sentence": "a", "label": 0}) + "\n" + json.dumps({"sentence": "b" * 5000, "label": 1}) + "\n")
    with tables.text_cap(None, 1000), pytest.raises(EngineError, match=r"t\.jsonl:2: .*--max-line-bytes"):
        read_table(jl)
    # SQuAD's files are one line of JSON (the official dev set: 4.8 MB on one line): no line cap there, but a
    # passage is still bounded by it (a passage cannot be cut: its answers may lie anywhere in it)
    ctx = "The market rose. " * 100
    squad = {"version": "1.1", "data": [{"title": "t", "paragraphs": [
        {"context": ctx, "qas": [{"id": "q1", "question": "What rose?", "answers": [{"text": "market", "answer_start": 4}]}]}]}]}
    sq = tmp_path / "squad.json"
    sq.write_text(json.dumps(squad))  # one line of about 1.8 kB
    with tables.text_cap(None, 1000):
        with pytest.raises(EngineError, match=r"squad\.json article 0 paragraph 0: the passage is .* longer than 1,000 bytes.*--max-line-bytes"):
            load_squad(sq)
    with tables.text_cap(None, 4000):
        assert len(load_squad(sq)[0]) == 1


class _Spy:
    """Wraps a Tokenizer and records the longest text each encode call was given."""

    def __init__(self, tok):
        self.tok, self.longest = tok, 0

    def _see(self, texts):
        for t in texts:
            for s in (t if isinstance(t, (tuple, list)) else (t,)):
                self.longest = max(self.longest, len(s or ""))

    def encode_batch(self, texts, *a, **k):
        self._see(texts)
        return self.tok.encode_batch(texts, *a, **k)

    def encode_words(self, words, *a, **k):
        self._see(words)
        return self.tok.encode_words(words, *a, **k)

    def __getattr__(self, name):
        return getattr(self.tok, name)


def test_a_long_field_under_the_cap_is_cut_to_what_max_seq_len_can_use(bbc_tokenizer):
    from engine.tasks.batching import CHARS_PER_TOKEN, cut_text
    from engine.tasks.glue import Example, TextTask, encode_classification
    from engine.tasks.multiple_choice import ChoiceExample, encode_multiple_choice
    from engine.tasks.squad import SquadExample, make_features
    from engine.tasks.tagging import TaggedSentence, encode_tagging
    long = "the market rose and the film won " * 25_000  # 825 kB: under the line cap
    normal = "the market rose and the film won"
    assert cut_text(normal, 32) == normal and len(cut_text(long, 32)) == 32 * CHARS_PER_TOKEN
    spy = _Spy(bbc_tokenizer)
    task = TextTask("t", "classification", ["0", "1"], [Example(long, long, "0"), Example(normal, None, "1")],
                    [Example(normal, None, "0")], ("accuracy",))
    batch = encode_classification(spy, task.train, max_len=32, label_to_id=task.label_to_id)
    assert batch["input_ids"].shape == (2, 32)
    assert task.lengths(spy, task.train, 32) == [32, len(bbc_tokenizer.encode(normal).ids)]
    whole = encode_classification(bbc_tokenizer, [Example(long[:20_000], long[:20_000], "0")], max_len=32, label_to_id=task.label_to_id)
    assert batch["input_ids"][0].tolist() == whole["input_ids"][0].tolist()  # the cut changes no token kept
    enc = encode_tagging(spy, [TaggedSentence(["x" + "y" * 500_000, "market"], ["O", "O"])], max_len=32, label_to_id={"O": 0})
    assert enc["input_ids"].shape[1] <= 32
    mc = encode_multiple_choice(spy, [ChoiceExample(long, long, [long, normal], 0)], max_len=32)
    assert mc["input_ids"].shape[:2] == (1, 2)
    feats = make_features(spy, [SquadExample("q", long, normal, [("market", 4)])], max_seq_len=64, max_query_len=16)
    assert len(feats) == 1 and feats[0].start_position > 0
    assert spy.longest <= max(32 * CHARS_PER_TOKEN, len(normal)), spy.longest


FINETUNE_CHILD = r'''
import io, os, json
from contextlib import redirect_stderr
import torch
torch.set_num_threads(1)
from engine.__main__ import run
ck, small, big, longfield, out = sys.argv[1:6]

def ft(train, o):
    err = io.StringIO()
    with redirect_stderr(err):
        code = run(["finetune", "--model", ck, "--task", "glue", "--train", train, "--dev", small, "--lr", "1e-3",
                    "--batch-size", "8", "--epochs", "1", "--max-seq-len", "32", "--num-threads", "1", "--out", o])
    lines = [l for l in err.getvalue().splitlines() if l.strip()]
    status = json.load(open(os.path.join(o, "run.json")))["status"] if os.path.exists(os.path.join(o, "run.json")) else None
    print("RESULT", json.dumps({"code": code, "last": lines[-1] if lines else "", "traceback": "Traceback" in err.getvalue(),
                      "status": status}), flush=True)

ft(small, out + "/warm")  # every module loaded, torch's and the tokenizer's threads started
limit(int(sys.argv[6]))
ft(big, out + "/big")
ft(longfield, out + "/long")
'''


@pytest.mark.slow
def test_finetune_on_a_12mb_line_is_one_line_and_a_long_field_trains_in_bounded_memory(tmp_path, tiny_checkpoint):
    """A child caps its address space 100 MB above its size after a warm-up fine-tune, then fine-tunes on a TSV
    whose second line is 12 MB (before: the tokenizer ran out of that room and the process died on signal 6, the
    Rust backtrace on stderr), then on a file with an 825 kB field under the line cap: it trains, the field cut to
    what --max-seq-len 32 can use (uncut, the tokenizer alone needs about 190 MB for it and the child dies; cut, the
    whole run fits in 30 MB)."""
    small = _small_tsv(tmp_path / "small.tsv")
    big = _long_line_tsv(tmp_path / "big.tsv", 12 * 2 ** 20)
    longfield = _small_tsv(tmp_path / "long.tsv", extra="the market rose and the film won " * 25_000 + "\t1\n")
    r = _child(FINETUNE_CHILD, tiny_checkpoint, small, big, longfield, tmp_path, 100, timeout=300)
    assert r.returncode == 0, f"child exit {r.returncode}: {r.stderr[-3000:]}"
    warm, on_big, on_long = (json.loads(l[len("RESULT "):]) for l in r.stdout.splitlines() if l.startswith("RESULT "))
    assert warm["code"] == 0, warm
    assert on_big["code"] == 2 and not on_big["traceback"] and on_big["last"].startswith("error: "), on_big
    assert "big.tsv:2" in on_big["last"] and "--max-line-bytes" in on_big["last"], on_big
    assert on_big["status"] == "failed", on_big  # not `running`: the process ended its run
    assert on_long["code"] == 0 and on_long["status"] == "finished", on_long


# ================================================================ 5. reads of a runs folder are bounded
def _run_folder(d: Path, records=None, status="finished") -> Path:
    d.mkdir(parents=True)
    (d / "run.json").write_text(json.dumps({"kind": "pretrain", "status": status, "created": "2026-01-01T00:00:00+00:00",
                                            "config": {"seed": 0}}))
    if records is not None:
        (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return d


DEV_ZERO_CHILD = r'''
import time
from engine import runs
from studio import compare
import pandas
root = sys.argv[1]
limit(300)
t = time.time()
print("rows", sorted((r["name"], r["step"]) for r in runs.list_runs(root)), flush=True)
print("metrics", runs.read_metrics(root + "/zero"), runs.last_metrics(root + "/zero"), flush=True)
df = compare.metrics_frame(compare.find_runs(root))
print("frame", sorted(set(df["run"])), len(df), flush=True)
print("seconds", time.time() - t, flush=True)
'''


@pytest.mark.slow
def test_metrics_jsonl_symlinked_to_dev_zero_is_not_read(tmp_path):
    """Before: MemoryError on the Start page (list_runs reads the "tail" of an endless file) and the Compare page."""
    root = tmp_path / "runs"
    _run_folder(root / "ok", [{"step": 1, "split": "train", "loss": 2.0}])
    (_run_folder(root / "zero") / "metrics.jsonl").symlink_to("/dev/zero")
    r = _child(DEV_ZERO_CHILD, root, timeout=60)
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout
    assert "rows [('ok', 1), ('zero', None)]" in out and "metrics [] None" in out and "frame ['ok'] 1" in out, out
    assert float(out.split("seconds")[1]) < 10, out


FIFO_CHILD = r'''
from engine import runs
from engine.errors import EngineError
from studio import compare
root = sys.argv[1]
print("rows", sorted((r["name"], r["step"], r["effective_status"]) for r in runs.list_runs(root)), flush=True)
print("metrics", runs.read_metrics(root + "/fifo"), runs.last_metrics(root + "/fifo"), runs.lock_holder(root + "/fifo"), flush=True)
print("frame", sorted(set(compare.metrics_frame(compare.find_runs(root))["run"])), flush=True)
try:
    runs.read_run_json(root + "/fifo-json")
    print("run.json read")
except EngineError as e:
    print("run.json error", str(e))
'''


@pytest.mark.slow
def test_fifos_in_a_run_folder_never_block_a_reader(tmp_path):
    """metrics.jsonl, run.lock and run.json as FIFOs (no writer ever opens them): before, list_runs blocked forever."""
    root = tmp_path / "runs"
    _run_folder(root / "ok", [{"step": 3, "loss": 1.0}])
    d = _run_folder(root / "fifo", status="running")
    os.mkfifo(d / "metrics.jsonl")
    os.mkfifo(d / "run.lock")
    (root / "fifo-json").mkdir()
    os.mkfifo(root / "fifo-json" / "run.json")
    r = _child(FIFO_CHILD, root, timeout=60)
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout
    assert "rows [('fifo', None, 'dead'), ('ok', 3, 'finished')]" in out, out
    assert "metrics [] None None" in out and "frame ['ok']" in out, out
    err = out.split("run.json error", 1)[1].strip()
    assert "fifo-json/run.json" in err and "not a regular file" in err and "\n" not in err, out


def test_run_files_symlinked_out_of_the_runs_folder_are_not_followed(tmp_path):
    root, outside = tmp_path / "runs", tmp_path / "outside"
    _run_folder(outside / "secret", [{"step": 7, "loss": 0.5}])
    _run_folder(root / "real", [{"step": 2, "loss": 1.0}])
    (root / "alias").symlink_to(root / "real")  # a run folder linked inside the runs folder: read as before
    d = _run_folder(root / "leak")
    (d / "metrics.jsonl").symlink_to(outside / "secret" / "metrics.jsonl")
    e = root / "leak-json"
    e.mkdir()
    (e / "run.json").symlink_to(outside / "secret" / "run.json")
    assert runs.read_metrics(d) == [] and runs.last_metrics(d) is None
    with pytest.raises(EngineError, match="outside") as info:
        runs.read_run_json(e)
    assert "\n" not in str(info.value)
    rows = {r["name"]: r for r in runs.list_runs(root)}
    assert rows["leak"]["step"] is None and rows["real"]["step"] == 2 and rows["alias"]["step"] == 2
    assert rows["leak-json"]["effective_status"] == "unreadable" and "outside" in rows["leak-json"]["error"]
    assert [r["step"] for r in runs.read_metrics(root / "alias")] == [2]


def test_metrics_are_down_sampled_evenly_per_series_keeping_the_last_and_every_rare_record(tmp_path):
    recs = []
    for s in range(1, 1001):
        recs.append({"step": s, "split": "train", "loss": 1.0 / s})
        if s % 100 == 0:
            recs.append({"step": s, "split": "eval", "eval_mlm_acc": s / 1000})
    d = _run_folder(tmp_path / "r", recs)
    got = runs.read_metrics(d, max_rows=50)
    train = [r["step"] for r in got if r["split"] == "train"]
    assert [r["step"] for r in got if r["split"] == "eval"] == list(range(100, 1001, 100))  # rare records all kept
    assert 25 <= len(train) <= 50 and train[0] == 1 and train[-1] == 1000 and train == sorted(train)
    gaps = {b - a for a, b in zip(train[:-2], train[1:-1])}
    assert len(gaps) == 1, gaps  # evenly spaced (the last one aside)
    assert [r["step"] for r in got] == sorted(r["step"] for r in got)  # file order
    assert runs.read_metrics(d, max_rows=None) == recs and len(runs.read_metrics(d)) == len(recs)  # small runs: all
    # a line far longer than any record (a file edited by hand) is skipped without being held
    with open(d / "metrics.jsonl", "ab") as f:
        f.write(b'{"step": 2000, "note": "' + b"x" * 300_000 + b'"}\n' + b'{"step": 2001, "loss": 0.1}\n')
    assert runs.read_metrics(d, max_rows=None)[-1] == {"step": 2001, "loss": 0.1}
    assert runs.truncate_metrics(d, 500) == 500 + 5  # resume's cut still keeps every record up to the step
    assert [r["step"] for r in runs.read_metrics(d, max_rows=None)][-2:] == [500, 500]


@pytest.mark.slow
def test_a_big_metrics_file_is_read_in_memory_a_small_multiple_of_what_is_kept(tmp_path):
    """Before: a 203 MB metrics.jsonl took 1.5 GB in read_metrics and 1.6 GB on the Compare page (8x the file)."""
    from studio import compare
    d = tmp_path / "runs" / "big"
    d.mkdir(parents=True)
    (d / "run.json").write_text(json.dumps({"kind": "pretrain", "status": "finished", "config": {}}))
    with open(d / "metrics.jsonl", "w") as f:
        for s in range(1, 150_001):
            f.write(json.dumps({"step": s, "split": "train", "tokens": 512 * s, "elapsed": 0.01 * s, "loss": 7.0 / s ** 0.1,
                                "mlm_loss": 6.0 / s ** 0.1, "nsp_loss": 0.69, "lr": 1e-4, "tokens_per_s": 51234.5}) + "\n")
            if s % 1000 == 0:
                f.write(json.dumps({"step": s, "split": "eval", "eval_mlm_acc": 0.1, "eval_nsp_acc": 0.6}) + "\n")
    size = (d / "metrics.jsonl").stat().st_size
    assert size > 25 * 2 ** 20
    tracemalloc.start()
    try:
        got = runs.read_metrics(d, max_rows=2000)
        kept, peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        frame = compare.metrics_frame(compare.find_runs(tmp_path / "runs"))
        frame_peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len([r for r in got if r["split"] == "train"]) <= 2000 and got[-1]["step"] == 150_000
    assert len([r for r in got if r["split"] == "eval"]) == 150
    assert peak < 3 * kept + 4 * 2 ** 20 and peak < size / 8, f"peak {peak / 2 ** 20:.1f} MB, kept {kept / 2 ** 20:.1f} MB"
    assert 0 < len(frame) <= compare.MAX_ROWS_PER_SERIES + 150 and frame["step"].max() == 150_000
    assert frame_peak < size / 4, f"the Compare page's frame peaked at {frame_peak / 2 ** 20:.1f} MB for a {size / 2 ** 20:.0f} MB file"


# ================================================================ 6. measured --write
def _readme(tmp_path: Path, body: str = None) -> Path:
    p = tmp_path / "README.md"
    body = body if body is not None else f"# Title\n\nintro\n\n{measured.README_START}\nold table\n{measured.README_END}\n\n## The end\nlast line\n"
    p.write_text(body, encoding="utf-8")
    return p


def _measured_cli(engine_cli, path):
    return engine_cli(["measured", "--write", path])


def test_measured_write_replaces_only_the_table_and_keeps_the_mode(tmp_path, engine_cli):
    p = _readme(tmp_path)
    os.chmod(p, 0o644)
    code, _, err = _measured_cli(engine_cli, p)
    assert code == 0, err
    text = p.read_text()
    assert text.startswith("# Title\n\nintro\n\n") and text.endswith(f"{measured.README_END}\n\n## The end\nlast line\n")
    assert measured.readme_table() in text and "old table" not in text
    assert oct(p.stat().st_mode & 0o777) == oct(0o644)
    assert [x.name for x in tmp_path.iterdir()] == ["README.md"]  # no temporary file left


def test_measured_write_on_a_full_disk_leaves_the_readme_as_it_was(tmp_path, engine_cli, one_line_error, monkeypatch):
    """Every file opened for writing in tmp_path takes half of what is written, then fails with ENOSPC (before: the
    README was truncated first and lost its end, and the error said to continue with --resume)."""
    p = _readme(tmp_path)
    before = p.read_bytes()
    real_open = builtins.open

    class Full:
        def __init__(self, f):
            self.f = f

        def write(self, data):
            self.f.write(data[: len(data) // 2])
            self.f.flush()
            raise OSError(errno.ENOSPC, "No space left on device")

        def __getattr__(self, name):
            return getattr(self.f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

    def full_open(file, mode="r", *a, **k):
        f = real_open(file, mode, *a, **k)
        writing = any(c in mode for c in "wax+")
        return Full(f) if writing and str(file).startswith(str(tmp_path)) else f

    monkeypatch.setattr(builtins, "open", full_open)
    monkeypatch.setattr(io, "open", full_open)
    code, _, err = _measured_cli(engine_cli, p)
    monkeypatch.undo()
    one_line_error(code, err, "No space left on device")
    assert "--resume" not in err and "README.md" in err
    assert p.read_bytes() == before
    assert [x.name for x in tmp_path.iterdir()] == ["README.md"]


@pytest.mark.parametrize("case", ["reversed", "two starts", "two ends"])
def test_measured_write_refuses_reversed_or_repeated_markers(tmp_path, engine_cli, one_line_error, case):
    s, e = measured.README_START, measured.README_END
    body = {"reversed": f"a\n{e}\nmiddle\n{s}\nz\n",
            "two starts": f"a\n{s}\nt\n{e}\nb\n{s}\nu\n{e}\nz\n",
            "two ends": f"a\n{s}\nt\n{e}\nb\n{e}\nz\n"}[case]
    p = _readme(tmp_path, body)
    code, _, err = _measured_cli(engine_cli, p)
    one_line_error(code, err, "README.md")
    assert {"reversed": "before", "two starts": "2 times", "two ends": "2 times"}[case] in err, err
    assert p.read_text() == body


def test_measured_write_on_a_readme_that_is_not_utf8_or_not_writable_is_one_line(tmp_path, engine_cli, one_line_error,
                                                                                  monkeypatch):
    p = tmp_path / "README.md"
    body = f"caf\xe9\n{measured.README_START}\nt\n{measured.README_END}\n".encode("latin-1")
    p.write_bytes(body)
    code, _, err = _measured_cli(engine_cli, p)
    one_line_error(code, err, "not UTF-8")
    assert p.read_bytes() == body
    p = _readme(tmp_path)
    before = p.read_bytes()
    # tests run as root, whom chmod does not stop: a read-only README is what os.access says, a read-only folder
    # is the PermissionError of creating the temporary file beside it
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode, **k: False if Path(path) == p and mode & os.W_OK else real_access(path, mode, **k))
    code, _, err = _measured_cli(engine_cli, p)
    one_line_error(code, err, "read-only")
    monkeypatch.undo()
    real_open = builtins.open

    def no_write(file, mode="r", *a, **k):
        if any(c in mode for c in "wax+") and str(file).startswith(str(tmp_path)):
            raise PermissionError(errno.EACCES, "Permission denied", str(file))
        return real_open(file, mode, *a, **k)

    monkeypatch.setattr(builtins, "open", no_write)
    monkeypatch.setattr(io, "open", no_write)
    code, _, err = _measured_cli(engine_cli, p)
    monkeypatch.undo()
    one_line_error(code, err, "Permission denied")
    assert p.read_bytes() == before
    assert [x.name for x in tmp_path.iterdir()] == ["README.md"]


def test_json_records_of_a_runs_folder_are_read_only_as_regular_bounded_files(tmp_path):
    """engine.records.read_json_or_empty (the Start page's study.json and run.json, eval.json): a FIFO never blocks,
    /dev/zero is not read, a file over the bound is not read whole; each reads as empty, and a real file as itself."""
    import threading
    from engine import records
    fifo, zero, big, ok = (tmp_path / n for n in ("study.json", "zero.json", "big.json", "run.json"))
    os.mkfifo(fifo)
    zero.symlink_to("/dev/zero")
    big.write_text('{"x": "' + "a" * (records.JSON_MAX_BYTES + 10) + '"}', encoding="utf-8")
    ok.write_text('{"kind": "pretrain"}', encoding="utf-8")
    got = {}
    t = threading.Thread(target=lambda: got.update({p.name: records.read_json_or_empty(p) for p in (fifo, zero, big, ok)}),
                         daemon=True)
    t.start()
    t.join(30)
    assert not t.is_alive(), "a reader blocked"
    assert got == {"study.json": {}, "zero.json": {}, "big.json": {}, "run.json": {"kind": "pretrain"}}


def test_features_cut_each_text_to_what_max_seq_len_can_use(tiny_checkpoint):
    """`features` reads task files too: each text (and each tagging word) reaches the tokenizer cut to max_seq_len x 32
    characters, and the features equal those of the uncut text (the model reads only max_seq_len pieces anyway)."""
    import engine
    from engine.features import layer_stack
    bundle = engine.load(tiny_checkpoint)
    tok = bundle.tokenizer
    seen = []
    real_batch, real_words = tok.encode_batch, tok.encode_words
    tok.encode_batch = lambda items, **k: seen.extend(len(x) if isinstance(x, str) else sum(map(len, x)) for x in items) or real_batch(items, **k)
    tok.encode_words = lambda words, **k: seen.append(max(map(len, words))) or real_words(words, **k)
    long = "the market rose sharply today . " * 20_000  # 640 kB
    cut = layer_stack(bundle, [long, ("a short one .", long)], [-1], "cls", max_seq_len=16)
    word = layer_stack(bundle, [["x" * 900_000, "rose"]], [-1], "first-subtoken", max_seq_len=16)
    assert seen and max(seen) <= 2 * 16 * 32  # a pair: two cut texts
    tok.encode_batch, tok.encode_words = real_batch, real_words
    full = layer_stack(bundle, [long, ("a short one .", long)], [-1], "cls", max_seq_len=16)
    import numpy as np
    np.testing.assert_allclose(np.asarray(cut), np.asarray(full), atol=1e-5)
    assert len(word) == 1 and np.asarray(word[0]).shape[0] == 2
