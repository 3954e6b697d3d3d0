"""Reading tabular task files (TSV, CSV, JSON Lines) into rows with line numbers, and finding columns.

Shared by `glue.py` and `multiple_choice.py`. Formats, chosen by the file extension:
- `.tsv` / `.txt`: one row per line, cells split on TAB with no quoting (the GLUE convention: RTE texts
  contain unbalanced quotes);
- `.csv`: the `csv` module's default dialect (quoted fields may span lines);
- `.jsonl`: one JSON object per line; `.json`: a list of objects (or {"data": [...]}).
A header row is detected when one of its cells is a known column name (or a name the caller asked for);
`header=True/False` forces it. Every problem is an EngineError naming the file and line.
"""
import csv
import json
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


def _read_text(path: Path) -> str:
    if not path.is_file():
        raise EngineError(f"task file {path} does not exist; check the path")
    try:
        return path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as e:
        raise EngineError(f"{path} is not UTF-8 text (byte {e.start}); re-save it as UTF-8")


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
    ext = path.suffix.lower()
    text = _read_text(path)
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
        raise EngineError(f"{path}: unsupported file type {ext or '(none)'}; use .tsv, .csv, .jsonl or .json")
    raw = [(ln, cells) for ln, cells in raw if any(c.strip() for c in cells)]  # blank lines
    if not raw:
        raise EngineError(f"{path} has no rows")
    first = raw[0][1]
    if header is None:
        names = {n.lower() for n in known_names}
        header = any(c.strip().lower() in names for c in first)
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
