"""The paper's own numbers for its ablations (Devlin et al. 2019, arXiv:1810.04805v2, section 5 and appendix C.2):
Tables 5, 6, 7 and 8, so an empty studio can show what the classroom studies reproduce at small scale.

Every number is a dev-set score as printed in the paper (Table 7 also gives CoNLL-2003 test F1 where printed).
`FAMILY_TABLES` holds those of the family's studies (RoBERTa, ELECTRA, ALBERT) whose figures were found in the
papers' text; `table(name)` finds a study's in either. `PAPER_TABLES` maps a study name (as in engine.ablations.STUDIES) to a `PaperTable`: its caption, column names and
rows; `frame(name)` gives it as a pandas DataFrame. Transcribed by hand from the paper's PDF.
"""
from dataclasses import dataclass


@dataclass(frozen=True)
class PaperTable:
    title: str  # "Table 5: ..."
    note: str  # what the numbers are
    columns: tuple
    rows: tuple  # one tuple per row, the row label first


PAPER_TABLES = {
    "pretraining-tasks": PaperTable(
        "Table 5: ablation over the pre-training tasks (BERT-BASE)",
        "dev set; accuracy except SQuAD 1.1 (F1)",
        ("Tasks", "MNLI-m", "QNLI", "MRPC", "SST-2", "SQuAD"),
        (("BERT-BASE", 84.4, 88.4, 86.7, 92.7, 88.5),
         ("No NSP", 83.9, 84.9, 86.5, 92.6, 87.9),
         ("LTR & No NSP", 82.1, 84.3, 77.5, 92.1, 77.8),
         ("+ BiLSTM", 82.1, 84.1, 75.7, 91.6, 84.9))),
    "model-size": PaperTable(
        "Table 6: ablation over BERT model size",
        "#L layers, #H hidden size, #A heads; LM (ppl) is the masked-LM perplexity of held-out training data; "
        "dev-set accuracy averaged over 5 random restarts of fine-tuning",
        ("#L", "#H", "#A", "LM (ppl)", "MNLI-m", "MRPC", "SST-2"),
        ((3, 768, 12, 5.84, 77.9, 79.8, 88.4),
         (6, 768, 3, 5.24, 80.6, 82.2, 90.7),
         (6, 768, 12, 4.68, 81.9, 84.8, 91.3),
         (12, 768, 12, 3.99, 84.4, 86.7, 92.9),
         (12, 1024, 16, 3.54, 85.7, 86.9, 93.3),
         (24, 1024, 16, 3.23, 86.6, 87.8, 93.7))),
    "feature-based": PaperTable(
        "Table 7: CoNLL-2003 named entity recognition",
        "F1; hyperparameters chosen on dev; dev and test averaged over 5 random restarts; feature-based rows use "
        "BERT-BASE activations fed to a two-layer 768-dimensional BiLSTM",
        ("System", "Dev F1", "Test F1"),
        (("ELMo (Peters et al., 2018a)", 95.7, 92.2),
         ("CVT (Clark et al., 2018)", None, 92.6),
         ("CSE (Akbik et al., 2018)", None, 93.1),
         ("Fine-tuning: BERT-LARGE", 96.6, 92.8),
         ("Fine-tuning: BERT-BASE", 96.4, 92.4),
         ("Feature-based: Embeddings", 91.0, None),
         ("Feature-based: Second-to-Last Hidden", 95.6, None),
         ("Feature-based: Last Hidden", 94.9, None),
         ("Feature-based: Weighted Sum Last Four Hidden", 95.9, None),
         ("Feature-based: Concat Last Four Hidden", 96.1, None),
         ("Feature-based: Weighted Sum All 12 Layers", 95.5, None))),
    "masking": PaperTable(
        "Table 8: ablation over the masking strategy",
        "MASK / SAME / RND: the share of the selected tokens replaced by [MASK], kept, or replaced by a random "
        "token; dev set (MNLI accuracy, NER F1)",
        ("MASK", "SAME", "RND", "MNLI fine-tune", "NER fine-tune", "NER feature-based"),
        (("80%", "10%", "10%", 84.2, 95.4, 94.9),
         ("100%", "0%", "0%", 84.3, 94.9, 94.0),
         ("80%", "0%", "20%", 84.1, 95.2, 94.6),
         ("80%", "20%", "0%", 84.4, 95.2, 94.7),
         ("0%", "20%", "80%", 83.7, 94.8, 94.6),
         ("0%", "0%", "100%", 83.6, 94.9, 94.6))),
}

# The family's tables (engine/ablations/family.py), where their figures were read in the papers' text: RoBERTa
# (Liu et al. 2019, arXiv:1907.11692) Tables 1 and 2, ELECTRA (Clark et al. 2020) Table 5; ALBERT's Table 5 with the
# figures the issue cites (its text was not found by the search tool; 86.5 from a summary of the table). SpanBERT's
# and Wettig et al.'s tables were not found, so those studies show no paper table.
FAMILY_TABLES = {
    "static-vs-dynamic": PaperTable(
        "RoBERTa Table 1: static vs dynamic masking (BERT-BASE)",
        "dev set; SQuAD 2.0 F1, MNLI-m and SST-2 accuracy; 'reference' is BERT-BASE as published, the other rows "
        "RoBERTa's reimplementation; static: the training data duplicated 10 times, each copy masked its own way",
        ("Masking", "SQuAD 2.0", "MNLI-m", "SST-2"),
        (("reference", 76.3, 84.3, 92.8), ("static", 78.3, 84.3, 92.5), ("dynamic", 78.7, 84.0, 92.9))),
    "input-formats": PaperTable(
        "RoBERTa Table 2: input formats and NSP (base models, BookCorpus + Wikipedia, 1M steps x 256)",
        "dev set; F1 for SQuAD, accuracy for MNLI-m, SST-2 and RACE; medians over five seeds",
        ("Model", "SQuAD 1.1", "SQuAD 2.0", "MNLI-m", "SST-2", "RACE"),
        (("SEGMENT-PAIR (with NSP)", 90.4, 78.7, 84.0, 92.9, 64.2),
         ("SENTENCE-PAIR (with NSP)", 88.7, 76.2, 82.9, 92.1, 63.0),
         ("FULL-SENTENCES (no NSP)", 90.4, 79.1, 84.7, 92.5, 64.8),
         ("DOC-SENTENCES (no NSP)", 90.6, 79.7, 84.7, 92.7, 65.6),
         ("BERT-BASE", 88.5, 76.3, 84.3, 92.8, 64.3))),
    "electra-vs-mlm": PaperTable(
        "ELECTRA Table 5: compute-efficiency experiments (base size)",
        "GLUE score (dev); every row is an objective of the engine; the study trains all but ELECTRA 15% "
        "(--objective electra-15)",
        ("Model", "GLUE score"),
        (("ELECTRA", 85.0), ("All-Tokens MLM", 84.3), ("Replace MLM", 82.4), ("ELECTRA 15%", 82.4), ("BERT", 82.2))),
    "nsp-vs-sop": PaperTable(
        "ALBERT Table 5: the inter-sentence loss (ALBERT-base)",
        "intrinsic accuracy on the pair tasks and the downstream average (SQuAD 1.1/2.0, MNLI, SST-2, RACE); the "
        "averages, 52.0 and 78.9 as the issue cites them, 86.5 from a summary of the table; the other cells were not "
        "looked up (None)",
        ("SP tasks", "NSP acc", "SOP acc", "downstream avg"),
        (("None", None, None, 79.0), ("NSP", None, 52.0, 79.2), ("SOP", 78.9, 86.5, 80.1))),
}


def table(name: str):
    """The paper's table of study `name`: the 2018 paper's (`PAPER_TABLES`) or a family paper's (`FAMILY_TABLES`);
    None for a study with none."""
    return PAPER_TABLES.get(name) or FAMILY_TABLES.get(name)


def frame(name: str):
    """The paper's table for study `name` (`table`) as a pandas DataFrame (missing cells as None)."""
    import pandas as pd
    t = table(name)
    return pd.DataFrame([list(r) for r in t.rows], columns=list(t.columns))
