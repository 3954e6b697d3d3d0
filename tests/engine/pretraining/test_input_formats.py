"""RoBERTa's input formats (engine/pretraining/input_formats.py, section 4.2): each format's defining property on
instances whose every token says where it came from, the default unchanged, the checks, batching by tokens, the
separator never masked, the Pre-train settings, and a short training run whose loss falls."""
import hashlib
import json
import random

import numpy as np
import pytest
import torch

import engine.corpora
from engine.errors import EngineError
from engine.objectives import OBJECTIVES, objective
from engine.pretraining.prepare import build_pretraining_data
from engine.pretraining.input_formats import (DEFAULT, DOC_SENTENCES, FULL_SENTENCES, INPUT_FORMATS, SEGMENT_PAIR,
                                              SENTENCE_PAIR, check_format, input_format, keyed)
from engine.pretraining.instances import make_instances
from engine.tokenizer import train_tokenizer

SEP = 0  # the document separator in the synthetic corpus (no text token has id 0)


def synthetic(n_docs=12, seed=7, longest=30):
    """Documents whose tokens are unique ids, and where each id comes from: (doc, sentence, position)."""
    rng = random.Random(seed)
    docs, where, nxt = [], {}, 1
    for d in range(n_docs):
        sents = []
        for s in range(rng.randint(1, 9)):
            ids = list(range(nxt, nxt + rng.randint(1, longest)))
            nxt += len(ids)
            where.update({t: (100 + d, s, k) for k, t in enumerate(ids)})
            sents.append((s, ids))
        docs.append((100 + d, sents))
    return docs, where


def sentence(docs, d, s):
    return dict(dict(docs)[d])[s]


def pieces(row):
    """A row's runs of text between separators."""
    out, cur = [], []
    for t in row:
        if t == SEP:
            out.append(cur)
            cur = []
        else:
            cur.append(t)
    return out + [cur]


# ---------------------------------------------------------------- each format's defining property
@pytest.mark.parametrize("short", [0.0, 0.3])
def test_full_sentences_cross_documents_only_right_after_a_separator_and_hold_full_sentences(short):
    docs, where = synthetic()
    seq_len = 40
    rows = make_instances(docs, "", seq_len, short, 1, random.Random(1), FULL_SENTENCES, SEP)
    crossing = 0
    for a, b, label, src in rows:
        assert b == [] and label is None and 0 < len(a) <= seq_len - 2
        runs = pieces(a)
        assert all(runs), "a separator is never first, last or doubled"
        crossing += len(runs) > 1
        for run, nxt in zip(runs, runs[1:]):  # the document changes exactly at each separator, to the next document
            assert where[nxt[0]][0] == where[run[-1]][0] + 1
        for run in runs:
            assert len({where[t][0] for t in run}) == 1  # between separators: one document
            assert run == sorted(run) and run == list(range(run[0], run[0] + len(run)))  # contiguous text
        assert src[0] == where[a[0]][0] and (src[3] == -1) == (len(runs) == 1)
    assert crossing > 3
    # the rows are the documents in order, each sentence whole, cut only where it is longer than a row
    flat = [t for a, _, _, _ in rows for t in a if t != SEP]
    assert flat == [t for _, sents in docs for _, ids in sents for t in ids]
    for (a, _, _, _), (b, _, _, _) in zip(rows, rows[1:]):
        last, first = where[a[-1]], where[b[0]]
        if first[2] != 0:  # a row that starts inside a sentence: the sentence is longer than a row
            assert last[:2] == first[:2] and len(sentence(docs, *first[:2])) > seq_len - 2


def test_doc_sentences_never_cross_a_document_and_cover_each_in_order():
    docs, where = synthetic()
    rows = make_instances(docs, "", 40, 0.1, 2, random.Random(1), DOC_SENTENCES, SEP)
    per_pass = [t for _, sents in docs for _, ids in sents for t in ids]
    flat = [t for a, _, _, _ in rows for t in a]
    assert flat == per_pass + per_pass  # two passes (dupe factor 2), nothing lost, no separator
    for a, _, _, src in rows:
        assert len({where[t][0] for t in a}) == 1 and src[0] == where[a[0]][0] and src[3] == -1
        assert where[a[0]][2] == 0 or len(sentence(docs, *where[a[0]][:2])) > 38  # starts a sentence unless cut
    ends = [where[a[-1]] for a, _, _, _ in rows]
    assert sum(e[1] == len(dict(docs)[e[0]]) - 1 for e in ends) >= len(docs)  # rows end with their document


@pytest.mark.parametrize("pairs", ["nsp", "sop"])
def test_sentence_pair_a_and_b_are_each_one_sentence(pairs):
    docs, where = synthetic(longest=12)
    got = make_instances(docs, pairs, 40, 0.1, 1, random.Random(2), SENTENCE_PAIR)
    assert len(got) > 20
    for a, b, label, (a_doc, a0, a1, b_doc, b0, b1) in got:
        assert a1 == a0 + 1 and b1 == b0 + 1  # one sentence each
        assert a == sentence(docs, a_doc, a0) and b == sentence(docs, b_doc, b0)  # whole (short enough: no truncation)
        if pairs == "sop":
            assert a_doc == b_doc and (b0 == a0 - 1 if label else b0 == a0 + 1)
        else:
            assert (a_doc != b_doc) if label else (a_doc == b_doc and b0 == a0 + 1)
    labels = [label for _, _, label, _ in got]
    assert 0.3 < sum(labels) / len(labels) < 0.7


def test_a_sentence_pair_longer_than_a_row_is_truncated_to_it():
    docs, _ = synthetic(longest=60)
    for a, b, _, _ in make_instances(docs, "nsp", 32, 0.0, 1, random.Random(2), SENTENCE_PAIR):
        assert a and b and len(a) + len(b) <= 32 - 3


def test_the_default_format_makes_exactly_the_instances_made_before_formats_existed():
    """sha256 of make_instances' output on this corpus and seed, taken from the code before the input formats."""
    docs, _ = synthetic()
    before = {"nsp": "9b2794a76baf657d", "sop": "a75fc53a58535e2c", "": "7c3d2b02a2295a38"}
    for pairs, digest in before.items():
        made = [make_instances(docs, pairs, 40, 0.1, 2, random.Random(3), fmt, SEP) for fmt in (None, SEGMENT_PAIR.name)]
        assert made[0] == made[1]
        assert hashlib.sha256(repr(made[0]).encode()).hexdigest()[:16] == digest, pairs
    assert DEFAULT is SEGMENT_PAIR


# ---------------------------------------------------------------- the table and its checks
def test_each_format_feeds_the_objectives_it_is_made_for_and_names_the_fix_otherwise():
    for fmt in INPUT_FORMATS.values():
        for obj in OBJECTIVES.values():
            ok = fmt.pairs if obj.pairs else fmt.singles
            if ok:
                assert check_format(fmt.name, obj) is fmt
                continue
            with pytest.raises(EngineError) as e:
                check_format(fmt.name, obj)
            line = str(e.value)
            assert "\n" not in line and f"--input-format {fmt.name}" in line and f"--objective {obj.name}" in line
            assert "use an objective" in line
    with pytest.raises(EngineError, match="choose one of segment-pair"):
        input_format("roberta")
    assert input_format(None) is DEFAULT and input_format(DOC_SENTENCES) is DOC_SENTENCES


def test_the_run_settings_refuse_a_format_its_objective_cannot_read():
    from engine.pretraining.config import PretrainConfig, validate
    base = dict(preset="tiny", steps=10, batch_size=8, seq_len=32, phase2_seq_len=None, vocab_size=1000, warmup=0.1)
    validate(PretrainConfig(**base, objective="mlm", input_format="full-sentences"))
    validate(PretrainConfig(**base, objective="mlm+sop", input_format="sentence-pair"))
    assert PretrainConfig().input_format == SEGMENT_PAIR.name
    with pytest.raises(EngineError, match="--input-format doc-sentences makes single rows with no pair task"):
        validate(PretrainConfig(**base, objective="mlm+nsp", input_format="doc-sentences"))
    with pytest.raises(EngineError, match="--input-format sentence-pair makes sentence pairs for a pair task"):
        validate(PretrainConfig(**base, objective="ltr", input_format="sentence-pair"))


# ---------------------------------------------------------------- stored, batched, masked
@pytest.fixture(scope="module")
def bbc(tmp_path_factory):
    docs = engine.corpora.load_corpus("bbc")[::9][:80]
    return docs, train_tokenizer(docs, vocab_size=1500), tmp_path_factory.mktemp("cache")


def test_the_cache_keys_the_format_but_keeps_the_default_key(bbc):
    docs, tok, cache = bbc
    plain = build_pretraining_data(docs, tok, 64, "mlm", cache_dir=cache)
    named = build_pretraining_data(docs, tok, 64, "mlm", cache_dir=cache, input_format=SEGMENT_PAIR.name)
    full = build_pretraining_data(docs, tok, 64, "mlm", cache_dir=cache, input_format=FULL_SENTENCES.name)
    doc = build_pretraining_data(docs, tok, 64, "mlm", cache_dir=cache, input_format=DOC_SENTENCES.name)
    assert named.key == plain.key and named.from_cache
    assert keyed(None) == keyed(SEGMENT_PAIR) == {} and keyed(FULL_SENTENCES.name) == {"input_format": "full-sentences"}
    assert len({plain.key, full.key, doc.key}) == 3
    assert full.config["input_format"] == FULL_SENTENCES.name and plain.config["input_format"] == SEGMENT_PAIR.name
    with pytest.raises(EngineError, match="makes single rows"):
        build_pretraining_data(docs, tok, 64, "mlm+nsp", cache_dir=cache, input_format=FULL_SENTENCES.name)


def test_the_document_separator_is_special_so_never_masked(bbc):
    from engine.pretraining.masking import mask_batch
    docs, tok, cache = bbc
    full = build_pretraining_data(docs, tok, 64, "mlm", cache_dir=cache, input_format=FULL_SENTENCES.name, eval_fraction=0.1)
    b = full.train.collate(np.arange(full.train.num_instances))
    seps = b["input_ids"] == tok.sep_id
    assert (seps & (b["attention_mask"].bool())).sum() > full.train.num_instances  # more [SEP]s than row ends
    assert b["special_tokens_mask"][seps].all() and (b["token_type_ids"] == 0).all()
    m = mask_batch(b, tok.vocab_size, tok.mask_id, tok.special_ids, rate=0.5, generator=torch.Generator().manual_seed(0))
    assert not (m["labels"][seps] != -100).any() and (m["input_ids"][seps] == tok.sep_id).all()
    assert full.eval.separator_id == tok.sep_id  # the held-out rows too
    plain = build_pretraining_data(docs, tok, 64, "mlm", cache_dir=cache)
    assert plain.train.separator_id is None and plain.train.row_tokens is None


def steps_of(data, batch, **kw):
    out = []
    for b in data.batches(batch, **kw):
        out.append(b)
        if b["position"]["epoch"] > 0:
            break
    return out


def test_doc_sentences_batch_by_tokens_and_resume_exactly(bbc):
    docs, tok, cache = bbc
    T, B = 64, 8
    doc = build_pretraining_data(docs, tok, T, "mlm", cache_dir=cache, input_format=DOC_SENTENCES.name)
    assert doc.train.row_tokens == T
    steps = steps_of(doc.train, B)
    real = [int(b["attention_mask"].sum()) for b in steps]
    assert all(B * T - T < r <= B * T for r in real)  # about B full rows of tokens each
    assert max(len(b["index"]) for b in steps) > B  # short rows at documents' ends: more of them in a step
    k = len(steps) // 2
    again = steps_of(doc.train, B, start_position=steps[k - 1]["position"])
    assert [b["index"].tolist() for b in again] == [b["index"].tolist() for b in steps[k:]]
    r0, r1 = (steps_of(doc.train, B // 2, rank=r, world_size=2) for r in (0, 1))
    assert len(r0) == len(r1) and all(b["input_ids"].shape[0] for b in r1)
    for a, b, whole in zip(r0, r1, steps):  # the two ranks split each step of the one-process run
        assert sorted(a["index"].tolist() + b["index"].tolist()) == sorted(whole["index"].tolist())


@pytest.mark.slow  # several seconds: a preparation per format
@pytest.mark.parametrize("obj, fmt", [("mlm+nsp", SENTENCE_PAIR.name), ("mlm+sop", SENTENCE_PAIR.name),
                                      ("mlm", FULL_SENTENCES.name), ("mlm", DOC_SENTENCES.name)])
def test_one_prepare_block_gives_the_in_memory_instances_and_pretrain_data_takes_its_format(bbc, tmp_path, obj, fmt):
    from engine.pretraining.config import PretrainConfig
    from engine.pretraining.prepare import PrepareConfig, open_prepared, prepare
    from engine.pretraining.run import with_prepared_data
    docs, tok, cache = bbc
    (tmp_path / "c.txt").write_text("\n\n".join("\n".join(d) for d in docs), encoding="utf-8")
    tok.save(tmp_path / "tok")
    settings = dict(seq_len=64, objective=obj, dupe_factor=2, eval_fraction=0.1, seed=3, input_format=fmt)
    mem = build_pretraining_data(engine.corpora.load_corpus(str(tmp_path / "c.txt")), tok, cache_dir=tmp_path / "m", **settings)
    prepare(PrepareConfig(corpus=str(tmp_path / "c.txt"), out=str(tmp_path / "p"), tokenizer=str(tmp_path / "tok"), **settings),
            lambda m: None)
    got = open_prepared(tmp_path / "p")
    assert got.train.num_shards == 1 and got.config["input_format"] == fmt
    for split in ("train", "eval"):
        for name in ("tokens", "offsets", "b_start", "nsp_label", "source"):
            assert np.array_equal(getattr(getattr(mem, split), name), getattr(getattr(got, split), name)), (split, name)
    assert (got.train.row_tokens, got.train.separator_id) == (mem.train.row_tokens, mem.train.separator_id)
    cfg = with_prepared_data(PretrainConfig(data=str(tmp_path / "p"), objective=obj, phase2_seq_len=None))
    assert cfg.input_format == fmt and cfg.objective == obj
    with pytest.raises(EngineError, match=f"--input-format segment-pair differs from the {fmt}"):
        with_prepared_data(PretrainConfig(data=str(tmp_path / "p"), objective=obj, phase2_seq_len=None), ("input_format",))


# ---------------------------------------------------------------- a short run whose loss falls
@pytest.mark.slow  # several seconds: a real (tiny) pre-training
def test_a_short_mlm_run_on_full_sentences_lowers_its_loss(tmp_path):
    """`pretrain` with --objective mlm --input-format full-sentences: a tiny model (2 layers, hidden 64), 30 steps; the
    masked-LM loss falls from the uniform guess (ln 1000, about 6.9) towards the unigram's."""
    from engine.pretraining.config import PretrainConfig
    from engine.pretraining.run import pretrain
    docs = engine.corpora.load_corpus("bbc")[::9][:120]
    (tmp_path / "c.txt").write_text("\n\n".join("\n".join(d) for d in docs), encoding="utf-8")
    fmt = FULL_SENTENCES.name
    run = pretrain(PretrainConfig(corpus=str(tmp_path / "c.txt"), objective="mlm", input_format=fmt, preset="tiny", layers=2,
                                  hidden=64, heads=1, vocab_size=1000, seq_len=64, phase2_seq_len=None, steps=30,
                                  batch_size=16, lr=2e-3, warmup=3, dropout=0.0, mask_rate=0.15, eval_every=0,
                                  save_every=0, log_every=5, out=str(tmp_path / "run"), cache_dir=str(tmp_path / "cache"),
                                  quiet=True, device="cpu", compile="off", seed=0))
    recs = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    train = [r["mlm_loss"] for r in recs if r.get("split") == "train"]
    assert len(train) >= 5 and sum(train[-2:]) / 2 < train[0] - 0.3, train
    info = json.loads((run / "run.json").read_text())
    assert info["config"]["input_format"] == fmt


def test_a_run_recorded_before_input_formats_is_the_default_format_to_a_study():
    """A run.json written before the setting records no input_format: it trained SEGMENT-PAIR, so a study's reuse
    (engine.ablations.reuse.training_key) sees it as today's default, and not as another format."""
    from dataclasses import asdict
    from engine.ablations.reuse import training_key
    from engine.pretraining.config import PretrainConfig
    today = asdict(PretrainConfig(objective="mlm"))
    old = {k: v for k, v in today.items() if k != "input_format"}
    assert training_key(old) == training_key(today)
    assert training_key(old) != training_key(dict(today, input_format=DOC_SENTENCES.name))
