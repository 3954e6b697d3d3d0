"""User-facing errors.

Every problem a user can cause (a missing file, a bad flag, a corpus that is empty, a checkpoint that does
not match its vocabulary) is raised as an `EngineError` whose message is one line naming the problem and
the fix. The CLI prints it as `error: ...` and exits 2 (the traceback only with `--debug`); the studio
shows it with `st.error`. Anything else that escapes is a bug in the engine.
"""


class EngineError(Exception):
    """A problem with the user's input or environment, with a one-line message that says how to fix it."""

    def __init__(self, message: str):
        message = " ".join(str(message).split())  # always one line
        super().__init__(message)
