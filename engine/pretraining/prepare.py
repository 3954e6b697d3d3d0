"""The one builder of pre-training data: a corpus -> instances in shards (a streamed corpus in many, built in worker
processes; a corpus held in memory in one).

`python -m engine prepare --corpus PATH --out CACHE [--tokenizer DIR] [--workers N] [--part i/n]` reads a
corpus of any size document by document (`engine.corpora.iter_documents`: a file, folder or glob of .txt files
with a blank line between documents, or .jsonl files with a "text" field; .gz/.bz2/.xz too) and writes
instances (engine/pretraining/instances.py) in shards (engine/pretraining/cache.py's arrays), which
`pretrain --data CACHE` then trains from.

`pretrain --corpus X` is the same builder with the whole corpus as ONE block (`build_pretraining_data`): the
documents `engine.corpora.load_corpus` gives (a built-in corpus by name, or a file), held in memory as before,
prepared into a folder under the data cache (`--cache-dir`, $BERT_STUDIO_CACHE) keyed by the corpus's
`corpus_fingerprint`, the vocabulary and the instance settings (`documents_key`), one folder per length of a
two-phase run, then trained from as `--data` is. One block with block 0's seeds (`seed`, `eval_seed`
themselves) makes exactly the instances the in-memory builder made before it was folded in here
(`make_instances` over the whole corpus: tested), so a run of the same settings trains as before. Its manifest
records what it was made from: the corpus's name and fingerprint and the settings.

How (memory stays bounded whatever the corpus size):
- The main process reads documents and groups them into blocks of `block_docs` documents (or fewer when they
  reach `block_chars` characters); a last block smaller than half of that joins the one before it.
- A worker takes a block: splits its documents into sentences, tokenizes all its sentences with one batch
  encoding call, holds out documents, makes instances with the in-memory builder's own functions
  (`tokenize_documents`, `hold_out`, `make_instances`, `write_split`) and writes them as one shard. At most
  2 x workers blocks are in flight, so the main process holds about 2 x workers + 2 blocks of text, and a
  worker one block and its instances. A document longer than `engine.corpora.PIECE_CHARS` (1M characters) is
  read in pieces of at most that many, cut at line ends or spaces, each a document of its own (so a block is
  at most `block_chars` + 1M characters whatever the documents). With --workers 1 the blocks are built in the
  main process, one after the other.
- Each block draws its randomness from its own seed: block 0 of part 0 uses `seed` (and `eval_seed`)
  itself, block b of part i `block_seed(seed, i, b)`. The result therefore does not depend on the number of
  workers, and a corpus that fits in one block gives exactly the in-memory builder's instances (tested).

Departures of a corpus in many blocks from one in a single block (and from google-research/bert, which keeps every
document in memory):
- NSP's random next sentence (NotNext) comes from another document of the SAME BLOCK, a pool of at most
  `block_docs` documents, not from the whole corpus. With 1,000 documents per block the chance of a random
  B from a related document stays small; instance count, label balance and lengths stay those of one block
  within sampling noise (tested on 300 BBC News articles in blocks of 40).
- Held-out documents are chosen per block (round(eval_fraction x block documents), by the block's eval
  seed), so the held-out share is the same but the documents differ from one block's choice. A block too
  small to keep `need` training documents after holding out holds out none (a corpus in one block is refused
  instead, in one line naming the fix, as are one without text or too short for any instance).
- Dupe factor: each block makes its `dupe_factor` passes over its own documents.
- Document numbers in `source` count the documents of the part as read (empty ones included).
- A block that holds a single document (one long next to `block_chars`) gives no mlm+nsp instance: NotNext
  needs another document of the block. The manifest's warnings say how many blocks did; when none gave an
  instance, the error says so and names the fix (a larger --block-chars, or --objective mlm).

Parts: file f goes to part `part_of(name of f)`, a hash of its path within the corpus folder modulo n, so a
file added later moves no other file to another part. Each part records the whole file list it was cut from
(count and sha256 of the names); parts whose lists differ are refused when the cache is opened. Binary files
(`engine.corpora.is_binary`) are skipped with a warning naming them. An --out inside the corpus folder is
refused, and a corpus walk never enters a prepared part folder.

Layout of CACHE (one folder per part; parts merge by listing their shards):
  CACHE/part-I-of-N/settings.json      what this part is built from (written first)
  CACHE/part-I-of-N/tokenizer/         the vocabulary (vocab.txt, tokenizer.json)
  CACHE/part-I-of-N/continuation.npy   (V,) bool: `##` pieces
  CACHE/part-I-of-N/shard-000000/      train/ and eval/ as in the in-memory cache (tokens, offsets, b_start,
                                       nsp_label, source .npy), meta.json with its counts
  CACHE/part-I-of-N/manifest.json      written LAST: shards with counts, totals, the key -> the part is complete
A cache is usable only when every part 0..N-1 has its manifest (`open_prepared`). Shards are written under
`.tmp-...` names and renamed into place when complete; the manifest is written atomically after all of them.

Interrupted preparation (killed, power cut): no manifest, so nothing can train from it. Running the same
command again KEEPS the finished shards (a shard folder exists only complete) when settings.json matches
(same files, sizes and modification times, tokenizer and settings), re-reads the corpus and builds only the
missing shards with the vocabulary it saved; leftover `.tmp-*` folders are removed. Different settings into
the same folder are refused, finished or not (a finished part is reported done only for the settings and
files it was made from). A folder killed before its settings.json was written is started again.

Opening (`open_prepared`): every shard's arrays are checked against a sound shard and against what its writer
recorded in the manifest (its largest token id and shortest instance, `split_checks`): ids outside the
vocabulary, empty instances or a truncated array are one line naming the shard, not an error mid-training.
This reads every shard's tokens once.

Input format (--input-format, RoBERTa 4.2: engine/pretraining/input_formats.py): each block is cut in it, so a
FULL-SENTENCES row runs on only into the next document of its block, and its rows end at the block's end.

Cache key: sha256 of the corpus content (every document's text, as read), the vocabulary, seq_len, objective,
input format (but for the default, SEGMENT-PAIR, so that earlier keys stay), seed, dupe factor, short_seq_prob,
eval fraction and seed, block size and part: the same settings on the same
text give the same key. A corpus in one block (`documents_key`) hashes the same settings with its
`corpus_fingerprint` instead of the raw text.

WordPiece vocabulary (no --tokenizer): trained through the tokenizers iterator API on a bounded sample,
`--tokenizer-sample-words` words (default 20M) taken evenly from the files: file k contributes its first
documents up to sample / number-of-files words, so the sample spans the whole corpus without a full pass.
"""
import errno
import hashlib
import json
import os
import random
import resource
import shutil
import sys
import time
import uuid
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Optional

import numpy as np

from engine import cli
from engine.cli import same_setting, setting
from engine.corpora import (COMPRESSED, SINGLE_SENTENCE_WARN, binary_warning, corpus_files, corpus_root,
                            document_sentences, iter_documents, skip_binary, split_sentences)
from engine.progress import Progress
from engine.errors import EngineError, quoted
from engine.fileio import atomic_write_json
from engine.objectives import MLM_NSP, OBJECTIVES, objective as get_objective
from engine.pretraining.cache import (DEFAULT_CACHE_DIR, FORMAT_VERSION, PretrainingCache, PretrainingData,
                                     continuation_ids, remove_stale_tmp, save_npy, token_dtype, token_info, write_split)
from engine.pretraining.config import PretrainConfig
from engine.pretraining.input_formats import HELP as FORMATS_HELP, INPUT_FORMATS, check_format, input_format
from engine.pretraining.input_formats import DEFAULT as DEFAULT_FORMAT, keyed as format_keyed
from engine.pretraining.instances import eval_count, hold_out, make_instances, tokenize_documents
from engine.tokenizer import corpus_fingerprint

BLOCK_DOCS = 1000  # documents per block = per shard = the NSP random-document pool
BLOCK_CHARS = 8_000_000  # a block closes earlier when its text reaches this many characters
TOKENIZER_SAMPLE_WORDS = 20_000_000  # words a WordPiece vocabulary is trained on when none is given
# where the Pre-train page looks for prepared data (besides <runs folder>/prepared)
DEFAULT_PREPARED_DIR = Path(os.environ.get("BERT_STUDIO_CACHE", "~/.cache/bert_studio")).expanduser() / "prepared"


@dataclass
class PrepareConfig:
    """Settings of one `python -m engine prepare` run (one part); each is a flag (engine/cli.py)."""
    command: ClassVar[str] = "prepare"
    corpus: str = setting("", "a file, folder or glob of .txt (blank line between documents) or .jsonl files, "
                          "optionally .gz/.bz2/.xz", group="data")
    out: str = setting("", "the cache folder to write (with --synthetic-copies: the corpus folder to write)", group="data")
    tokenizer: Optional[str] = setting(None, "a tokenizer folder or vocab.txt, or minilm (MiniLM's vocabulary, for pretrain "
                                       "--init minilm) (default: train one on a sample of the corpus)", group="tokenizer")
    vocab_size: int = setting(8000, "vocabulary size when training one", group="tokenizer")
    cased: bool = setting(False, "keep case when training the vocabulary", group="tokenizer")
    tokenizer_sample_words: int = setting(TOKENIZER_SAMPLE_WORDS, "words the vocabulary is trained on, spread over the files",
                                          group="tokenizer")
    # the instance settings, described once on PretrainConfig's fields: prepare and pretrain share them
    seq_len: int = same_setting(PretrainConfig, "seq_len", group="instances")
    objective: str = same_setting(PretrainConfig, "objective", group="instances")
    input_format: str = same_setting(PretrainConfig, "input_format", group="instances")
    seed: int = same_setting(PretrainConfig, "seed", " (here: the instances' sampling)", group="instances")
    short_seq_prob: float = same_setting(PretrainConfig, "short_seq_prob", group="instances")
    dupe_factor: int = same_setting(PretrainConfig, "dupe_factor", " (here: over each block's documents)", group="instances")
    eval_fraction: float = same_setting(PretrainConfig, "eval_fraction", " (here: per block)", group="instances")
    eval_seed: int = setting(0, "which documents are held out", group="instances")
    workers: int = setting(1, "worker processes", group="scale")
    part: str = setting("0/1", "i/n: prepare only this share of the files (each file goes to the part a hash of its name "
                        "picks, so files added later do not move the others), parts numbered from 0", group="scale")
    block_docs: int = setting(BLOCK_DOCS, "documents per block: one shard and the NSP random-document pool", group="scale")
    block_chars: int = setting(BLOCK_CHARS, "a block closes early at this many characters", group="scale")
    text_field: str = setting("text", "the .jsonl field holding a document", group="data")
    synthetic_copies: Optional[int] = setting(None, "instead of preparing: write this many shuffled copies of "
                                              "--synthetic-source as a folder of .txt files at --out", group="measure")
    synthetic_source: str = setting("all", "the built-in corpus copied (all: 3.28M words a copy; 31 copies make 102M)", group="measure")
    compare_tokenizer: int = setting(0, "also time the tokenizer's own batch encoding on the first N words and print "
                                     "both speeds and their ratio (0: off)", group="measure")


# ================================================================ blocks
def block_seed(seed: int, part: int, block: int) -> int:
    """Block b of part i's seed: `seed` itself for block 0 of part 0, else a hash of (seed, i, b)."""
    if part == 0 and block == 0:
        return int(seed)
    return int(hashlib.sha256(f"{seed}/{part}/{block}".encode()).hexdigest()[:15], 16)


def parse_part(text: str) -> tuple:
    try:
        i, n = (int(x) for x in str(text).split("/"))
    except ValueError:
        raise EngineError(f"--part {quoted(text)} must look like i/n, e.g. 0/4 for the first of 4 parts")
    if n < 1 or not 0 <= i < n:
        raise EngineError(f"--part {text}: need 0 <= i < n (parts are numbered from 0), e.g. 0/4 .. 3/4")
    return i, n


def file_names(files: list, spec) -> list:
    """The corpus files' names relative to the corpus's folder (`corpus_root`), with / between folders: what
    decides a file's part, the same on every machine whatever the corpus's location."""
    root = corpus_root(spec)
    return [Path(os.path.relpath(f, root)).as_posix() for f in files]


def part_of(name: str, parts: int) -> int:
    """The part a file goes to: a hash of its name (`file_names`) modulo the number of parts, so a file's part
    never depends on the other files (one added later moves no other file to another part)."""
    return int(hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:15], 16) % parts


def part_files(files: list, part: int, parts: int, spec) -> list:
    """This part's share of the (sorted) files of corpus `spec` (`part_of`)."""
    return [f for f, name in zip(files, file_names(files, spec)) if part_of(name, parts) == part]


def file_list_record(files: list, spec) -> dict:
    """What a part records about the whole file list it was cut from: the count and a sha256 of the names. Parts
    merge only when these agree (`read_manifests`)."""
    names = file_names(files, spec)
    return {"count": len(names), "sha256": hashlib.sha256("\n".join(names).encode("utf-8", "surrogatepass")).hexdigest()}


def blocks(texts, block_docs: int, block_chars: int, hasher=None):
    """Group documents into blocks [(first document number, [texts])]; a short last block joins the one
    before it. `hasher` (a hashlib object) sees every document's text in order."""
    held, cur, chars, first, n = None, [], 0, 0, 0
    for t in texts:
        if hasher is not None:
            hasher.update(t.encode("utf-8", "surrogatepass"))
            hasher.update(b"\x1e")
        cur.append(t)
        chars += len(t)
        n += 1
        if len(cur) >= block_docs or chars >= block_chars:
            if held is not None:
                yield held
            held, cur, chars, first = (first, cur), [], 0, n
    if cur:
        if held is not None and len(cur) < block_docs // 2 and chars < block_chars // 2:
            held = (held[0], held[1] + cur)
        else:
            if held is not None:
                yield held
            held = (first, cur)
    if held is not None:
        yield held


# ================================================================ one block -> one shard (in a worker)
_WORKER_TOKENIZER = None


def _init_worker(tokenizer_path: str) -> None:
    global _WORKER_TOKENIZER
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # the workers are the parallelism
    from engine.tokenizer import Tokenizer
    _WORKER_TOKENIZER = Tokenizer.from_file(tokenizer_path)


def build_shard(job: dict, tokenizer=None) -> dict:
    """One block of raw documents -> shard folder `job["final"]` (written under a temporary name, renamed
    when complete). Returns the shard's meta (counts)."""
    tok = tokenizer if tokenizer is not None else _WORKER_TOKENIZER
    s = job["settings"]
    obj, seq_len = get_objective(s["objective"]), s["seq_len"]
    docs = [t if isinstance(t, list) else document_sentences(t) for t in job["texts"]]  # raw text, or sentences
    tokenized = tokenize_documents(docs, tok, first_doc=job["first_doc"])
    need = obj.min_documents
    n_eval = eval_count(len(tokenized), s["eval_fraction"], need)
    if job.get("whole_corpus"):  # a corpus in one block (`build_pretraining_data`): refused, not thinned, when too small
        check_corpus(obj, tokenized, n_eval, s["eval_fraction"], job["whole_corpus"])
    if len(tokenized) - n_eval < need:
        n_eval = 0  # a block too small to hold out: it only trains
    train_docs, eval_docs = hold_out(tokenized, n_eval, block_seed(s["eval_seed"], job["part"], job["block"]))
    rng = random.Random(block_seed(s["seed"], job["part"], job["block"]))
    fmt, sep = input_format(s.get("input_format")), tok.sep_id
    if len(train_docs) >= need:
        train = make_instances(train_docs, obj.pairs, seq_len, s["short_seq_prob"], s["dupe_factor"], rng, fmt, sep)
    else:
        train = []  # a lone document cannot pair with another for NotNext (reported: "lone_document")
    ev = make_instances(eval_docs, obj.pairs, seq_len, s["short_seq_prob"], 1,
                         random.Random(block_seed(s["eval_seed"], job["part"], job["block"])), fmt, sep) if n_eval else []
    if job.get("whole_corpus") and not train:
        raise EngineError("the documents are too short to make any pre-training instance; give longer documents or a lower seq_len")
    meta = {"name": job["final"].name, "block": job["block"], "first_doc": job["first_doc"],
            "documents": {"total": len(docs), "usable": len(tokenized), "train": len(train_docs), "eval": len(eval_docs)},
            "words": sum(len(x.split()) for t in job["texts"] for x in ([t] if isinstance(t, str) else t)),
            "single_sentence_documents": sum(len(sents) == 1 for _, sents in tokenized),
            "instances": {"train": len(train), "eval": len(ev)},
            "tokens": {"train": sum(len(a) + len(b) + (3 if b else 2) for a, b, _, _ in train),
                       "eval": sum(len(a) + len(b) + (3 if b else 2) for a, b, _, _ in ev)},
            "eval_documents": [d for d, _ in eval_docs],
            "lone_document": bool(obj.nsp and 0 < len(train_docs) < need)}
    final = Path(job["final"])
    tmp = final.parent / f".tmp-{final.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    dtype = token_dtype(tok.vocab_size)
    try:
        tmp.mkdir(parents=True)
        checks = {name: write_split(tmp / name, inst, tok.cls_id, tok.sep_id, dtype) for name, inst in (("train", train), ("eval", ev))}
        meta["checks"] = checks  # what open_prepared verifies the arrays against
        atomic_write_json(tmp / "meta.json", meta)
        try:
            os.rename(tmp, final)  # the shard exists only complete
        except OSError:
            if not (final / "meta.json").is_file():
                raise
            # a second prepare of the same settings published this shard first: the same content, keep theirs
    except OSError as e:
        raise EngineError(f"could not write shard {final}: {e.strerror or e}; free disk space or choose another --out, "
                          "then run the same command again (finished shards are kept)")
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return meta


def _run_jobs(jobs, workers: int, tokenizer, tokenizer_path: str):
    """Yield build_shard's result for each job, in job order; at most 2 x workers jobs in flight."""
    if workers <= 1:
        for job in jobs:
            yield job["done"] if job.get("done") else build_shard(job, tokenizer)
        return
    import multiprocessing as mp

    ctx = mp.get_context("fork")  # the workers inherit the loaded modules (no torch import per worker)
    with ctx.Pool(workers, initializer=_init_worker, initargs=(tokenizer_path,)) as pool:
        pending = deque()
        for job in jobs:
            pending.append(job["done"] if job.get("done") else pool.apply_async(build_shard, (job,)))
            while len(pending) >= 2 * workers:
                p = pending.popleft()
                yield p if isinstance(p, dict) else p.get()
        while pending:
            p = pending.popleft()
            yield p if isinstance(p, dict) else p.get()


# ================================================================ the tokenizer
def sample_texts(files: list, words: int, text_field: str = "text"):
    """About `words` words of documents, spread over the files: each file gives its first documents up to
    words / len(files) words (a bounded sample without a full pass over the corpus)."""
    per_file = max(1, words // max(1, len(files)))
    for f in files:
        n = 0
        for t in iter_documents([f], text_field):
            yield t
            n += len(t.split())
            if n >= per_file:
                break


def train_sampled_tokenizer(files: list, vocab_size: int, lowercase: bool, words: int, text_field: str = "text"):
    """A WordPiece vocabulary trained (tokenizers' iterator API) on `sample_texts(files, words)`."""
    from engine.tokenizer import train_tokenizer

    return train_tokenizer(sample_texts(files, words, text_field), vocab_size=vocab_size, lowercase=lowercase)


# ================================================================ prepare one part
def _file_stats(files: list) -> list:
    out = []
    for f in files:
        st = f.stat()
        out.append([str(f.resolve()), st.st_size, st.st_mtime_ns])
    return out


def _check_prepare_args(cfg: PrepareConfig) -> None:
    """The settings prepare() refuses, each with one line naming the fix."""
    if cfg.seq_len < 8:
        raise EngineError(f"--seq-len {cfg.seq_len} is too short; use at least 8 (the paper uses 128, then 512)")
    if not 0.0 <= cfg.short_seq_prob <= 1.0:
        raise EngineError(f"--short-seq-prob {cfg.short_seq_prob} must be between 0 and 1")
    if cfg.dupe_factor < 1 or cfg.workers < 1 or cfg.block_docs < 2 or cfg.block_chars < 1:
        raise EngineError("--dupe-factor and --workers must be at least 1, --block-docs at least 2")
    if not 0.0 <= cfg.eval_fraction < 1.0:
        raise EngineError(f"--eval-fraction {cfg.eval_fraction} must be in [0, 1)")
    check_format(cfg.input_format, get_objective(cfg.objective))
    spec = Path(str(cfg.corpus)).expanduser()
    if not spec.is_file():  # a folder or a glob: an --out inside it would become corpus text
        root, out = corpus_root(cfg.corpus).resolve(), Path(cfg.out).expanduser().resolve()
        if out == root or root in out.parents:
            raise EngineError(f"--out {cfg.out} is inside the corpus folder {root}: its vocabulary and shards would sit among "
                              "the documents; choose an --out outside the corpus")


def _part_tokenizer(cfg: PrepareConfig, folder: Path, files: list, log):
    """The part's vocabulary: --tokenizer, else the one this folder was started with (saved before its
    settings.json), else one trained on a sample of the part's files."""
    from engine.tokenizer import Tokenizer
    if cfg.tokenizer:
        return Tokenizer.from_file(cfg.tokenizer)
    if (folder / "settings.json").is_file() or (folder / "manifest.json").is_file():
        return Tokenizer.from_file(folder / "tokenizer")
    log(f"training a {cfg.vocab_size}-token WordPiece vocabulary on about {cfg.tokenizer_sample_words:,} words ...")
    return train_sampled_tokenizer(files, cfg.vocab_size, not cfg.cased, cfg.tokenizer_sample_words, cfg.text_field)


# settings compared on a rerun, but not part of the key (the input format is, but for the default: `format_keyed`)
NOT_KEYED = ("files", "corpus_files", "vocab_training", "input_format")


def part_settings(cfg: PrepareConfig, tok, files: list, every: list, part: int, parts: int) -> dict:
    """What part `part` is built from (its settings.json): the vocabulary, every instance setting, its files
    (sizes, modification times), the whole file list it was cut from, and how the vocabulary was trained."""
    tinfo = token_info(tok)
    return {"format": FORMAT_VERSION, "vocab_sha256": tinfo["vocab_sha256"], "lowercase": tinfo["lowercase"],
            "seq_len": int(cfg.seq_len), "objective": cfg.objective, "input_format": input_format(cfg.input_format).name,
            "seed": int(cfg.seed), "dupe_factor": int(cfg.dupe_factor), "short_seq_prob": float(cfg.short_seq_prob),
            "eval_fraction": float(cfg.eval_fraction), "eval_seed": int(cfg.eval_seed),
            "block_docs": int(cfg.block_docs), "block_chars": int(cfg.block_chars), "text_field": cfg.text_field,
            "part": part, "parts": parts, "files": _file_stats(files), "corpus_files": file_list_record(every, cfg.corpus),
            "vocab_training": None if cfg.tokenizer else {"vocab_size": int(cfg.vocab_size), "cased": bool(cfg.cased),
                                                          "sample_words": int(cfg.tokenizer_sample_words)}}


def _differences(old: dict, new: dict) -> list:
    """How settings `new` differ from `old` (a part's settings.json), one phrase each; a setting `old` does not
    record (an older version wrote it) is not compared."""
    out = []
    for k, v in new.items():
        if k not in old or old[k] == v:
            continue
        if k == "files":
            out.append("the part's corpus files changed (names, sizes or modification times)")
        elif k == "corpus_files":
            out.append(f"the corpus has {v['count']} files, {old[k]['count']} when it was prepared" if v["count"] != old[k]["count"]
                       else "the corpus's file names changed")
        elif k == "vocab_sha256":
            out.append("another vocabulary")
        else:
            out.append(f"{k.replace('_', '-')} {old[k]} there, {v} now")
    return out


def _open_part_folder(folder: Path, settings: dict, tok, log) -> None:
    """Continue an unfinished preparation with the same settings (its finished shards kept, half-written ones
    removed), or start the part's folder afresh: its tokenizer, the continuation ids, then settings.json."""
    if (folder / "settings.json").is_file():
        diff = _differences(json.loads((folder / "settings.json").read_text(encoding="utf-8")), settings)
        if diff:
            raise EngineError(f"{folder} holds an unfinished preparation with other settings or files ({'; '.join(diff[:3])}); "
                              "delete it or choose another --out")
        for p in folder.glob(".tmp-*"):
            shutil.rmtree(p, ignore_errors=True)  # a killed run's half-written shard
        log(f"continuing the unfinished preparation in {folder}: finished shards are kept")
        return
    if folder.exists():
        shutil.rmtree(folder)  # no settings.json: nothing in it can be trusted
    folder.mkdir(parents=True)
    tok.save(folder / "tokenizer")
    save_npy(folder / "continuation.npy", continuation_ids(tok))
    atomic_write_json(folder / "settings.json", settings)


def _finished_part(folder: Path, settings: dict, log) -> dict:
    """The manifest of a part already prepared with exactly `settings`; refused (one line) when it was prepared
    with others or from other files: it never reports success for settings it did not apply."""
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    old = (json.loads((folder / "settings.json").read_text(encoding="utf-8")) if (folder / "settings.json").is_file()
           else {k: v for k, v in manifest.items() if k in settings})
    diff = _differences(old, settings)
    if diff:
        raise EngineError(f"{folder} is already prepared with other settings or files ({'; '.join(diff[:3])}); prepare into "
                          f"another --out, or delete {folder} to prepare it again with these")
    log(f"{folder} is already prepared with these settings ({manifest['instances']['train']} training instances)")
    return manifest


def _part_files(cfg: PrepareConfig, every: list, part: int, parts: int) -> tuple:
    """(this part's text files, warnings about the binary ones skipped)."""
    picked = part_files(every, part, parts, cfg.corpus)
    if not picked:
        raise EngineError(f"part {part}/{parts} gets no file of corpus {quoted(cfg.corpus)} ({len(every)} files; each goes to the "
                          "part a hash of its name picks); use fewer parts or split the corpus into more files")
    files, binary = skip_binary(picked)
    if not files:
        raise EngineError(f"part {part}/{parts} of corpus {quoted(cfg.corpus)} has only binary files ({binary[0]} ...), no text; "
                          "give .txt or .jsonl files of UTF-8 text")
    return files, [binary_warning(f) for f in binary]


def _build_shards(cfg: PrepareConfig, folder: Path, files: list, settings: dict, tok, part: int, t0: float, log) -> tuple:
    """Every shard of the part, finished ones kept: (their metas in order, the sha256 of the documents read)."""
    hasher = hashlib.sha256()

    def jobs():
        texts = iter_documents(files, cfg.text_field)
        for b, (first, block_texts) in enumerate(blocks(texts, cfg.block_docs, cfg.block_chars, hasher)):
            final = folder / f"shard-{b:06d}"
            job = {"texts": block_texts, "first_doc": first, "block": b, "part": part, "settings": settings, "final": final}
            if (final / "meta.json").is_file():
                job = {"done": json.loads((final / "meta.json").read_text(encoding="utf-8"))}
            yield job

    shards, words = [], 0
    # the share read: the corpus's bytes when its files are plain text (compressed files' text size is not known
    # ahead, so then the count of shards alone); a bar on a terminal, a plain line a minute in a log
    plain = not any(str(f).endswith(COMPRESSED) for f in files)
    progress = Progress(sum(f.stat().st_size for f in files) >> 20 if plain else 0, "prepare", "MB")
    read = [0]

    def counted(it):
        for job in it:
            read[0] += sum(len(t) for t in job.get("texts", ()))
            yield job

    for meta in _run_jobs(counted(jobs()), cfg.workers, tok, str(folder / "tokenizer")):
        shards.append(meta)
        words += meta["words"]
        progress.update((read[0] >> 20) - progress.done)
        if len(shards) % 20 == 0:
            log(f"  {len(shards)} shards, {words:,} words, {time.time() - t0:.0f} s")
    progress.close()
    return shards, hasher.hexdigest()


def _check_shards(cfg: PrepareConfig, obj, shards: list) -> list:
    """Refuse a part that gives nothing to train on, saying why; else the warnings about its documents."""
    total = lambda k, s: sum(m[k][s] for m in shards)  # noqa: E731
    usable = total("documents", "usable")
    if usable < obj.min_documents:
        raise EngineError(f"{obj.name} needs at least 2 documents (NotNext takes B from another document); add documents or use --objective mlm")
    lone = sum(bool(m.get("lone_document")) for m in shards)
    why = (f"{lone} of {len(shards)} blocks hold a single document (documents long next to --block-chars {cfg.block_chars}), "
           f"and {obj.name}'s NotNext takes segment B from another document of the same block")
    if total("instances", "train") == 0:
        if lone:
            raise EngineError(f"the corpus gives no training instance: {why}; raise --block-chars so a block holds several "
                              "documents, or use --objective mlm")
        raise EngineError("the corpus gives no training instance (documents too short or empty); give longer documents or a lower --seq-len")
    warnings = []
    if lone:
        warnings.append(f"{why}, so those documents gave no training instance; raise --block-chars, or use --objective mlm")
    single = sum(m.get("single_sentence_documents", 0) for m in shards)
    if usable >= 5 and single > SINGLE_SENTENCE_WARN * usable:  # the warning load_corpus gives
        warnings.append(f"{single} of {usable} documents ({single / usable:.0%}) have a single sentence: next-sentence "
                        "pairs from them are all NotNext, an easy shortcut; put blank lines only between documents (or "
                        "`= Title =` headings before each article), or prepare with --objective mlm")
    return warnings


def prepare(cfg: PrepareConfig, log=print) -> dict:
    """Prepare part i/n of `cfg.corpus` into `cfg.out` (see the module docstring). Returns the part's
    manifest, plus this run's "seconds" (reading, tokenizing, building and writing: the preparation proper),
    "tokenizer_training_s" (reading the corpus files' list and training the vocabulary, when not given) and
    "peak_rss_mb" (`peak_rss_mb`)."""
    obj = get_objective(cfg.objective)
    _check_prepare_args(cfg)
    part, parts = parse_part(cfg.part)
    if parts > 1 and not cfg.tokenizer:
        raise EngineError("--part needs --tokenizer: every part must use the same vocabulary (train one first with "
                          "python -m engine tokenizer, or prepare part 0/1 once and use CACHE/part-0-of-1/tokenizer)")
    t0 = time.time()
    every = corpus_files(cfg.corpus)
    files, warnings = _part_files(cfg, every, part, parts)
    folder = Path(cfg.out).expanduser() / f"part-{part}-of-{parts}"
    tok = _part_tokenizer(cfg, folder, files, log)
    settings = part_settings(cfg, tok, files, every, part, parts)
    if (folder / "manifest.json").is_file():
        return _finished_part(folder, settings, log)
    _open_part_folder(folder, settings, tok, log)
    for w in warnings:
        log(f"warning: {w}")

    t_build = time.time()  # preparation proper, without training the vocabulary
    shards, corpus_sha256 = _build_shards(cfg, folder, files, settings, tok, part, t0, log)
    for w in _check_shards(cfg, obj, shards):
        log(f"warning: {w}")
        warnings.append(w)
    total = lambda k, s: sum(m[k][s] for m in shards)  # noqa: E731
    keyed = {k: v for k, v in settings.items() if k not in NOT_KEYED}
    keyed.update(corpus_sha256=corpus_sha256, **format_keyed(settings["input_format"]))
    key = hashlib.sha256(json.dumps(keyed, sort_keys=True).encode()).hexdigest()[:16]
    manifest = {**keyed, "input_format": settings["input_format"], "key": key, "corpus": str(cfg.corpus), "corpus_files": settings["corpus_files"],
                "tokenizer": token_info(tok), "token_dtype": np.dtype(token_dtype(tok.vocab_size)).name,
                "documents": {k: total("documents", k) for k in ("total", "usable", "train", "eval")},
                "instances": {k: total("instances", k) for k in ("train", "eval")},
                "tokens": {k: total("tokens", k) for k in ("train", "eval")},
                "words": sum(m["words"] for m in shards), "files": len(files), "warnings": warnings,
                "shards": [{k: m[k] for k in ("name", "documents", "instances", "tokens", "words", "checks") if k in m}
                           for m in shards]}
    atomic_write_json(folder / "manifest.json", manifest)  # written last: the part is complete
    return {**manifest, "seconds": round(time.time() - t_build, 2), "tokenizer_training_s": round(t_build - t0, 2),
            "peak_rss_mb": peak_rss_mb(cfg.workers)}


def peak_rss_mb(workers: int = 1) -> dict:
    """Peak resident memory in MB (ru_maxrss, Linux KiB): `main` of this process, `worker` of the largest finished
    child (the workers, reaped when their pool closes), and `tree` = main + workers x worker, a bound on the
    process tree's peak (the workers run beside the main process, not after it)."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    kid = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0 if workers > 1 else 0.0
    return {"main": round(own, 1), "worker": round(kid, 1), "tree": round(own + workers * kid, 1)}


# ================================================================ open a prepared cache
def is_prepared(path) -> bool:
    return bool(list(Path(path).expanduser().glob("part-*-of-*/manifest.json")))


def list_prepared(folder, limit: int = 200) -> list:
    """The prepared data folders directly inside `folder` (complete or not: `prepared_stats` says), by name."""
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        return []
    out = []
    for p in sorted(folder.iterdir())[:limit]:
        if p.is_dir() and (list(p.glob("part-*-of-*/manifest.json")) or list(p.glob("part-*-of-*/settings.json"))):
            out.append(p)
    return out


def read_manifests(path) -> list:
    """The part manifests of a prepared cache, in part order; EngineError unless every part is complete."""
    path = Path(path).expanduser()
    found = sorted(path.glob("part-*-of-*/manifest.json"))
    if not found:
        started = list(path.glob("part-*-of-*/settings.json"))
        if started:
            raise EngineError(f"{path} is an unfinished preparation (no manifest); run the same prepare command again to finish it")
        raise EngineError(f"{path} is not a prepared data folder; make one with python -m engine prepare --corpus ... --out {path}")
    try:  # a manifest without an input format was made before the setting, in SEGMENT-PAIR
        manifests = [{"input_format": DEFAULT_FORMAT.name, **json.loads(f.read_text(encoding="utf-8"))} for f in found]
    except ValueError as e:
        raise EngineError(f"a manifest in {path} is damaged ({e}); prepare the data again")
    parts = manifests[0]["parts"]
    have = {m["part"] for m in manifests if m["parts"] == parts}
    if len(manifests) != parts or have != set(range(parts)):
        missing = sorted(set(range(parts)) - have)
        raise EngineError(f"{path} lacks part(s) {', '.join(f'{i}/{parts}' for i in missing)} (or mixes part counts); "
                          "prepare them (or copy their part-*-of-* folders here)")
    base = {k: v for k, v in manifests[0].items() if k in ("vocab_sha256", "seq_len", "objective", "seed", "dupe_factor",
                                                            "short_seq_prob", "eval_fraction", "eval_seed", "input_format")}
    for m in manifests[1:]:
        if any(m.get(k) != v for k, v in base.items()):
            raise EngineError(f"the parts in {path} were prepared with different settings or vocabularies; prepare them again alike")
    lists = {json.dumps(m.get("corpus_files"), sort_keys=True) for m in manifests}
    if len(lists) > 1:  # files added or removed between parts: the parts' files would overlap or miss some
        counts = ", ".join(f"part {m['part']}/{parts}: {(m.get('corpus_files') or {}).get('count', 'unrecorded')} files"
                           for m in sorted(manifests, key=lambda m: m["part"]))
        raise EngineError(f"the parts in {path} were cut from different lists of corpus files ({counts}); prepare every "
                          "part again from the same files")
    return sorted(manifests, key=lambda m: m["part"])


def prepared_stats(path) -> dict:
    """Documents, instances, tokens, words and shards of a prepared cache (for the Pre-train page)."""
    return _stats(path, read_manifests(path))


def _stats(path, ms: list) -> dict:
    """`prepared_stats` of manifests `ms` already read."""
    add = lambda k, s: sum(m[k][s] for m in ms)  # noqa: E731
    return {"path": str(Path(path).expanduser()), "objective": ms[0]["objective"], "seq_len": ms[0]["seq_len"],
            "input_format": ms[0]["input_format"],
            "vocab_size": ms[0]["tokenizer"]["vocab_size"], "parts": len(ms),
            "shards": sum(len(m["shards"]) for m in ms), "words": sum(m["words"] for m in ms),
            "documents": add("documents", "usable"), "documents_eval": add("documents", "eval"),
            "instances": add("instances", "train"), "instances_eval": add("instances", "eval"),
            "tokens": add("tokens", "train"), "tokens_eval": add("tokens", "eval")}


def prepared_key(path) -> str:
    """The key of a prepared cache: its part's key, or a hash of every part's key (each hashes the text and settings)."""
    return _key(read_manifests(path))


def _key(ms: list) -> str:
    """`prepared_key` of manifests `ms` already read."""
    return ms[0]["key"] if len(ms) == 1 else hashlib.sha256("".join(m["key"] for m in ms).encode()).hexdigest()[:16]


def open_prepared(path) -> PretrainingCache:
    """A prepared cache as a `PretrainingCache` whose train/eval splits read all the parts' shards."""
    path = Path(path).expanduser()
    ms = read_manifests(path)
    first = ms[0]
    t = first["tokenizer"]
    folder0 = path / f"part-0-of-{first['parts']}"
    fmt = input_format(first["input_format"])
    sep = t["sep_id"] if fmt.crosses_documents else None
    try:
        cont = np.load(folder0 / "continuation.npy")
        split = {}
        for name in ("train", "eval"):
            folders, counts, checks = [], [], []
            for m in ms:
                for sh in m["shards"]:
                    if sh["instances"][name]:
                        folders.append(path / f"part-{m['part']}-of-{m['parts']}" / sh["name"] / name)
                        counts.append(sh["instances"][name])
                        checks.append((sh.get("checks") or {}).get(name))  # none recorded by an older version
            seed = first["seed"] if name == "train" else first["eval_seed"]
            by_tokens = first["seq_len"] if fmt.batch_by_tokens and name == "train" else None
            split[name] = (PretrainingData(folders, first["objective"], t["pad_id"], cont, seed, counts=counts,
                                           vocab_size=t["vocab_size"], checks=checks, separator_id=sep,
                                           row_tokens=by_tokens) if folders else None)
    except (OSError, ValueError, KeyError) as e:
        raise EngineError(f"prepared data in {path} is damaged ({e}); prepare it again")
    key = _key(ms)  # the manifests read above, not read again
    config = {k: first[k] for k in ("format", "seq_len", "objective", "seed", "dupe_factor", "short_seq_prob",
                                     "eval_fraction", "eval_seed", "vocab_sha256", "lowercase", "input_format")}
    config.update(key=key, corpus_name=first["corpus"], tokenizer=t, has_eval=split["eval"] is not None,
                  token_dtype=first["token_dtype"], prepared=_stats(path, ms))
    if len(ms) == 1 and "eval_documents" in first:  # prepared from documents in memory: which were held out
        config.update(documents=first["documents"], eval_documents=first["eval_documents"])
    return PretrainingCache(path, key, config, split["train"], split["eval"], from_cache=True)


def prepared_tokenizer_dir(path) -> Path:
    """The vocabulary a prepared cache was made with (part 0's copy; every part's has the same sha256)."""
    ms = read_manifests(path)
    return Path(path).expanduser() / f"part-0-of-{ms[0]['parts']}" / "tokenizer"


# ================================================================ documents held in memory: one block
def check_build_args(docs, seq_len, max_positions, short_seq_prob, dupe_factor, eval_fraction) -> None:
    """build_pretraining_data's settings, each refused with one line naming the fix."""
    if not isinstance(seq_len, (int, np.integer)) or seq_len < 8:
        raise EngineError(f"sequence length {seq_len} is too short; use at least 8 (the paper uses 128, then 512)")
    if max_positions is not None and seq_len > max_positions:
        raise EngineError(f"sequence length {seq_len} exceeds the model's {max_positions} positions; lower seq_len or use a model with more max_position_embeddings")
    if not 0.0 <= short_seq_prob <= 1.0:
        raise EngineError(f"short_seq_prob {short_seq_prob} must be between 0 and 1; the paper's code uses 0.1")
    if not isinstance(dupe_factor, (int, np.integer)) or dupe_factor < 1:
        raise EngineError(f"dupe factor {dupe_factor} must be a whole number >= 1")
    if not 0.0 <= eval_fraction < 1.0:
        raise EngineError(f"--eval-fraction {eval_fraction} must be in [0, 1); e.g. 0.05 holds out 5% of the documents")
    if docs is None or len(docs) == 0:
        raise EngineError("the corpus is empty; give at least one document with text")


def check_corpus(obj, tokenized: list, n_eval: int, eval_fraction: float, name: str) -> None:
    """A whole corpus in one block (`build_pretraining_data`): refused in one line when it cannot give what the
    objective needs or hold out `n_eval` documents (a block of a streamed corpus holds out none instead)."""
    if not tokenized:
        raise EngineError(f"the corpus {quoted(name)} has no text the tokenizer can read; give documents with words in them")
    need = obj.min_documents
    if len(tokenized) < need:
        raise EngineError(f"{obj.name} needs at least 2 documents (NotNext takes B from another document); add documents (blank lines separate them) or use objective mlm")
    if obj.nsp and not any(len(s) >= 2 for _, s in tokenized):
        raise EngineError(f"no document has two sentences, so {obj.pair.upper()} would have no pairs; give documents of several sentences or use objective mlm")
    if eval_fraction > 0 and len(tokenized) - n_eval < need:
        raise EngineError(f"the corpus has {len(tokenized)} usable documents, too few to hold out {n_eval} for evaluation and keep {need} for training; add documents or hold out none (--eval-fraction 0)")


def normalise_docs(docs) -> list:
    """Documents as lists of sentences: a string is split into sentences (`engine.corpora.split_sentences`)."""
    return [split_sentences(d) if isinstance(d, str) else [str(x) for x in d] for d in docs]


def documents_settings(tokenizer, seq_len: int = 128, objective: str = MLM_NSP.name, seed: int = 0,
                       short_seq_prob: float = 0.1, dupe_factor: int = 1, eval_fraction: float = 0.05,
                       eval_seed: int = 0, input_format: Optional[str] = None) -> dict:
    """What data prepared from documents in memory is built from (its settings.json): the vocabulary, every instance
    setting, one part of one block."""
    tinfo = token_info(tokenizer)
    return {"format": FORMAT_VERSION, "source": "documents", "vocab_sha256": tinfo["vocab_sha256"],
            "lowercase": tinfo["lowercase"], "seq_len": int(seq_len), "objective": objective,
            "input_format": check_format(input_format, get_objective(objective)).name, "seed": int(seed),
            "dupe_factor": int(dupe_factor), "short_seq_prob": float(short_seq_prob),
            "eval_fraction": float(eval_fraction), "eval_seed": int(eval_seed), "part": 0, "parts": 1}


def documents_key(settings: dict, fingerprint: str) -> str:
    """The key of data prepared from documents in memory: a hash of `documents_settings` and the corpus's
    `engine.tokenizer.corpus_fingerprint` (the text, sentence by sentence); its folder's name ends with it."""
    keyed = {k: v for k, v in settings.items() if k not in NOT_KEYED}
    keyed.update(corpus_fingerprint=fingerprint, **format_keyed(settings["input_format"]))
    return hashlib.sha256(json.dumps(keyed, sort_keys=True).encode()).hexdigest()[:16]


def build_pretraining_data(docs, tokenizer, seq_len: int = 128, objective: str = MLM_NSP.name, seed: int = 0,
                           cache_dir=None, short_seq_prob: float = 0.1, dupe_factor: int = 1,
                           eval_fraction: float = 0.05, eval_seed: int = 0, max_positions: Optional[int] = None,
                           corpus_name: Optional[str] = None, input_format: Optional[str] = None) -> PretrainingCache:
    """Documents held in memory (lists of sentences, or strings; `pretrain --corpus` gives `load_corpus`'s, built-in
    corpora and files alike) -> prepared data of ONE block, a folder under `cache_dir` (default: DEFAULT_CACHE_DIR)
    named by `documents_key`, or that folder opened when it was prepared before. The one builder: the block is made
    by `build_shard`, as every block of `prepare`, with seeds `seed` and `eval_seed` themselves (`block_seed` of
    block 0), so the instances are `make_instances` of the whole corpus, as the in-memory builder made them.
    Returns a `PretrainingCache` (`open_prepared`); `from_cache` is False when built now.

    seq_len: tokens per instance including [CLS]/[SEP] (8 .. `max_positions`); objective: mlm+nsp, mlm or ltr;
    seed: instance sampling of the training documents; dupe_factor: passes over the training documents,
    each with a different random segmentation; eval_fraction: share of documents held out (0 for none), chosen
    by `eval_seed`, with their instances built from `eval_seed` too (same across training seeds); input_format:
    RoBERTa's (engine/pretraining/input_formats.py; None: SEGMENT-PAIR, BERT's).
    """
    check_build_args(docs, seq_len, max_positions, short_seq_prob, dupe_factor, eval_fraction)
    settings = documents_settings(tokenizer, seq_len, objective, seed, short_seq_prob, dupe_factor, eval_fraction,
                                  eval_seed, input_format)
    name = corpus_name or (getattr(docs, "info", None) or {}).get("name") or "custom"
    docs = normalise_docs(docs)
    fingerprint = corpus_fingerprint(docs)
    key = documents_key(settings, fingerprint)
    cache_dir = Path(cache_dir).expanduser() if cache_dir is not None else DEFAULT_CACHE_DIR
    final = cache_dir / f"prepared-{objective.replace('+', '_')}-T{seq_len}-{key}"
    if (final / "part-0-of-1" / "manifest.json").is_file():
        return open_prepared(final)
    _write_one_block(final, docs, tokenizer, settings, {"corpus": name, "corpus_fingerprint": fingerprint, "key": key})
    out = open_prepared(final)
    out.from_cache = False
    return out


def _write_one_block(final: Path, docs: list, tok, settings: dict, record: dict) -> None:
    """Prepared data of one part and one block at `final`: written under a temporary name, its manifest last, then
    renamed into place (atomic; when another process published the same key first, theirs is kept)."""
    cache_dir = final.parent
    tmp = cache_dir / f".tmp-{final.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    folder = tmp / "part-0-of-1"
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        remove_stale_tmp(cache_dir, final.name)
        folder.mkdir(parents=True)
        tok.save(folder / "tokenizer")
        save_npy(folder / "continuation.npy", continuation_ids(tok))
        atomic_write_json(folder / "settings.json", settings)
        meta = build_shard({"texts": docs, "first_doc": 0, "block": 0, "part": 0, "settings": settings,
                            "final": folder / "shard-000000", "whole_corpus": record["corpus"]}, tok)
        manifest = {**settings, **record, "corpus_files": None, "files": 0, "tokenizer": token_info(tok),
                    "token_dtype": np.dtype(token_dtype(tok.vocab_size)).name, "warnings": [],
                    **{k: meta[k] for k in ("documents", "instances", "tokens", "words", "eval_documents")},
                    "shards": [{k: meta[k] for k in ("name", "documents", "instances", "tokens", "words", "checks")}]}
        atomic_write_json(folder / "manifest.json", manifest)  # written last: the part is complete
        if final.exists() and not (final / "part-0-of-1" / "manifest.json").is_file():
            shutil.rmtree(final, ignore_errors=True)  # never published complete: nothing in it to trust
        try:
            os.rename(tmp, final)  # atomic; fails if another process published the same key first
        except OSError as e:
            if e.errno not in (errno.ENOTEMPTY, errno.EEXIST) or not (final / "part-0-of-1" / "manifest.json").is_file():
                raise
    except OSError as e:
        raise EngineError(f"could not write pre-training data to {cache_dir}: {e.strerror or e}; free disk space or pick another cache folder")
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


# ================================================================ a big corpus from the built-in ones
def write_synthetic_corpus(out, copies: int, source: str = "all", seed: int = 0, log=print) -> dict:
    """`copies` shuffled copies of a built-in corpus as a folder of .txt files (one file per copy, a blank
    line between documents, one sentence per line), for measuring preparation at scale. 'all' (bbc + wiki +
    sotu) is 3.28M words, so 4 copies make 13M words and 31 copies 102M. Returns {"files", "documents", "words"}."""
    from engine.corpora import load_corpus

    if copies < 1:
        raise EngineError("--synthetic-copies must be at least 1")
    docs = load_corpus(source)
    out = Path(out).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    texts = ["\n".join(d) for d in docs]
    words_one = sum(len(t.split()) for t in texts)
    rng = random.Random(seed)
    for c in range(copies):
        order = list(range(len(texts)))
        rng.shuffle(order)
        target = out / f"copy-{c:04d}.txt"
        tmp = out / f".tmp-{target.name}"
        with open(tmp, "w", encoding="utf-8") as f:
            for j in order:
                f.write(texts[j])
                f.write("\n\n")
        os.replace(tmp, target)
        log(f"  wrote {target} ({(c + 1) * words_one:,} words so far)")
    return {"files": copies, "documents": copies * len(texts), "words": copies * words_one}


def tokenizer_words_per_s(files: list, tok, words: int, text_field: str = "text") -> float:
    """The tokenizer's own batch encoding speed (words/s, all its threads) on the first `words` words of the
    corpus, split into sentences as prepare splits them: the reference the preparation speed is compared to."""
    batch, n, took = [], 0, 0.0
    for t in iter_documents(files, text_field):
        batch.extend(document_sentences(t))
        n += len(t.split())
        if len(batch) >= 20000 or n >= words:
            t0 = time.perf_counter()
            tok.tokenize_ids(batch)
            took += time.perf_counter() - t0
            batch = []
        if n >= words:
            break
    if batch:
        t0 = time.perf_counter()
        tok.tokenize_ids(batch)
        took += time.perf_counter() - t0
    return n / max(took, 1e-9)


# ================================================================ CLI
def build_parser():
    return cli.parser(PrepareConfig, "Prepare pre-training data from a corpus of any size into shards (bounded memory, "
                                     "worker processes); then train with python -m engine pretrain --data CACHE.")


def main(argv) -> int:
    a = PrepareConfig(**cli.given(PrepareConfig, build_parser(), argv))
    if not a.out:
        raise EngineError("prepare needs --out (the cache folder to write, or with --synthetic-copies the corpus folder)")
    if a.synthetic_copies is not None:
        got = write_synthetic_corpus(a.out, a.synthetic_copies, a.synthetic_source)
        print(json.dumps(got), flush=True)
        return 0
    if not a.corpus:
        raise EngineError("prepare needs --corpus (a file, folder or glob of .txt / .jsonl files)")
    cfg = a
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    got = prepare(cfg, log)
    report = {k: got[k] for k in ("key", "documents", "instances", "tokens", "words", "warnings") if got.get(k)}
    report["shards"] = len(got["shards"])
    if "seconds" in got:
        report.update(seconds=got["seconds"], tokenizer_training_s=got["tokenizer_training_s"],
                      words_per_s=round(got["words"] / max(got["seconds"], 1e-9)), peak_rss_mb=got["peak_rss_mb"])
    if a.compare_tokenizer:
        from engine.tokenizer import Tokenizer
        part, parts = parse_part(cfg.part)
        tok = Tokenizer.from_file(Path(cfg.out).expanduser() / f"part-{part}-of-{parts}" / "tokenizer")
        wps = tokenizer_words_per_s(part_files(corpus_files(cfg.corpus), part, parts, cfg.corpus), tok, a.compare_tokenizer,
                                    cfg.text_field)
        report["tokenizer_words_per_s"] = round(wps)
        if "words_per_s" in report:
            report["ratio_prepare_to_tokenizer"] = round(report["words_per_s"] / wps, 3)
    print(json.dumps(report), flush=True)
    return 0
