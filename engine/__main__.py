"""`python -m engine <command> ...`: the shell interface. Each command lives in its own module's `main(argv)`.

A user error (`EngineError`) prints one line, `error: <what is wrong and how to fix it>`, and exits 2; add
`--debug` anywhere to see the traceback instead.
"""
import sys

import importlib

from engine.commands import COMMANDS, help_text  # the command table, also read by the job queue (engine.jobs)


def dispatch(cmd: str, argv: list) -> int:
    if cmd not in COMMANDS:
        print(f"error: unknown command '{cmd}'; choose one of {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    return importlib.import_module(COMMANDS[cmd][0]).main(argv) or 0


def run(args: list) -> int:
    debug = "--debug" in args
    args = [a for a in args if a != "--debug"]
    if not args or args[0] in ("-h", "--help"):
        print("usage: python -m engine <command> [flags] [--debug]\n\n" + help_text())
        return 0 if args else 2
    from engine.errors import EngineError
    try:
        return dispatch(args[0], args[1:])
    except EngineError as e:
        if debug:
            raise
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # out of memory, a full disk: one line naming the fix, like an EngineError
        from engine.errors import as_engine_error
        known = as_engine_error(e)
        if known is None or debug:
            raise
        print(f"error: {known}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
