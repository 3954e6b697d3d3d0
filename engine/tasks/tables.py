"""Reading tabular task files (TSV, CSV, JSON Lines) into rows with line numbers, and finding columns.

Shared by `glue.py` and `multiple_choice.py`. Formats, chosen by the file extension:
- `.tsv` / `.txt`: one row per line, cells split on TAB with no quoting (the GLUE convention: RTE texts
  contain unbalanced quotes);
- `.csv`: the `csv` module's default dialect (quoted fields may span lines);
- `.jsonl`: one JSON object per line; `.json`: a list of objects (or {"data": [...]}).
Any of them may be compressed as `.gz` or `.bz2` (`train.tsv.gz`); the extension before it picks the format.
A file is read in chunks (a compressed one decompressed as it is read) and refused as soon as it holds a NUL byte
(binary, or UTF-16) or more than `MAX_TASK_FILE_MB` of text (`text_cap` lifts it: the finetune command's
`--max-task-file-mb`), so neither a file that decompresses to gigabytes nor a huge binary file is read whole.
A line-based file (TSV, CSV, JSON Lines, a tagging file) is also refused as soon as one line passes
`MAX_LINE_BYTES` (1 MB; `text_cap`'s second value: `--max-line-bytes`), before the rest of that line is read: no
example needs a megabyte of text (the model reads at most --max-seq-len tokens of it, engine.tasks.batching.cut_text),
while the tokenizer takes about 230 bytes of memory per character of one text (a 10 MB line: 2.3 GB). A .json
file (SQuAD's, the official dev set is one 4.8 MB line) has no line cap; a SQuAD passage has it instead.
A header row is detected (`looks_like_header`) when one of its cells is a known column name (or a name the
caller asked for), or from the content: in some column every other value is a number and the first is not
(`label` over 0/1 labels), or every other value repeats (a label column) and the first one is a word that occurs
nowhere else in it. `header=True/False` forces it (the CLI's `--header yes|no`). Every problem is an
EngineError naming the file and line.
"""
import bz2
import contextvars
import csv
import gzip
import json
import math
import os
import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from engine.errors import EngineError


@dataclass
class Table:
    path: Path
    columns: list  # header names as written, or None for a headerless file
    rows: list = field(default_factory=list)  # (line number, [cell, ...]) in file order
    n_cols: int = 0

    def where(self, line: int) -> str:
        return f"{self.path}:{line}" if self.path.suffix.lower() != ".json" else f"{self.path} record {line}"


COMPRESSED = {".gz": gzip.open, ".bz2": bz2.open}  # extension -> a reader that decompresses as it reads
MAX_TASK_FILE_MB = 512  # the most text a task file may hold (decompressed); GLUE's largest, MNLI's train set, is ~300 MB
CAP_FLAG = "--max-task-file-mb"  # the finetune flag that lifts it
MAX_LINE_BYTES = 1 << 20  # the longest line (bytes, its newline aside) a line-based task file may hold
LINE_FLAG = "--max-line-bytes"  # the finetune flag that changes it
CHUNK = 1 << 20
_CAP_MB = contextvars.ContextVar("task_file_cap_mb", default=None)  # None: MAX_TASK_FILE_MB
_LINE_CAP = contextvars.ContextVar("task_file_line_cap", default=None)  # None: MAX_LINE_BYTES


@contextmanager
def text_cap(mb, line_bytes=None):
    """Within this block a task file may hold up to `mb` MB of text (None: MAX_TASK_FILE_MB) and lines of up to
    `line_bytes` bytes (None: MAX_LINE_BYTES)."""
    token, line_token = _CAP_MB.set(mb), _LINE_CAP.set(line_bytes)
    try:
        yield
    finally:
        _LINE_CAP.reset(line_token)
        _CAP_MB.reset(token)


def line_cap() -> int:
    """The longest line a task file may hold now, in bytes (`text_cap`)."""
    return _LINE_CAP.get() or MAX_LINE_BYTES


def too_long(where: str, size: int = None) -> EngineError:
    """The one-line error for a line longer than the line cap (`size`: a SQuAD passage's length, which has it too)."""
    what = "the line is longer than" if size is None else f"the passage is {_bytes(size)}, longer than"
    return EngineError(f"{where}: {what} {_bytes(line_cap())}, the most one {'line' if size is None else 'passage'} of a "
                       f"task file may hold; shorten or split it, or raise the cap with {LINE_FLAG} N (in bytes)")


def _bytes(n: int) -> str:
    if n >= 1 << 20 and n % (1 << 20) == 0:
        return f"{n >> 20} MB"
    if n >= 1 << 20:
        return f"{n / 2 ** 20:.1f} MB"
    return f"{n:,} bytes"


def file_format(path) -> str:
    """The format extension of a task file, looking through a .gz/.bz2 suffix: "train.tsv.gz" -> ".tsv"."""
    path = Path(path)
    suffixes = [x.lower() for x in path.suffixes]
    if suffixes and suffixes[-1] in COMPRESSED:
        suffixes = suffixes[:-1]
    return suffixes[-1] if suffixes else ""


def read_text(path, what: str = "task file", lines: bool = None) -> str:
    """The text of a UTF-8 file (a BOM dropped); .gz and .bz2 files are decompressed as they are read. A compressed
    file without that extension, a NUL byte, more text than the cap (`text_cap`), a line longer than the line cap
    (`lines`: None = every format but .json) or a file that is not UTF-8 is one clear EngineError, raised as soon
    as it is seen."""
    path = Path(path)
    lines = file_format(path) != ".json" if lines is None else lines
    if not path.is_file():
        raise EngineError(f"{what} {path} does not exist; check the path")
    ext, cap_mb = path.suffix.lower(), _CAP_MB.get() or MAX_TASK_FILE_MB
    cap = int(cap_mb * 2**20)
    too_big = (f"{path} holds more than {cap_mb:g} MB of text{' once decompressed' if ext in COMPRESSED else ''}, the "
               f"most a task file may hold; pass a smaller file, or raise the cap with {CAP_FLAG} N (in MB)")
    with open(path, "rb") as raw:
        head = raw.read(3)
        raw.seek(0)
        if ext not in COMPRESSED and (head[:2] == b"\x1f\x8b" or head == b"BZh"):
            kind = "gzip" if head[:2] == b"\x1f\x8b" else "bzip2"
            raise EngineError(f"{path} is {kind}-compressed; name it {path.name}{'.gz' if kind == 'gzip' else '.bz2'} "
                              f"(it is then read as it is) or decompress it")
        if ext not in COMPRESSED and os.fstat(raw.fileno()).st_size > cap:
            raise EngineError(too_big)
        data = _read_chunks(COMPRESSED[ext](raw) if ext in COMPRESSED else raw, path, ext, cap, too_big,
                            line_cap() if lines else None)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise EngineError(f"{path} is not UTF-8 text (byte {e.start}); re-save it as UTF-8")


def _read_chunks(f, path: Path, ext: str, cap: int, too_big: str, max_line: int = None) -> bytearray:
    """All of `f`, a chunk at a time: refused at the first NUL byte, once past `cap` bytes, or (with `max_line`)
    once a line passes `max_line` bytes. Chunks are then at most `max_line` bytes, so a line inside one chunk is
    shorter than the cap and only a line running across chunks needs counting."""
    data = bytearray()
    size = min(CHUNK, max_line) if max_line else CHUNK
    run = newlines = 0  # bytes since the last newline; newlines so far
    try:
        while chunk := f.read(size):
            nul = chunk.find(b"\x00")
            if nul >= 0:
                raise EngineError(f"{path} is not a text file (a NUL byte at byte {len(data) + nul}{' of its decompressed text' if ext in COMPRESSED else ''}: "
                                  f"binary, or UTF-16 text); give the UTF-8 text file")
            if max_line:
                first = chunk.find(b"\n")
                if run + (len(chunk) if first < 0 else first) > max_line:
                    raise too_long(f"{path}:{newlines + 1}")
                if first < 0:
                    run += len(chunk)
                else:
                    newlines += chunk.count(b"\n")
                    run = len(chunk) - chunk.rfind(b"\n") - 1
            data += chunk
            if len(data) > cap:
                raise EngineError(too_big)
    except (OSError, EOFError, ValueError) as e:
        if ext not in COMPRESSED:
            raise EngineError(f"could not read {path}: {getattr(e, 'strerror', None) or e}; check the file")
        raise EngineError(f"{path} is not a valid {ext[1:]} file ({e}); decompress it yourself and pass the plain file")
    return data


def _is_number(s: str) -> bool:
    try:
        return math.isfinite(float(s))
    except (TypeError, ValueError):
        return False


_NAME = re.compile(r"[A-Za-z_#][\w #.\-]{0,40}")  # what a column name looks like


def looks_like_header(first: list, rest: list, known_names=()) -> bool:
    """Whether `first` (the cells of the first row) is a header, judged by names and by content (module
    docstring); `rest` holds the cells of the following rows (the first 1,000 are read)."""
    names = {n.lower() for n in known_names}
    if any(c.strip().lower() in names for c in first):
        return True
    sample = [r for r in rest[:1000] if len(r) == len(first)]
    for j, head in enumerate(first):
        h = head.strip()
        vals = [r[j].strip() for r in sample if r[j].strip()]
        if not h or not vals or _is_number(h):
            continue
        if all(_is_number(v) for v in vals):
            return True  # "label" over numbers
        counts = {}
        for v in vals:
            counts[v] = counts.get(v, 0) + 1
        if len(vals) >= 8 and min(counts.values()) >= 2 and h not in counts and _NAME.fullmatch(h):
            return True  # a word over a column of repeated values (a label column)
    return False


def _json_table(path: Path, records: list) -> Table:
    cols = []
    for _, r in records:
        for k in r:
            if k not in cols:
                cols.append(k)
    rows = [(ln, [r.get(c) for c in cols]) for ln, r in records]
    return Table(path, cols, rows, len(cols))


def read_table(path, header=None, known_names=()) -> Table:
    """Rows of a TSV/CSV/JSONL/JSON file. `header`: None = detect (a cell of the first row is one of
    `known_names`, compared case-insensitively), True/False = force."""
    path = Path(path)
    ext = file_format(path)
    text = read_text(path)
    if ext in (".jsonl", ".json"):
        records = []
        if ext == ".json":
            try:
                data = json.loads(text)
            except json.JSONDecodeError as e:
                raise EngineError(f"{path} is not valid JSON (line {e.lineno}: {e.msg}); fix the file or save it as .jsonl")
            if isinstance(data, dict) and isinstance(data.get("data"), list):
                data = data["data"]
            if not isinstance(data, list):
                raise EngineError(f"{path} must hold a list of objects (one per example)")
            lines = list(enumerate(data, 1))
        else:
            lines = []
            for ln, line in enumerate(text.splitlines(), 1):
                if not line.strip():
                    continue
                try:
                    lines.append((ln, json.loads(line)))
                except json.JSONDecodeError as e:
                    raise EngineError(f"{path}:{ln} is not valid JSON ({e.msg}); each line must be one JSON object")
        for ln, obj in lines:
            if not isinstance(obj, dict):
                raise EngineError(f"{path}:{ln} is not a JSON object; each line must be an object like {{\"sentence\": ..., \"label\": ...}}")
            records.append((ln, obj))
        if not records:
            raise EngineError(f"{path} has no examples")
        return _json_table(path, records)
    if ext in (".tsv", ".txt"):
        raw = [(ln, line.rstrip("\r\n").split("\t")) for ln, line in enumerate(text.split("\n"), 1)]
    elif ext == ".csv":
        reader = csv.reader(text.splitlines(keepends=True))
        raw, ln = [], 1
        try:
            for cells in reader:
                raw.append((ln, cells))
                ln = reader.line_num + 1
        except csv.Error as e:
            raise EngineError(f"{path}:{reader.line_num} is not valid CSV ({e}); check its quotes")
    else:
        raise EngineError(f"{path}: unsupported file type {ext or '(none)'}; use .tsv, .csv, .jsonl or .json "
                          f"(optionally compressed: .tsv.gz, .csv.bz2, ...)")
    raw = [(ln, cells) for ln, cells in raw if any(c.strip() for c in cells)]  # blank lines
    if not raw:
        raise EngineError(f"{path} has no rows")
    first = raw[0][1]
    _check_separator(path, ext, raw)
    if all(len(cells) == 1 for _, cells in raw):  # no column flag can pick a label out of one column
        sep = "comma" if ext == ".csv" else "TAB"
        raise EngineError(f"{path} has a single column (no {sep} on any line; line {raw[0][0]}: {first[0][:60]!r}), but a "
                          f"task needs a text column and a label column: put a {sep} and the label after the text on every "
                          f"line, under a header row naming them (sentence{sep.replace('TAB', '<TAB>').replace('comma', ',')}label)")
    if header is None:
        header = looks_like_header(first, [cells for _, cells in raw[1:]], known_names)
    columns = [c.strip() for c in first] if header else None
    rows = raw[1:] if header else raw
    n_cols = len(first)
    for ln, cells in rows:
        if len(cells) != n_cols:
            raise EngineError(f"{path}:{ln} has {len(cells)} cells but the {'header' if header else 'first row'} has "
                              f"{n_cols}; fix that line (a stray or missing {'TAB' if ext != '.csv' else 'comma or quote'})")
    if not rows:
        raise EngineError(f"{path} has a header but no examples")
    return Table(path, columns, rows, n_cols)


def _check_separator(path: Path, ext: str, raw: list) -> None:
    """Rows of one cell that all hold another separator (semicolons, or commas in a .tsv, TABs in a .csv) come
    from a file written with another separator than its extension says: say so instead of reading one column."""
    head = [cells[0] for _, cells in raw[:20] if len(cells) == 1]
    if len(head) < min(len(raw), 20):
        return
    others = {".csv": ((";", "semicolons"), ("\t", "TABs"), ("|", "'|'"))}.get(ext, ((";", "semicolons"), (",", "commas"), ("|", "'|'")))
    for sep, name in others:
        if all(sep in c for c in head):
            fix = {",": "rename it to .csv", "\t": "rename it to .tsv"}.get(sep, "save it as .tsv with TABs or as .csv with commas")
            raise EngineError(f"{path} looks separated by {name} (line {raw[0][0]}: {head[0][:60]!r}), but a {ext} file "
                              f"is read as {'comma' if ext == '.csv' else 'TAB'}-separated; {fix}")


def find_column(table: Table, spec, candidates=(), what="text") -> int:
    """Index of a column: `spec` an int (0-based; a digit string also works) or a header name; None = the
    first of `candidates` present in the header (None if none is)."""
    if isinstance(spec, str) and spec.strip().lstrip("-").isdigit():
        spec = int(spec)
    if isinstance(spec, int):
        if not -table.n_cols <= spec < table.n_cols:
            raise EngineError(f"{what} column index {spec} is out of range for {table.path} ({table.n_cols} columns"
                              f"{': ' + ', '.join(table.columns) if table.columns else ''}); use 0..{table.n_cols - 1}")
        return spec % table.n_cols
    if spec is not None:
        if table.columns is None:
            raise EngineError(f"{table.path} has no header row, so {what} column {spec!r} cannot be found by name; "
                              f"give its 0-based index instead ({table.n_cols} columns)")
        lower = [c.lower() for c in table.columns]
        if spec.lower() not in lower:
            raise EngineError(f"{table.path} has no {what} column {spec!r} (columns: {', '.join(table.columns)}); "
                              f"name one of those or give a 0-based index")
        return lower.index(spec.lower())
    if table.columns is None:
        return None
    lower = [c.lower() for c in table.columns]
    for c in candidates:
        if c.lower() in lower:
            return lower.index(c.lower())
    return None
