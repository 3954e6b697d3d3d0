"""bbc-order (sentence order as a downstream task): the swapped pairs are exactly the label-0 ones, both sentences of
every pair come from one document and are consecutive there, the labels are balanced, the dev documents are the
ones pre-training holds out, and it is a registered built-in task."""

from engine.tasks.bbc_order import IN_ORDER, SWAPPED, bbc_order_task, order_examples
from engine.tasks.heldout import HELD_OUT_TASKS, corpus_split
from engine.tasks.registry import BUILTINS


def docs(n=30):
    """n small articles, a headline first, each sentence naming its article and position."""
    return [(f"news/{i:03d}.txt", [f"Headline {i}"] + [f"Article {i} says thing {k} today." for k in range(4)])
            for i in range(n)]


def test_swapped_pairs_are_exactly_the_label_0_ones_and_both_sentences_come_from_one_document():
    corpus = dict(docs())
    task = bbc_order_task(corpus_split(list(corpus.items()), eval_fraction=0.2, eval_seed=0))
    examples = task.train + task.dev
    assert examples
    for ex in examples:
        body = corpus[ex.guid.split("#")[0]][1:]  # the headline is skipped
        a, b = body.index(ex.text_a), body.index(ex.text_b)  # both sentences are the guid's document's
        swapped = a == b + 1
        assert swapped or b == a + 1  # consecutive, one way or the other
        assert (ex.label == SWAPPED) == swapped and (ex.label == IN_ORDER) == (not swapped)
    labels = [ex.label for ex in examples]
    assert labels.count(SWAPPED) == labels.count(IN_ORDER)


def test_each_consecutive_pair_appears_once_each_way_and_depends_on_its_document_alone():
    doc_id, sents = docs(1)[0]
    made = order_examples(doc_id, sents)
    assert len(made) == 2 * 3  # 4 body sentences: 3 consecutive pairs, each in order and swapped
    pairs = {(ex.text_a, ex.text_b) for ex in made}
    assert all((b, a) in pairs for a, b in pairs)
    assert order_examples(doc_id, sents) == made and order_examples(doc_id, sents[:2]) == []


def test_dev_comes_only_from_held_out_documents_and_the_task_is_registered():
    split = corpus_split(docs(), eval_fraction=0.2, eval_seed=0)
    task = bbc_order_task(split)
    held = {d for d, _ in split.dev}
    assert {ex.guid.split("#")[0] for ex in task.dev} <= held
    assert not {ex.guid.split("#")[0] for ex in task.train} & held
    assert "bbc-order" in BUILTINS and "bbc-order" in HELD_OUT_TASKS
