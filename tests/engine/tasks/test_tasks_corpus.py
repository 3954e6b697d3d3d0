"""The corpus-made built-in tasks (bbc-cloze, bbc-punct, bbc-next, bbc-story): labels derived from the text, dev documents
exactly the ones pre-training holds out, a deterministic split, the sizes."""

import pytest
import torch

from engine.errors import EngineError
from engine.pretraining.prepare import build_pretraining_data
from engine.tasks.bbc_cloze import BLANK, bbc_cloze_task, candidates, cloze_examples
from engine.tasks.bbc_next import bbc_next_task, next_examples
from engine.tasks.bbc_punct import bbc_punct_task, label_words, punct_examples
from engine.tasks.bbc_story import bbc_story_task, topic_of
from engine.tasks.heldout import Split, build, corpus_split, doc_rng
from engine.tasks.registry import BUILTINS, load_task
from engine.tokenizer import train_tokenizer

torch.set_num_threads(1)

NAMES = ["Anna Smith", "Red Lake", "Blue River", "Tom Green", "North Bay", "Sam West", "Kim Lee", "Old Town"]


def fixture_docs(n=40):
    """n small articles, a headline first, each naming one person and one number twice."""
    docs = []
    for i in range(n):
        name, place = NAMES[i % len(NAMES)], NAMES[(i + 3) % len(NAMES)]
        docs.append((f"news/{i:03d}.txt", [
            f"Headline number {i} about {name}",
            f"{name} visited {place} on Monday, officials said.",
            f"The trip cost {100 + i} pounds in total.",
            f"Why did {name} go there?",
            f"Local people said the {100 + i} pounds were well spent.",
        ]))
    return docs


def test_punctuation_labels_come_from_the_mark_after_each_word():
    words, tags = label_words('He said: "Yes, we will." Why not? (It ends) -- here!')
    assert words == ["he", "said", "yes", "we", "will", "why", "not", "it", "ends", "here"]
    assert tags == ["O", "B-COMMA", "B-COMMA", "O", "B-PERIOD", "O", "B-QUESTION", "O", "O", "B-PERIOD"]
    assert label_words("It costs 3.5 and don't")[0] == ["it", "costs", "3.5", "and", "don't"]  # inner marks stay
    ex = punct_examples("news/000.txt", fixture_docs(1)[0][1])
    assert len(ex) == 2 and ex[0].words[0] == "anna"  # the headline is skipped; windows of 3 sentences
    assert all(w == w.lower() and w[-1].isalnum() for s in ex for w in s.words)


def test_cloze_question_blanks_a_span_the_context_mentions_elsewhere():
    doc_id, sents = fixture_docs(1)[0]
    assert candidates(sents[1]) == ["Anna Smith", "Tom Green"]
    exs = cloze_examples(doc_id, sents, doc_rng(doc_id))
    assert exs
    for ex in exs:
        i = int(ex.qid.split("#")[1])
        text, start = ex.answers[0]
        assert BLANK in ex.question and sents[i] not in ex.context  # the blanked sentence is not in its context
        assert ex.question.replace(BLANK, text, 1) == sents[i]
        assert ex.context[start:start + len(text)] == text
    # a span that occurs once has no second mention: "Monday" is not capitalised multi-word, "officials" not a name
    assert all(e.answers[0][0] in ("Anna Smith", "Tom Green", "100", *NAMES) for e in exs)


def test_next_pairs_are_balanced_with_negatives_from_the_same_document():
    doc_id, sents = fixture_docs(1)[0]
    exs = next_examples(doc_id, sents, doc_rng(doc_id))
    body = sents[1:]
    assert [e.label for e in exs].count("1") == [e.label for e in exs].count("0") == len(body) - 1
    for e in exs:
        i = body.index(e.text_a)
        assert e.text_b in body  # the same article
        assert (e.label == "1") == (body.index(e.text_b) == i + 1)
    assert next_examples("x", ["headline", "a.", "b."], doc_rng("x")) == []  # two sentences: no negative to draw


def test_story_negatives_come_from_another_article_on_the_same_topic_and_side():
    docs = [(f"{('sport', 'tech')[i % 2]}/{i:03d}.txt", sents) for i, (_, sents) in enumerate(fixture_docs(40))]
    split = corpus_split(docs, eval_fraction=0.2, eval_seed=0)
    sentences = {d: s[1:] for d, s in docs}  # bodies (the headline skipped)
    dev_ids = {d for d, _ in split.dev}
    assert len({topic_of(d) for d in dev_ids}) == 2  # both topics among the held-out articles
    task = bbc_story_task(split)
    for side, examples in (("train", task.train), ("dev", task.dev)):
        labels = [e.label for e in examples]
        assert labels.count("1") == labels.count("0") > 0
        for e in examples:
            doc = e.guid.split("#")[0]
            body = sentences[doc]
            i = body.index(e.text_a)
            if e.label == "1":
                assert e.text_b == body[i + 1]
                continue
            other = e.guid.split("-", 1)[1].split("#")[0]
            assert other != doc and topic_of(other) == topic_of(doc) and e.text_b in sentences[other]
            assert (other in dev_ids) == (doc in dev_ids)  # dev negatives only from held-out articles
    assert {e.guid.split("#")[0] for e in task.dev} <= dev_ids
    again = bbc_story_task(corpus_split(list(docs), eval_fraction=0.2, eval_seed=0))
    assert again.train == task.train and again.dev == task.dev  # the same split and pairs every time
    assert topic_of("business/001.txt") == "business" and topic_of("sotu:3") == "sotu"


def test_dev_documents_are_exactly_the_ones_pretraining_holds_out(tmp_path):
    docs = fixture_docs(40)
    split = corpus_split(docs, eval_fraction=0.1, eval_seed=0)
    tok = train_tokenizer([d for _, d in docs], vocab_size=300, lowercase=True)
    data = build_pretraining_data([d for _, d in docs], tok, seq_len=32, eval_fraction=0.1, eval_seed=0,
                                  cache_dir=tmp_path)
    cfg = data.config
    held = {docs[i][0] for i in cfg["eval_documents"]}
    assert cfg["documents"]["usable"] == len(docs)  # every document has text, so indices are document positions
    assert {d for d, _ in split.dev} == held and len(held) == 4
    assert not held & {d for d, _ in split.train}
    task = bbc_next_task(split)
    assert {e.guid.split("#")[0] for e in task.dev} <= held
    assert not {e.guid.split("#")[0] for e in task.train} & held


def test_split_is_deterministic_and_topped_up_to_the_dev_size():
    docs = fixture_docs(40)
    extra = [(f"sotu:{i}", s) for i, (_, s) in enumerate(fixture_docs(30))]
    a = build(corpus_split(docs, 0.1, 0, top_up=extra), next_examples, dev_min=50, train_max=30)
    b = build(corpus_split(list(docs), 0.1, 0, top_up=list(extra)), next_examples, dev_min=50, train_max=30)
    assert a[0] == b[0] and a[1] == b[1]
    train, dev, info = a
    assert len(train) == 30 and info["dev_sources"]["held-out bbc"] == 4 * 6  # 4 held-out docs x 3 anchors (headline skipped) x 2
    assert len(dev) >= 50 and len(dev) - 8 < 50  # whole (8 pairs each: no headline) top-up documents, only until the size is reached
    assert info["dev_sources"]["sotu"] == len(dev) - 24
    # a document's examples do not depend on which other documents are there: each draws from its own generator, so
    # in a build with every document, and in one with the other documents reversed and half of them gone, a
    # document's examples are the ones it makes alone
    doc_id = docs[5][0]
    alone = next_examples(*docs[5], doc_rng(doc_id))
    assert alone and any(ex.label == "0" for ex in alone)  # its NotNext pairs are random draws
    for others in (docs, docs[:5][::-1] + docs[5:6] + docs[6::2]):
        tr, dv, _ = build(corpus_split(others, 0.1, 0), next_examples, dev_min=0, train_max=10 ** 6)
        assert [ex for ex in tr + dv if ex.guid.startswith(f"{doc_id}#")] == alone
    with pytest.raises(EngineError):
        corpus_split(docs[:1], eval_fraction=0.5)


def test_tasks_on_a_split_have_the_right_types_and_sizes():
    split = corpus_split(fixture_docs(40), 0.1, 0)
    cloze, punct, nxt = bbc_cloze_task(split), bbc_punct_task(split), bbc_next_task(split)
    assert cloze.kind == "squad" and cloze.version == "1.1" and len(cloze.dev) == cloze.info["dev_questions"] > 0
    assert punct.kind == "tagging" and set(punct.labels) >= {"O", "B-COMMA", "B-PERIOD", "B-QUESTION"}
    assert 0.5 < punct.info["majority_accuracy"] < 1
    assert nxt.labels == ["0", "1"] and len(nxt.dev) == 24
    assert {"bbc-cloze", "bbc-punct", "bbc-next", "bbc-story"} <= set(BUILTINS)


@pytest.mark.slow
def test_classroom_tasks_have_2000_unseen_dev_examples():
    tasks = [load_task(n) for n in ("bbc-cloze", "bbc-punct", "bbc-next", "bbc-story")]
    from engine.corpora import load_corpus
    from engine.tasks.heldout import bbc_documents
    assert [d for _, d in bbc_documents()] == list(load_corpus("bbc"))  # the documents pre-training indexes
    for t in tasks:
        assert t.info["dev_examples"] >= 2000, t.name
        assert t.info["held_out_documents"] == 111 and t.info["dev_sources"]["held-out bbc"] > 0


def test_a_study_whose_pretraining_sees_the_dev_texts_is_refused(tmp_path):
    from dataclasses import replace

    import engine.ablations as A
    study = A.get_study("pretraining-tasks", scale="classroom")
    assert A.plan(study, tmp_path)  # corpus bbc, the default held-out share: fine
    for change in ({"corpus": "all"}, {"eval_fraction": 0.1}):
        with pytest.raises(EngineError, match="holds out"):
            A.plan(replace(study, base=replace(study.base, **change)), tmp_path)
    A.plan(replace(study, base=replace(study.base, corpus="all"), evaluations=(A.BBC,)), tmp_path)  # topic: no such rule
