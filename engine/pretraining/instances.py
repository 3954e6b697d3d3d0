"""Pre-training instances from documents (paper 3.1, A.2): segment pairs with IsNext/NotNext for NSP, single
stretches without it, short sequences, and the held-out documents. The algorithm of google-research/bert
`create_pretraining_data.py` (re-implemented, not copied):

- `mlm+nsp` (BERT): per document, sentences are gathered into a chunk until it reaches a target length
  (`seq_len - 3`, or with probability `short_seq_prob` a random length in [2, seq_len - 3]). A random number
  of the chunk's leading sentences form segment A. With probability 0.5 segment B is the rest of the chunk
  (IsNext, label 0); otherwise B is a run of sentences from a random start in ANOTHER document (NotNext,
  label 1) and the chunk's unused sentences are put back for the next instance. The pair is truncated to
  the target, one token at a time from the longer side, from the front or the back at random (as the
  released code).
- `mlm+sop` (ALBERT, Lan et al. 2020, section 4.6): the same chunks, B always the rest of A's chunk (the
  consecutive text of the same document), and A and B swapped for half the pairs (label 1: swapped, 0: in order),
  so the pair task asks about order, not topic. As ALBERT's code, the swap is drawn after truncation.
- `mlm` (No NSP) and `ltr` (LTR & No NSP): one segment per instance, `[CLS] text [SEP]`: each document's
  tokens are cut into consecutive windows of `seq_len - 2` tokens (or a short random target with
  probability `short_seq_prob`); no NSP label. The LTR next-token loss is the training loop's business.

These are the default input format, SEGMENT-PAIR. RoBERTa's others (Liu et al. 2019, section 4.2; the table, the
findings and where ours departs: engine/pretraining/input_formats.py), chosen by `make_instances`' `fmt`:
- SENTENCE-PAIR (`_sentence_pair_instances`, with NSP or SOP): A one sentence, B the next sentence or, for NotNext, a
  sentence of another document.
- FULL-SENTENCES (`_packed_rows` with a separator, no pair task): whole sentences packed up to the sequence length,
  running on into the next document after a [SEP]; DOC-SENTENCES (`_packed_rows` without one): the same, a row ending
  with its document.

An instance is (segment A ids, segment B ids, NotNext label or None, provenance); engine/pretraining/cache.py
stores them, engine/pretraining/prepare.py builds them shard by shard with the same functions. Held-out
documents are chosen by `eval_seed` alone (`hold_out`), so runs with different training seeds evaluate on the
same documents.

Departures from the paper / released code, on purpose:
- The short target (probability `short_seq_prob`) is drawn for each instance and the pair is truncated to
  it; the released code draws it once per document and truncates to the maximum, so with sentences that
  are long next to seq_len (BBC news at 64-128 tokens) its "short" instances came out full length.
- NotNext B always comes from another document (the released code tries 10 times and may keep the same one).
- The released code forces NotNext whenever a chunk holds a single sentence, which skews NSP labels towards
  NotNext; here, when the coin says IsNext and the chunk has one sentence, the chunk takes the document's
  next sentence as B, or, at the very end of a document, is paired with the sentence before it (that
  sentence then appears in two instances); a one-sentence document that draws IsNext gives no instance.
  (Forcing NotNext made NotNext about 55% of BBC news instances.)
- The No-NSP inputs are packed windows within a document and may start mid-sentence (the paper does not
  say how its No-NSP inputs were built; this follows RoBERTa's DOC-SENTENCES packing).
"""
import random

from engine.pretraining.input_formats import input_format


def _truncate_pair(a: list, b: list, max_tokens: int, rng: random.Random) -> None:
    """Trim the longer side one token at a time, from the front or the back at random, until they fit."""
    while len(a) + len(b) > max_tokens:
        side = a if len(a) > len(b) else b
        if rng.random() < 0.5:
            del side[0]
        else:
            side.pop()


def _nsp_instances(docs: list, d: int, seq_len: int, short_seq_prob: float, rng: random.Random,
                   order: bool = False) -> list:
    """Instances (tokens_a, tokens_b, label, source) from document `d` of `docs`: NSP's (label: B is random, from
    another document), or with `order` SOP's (label: A and B, consecutive, are swapped).

    docs: list of documents, each a list of (sentence_index, token_ids) with non-empty token lists.
    """
    doc = docs[d]
    max_tokens = seq_len - 3  # [CLS] A [SEP] B [SEP]

    def draw_target():
        return rng.randint(2, max_tokens) if rng.random() < short_seq_prob else max_tokens

    target = draw_target()
    out = []
    chunk = []  # indices into doc
    length = 0
    i = 0
    while i < len(doc):
        chunk.append(i)
        length += len(doc[i][1])
        if i == len(doc) - 1 or length >= target:
            is_random_next = False if order else rng.random() < 0.5
            if not is_random_next and len(chunk) == 1:
                if i + 1 < len(doc):  # IsNext needs a B: take the next sentence of the document
                    i += 1
                    chunk.append(i)
                elif i > 0:  # a lone last sentence: pair it with the sentence before it (used once already)
                    chunk.insert(0, i - 1)
                else:  # a one-sentence document: no IsNext pair exists; drop rather than force NotNext
                    break
            a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
            tokens_a = [t for j in chunk[:a_end] for t in doc[j][1]]
            if is_random_next:
                r = rng.randrange(len(docs) - 1)
                r = r + 1 if r >= d else r  # any document but this one
                other = docs[r]
                start = rng.randrange(len(other))
                tokens_b, j = [], start
                while j < len(other):
                    tokens_b.extend(other[j][1])
                    j += 1
                    if len(tokens_b) >= target - len(tokens_a):
                        break
                b_src = (r, other[start][0], other[j - 1][0] + 1)
                i -= len(chunk) - a_end  # put the unused sentences back
            else:
                tokens_b = [t for j in chunk[a_end:] for t in doc[j][1]]
                b_src = (d, doc[chunk[a_end]][0], doc[chunk[-1]][0] + 1)
            _truncate_pair(tokens_a, tokens_b, target, rng)
            a_src = (d, doc[chunk[0]][0], doc[chunk[a_end - 1]][0] + 1)
            if order and rng.random() < 0.5:  # SOP: the two consecutive segments in the wrong order
                out.append((tokens_b, tokens_a, True, b_src + a_src))
            else:
                out.append((tokens_a, tokens_b, is_random_next, a_src + b_src))
            chunk, length = [], 0
            target = draw_target()
        i += 1
    return out


def _single_instances(doc: list, d: int, seq_len: int, short_seq_prob: float, rng: random.Random) -> list:
    """No-NSP instances: consecutive windows of the document's tokens, `[CLS] window [SEP]`."""
    max_tokens = seq_len - 2
    flat = [t for _, ids in doc for t in ids]
    sent_of = [s for s, ids in doc for _ in ids]  # sentence index of each token
    out, pos = [], 0
    while pos < len(flat):
        target = max_tokens
        if rng.random() < short_seq_prob:
            target = rng.randint(2, max_tokens)
        end = min(pos + target, len(flat))
        out.append((flat[pos:end], [], None, (d, sent_of[pos], sent_of[end - 1] + 1, -1, -1, -1)))
        pos = end
    return out


def _sentence_pair_instances(docs: list, d: int, seq_len: int, short_seq_prob: float, rng: random.Random,
                              order: bool = False) -> list:
    """SENTENCE-PAIR instances (RoBERTa 4.2) from document `d` of `docs`: A one sentence, B the sentence after it
    (IsNext, label 0) or, half the time, a sentence of another document (NotNext, label 1; A's next sentence then starts
    the next pair); with `order` ALBERT's SOP on two consecutive sentences, swapped for half of them (label 1). A lone
    last sentence that draws IsNext is paired with the one before it, as `_nsp_instances` does; a pair longer than
    seq_len - 3 is truncated as BERT's. `short_seq_prob` is not used: two sentences are short already."""
    doc = docs[d]
    out, i = [], 0
    while i < len(doc):
        is_random_next = False if order else rng.random() < 0.5
        if is_random_next:
            r = rng.randrange(len(docs) - 1)
            r = r + 1 if r >= d else r  # any document but this one
            a, b, b_doc, step = doc[i], docs[r][rng.randrange(len(docs[r]))], r, 1
        elif i + 1 < len(doc):
            a, b, b_doc, step = doc[i], doc[i + 1], d, 2
        elif i > 0:  # a lone last sentence: with the sentence before it (used once already)
            a, b, b_doc, step = doc[i - 1], doc[i], d, 1
        else:  # a one-sentence document has no IsNext pair
            break
        tokens_a, tokens_b = list(a[1]), list(b[1])
        _truncate_pair(tokens_a, tokens_b, seq_len - 3, rng)
        a_src, b_src = (d, a[0], a[0] + 1), (b_doc, b[0], b[0] + 1)
        if order and rng.random() < 0.5:  # SOP: the two consecutive sentences in the wrong order
            out.append((tokens_b, tokens_a, True, b_src + a_src))
        else:
            out.append((tokens_a, tokens_b, is_random_next, a_src + b_src))
        i += step
    return out


def _packed_rows(docs: list, seq_len: int, short_seq_prob: float, rng: random.Random, separator=None) -> list:
    """FULL-SENTENCES (`separator`: the token id put between documents; a row runs on into the next document) or
    DOC-SENTENCES (None: a row ends with its document) rows, `[CLS] sentences [SEP]`: whole sentences, in order, while
    they fit a target length (seq_len - 2, or with probability `short_seq_prob` a random one in [2, seq_len - 2]). A row
    always takes its first sentence, so only a sentence longer than seq_len - 2 is cut (into pieces of that length).
    A row's source is its first document's stretch (doc, first sentence, end sentence) and, when it crosses documents,
    its last document's in the B fields (the documents between them whole); else -1s there.

    docs: [(doc_index, [(sentence_index, ids), ...]), ...], in the order they run on."""
    max_tokens = seq_len - 2
    draw_target = lambda: rng.randint(2, max_tokens) if rng.random() < short_seq_prob else max_tokens  # noqa: E731
    out, row, spans, target = [], [], [], draw_target()  # spans: [doc, first sentence, end sentence] per document

    def close():
        src = tuple(spans[0]) + (tuple(spans[-1]) if len(spans) > 1 else (-1, -1, -1))
        out.append((list(row), [], None, src))
        row.clear()
        spans.clear()
        return draw_target()

    for d, sents in docs:
        if row and separator is None:
            target = close()
        for s, ids in sents:
            for k in range(0, len(ids), max_tokens):
                piece = ids[k:k + max_tokens]
                new_doc = not spans or spans[-1][0] != d
                if row and len(row) + len(piece) + new_doc > target:
                    target, new_doc = close(), True
                if row and new_doc:
                    row.append(separator)  # running on into the next document (FULL-SENTENCES)
                row.extend(piece)
                if new_doc:
                    spans.append([d, s, s + 1])
                else:
                    spans[-1][2] = s + 1
    if row:
        close()
    return out


def make_instances(docs: list, pairs, seq_len: int, short_seq_prob: float, dupe_factor: int,
                    rng: random.Random, fmt=None, separator=None) -> list:
    """docs: list of (doc_index, [(sentence_index, ids), ...]) -> instances (dupe_factor passes over docs):
    segment pairs when `pairs` names the objective's pair task ("nsp": IsNext/NotNext; "sop": in order/swapped;
    True reads as "nsp"), else ("" or None or False) single stretches. `fmt`: the input format
    (engine.pretraining.input_formats; its name or itself; None: SEGMENT-PAIR): sentence pairs, or rows packed with
    full sentences, within documents or across them with `separator` (the [SEP] id) between documents."""
    fmt = input_format(fmt)
    pairs = "nsp" if pairs is True else (pairs or "")
    if not (fmt.pairs if pairs else fmt.singles) or (fmt.crosses_documents and separator is None):
        raise ValueError(f"{fmt.label} cannot make {'pairs' if pairs else 'single rows'} (or its separator is missing)")
    inner = [sents for _, sents in docs]
    out = []
    for _ in range(dupe_factor):
        if fmt.packed:
            out.extend(_packed_rows(docs, seq_len, short_seq_prob, rng, separator if fmt.crosses_documents else None))
            continue
        for n, (d, sents) in enumerate(docs):
            if pairs:
                build = _sentence_pair_instances if fmt.one_sentence else _nsp_instances
                made = build(inner, n, seq_len, short_seq_prob, rng, order=pairs == "sop")
                # map positions in `docs` back to the caller's document indices
                made = [(a, b, r, (d, s[1], s[2], docs[s[3]][0], s[4], s[5])) for a, b, r, s in made]
            else:
                made = _single_instances(sents, d, seq_len, short_seq_prob, rng)
            out.extend(made)
    return out


def tokenize_documents(docs: list, tokenizer, first_doc: int = 0) -> list:
    """Documents (lists of sentences) -> [(doc_index, [(sentence_index, ids), ...]), ...], with empty sentences
    and documents dropped and literal special tokens in the text read as [UNK] (so text never holds a [SEP]).
    Document indices count from `first_doc`. One batch encoding call for all the sentences."""
    flat = [s for d in docs for s in d]
    ids = tokenizer.tokenize_ids(flat) if flat else []
    specials = set(tokenizer.special_ids) - {tokenizer.unk_id}
    tokenized, k = [], 0
    for di, d in enumerate(docs):
        sents = []
        for si in range(len(d)):
            piece = ids[k + si]
            if specials.intersection(piece):
                piece = [tokenizer.unk_id if t in specials else t for t in piece]
            if piece:
                sents.append((si, piece))
        k += len(d)
        if sents:
            tokenized.append((first_doc + di, sents))
    return tokenized


def eval_count(n_docs: int, eval_fraction: float, need: int) -> int:
    """How many of `n_docs` documents are held out: round(fraction * n), at least `need` (0 when fraction is 0)."""
    return max(need, int(round(eval_fraction * n_docs))) if eval_fraction > 0 else 0


def hold_out(tokenized: list, n_eval: int, eval_seed: int) -> tuple:
    """(train documents, held-out documents): `n_eval` documents chosen by `eval_seed` alone, both in order."""
    order = list(range(len(tokenized)))
    random.Random(eval_seed).shuffle(order)
    return [tokenized[j] for j in sorted(order[n_eval:])], [tokenized[j] for j in sorted(order[:n_eval])]
