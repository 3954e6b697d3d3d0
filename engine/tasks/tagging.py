"""Token tagging (NER) in the CoNLL/BIO format (paper 5.3: the first sub-token of each word is classified,
no CRF).

File format: one word per line, `word<TAB>tag` or `word tag` (whitespace separated); sentences are separated
by a blank or whitespace-only line (the WNUT-16 file uses a line holding just a TAB); `-DOCSTART-` lines are
skipped; `.gz`/`.bz2` files are decompressed. Tags are `O`, `B-TYPE` or `I-TYPE`. Columns: by default the
word is the first field and the tag the LAST (CoNLL-2003 `word POS chunk NER` gives NER); `token=` / `label=`
(the CLI's `--token-col` / `--label-col`) pick others by 0-based index (negative counts from the end) or by
name when the file's first line is a header (`token pos ner`: its tag cell is not a BIO tag). The columns
used and the tag counts go to the task's `info`.

Alignment: each word is split into WordPieces (`Tokenizer.encode_words`); its label goes on the first
piece, -100 on the other pieces and on [CLS]/[SEP]/[PAD]. Sentences longer than `max_len` pieces are
truncated (the words cut off count as predicted `O`; `count_truncated` says how many sentences lose words).
Scores are conlleval's entity-level precision / recall / F1 on word-level tags: an entity is a B-X followed
by I-X tags, and a stray I-X (after O or another type) starts an entity, as conlleval does.
Departure from the paper: one sentence per input (the paper used maximal document context).
"""
import functools
from dataclasses import dataclass, field
from pathlib import Path

import torch

from engine import records
from engine.errors import EngineError
from engine.tasks.batching import Prepared, cut_text, pad_batch, predict
from engine.tasks.kinds import TAGGING

IGNORE = -100  # label of pieces that are not scored (non-first pieces, specials, padding)


@dataclass
class TaggedSentence:
    words: list  # of str
    tags: list  # of str, one per word
    guid: str = None  # "file:line" of its first word


@dataclass
class TaggingTask:
    name: str
    labels: list  # tags in id order: "O", then B-X, I-X for each entity type X (sorted)
    train: list  # of TaggedSentence
    dev: list  # of TaggedSentence
    metrics: tuple = ("f1", "precision", "recall", "accuracy")  # f1 = entity-level, the selection metric
    info: dict = field(default_factory=dict)
    kind: str = TAGGING.name

    @property
    def num_labels(self) -> int:
        return len(self.labels)

    @property
    def label_to_id(self) -> dict:
        return {l: i for i, l in enumerate(self.labels)}

    def collate(self, tok, max_len: int):
        """A DataLoader `collate_fn` that encodes a list of TaggedSentences."""
        return functools.partial(encode_tagging, tok, max_len=max_len, label_to_id=self.label_to_id)

    def compute_metrics(self, pred_tags, gold_tags=None) -> dict:
        """Entity P/R/F1 and word accuracy of predicted word-level tag lists (default gold: the dev tags)."""
        gold_tags = [s.tags for s in self.dev] if gold_tags is None else gold_tags
        return entity_scores(gold_tags, pred_tags)

    def dev_scores(self, pred_tags, gold_tags=None) -> dict:
        """compute_metrics plus each sentence's entity counts under records.PER_EXAMPLE (entity_counts), what a
        study's bootstrap resamples (fine-tuning and features both)."""
        gold_tags = [s.tags for s in self.dev] if gold_tags is None else gold_tags
        return {**self.compute_metrics(pred_tags, gold_tags), records.PER_EXAMPLE: entity_counts(gold_tags, pred_tags)}

    def prepare(self, tok, max_len: int, cfg=None) -> Prepared:
        """The loop's view: sentences as items (length = words), per-piece logits decoded to word tags."""
        collate = self.collate(tok, max_len)
        tr_len, dv_len = [len(s.words) for s in self.train], [len(s.words) for s in self.dev]

        def evaluate(model, device, bs):
            def per_batch(batch, logits):
                n_words = [len(s.words) for s in batch["_items"]]
                return logits_to_word_tags(logits, batch["word_index"], n_words, self.labels)
            pred = predict(model, self.dev, dv_len, collate, bs, device, per_batch=per_batch)
            return self.dev_scores(pred)
        info = {"labels": list(self.labels), "truncated_dev": count_truncated(tok, self.dev, max_len)}
        return Prepared(self, TAGGING.name, self.num_labels, self.metrics[0], self.train, tr_len, self.dev, dv_len,
                        collate, evaluate, info)

    def preview(self, n: int = 10) -> list:
        """The first n training sentences as table rows (the Fine-tune page's preview)."""
        return [{"words": " ".join(s.words), "tags": " ".join(s.tags)} for s in self.train[:n]]


def _check_tag(tag: str, where: str) -> str:
    if tag == "O" or (len(tag) > 2 and tag[:2] in ("B-", "I-")):
        return tag
    raise EngineError(f"{where}: tag {tag!r} is not BIO; tags must be O, B-TYPE or I-TYPE")


def _split(line: str) -> list:
    return [p.strip() for p in (line.split("\t") if "\t" in line else line.split())]


def _is_tag(cells: list, k) -> bool:
    """Whether cell `k` (an index, possibly a digit string) of a split line is a BIO tag."""
    try:
        t = cells[int(k)]
    except (IndexError, ValueError):
        return False
    return t == "O" or (len(t) > 2 and t[:2] in ("B-", "I-"))


def _column(spec, header, n: int, what: str, source: str) -> int:
    """0-based index of a column given as an index (a digit string works, negative from the end) or a name."""
    if isinstance(spec, str) and spec.strip().lstrip("-").isdigit():
        spec = int(spec)
    if isinstance(spec, int):
        if not -n <= spec < n:
            raise EngineError(f"{what} {spec} is out of range for {source} ({n} columns); use 0..{n - 1} (or -1 for the last)")
        return spec % n
    lower = [c.lower() for c in header or ()]
    if str(spec).lower() not in lower:
        raise EngineError(f"{source} has no column named {spec!r} for {what} "
                          f"({'its header: ' + ', '.join(header) if header else 'it has no header line'}); give a 0-based index")
    return lower.index(str(spec).lower())


def parse_bio(text: str, source: str = "<text>", token=None, label=None, columns: dict = None) -> list:
    """TaggedSentences from the text of a BIO file (format in the module docstring). `token`, `label`: the
    word and tag columns (index or header name; default first and last). `columns`, when given, receives
    {"token": index, "label": index, "n_columns": n, "header": names or None}."""
    sents, words, tags, first = [], [], [], None
    lines = text.splitlines()
    head = next(((i, _split(l)) for i, l in enumerate(lines) if l.strip() and not l.strip().startswith("-DOCSTART-")), None)
    header = None
    ti, li, skip = 0, -1, None
    if head is not None:
        n = len(head[1])
        # a header line: asked for by name, or its tag cell is not a tag while the next line's is
        by_name = any(isinstance(x, str) and not x.strip().lstrip("-").isdigit() for x in (token, label))
        probe = label if label is not None and not by_name else -1
        nxt = next((_split(l) for l in lines[head[0] + 1:] if l.strip()), None)
        if by_name or (not _is_tag(head[1], probe) and nxt is not None and len(nxt) == n and _is_tag(nxt, probe)):
            header, skip = head[1], head[0]
        ti = _column(token if token is not None else 0, header, n, "--token-col", source)
        li = _column(label if label is not None else -1, header, n, "--label-col", source)
        if ti == li:
            raise EngineError(f"--token-col and --label-col both name column {ti} of {source}; the words and tags are two columns")
        if columns is not None:
            columns.update(token=ti, label=li, n_columns=n, header=header)
    for ln, line in enumerate(lines, 1):
        if ln - 1 == skip:
            continue
        if not line.strip():
            if words:
                sents.append(TaggedSentence(words, tags, f"{source}:{first}"))
            words, tags = [], []
            continue
        parts = _split(line)
        if parts[0].startswith("-DOCSTART-"):
            continue
        if len(parts) < 2 or len(parts) <= max(ti, li) or not parts[ti] or not parts[li]:
            raise EngineError(f"{source}:{ln}: expected `word<TAB>tag`{' with a column ' + str(max(ti, li)) if max(ti, li) > 1 else ''}, "
                              f"found {line.strip()[:40]!r}; put one word and its tag per line, a blank line between sentences")
        if not words:
            first = ln
        words.append(parts[ti])
        tags.append(_check_tag(parts[li], f"{source}:{ln}"))
    if words:
        sents.append(TaggedSentence(words, tags, f"{source}:{first}"))
    return sents


def read_bio(path, token=None, label=None, columns: dict = None) -> list:
    """TaggedSentences of a BIO file (plain, .gz or .bz2); `token`, `label`, `columns` as in `parse_bio`."""
    from engine.tasks.tables import read_text
    path = Path(path)
    text = read_text(path, "tagging file")
    sents = parse_bio(text, str(path), token, label, columns)
    if not sents:
        raise EngineError(f"{path} has no tagged words; expected `word<TAB>tag` lines")
    return sents


def tag_set(*splits) -> list:
    """"O" then B-X, I-X for every entity type X seen in any split (sorted), so every type can be predicted."""
    types = sorted({t[2:] for split in splits for s in split for t in s.tags if t != "O"})
    return ["O"] + [f"{p}-{x}" for x in types for p in ("B", "I")]


def tag_counts(sents) -> dict:
    """{tag: how many words carry it}, most frequent first."""
    counts = {}
    for s in sents:
        for t in s.tags:
            counts[t] = counts.get(t, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def make_tagging_task(name: str, train: list, dev: list, info: dict = None) -> TaggingTask:
    info = dict(info or {})
    info.update(train_sentences=len(train), dev_sentences=len(dev),
                train_words=sum(len(s.words) for s in train), dev_words=sum(len(s.words) for s in dev),
                train_tags=tag_counts(train))
    return TaggingTask(name, tag_set(train, dev), train, dev, info=info)


def load_tagging(train, dev=None, name: str = None, token=None, label=None) -> TaggingTask:
    """A tagging task from BIO files. The label set is the union of the train and dev entity types (a type
    seen only in dev is still scored, and counts as missed). `token`, `label`: the word and tag columns
    (module docstring); info["columns"] says which were used."""
    cols = {}
    tr = read_bio(train, token, label, cols)
    dv = read_bio(dev, token, label) if dev is not None else []
    n = cols.get("n_columns", 2)
    names = cols.get("header")
    used = {k: (names[cols[k]] if names else cols[k]) for k in ("token", "label")}
    info = {"train_file": str(train), "dev_file": str(dev) if dev else None, "columns": used, "n_columns": n}
    if n > 2 and label is None:
        info["warnings"] = [f"{Path(train).name} has {n} columns; the tags are read from the last one (column {n - 1}): "
                            f"choose another with --label-col"]
    return make_tagging_task(name or Path(train).name.split(".")[0], tr, dv, info)


def encode_tagging(tok, sentences, max_len: int = 128, label_to_id: dict = None) -> dict:
    """Encode TaggedSentences as one padded batch: input_ids, token_type_ids, attention_mask (B, T) long;
    `word_index` (B, T) long, the word number on the first piece of each word kept, -1 elsewhere;
    `truncated` (B,) bool; `labels` (B, T) long (tag id on first pieces, -100 elsewhere) when
    `label_to_id` is given."""
    encs = [tok.encode_words(_words(s, max_len), max_length=max_len) for s in sentences]
    input_ids, token_type_ids, attention_mask = pad_batch([(e.ids, e.type_ids) for e in encs], tok.pad_id)  # (B, T)
    B, T = input_ids.shape
    word_index = torch.full((B, T), -1, dtype=torch.long)  # (B, T)
    labels = torch.full((B, T), IGNORE, dtype=torch.long)  # (B, T)
    truncated = torch.zeros(B, dtype=torch.bool)  # (B,)
    for b, (s, e) in enumerate(zip(sentences, encs)):
        prev = None
        for t, w in enumerate(e.word_ids):
            if w is not None and w != prev:
                word_index[b, t] = w
                if label_to_id is not None:
                    tag = s.tags[w]
                    if tag not in label_to_id:
                        raise EngineError(f"tag {tag!r} ({s.guid}) is not in the task's labels ({', '.join(label_to_id)})")
                    labels[b, t] = label_to_id[tag]
            prev = w
        truncated[b] = len(e.overflowing) > 0
    out = {"input_ids": input_ids, "token_type_ids": token_type_ids, "attention_mask": attention_mask,
           "word_index": word_index, "truncated": truncated}
    if label_to_id is not None:
        out["labels"] = labels
    return out


def count_truncated(tok, sentences, max_len: int) -> int:
    """How many sentences need more than `max_len` pieces (their last words are cut off)."""
    return sum(len(tok.encode_words(_words(s, max_len)).ids) > max_len for s in sentences)


def _words(sentence, max_len: int) -> list:
    """The sentence's words, each cut to what `max_len` pieces can use (engine.tasks.batching.cut_text)."""
    return [cut_text(w, max_len) for w in sentence.words]


def logits_to_word_tags(logits, word_index, n_words, labels) -> list:
    """Word-level tag lists from per-piece logits (B, T, C) (or predicted ids (B, T)): the tag of each word
    is the argmax at its first piece; words lost to truncation (or with no pieces) get "O". A stray I-X is
    kept as predicted (scoring reads it as the start of an entity). `word_index` (B, T) from
    `encode_tagging`; `n_words` the number of words of each sentence (B,)."""
    ids = logits.argmax(-1) if logits.dim() == 3 else logits  # (B, T)
    out = []
    for b in range(ids.shape[0]):
        tags = ["O"] * int(n_words[b])
        for w, i in zip(word_index[b].tolist(), ids[b].tolist()):
            if 0 <= w < len(tags):
                tags[w] = labels[i]
        out.append(tags)
    return out


def get_entities(tags) -> list:
    """Entities of one tag sequence as (type, start, end) with `end` inclusive, conlleval-style."""
    ents = []
    start, typ = None, None
    for i, tag in enumerate(list(tags) + ["O"]):
        prefix, t = (tag[0], tag[2:]) if tag != "O" and len(tag) > 2 else ("O", None)
        ends = typ is not None and (prefix in ("B", "O") or t != typ)
        if ends:
            ents.append((typ, start, i - 1))
            start, typ = None, None
        if prefix == "B" or (prefix == "I" and typ is None):
            start, typ = i, t
    return ents


def entity_counts(gold_tags, pred_tags) -> list:
    """Per sentence [true positives, false positives, false negatives] of its entities: summed over any sample of
    sentences they give that sample's entity F1 (2tp / (2tp + fp + fn)), what a bootstrap over sentences needs."""
    out = []
    for g, p in zip(gold_tags, pred_tags):
        gs, ps = set(get_entities(g)), set(get_entities(p))
        out.append([len(gs & ps), len(ps - gs), len(gs - ps)])
    return out


def entity_scores(gold_tags, pred_tags) -> dict:
    """conlleval scores over sentences: {"precision", "recall", "f1", "accuracy" (per word), "per_type":
    {type: {"precision", "recall", "f1", "support"}}} as fractions in [0, 1]; 0 where undefined."""
    if len(gold_tags) != len(pred_tags):
        raise ValueError(f"{len(pred_tags)} predicted sentences for {len(gold_tags)} gold sentences")
    gold, pred = set(), set()
    correct_words = total_words = 0
    for k, (g, p) in enumerate(zip(gold_tags, pred_tags)):
        if len(g) != len(p):
            raise ValueError(f"sentence {k}: {len(p)} predicted tags for {len(g)} words")
        gold |= {(k,) + e for e in get_entities(g)}
        pred |= {(k,) + e for e in get_entities(p)}
        correct_words += sum(a == b for a, b in zip(g, p))
        total_words += len(g)

    def prf(gs, ps):
        tp = len(gs & ps)
        pr = tp / len(ps) if ps else 0.0
        rc = tp / len(gs) if gs else 0.0
        return pr, rc, (2 * pr * rc / (pr + rc) if pr + rc else 0.0)

    p, r, f = prf(gold, pred)
    per_type = {}
    for t in sorted({e[1] for e in gold | pred}):
        gs = {e for e in gold if e[1] == t}
        ps = {e for e in pred if e[1] == t}
        tp, tr, tf = prf(gs, ps)
        per_type[t] = {"precision": tp, "recall": tr, "f1": tf, "support": len(gs)}
    return {"precision": p, "recall": r, "f1": f, "accuracy": correct_words / total_words if total_words else 0.0,
            "per_type": per_type}
