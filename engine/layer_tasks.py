"""The tasks that `engine.layers` probes every layer with, and their control tasks.

A probing task is a `ProbeTask`: its name, its level (`TOKEN`: one label per word; `SENTENCE`: one label per text or
text pair), its label names and its train and dev items, `(words, labels)` per sentence for a token task and
`(text, label)` for a sentence task (text a string or an (a, b) pair). Labels are strings; `ids(items)` numbers them.

Token tasks (a word's label is read from the hidden state at its first WordPiece, as the paper's feature-based NER, 5.3):
- the built-in tagging tasks (wnut16, bbc-punct: engine.tasks.registry);
- the user's own files in the fine-tuning tagging format (engine.tasks.tagging: a word and its label per line, a
  blank line between sentences, `--token-col` / `--label-col` as there). Their labels need not be BIO: a file of
  POS tags or any other word labels is read by `read_word_labels` with the same layout.

Sentence tasks, made from any corpus without annotation, after Conneau et al. 2018 ("What you can cram into a single
$&!#* vector", their SentLen, WC and BShift) plus BERT's own question:
- `sentence-length`: the number of words in six bins (5-8, 9-12, 13-16, 17-20, 21-25, 26-28 words, Conneau's bins);
  sentences outside them are left out;
- `word-content`: which of `WORD_CONTENT_WORDS` mid-frequency words the sentence holds (exactly one of them).
  Departure: Conneau used 1,000 words; 20 leave each class enough examples in a few thousand sentences;
- `bigram-shift`: were two adjacent words swapped (half the sentences are);
- `next-sentence`: is B the sentence after A in the same document, or a sentence of another document (half each).
A corpus is split by document, `DEV_FRACTION` to dev (random.Random(seed)), so no dev sentence's document is in train.

Control tasks (Hewitt and Liang 2019, "Designing and Interpreting Probes with Control Tasks"): for a token task,
`control_task` gives every word type (lower-cased) one fixed label, drawn so that the labels of the word types follow
the real task's label distribution over training words (exactly, up to rounding: each label gets its share of the
types, then the types are shuffled). A probe that scores well on the control has memorised word identities, so
selectivity (accuracy minus control accuracy) says how much of its accuracy the representation, not the probe, holds.
Sentence tasks have no control task (Hewitt and Liang's is defined on word types).
"""
import random
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path

from engine.errors import EngineError

TOKEN, SENTENCE = "token", "sentence"
LENGTH_BINS = ((5, 8), (9, 12), (13, 16), (17, 20), (21, 25), (26, 28))  # Conneau et al.'s SentLen classes
WORD_CONTENT_WORDS = 20  # classes of word-content
WORD_CONTENT_SKIP = 100  # the most frequent words (function words) are not candidates
DEV_FRACTION = 0.2
SENTENCE_TASKS = {
    "sentence-length": "how many words (6 bins; Conneau et al. 2018)",
    "word-content": f"which of {WORD_CONTENT_WORDS} mid-frequency words it holds (Conneau et al. 2018)",
    "bigram-shift": "were two adjacent words swapped? (Conneau et al. 2018)",
    "next-sentence": "is B the sentence after A? (BERT's next-sentence question)",
}
TOKEN_FILE_TASK = "tagging"  # the --task value of the user's own word-label files


@dataclass
class ProbeTask:
    name: str
    level: str  # TOKEN or SENTENCE
    labels: list  # label names, in id order
    train: list  # TOKEN: (words, labels) per sentence; SENTENCE: (text or (a, b), label)
    dev: list
    info: dict = field(default_factory=dict)

    def ids(self, items) -> list:
        """Label ids of `items`, flattened over words for a token task."""
        index = {l: i for i, l in enumerate(self.labels)}
        if self.level == TOKEN:
            return [index[l] for _, labels in items for l in labels]
        return [index[l] for _, l in items]

    def texts(self, items) -> list:
        return [x for x, _ in items]


def token_task_names() -> tuple:
    """The built-in tagging tasks, then `tagging` (the user's files)."""
    from engine.tasks.registry import BUILTINS
    return tuple(n for n, b in BUILTINS.items() if b.format == TOKEN_FILE_TASK) + (TOKEN_FILE_TASK,)


def task_names() -> tuple:
    """Every task `engine layers --task` takes."""
    return token_task_names() + tuple(SENTENCE_TASKS)


def sample(items: list, n, seed: int) -> list:
    """A fixed random sample of `n` items in their own order (all of them when n is None or not smaller)."""
    if n is None or int(n) >= len(items):
        return list(items)
    keep = sorted(random.Random(seed).sample(range(len(items)), int(n)))
    return [items[i] for i in keep]


def sized(task: ProbeTask, max_train=None, max_dev=None, seed: int = 0) -> ProbeTask:
    """The task with a fixed sample of at most max_train / max_dev items on each side."""
    return replace(task, train=sample(task.train, max_train, seed), dev=sample(task.dev, max_dev, seed + 1))


# ------------------------------------------------------------------ token tasks
def read_word_labels(path, token=None, label=None) -> list:
    """(words, labels) per sentence of a word-label file whose labels are not BIO tags (POS tags, anything): one
    word and its label per line, a blank line between sentences, the word in column `token` (default the first)
    and the label in column `label` (default the last)."""
    from engine.tasks.tables import read_text
    try:
        ti, li = int(token or 0), int(label if label is not None else -1)
    except ValueError:
        raise EngineError(f"{path}: its labels are not BIO tags, so give --token-col and --label-col as 0-based column numbers")
    out, words, labels = [], [], []
    for n, line in enumerate(read_text(Path(path), "tagging file").splitlines(), 1):
        parts = line.split("\t") if "\t" in line else line.split()
        parts = [p.strip() for p in parts]
        if not line.strip() or parts[0].startswith("-DOCSTART-"):
            if words:
                out.append((words, labels))
            words, labels = [], []
            continue
        if len(parts) < 2:
            raise EngineError(f"{path}:{n}: expected a word and its label, found {line.strip()[:40]!r}; put one word "
                              f"and its label per line, a blank line between sentences")
        words.append(parts[ti])
        labels.append(parts[li])
    if words:
        out.append((words, labels))
    if not out:
        raise EngineError(f"{path} has no labelled words; expected `word<TAB>label` lines")
    return out


def _label_set(*splits) -> list:
    counts = Counter(l for split in splits for _, labels in split for l in labels)
    return sorted(counts, key=lambda l: (-counts[l], l))


def file_token_task(train, dev, token=None, label=None) -> ProbeTask:
    """A token task from the user's train and dev files (BIO tags through engine.tasks.tagging, else any labels)."""
    from engine.tasks.tagging import load_tagging
    if not train or not dev:
        raise EngineError(f"--task {TOKEN_FILE_TASK} needs --train FILE and --dev FILE (one word and its label per line)")
    try:
        t = load_tagging(train, dev, token=token, label=label)
        tr, dv = [(s.words, s.tags) for s in t.train], [(s.words, s.tags) for s in t.dev]
        name = t.name
    except EngineError as e:
        if "is not BIO" not in str(e):
            raise
        tr, dv = read_word_labels(train, token, label), read_word_labels(dev, token, label)
        name = Path(train).name.split(".")[0]
    return ProbeTask(name, TOKEN, _label_set(tr, dv), tr, dv, {"train_file": str(train), "dev_file": str(dev)})


def builtin_token_task(name: str) -> ProbeTask:
    """A built-in tagging task (wnut16, bbc-punct) as a token probing task."""
    from engine.tasks.registry import load_task
    t = load_task(name)
    tr, dv = [(s.words, s.tags) for s in t.train], [(s.words, s.tags) for s in t.dev]
    return ProbeTask(name, TOKEN, _label_set(tr, dv), tr, dv, {"source": (t.info or {}).get("source")})


def control_task(task: ProbeTask, seed: int = 0) -> ProbeTask:
    """Hewitt and Liang's control task of a token task (module docstring): the same words, each word type's label
    fixed and drawn from the real task's label distribution."""
    if task.level != TOKEN:
        raise EngineError(f"{task.name} is a sentence task; control tasks are made for token tasks (word types)")
    counts = Counter(l for _, labels in task.train for l in labels)
    total = sum(counts.values())
    types = sorted({w.lower() for split in (task.train, task.dev) for words, _ in split for w in words})
    if not total or not types:
        raise EngineError(f"{task.name} has no labelled training words to draw a control task from")
    labels = sorted(counts, key=lambda l: (-counts[l], l))
    share = [counts[l] * len(types) / total for l in labels]
    n = [int(s) for s in share]
    for i in sorted(range(len(labels)), key=lambda i: n[i] - share[i])[:len(types) - sum(n)]:  # largest remainders
        n[i] += 1
    drawn = [l for l, k in zip(labels, n) for _ in range(k)]
    rng = random.Random(f"control:{seed}")
    order = list(types)
    rng.shuffle(order)
    of_type = dict(zip(order, drawn))

    def relabel(split):
        return [(words, [of_type[w.lower()] for w in words]) for words, _ in split]
    return ProbeTask(f"{task.name} (control)", TOKEN, list(task.labels), relabel(task.train), relabel(task.dev),
                     {"control_of": task.name, "word_types": len(types)})


# ------------------------------------------------------------------ sentence tasks
def split_documents(docs, seed: int) -> tuple:
    """(train documents, dev documents): DEV_FRACTION of the documents with at least one sentence, at least one."""
    docs = [[s for s in d if str(s).strip()] for d in docs]
    docs = [d for d in docs if d]
    if len(docs) < 2:
        raise EngineError("the corpus needs at least two documents (blank lines between them) to make train and dev sides")
    order = list(range(len(docs)))
    random.Random(f"split:{seed}").shuffle(order)
    n_dev = max(1, round(DEV_FRACTION * len(docs)))
    dev = set(order[:n_dev])
    return [d for i, d in enumerate(docs) if i not in dev], [d for i, d in enumerate(docs) if i in dev]


def length_items(docs, rng) -> list:
    out = []
    for d in docs:
        for s in d:
            n = len(s.split())
            b = next((f"{lo}-{hi}" for lo, hi in LENGTH_BINS if lo <= n <= hi), None)
            if b is not None:
                out.append((s, b))
    return out


def bigram_items(docs, rng) -> list:
    out = []
    for d in docs:
        for s in d:
            w = s.split()
            if len(w) < 4:
                continue
            if rng.random() < 0.5:
                i = rng.randrange(len(w) - 1)
                if w[i] == w[i + 1]:
                    continue
                w[i], w[i + 1] = w[i + 1], w[i]
                out.append((" ".join(w), "inverted"))
            else:
                out.append((s, "original"))
    return out


def next_items(docs, rng) -> list:
    pool = [(k, s) for k, d in enumerate(docs) for s in d]
    out = []
    for k, d in enumerate(docs):
        for i in range(len(d) - 1):
            if rng.random() < 0.5:
                out.append(((d[i], d[i + 1]), "IsNext"))
                continue
            other = pool[rng.randrange(len(pool))]
            if other[0] != k:
                out.append(((d[i], other[1]), "NotNext"))
    return out


def content_words(docs) -> list:
    """WORD_CONTENT_WORDS mid-frequency words of the documents (lower-cased, alphabetic, at least 3 letters): the
    ones after the WORD_CONTENT_SKIP most frequent, counted once per sentence."""
    counts = Counter(w for d in docs for s in d for w in {x.lower() for x in s.split()})
    ranked = [w for w, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])) if w.isalpha() and len(w) >= 3]
    return ranked[WORD_CONTENT_SKIP:WORD_CONTENT_SKIP + WORD_CONTENT_WORDS]


def content_items(docs, rng, words=()) -> list:
    chosen = set(words)
    out = []
    for d in docs:
        for s in d:
            hits = {w.lower() for w in s.split()} & chosen
            if len(hits) == 1:
                out.append((s, hits.pop()))
    return out


MAKERS = {"sentence-length": length_items, "bigram-shift": bigram_items, "next-sentence": next_items,
          "word-content": content_items}


def sentence_task(name: str, corpus, seed: int = 0) -> ProbeTask:
    """A sentence task (SENTENCE_TASKS) made from `corpus`: a built-in corpus name, a path, or documents (lists of
    sentences)."""
    if name not in SENTENCE_TASKS:
        raise EngineError(f"unknown sentence task {name!r}; choose one of {', '.join(SENTENCE_TASKS)}")
    if corpus is None or corpus == "":
        raise EngineError(f"--task {name} is made from a corpus; give --corpus bbc (or another built-in corpus, or a .txt path)")
    if isinstance(corpus, (str, Path)):
        from engine.corpora import load_corpus
        label = str(corpus)
        corpus = load_corpus(str(corpus))
    else:
        label = "documents"
    train_docs, dev_docs = split_documents(corpus, seed)
    kw = {"words": content_words(train_docs)} if name == "word-content" else {}
    make = MAKERS[name]
    train = make(train_docs, random.Random(f"{name}:train:{seed}"), **kw)
    dev = make(dev_docs, random.Random(f"{name}:dev:{seed}"), **kw)
    if not train or not dev:
        raise EngineError(f"corpus {label} gives no {name} examples on one side (train {len(train)}, dev {len(dev)}); "
                          f"give a larger corpus")
    labels = sorted({l for _, l in train + dev}, key=lambda l: (-sum(1 for _, x in train if x == l), l))
    return ProbeTask(name, SENTENCE, labels, train, dev, {"corpus": label, **({"words": kw["words"]} if kw else {})})


def load_probe_task(name: str, train=None, dev=None, corpus=None, token=None, label=None, seed: int = 0) -> ProbeTask:
    """The probing task of a `--task` value (task_names()): a built-in tagging task, the user's files, or a sentence
    task from `corpus`."""
    if name in SENTENCE_TASKS:
        return sentence_task(name, corpus, seed)
    if name == TOKEN_FILE_TASK:
        return file_token_task(train, dev, token, label)
    if name in token_task_names():
        if train or dev:
            raise EngineError(f"{name} is a built-in task and takes no --train / --dev files; use --task {TOKEN_FILE_TASK} for your own")
        return builtin_token_task(name)
    raise EngineError(f"unknown probing task {name!r}; choose one of {', '.join(task_names())}")
