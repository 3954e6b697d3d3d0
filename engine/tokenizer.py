"""WordPiece tokenizer (paper section 3: a ~30k WordPiece vocabulary, [CLS] A [SEP] B [SEP] inputs).

Built on the `tokenizers` library with the same pipeline as Google's BERT and `BertTokenizerFast`:
BERT normaliser (clean text, CJK spacing, lowercase + accent stripping for uncased models), BERT
pre-tokenizer (whitespace and punctuation), WordPiece with `##` continuation pieces, and a post-processor
that adds [CLS]/[SEP] and segment ids (0 for [CLS] A [SEP], 1 for B [SEP]). Saved as a Google-format
`vocab.txt` (one token per line, the line number is the id) plus `tokenizer.json`; any BERT `vocab.txt`
loads. Pairs longer than the limit are truncated longest side first, as the released code does.
"""
import json
import sys
from pathlib import Path
from typing import Iterable, Sequence

from tokenizers import Encoding, decoders, models, normalizers, pre_tokenizers, processors, trainers
from tokenizers import Tokenizer as _HFTokenizer

from engine.errors import EngineError
from engine.fileio import atomic_write_json, atomic_write_text

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def _pipeline(tok: _HFTokenizer, lowercase: bool) -> _HFTokenizer:
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=lowercase)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    return tok


def _wordpiece(vocab: dict = None) -> models.WordPiece:
    """The WordPiece model of every tokenizer here: `vocab` (piece -> id), or empty for the trainer to fill."""
    return models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100)


def _post_processor(tok: _HFTokenizer) -> None:
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )


class Tokenizer:
    """A BERT WordPiece tokenizer. `encode` returns a `tokenizers.Encoding` (.ids, .type_ids, .tokens,
    .special_tokens_mask, .attention_mask, .word_ids, .offsets)."""

    def __init__(self, hf: _HFTokenizer, lowercase: bool = True):
        for t in SPECIAL_TOKENS:
            if hf.token_to_id(t) is None:
                raise EngineError(f"the vocabulary has no {t} token; a BERT vocab.txt must contain {' '.join(SPECIAL_TOKENS)}")
        self.hf = hf
        self.lowercase = lowercase
        self.pad_id = hf.token_to_id("[PAD]")
        self.unk_id = hf.token_to_id("[UNK]")
        self.cls_id = hf.token_to_id("[CLS]")
        self.sep_id = hf.token_to_id("[SEP]")
        self.mask_id = hf.token_to_id("[MASK]")
        self.special_ids = sorted({self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id})

    # --- vocabulary ---
    @property
    def vocab_size(self) -> int:
        return self.hf.get_vocab_size(with_added_tokens=True)

    def __len__(self) -> int:
        return self.vocab_size

    def vocab(self) -> list:
        """Tokens in id order (the lines of vocab.txt)."""
        inv = {i: t for t, i in self.hf.get_vocab(with_added_tokens=True).items()}
        return [inv.get(i, "[UNK]") for i in range(self.vocab_size)]

    def token_to_id(self, token: str):
        return self.hf.token_to_id(token)

    def id_to_token(self, i: int) -> str:
        return self.hf.id_to_token(int(i))

    def convert_ids_to_tokens(self, ids: Iterable[int]) -> list:
        return [self.hf.id_to_token(int(i)) for i in ids]

    # --- encoding ---
    def encode(self, text: str, text_pair: str = None, max_length: int = None, add_special_tokens: bool = True) -> Encoding:
        """Encode one text or a pair; with `max_length`, the longer side is truncated first."""
        self._truncation(max_length)
        return self.hf.encode(text, text_pair, add_special_tokens=add_special_tokens)

    def encode_batch(self, texts: Sequence, max_length: int = None, add_special_tokens: bool = True) -> list:
        """`texts`: strings or (a, b) pairs."""
        self._truncation(max_length)
        items = [tuple(t) if isinstance(t, (list, tuple)) else t for t in texts]
        return self.hf.encode_batch(items, add_special_tokens=add_special_tokens)

    def encode_words(self, words: Sequence[str], text_pair=None, max_length: int = None) -> Encoding:
        """Encode text already split into words (NER); `.word_ids` maps each piece to its word."""
        self._truncation(max_length)
        return self.hf.encode(list(words), text_pair, is_pretokenized=True)

    def tokenize_ids(self, texts: Sequence[str]) -> list:
        """WordPiece ids of each text, no special tokens, no truncation (pre-training data)."""
        self._truncation(None)
        return [e.ids for e in self.hf.encode_batch(list(texts), add_special_tokens=False)]

    def tokenize(self, text: str) -> list:
        return self.encode(text, add_special_tokens=False).tokens

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = True) -> str:
        return self.hf.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

    def _truncation(self, max_length):
        set_truncation(self.hf, max_length)

    # --- files ---
    def save(self, directory) -> Path:
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        atomic_write_text(d / "vocab.txt", "\n".join(self.vocab()) + "\n")
        atomic_write_text(d / "tokenizer.json", self.hf.to_str())
        atomic_write_json(d / "tokenizer_config.json", {
            "tokenizer_class": "BertTokenizer", "do_lower_case": self.lowercase, "model_max_length": 512,
            "unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]", "mask_token": "[MASK]",
        })
        return d

    @classmethod
    def from_file(cls, path, lowercase: bool = None) -> "Tokenizer":
        """Load from a folder (vocab.txt, tokenizer_config.json) or a vocab.txt file, or "minilm" (MiniLM's own
        folder, as `--init minilm` names it). `lowercase=None` reads `do_lower_case` from tokenizer_config.json
        when present, else lowercases."""
        if str(path) == "minilm":
            from engine.minilm import minilm_path
            path = minilm_path()
        p = Path(path)
        if p.is_dir():
            vocab = p / "vocab.txt"
            conf = p / "tokenizer_config.json"
        else:
            vocab, conf = p, p.with_name("tokenizer_config.json")
        if not vocab.is_file():
            raise EngineError(f"no vocab.txt at {p}; point to a tokenizer folder or a BERT vocab.txt, or give minilm (train one with `python -m engine tokenizer`)")
        if lowercase is None:
            lowercase = True
            if conf.is_file():
                try:
                    lowercase = bool(json.loads(conf.read_text(encoding="utf-8")).get("do_lower_case", True))
                except (ValueError, UnicodeDecodeError):
                    raise EngineError(f"{conf} is not valid JSON; delete it or fix it")
        try:
            lines = vocab.read_text(encoding="utf-8").splitlines()
        except UnicodeDecodeError:
            raise EngineError(f"{vocab} is not UTF-8 text; a vocab.txt has one UTF-8 token per line")
        vocab_map = {}
        for i, t in enumerate(lines):
            t = t.rstrip("\r\n")
            if t and t not in vocab_map:
                vocab_map[t] = i
        if not vocab_map:
            raise EngineError(f"{vocab} is empty; a vocab.txt has one token per line")
        hf = _pipeline(_HFTokenizer(_wordpiece(vocab_map)), lowercase)
        # special tokens are matched in raw text before normalisation, so "[MASK]" in a probe is one token
        hf.add_special_tokens([t for t in SPECIAL_TOKENS if t in vocab_map])
        tok = cls(hf, lowercase)
        _post_processor(hf)
        return tok


def train_tokenizer(docs, vocab_size: int = 8000, lowercase: bool = True, min_frequency: int = 2) -> Tokenizer:
    """Train a WordPiece vocabulary on documents (lists of sentences) or plain strings."""
    if vocab_size < len(SPECIAL_TOKENS) + 26:
        raise EngineError(f"vocab size {vocab_size} is too small; use at least a few hundred (the paper uses 30,000)")

    def texts():
        for d in docs:
            if isinstance(d, str):
                yield d
            else:
                yield from d

    hf = _pipeline(_HFTokenizer(_wordpiece()), lowercase)
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=SPECIAL_TOKENS,
                                        continuing_subword_prefix="##", show_progress=False)
    n = 0

    def counted():
        nonlocal n
        for t in texts():
            if t and t.strip():
                n += 1
                yield t

    hf.train_from_iterator(counted(), trainer=trainer)
    if n == 0:
        raise EngineError("the corpus has no text to train a tokenizer on; give a corpus with at least one non-empty document")
    hf.model = _wordpiece(canonical_order(hf.get_vocab()))
    _post_processor(hf)
    return Tokenizer(hf, lowercase)


def canonical_order(vocab: dict) -> dict:
    """The trained pieces under ids that do not depend on the process: the special tokens first, in their order,
    then every other piece by its length without "##", whole words before continuations, then by text.

    Why: the `tokenizers` WordPiece trainer lays out its alphabet and its equally frequent pieces in hash-map order
    (huggingface/tokenizers#1794), so two processes training on the same corpus got the same pieces under
    different ids (measured: 165 of 8,000 BBC pieces moved between two runs), and the same seed then pre-trained a
    different model (a different embedding row per piece). WordPiece tokenizes by greedy longest match and never
    reads the order, so only the ids change. Google's vocab.txt lists pieces in the order its trainer made them;
    ours is sorted instead. What sorting cannot fix: on a small corpus, ties in the order of the trainer's merges can
    change which pieces are learnt (150 BBC articles at 1,000 pieces gave two vocabularies in 5 processes; 400 at
    2,000 gave one in 45, all 2,225 at 8,000 one in 5); `train_tokenizer_cached` covers that by reusing the first."""
    rest = sorted((t for t in vocab if t not in SPECIAL_TOKENS), key=lambda t: (len(t.removeprefix("##")), t.startswith("##"), t))
    return {t: i for i, t in enumerate(SPECIAL_TOKENS + rest)}  # the trainer always holds every special token


def corpus_fingerprint(docs) -> str:
    """A hash of the corpus text (documents of sentences, or strings), for cache keys."""
    import hashlib

    h = hashlib.sha256()
    for d in docs:
        for s in ([d] if isinstance(d, str) else d):
            h.update(s.encode("utf-8", "surrogatepass"))
            h.update(b"\x00")
        h.update(b"\x01")
    return h.hexdigest()[:16]


def train_tokenizer_cached(docs, vocab_size: int = 8000, lowercase: bool = True, min_frequency: int = 2, cache_dir=None) -> Tokenizer:
    """`train_tokenizer`, stored under `cache_dir` keyed by (corpus text, vocab size, case, min frequency).

    Why a cache and not just training again: the `tokenizers` WordPiece trainer breaks frequency ties in
    hash-map order (huggingface/tokenizers#1794). `canonical_order` makes the ids independent of that, but
    a tie at the vocabulary's size limit could in principle still change which pieces make the cut; reusing the
    first vocabulary makes runs with the same settings comparable whatever happens (and saves the training). The
    key names the sorted order, so a vocabulary cached before it was introduced is not reused."""
    import os

    if cache_dir is None:
        cache_dir = Path(os.environ.get("BERT_STUDIO_CACHE", "~/.cache/bert_studio")).expanduser() / "tokenizers"
    key = f"wp{vocab_size}-{'uncased' if lowercase else 'cased'}-f{min_frequency}-sorted-{corpus_fingerprint(docs)}"
    d = Path(cache_dir) / key
    if (d / "vocab.txt").is_file() and (d / "tokenizer_config.json").is_file():
        try:
            return Tokenizer.from_file(d, lowercase=lowercase)
        except EngineError:
            pass  # a damaged cache entry is trained again below
    tok = train_tokenizer(docs, vocab_size=vocab_size, lowercase=lowercase, min_frequency=min_frequency)
    try:
        import shutil
        import tempfile

        Path(cache_dir).mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=cache_dir))
        tok.save(tmp)
        try:
            os.replace(tmp, d)
        except OSError:  # another process stored it first: use theirs, so both agree
            shutil.rmtree(tmp, ignore_errors=True)
            return Tokenizer.from_file(d, lowercase=lowercase)
    except (OSError, EngineError):
        pass  # caching is an optimisation; an unwritable cache still gives a working tokenizer
    return tok


def main(argv) -> int:
    """`python -m engine tokenizer --corpus bbc --vocab-size 8000 --out DIR`"""
    import argparse
    import time

    from engine.corpora import load_corpus

    ap = argparse.ArgumentParser(prog="python -m engine tokenizer", description="Train a WordPiece vocabulary (Google vocab.txt format).")
    ap.add_argument("--corpus", required=True, help="bbc, wiki, sotu, all (bbc+wiki+sotu), wikivital (if installed), or a path (.txt with blank lines between documents, a folder of .txt, a .jsonl)")
    ap.add_argument("--vocab-size", type=int, default=8000)
    ap.add_argument("--cased", action="store_true", help="keep case (the paper's NER models are cased); default lowercases")
    ap.add_argument("--min-frequency", type=int, default=2)
    ap.add_argument("--out", required=True, help="folder for vocab.txt, tokenizer.json, tokenizer_config.json")
    a = ap.parse_args(argv)
    t0 = time.time()
    docs = load_corpus(a.corpus)
    if docs.info.get("non_utf8_files"):
        print(f"note: {len(docs.info['non_utf8_files'])} file(s) were not valid UTF-8 and were decoded with replacement characters: "
              + ", ".join(docs.info["non_utf8_files"][:5]), file=sys.stderr)
    for w in docs.info.get("warnings", []):  # binary files skipped, single-sentence documents
        print(f"warning: {w}", file=sys.stderr)
    tok = train_tokenizer(docs, vocab_size=a.vocab_size, lowercase=not a.cased, min_frequency=a.min_frequency)
    out = tok.save(a.out)
    print(json.dumps({"out": str(out), "vocab_size": tok.vocab_size, "documents": len(docs), "seconds": round(time.time() - t0, 1)}))
    return 0


def set_truncation(hf, max_length) -> None:
    """A `tokenizers.Tokenizer` set to cut at `max_length` pieces, the longer side of a pair first (None: no cut);
    a length without room for [CLS] and [SEP] is one line."""
    if max_length is None:
        hf.no_truncation()
    else:
        if max_length < 3:
            raise EngineError(f"max_length {max_length} is too short; it must leave room for [CLS] and [SEP]")
        hf.enable_truncation(int(max_length), strategy="longest_first")
