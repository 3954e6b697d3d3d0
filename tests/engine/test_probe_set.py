"""engine.probe_set: the classroom probe set's sections, answers that are whole words of a real vocabulary, and balanced
next-sentence pairs."""
import pytest

import engine
from engine import probe_set


def test_classroom_probe_set_sections_and_answers_fit_a_real_vocabulary(minilm):
    assert set(probe_set.CLOZE_SECTIONS) == {"everyday facts", "grammar", "news"}
    assert all(len(items) >= 12 for items in probe_set.CLOZE_SECTIONS.values())
    assert len(probe_set.CLOZE) == len(probe_set.CLOZE_SECTION_OF) == sum(len(v) for v in probe_set.CLOZE_SECTIONS.values())
    for sentence, answers in probe_set.CLOZE:
        assert sentence.count("[MASK]") == 1 and sentence == sentence.lower().replace("[mask]", "[MASK]")
        assert all(minilm.tokenizer.token_to_id(a) is not None for a in answers), sentence  # Google's uncased vocab
    truth = [y for _, _, y in probe_set.NSP_PAIRS]
    assert len(truth) >= 30 and truth.count(True) == truth.count(False)
