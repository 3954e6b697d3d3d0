"""Files uploaded through the studio (pre-training corpora, fine-tuning task files): one place that checks them and
stores them under <runs root>/uploads with a safe name."""
import hashlib
import re
from pathlib import Path

from engine.errors import EngineError
from engine.fileio import atomic_write_bytes

MAX_UPLOAD_MB = 50  # also .streamlit/config.toml's server.maxUploadSize
BINARY_CHECK_BYTES = 1 << 16  # a NUL byte among an upload's first bytes: binary (the engine's readers check it all)


def safe_upload_name(name: str, data: bytes, extensions, what: str = "file") -> str:
    """A plain file name for an upload: letters, digits, - _ only in the stem, no folders, one of `extensions`
    (lower case, without the dot), and a short content hash so two different files never overwrite each other."""
    base = Path(str(name).replace("\\", "/")).name
    stem, dot, ext = base.rpartition(".")
    if not dot:
        stem, ext = base, ""
    ext = ext.lower()
    if ext not in extensions:
        raise EngineError(f"{base!r} is not a {what}; use one of .{', .'.join(extensions)}")
    stem = re.sub(r"[^A-Za-z0-9_-]+", "-", stem).strip("-_")[:60] or "file"
    return f"{stem}-{hashlib.sha256(data).hexdigest()[:10]}.{ext}"


def save_upload(root: Path, name: str, data: bytes, extensions, what: str = "file") -> Path:
    """Store an upload as <root>/uploads/<safe name>; the same content under the same name is written once."""
    if len(data) > MAX_UPLOAD_MB * 1024 * 1024:
        raise EngineError(f"{name} is {len(data) / 2**20:.0f} MB; upload at most {MAX_UPLOAD_MB} MB (or give its path on the server)")
    if not data.strip():
        raise EngineError(f"{name} is empty; upload a file with content")
    nul = data.find(b"\x00", 0, BINARY_CHECK_BYTES)
    if nul >= 0:  # every upload is text: refused here rather than after the page has read it
        raise EngineError(f"{name} is not a text file (a NUL byte at byte {nul}: binary, or UTF-16 text); upload UTF-8 text")
    path = Path(root) / "uploads" / safe_upload_name(name, data, extensions, what)
    if not (path.is_file() and path.read_bytes() == data):
        atomic_write_bytes(path, data)
    return path
