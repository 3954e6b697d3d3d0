"""Command lines made from the dataclass configs: each setting is described once, on its config field.

A config field declared with `setting(default, help, ...)` is a flag of its command: `--field-name`
(underscores become dashes) unless `flag=` names it, parsed by its type (int, float, str, Optional[...]) or by
`parse=`, shown by `text()`, limited to `choices=` (a tuple, or a function that returns one); a bool with default False is a switch, one with default True is switched off by
its `flag=` (e.g. `--no-save-features`). From that one description:

A config class names its command in a class attribute, `command: ClassVar[str] = "pretrain"`.

- `parser(Config, description)` builds the argparse parser of `python -m engine <command>` (flag, help with the default, choices, groups,
  required flags); a bad flag is one line, `error: <problem>; see <prog> --help` (an `EngineError`);
- `given(Config, parser, argv)` -> {field: value} of the flags actually given (the others stay out, so a resume
  can tell what was asked for again); `Config(**given(...))` is the config, checked by its own `__post_init__`
  or `validate`;
- `argv(config)` -> `[command, flags...]`, the `python -m engine` command line (a job queue's argv) that gives
  back an equal config: every setting that has a value (not
  None, not ""; a switch when it is not its default), so a queued job runs the same settings even if a
  default changes later (a field whose None is not its default says how None is written: `setting(none=...)`).
"""
import argparse
import dataclasses
import re
import typing

from engine.errors import EngineError


def setting(default, help: str, *, flag: str = None, parse=None, choices=None, group: str = None,
            required: bool = False, none: str = None, limits: tuple = None):
    """A config field that is also a command-line flag (see the module docstring). `none`: the word that stands
    for None on a command line when the default is not None (its `parse` reads it back as None). `limits`: (lowest,
    highest, step) a form's box offers (`field_limits`; the command's own checks are the config's)."""
    meta = {"help": help, "flag": flag, "parse": parse, "choices": choices, "group": group, "required": required,
            "none": none, "limits": limits}
    return dataclasses.field(default=default, metadata={"cli": meta})


def number_text(x) -> str:
    """A number for a command line: 0.8 -> '0.8', 1.0 -> '1', 5e-05 -> '5e-05'."""
    if isinstance(x, float) and x.is_integer():
        return str(int(x))
    return str(x)


def text(value) -> str:
    """A setting's value as one command-line word: tuples comma-joined (0.8,0.1,0.1), numbers short."""
    if isinstance(value, (tuple, list)):
        return ",".join(number_text(x) for x in value)
    return number_text(value)


def floats(s: str) -> tuple:
    """'5e-5,3e-5' -> (5e-05, 3e-05)."""
    try:
        return tuple(float(x) for x in str(s).split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{s}' must be comma-separated numbers, e.g. 5e-5,3e-5,2e-5")


def ints(s: str) -> tuple:
    """'16,32' -> (16, 32); '-1,-2' -> (-1, -2)."""
    try:
        return tuple(int(x) for x in str(s).split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{s}' must be comma-separated integers, e.g. 16,32")


def words(s: str) -> tuple:
    """'concat,last' -> ('concat', 'last')."""
    return tuple(x.strip() for x in str(s).split(",") if x.strip())


def flags(cls) -> list:
    """(field, its cli metadata, its flag) for every command-line setting of the config class, in field order."""
    out = []
    for f in dataclasses.fields(cls):
        meta = f.metadata.get("cli")
        if meta is not None:
            out.append((f, meta, meta["flag"] or "--" + f.name.replace("_", "-")))
    return out


def field_setting(cls, name: str) -> tuple:
    """(default, help text) of the config class's setting `name`: what a page's widget shows, read from the field
    so a default changed there moves every form that offers it."""
    for f, meta, _ in flags(cls):
        if f.name == name:
            return f.default, meta["help"]
    raise KeyError(f"{cls.__name__} has no setting {name!r}")


def same_setting(cls, name: str, help_more: str = "", group: str = None):
    """A setting of another config class described once: the field `name` of `cls` with its default, help, parse and
    choices (prepare's instance settings are pre-training's, engine/pretraining/prepare.py); `help_more` is added to
    its help, `group` replaces its group."""
    for f, meta, _ in flags(cls):
        if f.name == name:
            return setting(f.default, meta["help"] + help_more, parse=meta["parse"], choices=meta["choices"],
                           group=group or meta["group"], none=meta["none"], limits=meta.get("limits"))
    raise KeyError(f"{cls.__name__} has no setting {name!r}")


def field_limits(cls, name: str) -> tuple:
    """(lowest, highest, step) a form offers for the config class's setting `name` (its `limits=`)."""
    for f, meta, _ in flags(cls):
        if f.name == name:
            if meta.get("limits") is None:
                raise KeyError(f"{cls.__name__}.{name} declares no limits")
            return meta["limits"]
    raise KeyError(f"{cls.__name__} has no setting {name!r}")


def field_choices(cls, name: str) -> tuple:
    """The choices of the config class's setting `name` (a function's are read now), or () when it takes any value."""
    for f, meta, _ in flags(cls):
        if f.name == name:
            choices = meta["choices"]() if callable(meta["choices"]) else meta["choices"]
            return tuple(choices or ())
    raise KeyError(f"{cls.__name__} has no setting {name!r}")


def _type(f: dataclasses.Field):
    """The parse function of a field without `parse=`: its annotation, Optional[X] -> X."""
    t = f.type
    args = [a for a in typing.get_args(t) if a is not type(None)]
    if typing.get_origin(t) is typing.Union and len(args) == 1:
        t = args[0]
    if t not in (int, float, str):
        raise TypeError(f"setting {f.name}: give parse= for type {t}")
    return t


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line through the engine's error path instead of usage + exit 2
        # a value our parse function refused reads as "--lr 'x' must be ...", not "argument --lr: 'x' must be ..."
        message = re.sub(r"^argument (--[\w-]+): (')", r"\1 \2", message)
        # a flag of choices given bare names them: "--compile: expected one argument: auto, on or off"
        bare = re.match(r"^argument (--[\w-]+): expected one argument$", message)
        action = bare and next((a for a in self._actions if bare.group(1) in a.option_strings), None)
        if action is not None and action.choices:
            *head, last = [str(c) for c in action.choices]
            message = f"{bare.group(1)} needs a value: {', '.join(head)} or {last}" if head else message
        raise EngineError(f"{message}; see {self.prog} --help")


def parser(cls, description: str) -> argparse.ArgumentParser:
    """The argparse parser of `python -m engine <cls.command>`: one flag per `setting` field; flags left out are
    absent from the parsed namespace (argparse.SUPPRESS), so `given` returns only what was typed."""
    ap = _Parser(prog=f"python -m engine {cls.command}", description=description, argument_default=argparse.SUPPRESS)
    groups = {}
    for f, meta, flag in flags(cls):
        target = ap
        if meta["group"]:
            if meta["group"] not in groups:
                groups[meta["group"]] = ap.add_argument_group(meta["group"])
            target = groups[meta["group"]]
        help_text = meta["help"]
        if not (f.default is None or isinstance(f.default, bool) or f.default == "" or meta["required"]) \
                and "default" not in help_text:
            help_text += f" (default {text(f.default)})"
        help_text = help_text.replace("%", "%%")  # argparse formats help with %: a literal '15%' must not break --help
        if f.type is bool:
            target.add_argument(flag, dest=f.name, action="store_false" if f.default else "store_true", help=help_text)
            continue
        choices = meta["choices"]() if callable(meta["choices"]) else meta["choices"]  # a function: read when built
        target.add_argument(flag, dest=f.name, type=meta["parse"] or _type(f), choices=choices,
                            required=meta["required"], help=help_text)
    return ap


def _join_negative_values(argv: list, value_flags: set) -> list:
    """`--layers -1,-2` -> `--layers=-1,-2`: argparse would read '-1,-2' as a flag."""
    out, i = [], 0
    while i < len(argv):
        a = argv[i]
        if a in value_flags and i + 1 < len(argv) and argv[i + 1][:1] == "-" and argv[i + 1][1:2].isdigit():
            out.append(f"{a}={argv[i + 1]}")
            i += 2
        else:
            out.append(a)
            i += 1
    return out


def given(cls, ap: argparse.ArgumentParser, argv: list) -> dict:
    """{field name: value} of the flags present in `argv` (a bad flag raises EngineError, one line)."""
    value_flags = {flag for f, _, flag in flags(cls) if f.type is not bool}
    return vars(ap.parse_args(_join_negative_values([str(a) for a in argv], value_flags)))


def argv(config, only: tuple = None) -> list:
    """`[command, flags...]` that rebuild `config` (see the module docstring): given(argv(c)[1:]) gives c back.
    `only`: just the flags of these fields (a resume names its run and takes every other setting from it)."""
    out = [config.command]
    for f, meta, flag in flags(type(config)):
        if only is not None and f.name not in only:
            continue
        value = getattr(config, f.name)
        if f.type is bool:
            if bool(value) != bool(f.default):
                out.append(flag)
        elif value is not None and value != "":
            out += [flag, text(value)]
        elif value is None and meta["none"] is not None and f.default is not None:
            out += [flag, meta["none"]]
        elif value != f.default:
            raise EngineError(f"{flag} cannot be given as {value!r} on a command line; leave it at {f.default!r}")
    for f in dataclasses.fields(config) if only is None else ():
        if "cli" not in f.metadata and getattr(config, f.name) != f.default:
            raise EngineError(f"{f.name} has no command-line flag; leave it at {f.default!r} for a queued job")
    return out


def resume_argv(cls, out, **more) -> list:
    """`[command, --out OUT, --resume, ...]`: continue the run in `out` with the settings it saved (every flag
    given again would override them)."""
    return argv(cls(out=str(out), resume=True, **more), only=("out", "resume", *more))
