"""User-facing errors.

Every problem a user can cause (a missing file, a bad flag, a corpus that is empty, a checkpoint that does
not match its vocabulary) is raised as an `EngineError` whose message is one line naming the problem and
the fix. The CLI prints it as `error: ...` and exits 2 (the traceback only with `--debug`); the studio
shows it with `st.error`. Anything else that escapes is a bug in the engine.
"""


def quoted(value) -> str:
    """`value` (a name or path the user typed) as one single-quoted shell word, control characters escaped: an error
    line that echoes it stays one line and, pasted or sourced into a shell, never runs any part of it."""
    import shlex
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(value))
    q = shlex.quote(text)
    return q if q.startswith("'") else f"'{q}'"


class EngineError(Exception):
    """A problem with the user's input or environment, with a one-line message that says how to fix it."""

    def __init__(self, message: str):
        message = " ".join(str(message).split())  # always one line
        super().__init__(message)


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [""])[0][:300]


def says_no_space(e: BaseException) -> bool:
    """The exception's text reports ENOSPC (libraries that wrap the OS error in their own type)."""
    return "No space left on device" in str(e) or "os error 28" in str(e)


def as_engine_error(e: BaseException):
    """The one-line EngineError for an environment failure that is the user's to fix, else None:
    out of memory (CUDA's OutOfMemoryError, the CPU allocator's "can't allocate memory") names the flags that
    shrink the batch; a full disk (ENOSPC: `OSError [Errno 28]`, or safetensors' "os error 28") says to free space.
    (torch.save words a full disk "iostream error" or "unexpected pos": engine.fileio checks the free space then.)"""
    import errno
    if isinstance(e, EngineError):
        return e
    text = str(e)
    if isinstance(e, MemoryError):  # the host's memory: most often an input read whole, or a batch too large
        return EngineError(f"out of memory ({_first_line(e) or 'MemoryError'}); give smaller input files, or lower "
                           f"--batch-size or --max-seq-len / --seq-len, or use a smaller model")
    if type(e).__name__ == "OutOfMemoryError" or "out of memory" in text.lower() or "can't allocate memory" in text:
        return EngineError(f"out of memory ({_first_line(e)}); lower --batch-size (pre-training: raise --grad-accum to keep "
                           f"the effective batch), or --max-seq-len / --seq-len, or use a smaller model")
    if (isinstance(e, OSError) and e.errno == errno.ENOSPC) or says_no_space(e):
        where = f" while writing {e.filename}" if isinstance(e, OSError) and e.filename else ""
        return EngineError(f"No space left on device{where}; free disk space (or choose another --out), then run the "
                           f"command again (a run continues where it stopped with --resume)")
    return None
