"""Atomic file writes: write to a temporary name in the same folder, fsync, then rename.

A reader (or a resumed run) therefore sees either the old file or the new one, never half of one. A failed
write (disk full, permission denied) leaves the old file intact and raises `EngineError` naming the path.
"""
import json
import os
import shutil
import tempfile
from pathlib import Path

from engine.errors import EngineError, says_no_space


def _tmp_path(path: Path) -> Path:
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    return Path(name)


def atomic_write_bytes(path, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = None
    try:
        tmp = _tmp_path(path)
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        if tmp is not None and tmp.exists():
            tmp.unlink(missing_ok=True)
        raise EngineError(f"could not write {path}: {e.strerror or e}; free disk space or fix permissions and retry") from e


def atomic_write_text(path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path, obj) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")


def atomic_save_with(path, save_fn) -> None:
    """Call `save_fn(tmp_path)` to write a file, then rename it over `path` (for safetensors, numpy, torch)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = None
    try:
        tmp = _tmp_path(path)
        save_fn(str(tmp))
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        # the writing library words a full disk its own way (safetensors: "os error 28", torch: "iostream error"
        # or "unexpected pos"): a disk with no room left, measured before the partial file goes, says it
        full = isinstance(e, Exception) and not isinstance(e, EngineError) and (says_no_space(e) or _disk_full(path.parent))
        if tmp is not None and tmp.exists():
            tmp.unlink(missing_ok=True)
        if isinstance(e, OSError) or full:
            reason = e.strerror if isinstance(e, OSError) and e.strerror else "No space left on device"
            raise EngineError(f"could not write {path}: {reason}; free disk space or fix permissions and retry") from e
        raise


def _disk_full(folder, margin: int = 1 << 20) -> bool:
    """True if the file system holding `folder` has less than `margin` bytes free."""
    try:
        return shutil.disk_usage(folder).free < margin
    except OSError:
        return False


def atomic_publish_dir(tmp_dir, final_dir) -> None:
    """Rename a fully written folder into place; an existing `final_dir` is replaced only after success."""
    tmp_dir, final_dir = Path(tmp_dir), Path(final_dir)
    old = None
    try:
        if final_dir.exists():
            old = final_dir.with_name(f".{final_dir.name}.old")
            if old.exists():
                shutil.rmtree(old)
            os.replace(final_dir, old)
        os.replace(tmp_dir, final_dir)
    except OSError as e:
        if old is not None and old.exists() and not final_dir.exists():
            os.replace(old, final_dir)
        raise EngineError(f"could not publish {final_dir}: {e.strerror or e}; free disk space or fix permissions and retry") from e
    if old is not None and old.exists():
        shutil.rmtree(old, ignore_errors=True)
