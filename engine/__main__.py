"""`python -m engine <command> ...`: the shell interface. Each command lives in its own module's `main(argv)`.

A user error (`EngineError`) prints one line, `error: <what is wrong and how to fix it>`, and exits 2; add
`--debug` anywhere to see the traceback instead.
"""
import sys

from engine.commands import COMMANDS  # the command list, also read by the job queue (engine.jobs)


def dispatch(cmd: str, argv: list) -> int:
    if cmd == "tokenizer":
        from engine.tokenizer import main
    elif cmd == "prepare":
        from engine.pretraining.prepare import main
    elif cmd == "pretrain":
        from engine.pretraining.run import main
    elif cmd == "finetune":
        from engine.finetune import main
    elif cmd == "features":
        from engine.features import main
    elif cmd == "probe":
        from engine.probes import main
    elif cmd == "ablate":
        from engine.ablations import main
    elif cmd == "bench":
        from engine.bench import main
    elif cmd == "class":
        from engine.classroom import main
    elif cmd == "measured":
        from engine.measured import main
    else:
        print(f"error: unknown command '{cmd}'; choose one of tokenizer, prepare, pretrain, finetune, features, probe, ablate, bench, class, measured", file=sys.stderr)
        return 2
    return main(argv) or 0


def run(args: list) -> int:
    debug = "--debug" in args
    args = [a for a in args if a != "--debug"]
    if not args or args[0] in ("-h", "--help"):
        print("usage: python -m engine <command> [flags] [--debug]\n\n" + COMMANDS)
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
