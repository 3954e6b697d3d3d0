"""Pre-training corpora with Wikipedia-style headings: articles split at `= Title =`, heading
lines never become sentences or documents, a warning when many documents have one sentence, and NSP's held-out
accuracy beside the best no-model rule."""
import math

import pytest
import torch

from engine.corpora import load_corpus

ARTICLE_A = ["The river rises in the hills. It flows north for ninety miles.",
             "Mills were built along its banks. Most of them closed long ago."]
ARTICLE_B = ["The castle stands on a rock. Its walls are ten feet thick.", "Tourists visit it every summer."]


def wikitext(blank_lines: bool) -> str:
    sep = "\n\n" if blank_lines else "\n"
    parts = [" = River Alde = ", ARTICLE_A[0], " = = History = = ", ARTICLE_A[1],
             " = Framlingham Castle = ", ARTICLE_B[0], " = = = Visitors = = = ", ARTICLE_B[1]]
    return sep.join(parts) + "\n"


@pytest.mark.parametrize("blank_lines", [True, False])
def test_wikitext_headings_split_articles_and_are_dropped(tmp_path, blank_lines):
    f = tmp_path / "wiki.txt"
    f.write_text(wikitext(blank_lines), encoding="utf-8")
    docs = load_corpus(str(f))
    assert len(docs) == 2  # one document per top-level heading, whatever the blank lines
    assert docs[0] == ["The river rises in the hills.", "It flows north for ninety miles.",
                       "Mills were built along its banks.", "Most of them closed long ago."]
    assert docs[1][-1] == "Tourists visit it every summer."
    assert not any("=" in s for d in docs for s in d)
    assert docs.info["read_by_headings"] and docs.info["heading_lines_dropped"] == 4
    assert "warnings" not in docs.info


def test_heading_level():
    from engine.corpora import heading_level
    assert heading_level(" = Title = ") == 1 and heading_level("= = Section = =") == 2 and heading_level("== Sec ==") == 2
    assert heading_level("a = b = c") == 0 and heading_level("= unbalanced = =") == 0 and heading_level("x") == 0


def test_heading_lines_dropped_in_folders_and_plain_files_keep_their_blocks(tmp_path):
    d = tmp_path / "docs"
    d.mkdir()
    (d / "a.txt").write_text("= = Notes = =\nThe river rises in the hills. It flows north.\n", encoding="utf-8")
    assert load_corpus(str(d))[0] == ["The river rises in the hills.", "It flows north."]
    plain = tmp_path / "plain.txt"
    plain.write_text(ARTICLE_A[0] + "\n\n" + ARTICLE_B[0] + "\n", encoding="utf-8")
    assert len(load_corpus(str(plain))) == 2 and "read_by_headings" not in load_corpus(str(plain)).info


def test_many_single_sentence_documents_warn(tmp_path):
    f = tmp_path / "snippets.txt"
    f.write_text("\n\n".join(f"Snippet number {i} stands alone." for i in range(8)) + "\n\nTwo here. And here.\n",
                 encoding="utf-8")
    docs = load_corpus(str(f))
    assert any("8 of 9 documents (89%) have a single sentence" in w for w in docs.info["warnings"])


def _batch(la, lb, labels):
    """Held-out-style batch: [CLS] A [SEP] B [SEP] with A/B of the given lengths, padded to the longest."""
    T = max(a + b + 3 for a, b in zip(la, lb))
    tt = torch.zeros(len(la), T, dtype=torch.long)
    am = torch.zeros(len(la), T, dtype=torch.long)
    for i, (a, b) in enumerate(zip(la, lb)):
        am[i, :a + b + 3] = 1
        tt[i, a + 2:a + b + 3] = 1
    return {"token_type_ids": tt, "attention_mask": am, "next_sentence_label": torch.tensor(labels)}


def test_nsp_baseline_finds_the_heading_shortcut_and_not_more():
    from engine.pretraining.evaluation import nsp_baseline
    # NotNext pairs whose B is a lone heading (2 tokens), IsNext pairs with real sentences: a length rule is perfect
    shortcut = _batch([10, 12, 9, 11, 10, 8], [2, 2, 2, 14, 9, 12], [1, 1, 1, 0, 0, 0])
    assert nsp_baseline([shortcut]) == 1.0
    # the same lengths on both sides of the label: nothing beyond the majority class (3 of 5)
    fair = _batch([10, 10, 10, 10, 10], [5, 9, 5, 9, 7], [1, 1, 0, 0, 0])
    assert nsp_baseline([fair]) == pytest.approx(0.6)
    # split over two batches, and with a reversed rule (NotNext when B is longer)
    longer = [_batch([5, 5], [20, 21], [1, 1]), _batch([5, 5], [3, 4], [0, 0])]
    assert nsp_baseline(longer) == 1.0
    assert math.isnan(nsp_baseline([{k: v for k, v in fair.items() if k != "next_sentence_label"}]))
