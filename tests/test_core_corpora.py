"""Built-in corpora (BBC, Wikipedia), user corpora, the sentence splitter, and bad corpus input."""
import json

import pytest

import engine
from engine.corpora import split_sentences


def test_bbc_corpus(bbc_docs):
    assert len(bbc_docs) == 2225
    assert bbc_docs.info["non_utf8_files"] == ["sports/199.txt"]  # the one file that is not valid UTF-8
    assert any("\ufffd" in s for d in bbc_docs for s in d)
    assert bbc_docs[0][0] == "Ad sales boost Time Warner profit"
    assert all(len(d) >= 2 for d in bbc_docs)
    rows = engine.load_bbc_labeled()
    assert len(rows) == 2225
    assert {t for _, t, _ in rows} == {"business", "entertainment", "politics", "sport", "tech"}


def test_wiki_corpus_has_no_redirects_or_markup():
    wiki = engine.load_corpus("wiki")
    assert wiki.info["redirects_skipped"] > 0
    assert len(wiki) > 50
    text = " ".join(s for d in wiki for s in d)
    for mark in ("[[", "]]", "{{", "}}", "'''", "<ref", "#REDIRECT"):
        assert mark not in text
    assert wiki[0][0].startswith("Anarchism")


def test_sentence_splitter_keeps_abbreviations_and_numbers():
    s = split_sentences("Mr. Smith met U.S. officials. Growth was 3.5% in 2004! Was it? Dr. J. Jones agreed. Prices rose.")
    assert s == ["Mr. Smith met U.S. officials.", "Growth was 3.5% in 2004!", "Was it?", "Dr. J. Jones agreed.", "Prices rose."]
    assert split_sentences("") == []
    assert split_sentences('He said "stop." Then he left.') == ['He said "stop."', "Then he left."]


def test_user_corpora(tmp_path):
    txt = tmp_path / "c.txt"
    txt.write_text("First doc. It has two sentences.\n\nSecond doc here.\nMore of it.\n\n\n")
    docs = engine.load_corpus(txt)
    assert docs == [["First doc.", "It has two sentences."], ["Second doc here.", "More of it."]]
    folder = tmp_path / "f"
    folder.mkdir()
    (folder / "a.txt").write_text("Alpha one. Alpha two.")
    (folder / "b.txt").write_bytes(b"Beta \xff one. Beta two.")
    docs = engine.load_corpus(folder)
    assert len(docs) == 2 and docs.info["non_utf8_files"] and "\ufffd" in docs[1][0]
    jl = tmp_path / "c.jsonl"
    jl.write_text(json.dumps({"text": "One. Two."}) + "\n\n" + json.dumps({"text": "Three."}) + "\n")
    assert engine.load_corpus(jl) == [["One.", "Two."], ["Three."]]


def test_bad_corpora(tmp_path):
    with pytest.raises(engine.EngineError, match="not found"):
        engine.load_corpus(tmp_path / "missing.txt")
    empty = tmp_path / "empty.txt"
    empty.write_text("  \n\n ")
    with pytest.raises(engine.EngineError, match="is empty"):
        engine.load_corpus(empty)
    d = tmp_path / "nothing"
    d.mkdir()
    with pytest.raises(engine.EngineError, match="no .txt files"):
        engine.load_corpus(d)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"txt": "x"}\n')
    with pytest.raises(engine.EngineError, match="line 1"):
        engine.load_corpus(bad)
