"""Atomic file writes, and bounded reads of files that other hands may have put in a folder.

Writes: to a temporary name in the same folder, fsync, then rename. A reader (or a resumed run) therefore sees
either the old file or the new one, never half of one. A failed write (disk full, permission denied) leaves the
old file intact and raises `EngineError` naming the path. A file that is replaced keeps its permission bits.

Reads (`open_regular`, `read_regular`, `tail_regular`): only a regular file is opened, never a FIFO (opened
without blocking, then refused: a FIFO with no writer would block the reader for ever), a device (/dev/zero never
ends), a socket, or a symlink that leads out of the folder the file belongs to; a whole-file read stops at a bound.
Each refusal is one `EngineError` line naming the file; a missing file is FileNotFoundError, as with open().
"""
import errno
from contextlib import contextmanager
import json
import os
import shutil
import stat
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
        _keep_mode(path, tmp)
        os.replace(tmp, path)
    except OSError as e:
        if tmp is not None and tmp.exists():
            tmp.unlink(missing_ok=True)
        raise EngineError(f"could not write {path}: {e.strerror or e}; free disk space or fix permissions and retry") from e


def _keep_mode(path: Path, tmp: Path) -> None:
    """Give `tmp` the permission bits of the file it replaces (mkstemp makes it 0600)."""
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        return
    os.chmod(tmp, mode)


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


# ---------------------------------------------------------------------------------------------------------
# bounded reads

_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder"))


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def open_regular(path, root=None):
    """`path` opened for reading in binary, only if it is a regular file inside `root` (default: the folder that
    holds it) once symlinks are resolved: a FIFO, a device, a socket or a symlink leading out is refused with one
    EngineError line (the FIFO is opened with O_NONBLOCK, so even that never blocks). FileNotFoundError when it
    does not exist (a dangling symlink included); other OSErrors (permissions) pass through."""
    path = Path(path)
    root = Path(root) if root is not None else path.parent
    try:
        real = path.resolve(strict=True)
    except FileNotFoundError:
        raise
    except RuntimeError as e:  # a symlink loop (Python 3.11 raises RuntimeError; later versions OSError ELOOP)
        raise EngineError(f"{path} is a symlink loop ({e}); it is not read: remove it") from e
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise EngineError(f"{path} is a symlink loop; it is not read: remove it") from e
        raise
    if not _inside(real, root.resolve()):
        raise EngineError(f"{path} leads outside {root} (a symlink to {real}); it is not read: remove the link, or "
                          f"copy the file into {root}")
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        if e.errno == errno.ELOOP:  # swapped for a symlink since it was resolved
            raise EngineError(f"{path} changed into a symlink while it was being opened; it is not read") from e
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = next((name for test, name in _KINDS if test(mode)), "not a plain file")
            raise EngineError(f"{path} is not a regular file ({kind}); it is not read: remove it (only the files the "
                              f"engine writes belong there)")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path, max_bytes: int, root=None, what: str = "file") -> bytes:
    """The bytes of a regular file (`open_regular`), refused with one EngineError line when it holds more than
    `max_bytes` (the read stops there)."""
    with open_regular(path, root) as f:
        size = os.fstat(f.fileno()).st_size
        # read(n) sets aside n bytes at once: ask for what the file holds (plus one byte, to see it has grown past
        # the bound), never for the bound itself
        data = f.read(min(size, max_bytes) + 1) if size <= max_bytes else b""
        while size <= max_bytes and len(data) <= max_bytes and (more := f.read(min(1 << 16, max_bytes + 1 - len(data)))):
            data += more
    if size > max_bytes or len(data) > max_bytes:
        raise EngineError(f"{path} holds more than {_size(max_bytes)}, far more than a {what} the engine writes; it is "
                          f"not read: remove or restore it")
    return data


def tail_regular(path, max_bytes: int, root=None) -> bytes:
    """At most the last `max_bytes` bytes of a regular file (`open_regular`): the cheap read of a log's end."""
    with open_regular(path, root) as f:
        size = f.seek(0, os.SEEK_END)
        f.seek(max(0, size - max_bytes))
        return f.read(max_bytes)


def _size(n: int) -> str:
    return f"{n / 2 ** 20:g} MB" if n >= 2 ** 20 else f"{n / 1024:g} kB" if n >= 1024 else f"{n} bytes"


@contextmanager
def held_flock(path, holder: str, busy, cannot_open: str):
    """Hold an exclusive flock on `path` (made if missing) while the block runs, with `holder` (who holds it) written
    in it; the kernel drops the lock when its holder dies, so a SIGKILLed holder leaves nothing to clean up. Taken
    already: EngineError(busy(text the holder wrote)). `cannot_open`: what to check when the file cannot be made.
    The file stays after (deleting an flock file races with a new opener); empty means free."""
    import fcntl
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise EngineError(f"could not open {path}: {e.strerror or e}; {cannot_open}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        text = os.pread(fd, 500, 0).decode(errors="replace").strip()
        os.close(fd)
        raise EngineError(busy(text)) from None
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, holder.encode(), 0)
        yield
    finally:
        os.ftruncate(fd, 0)
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
