"""The downstream tasks the engine knows, in one place: the file formats (`FORMATS`) and the built-in tasks
(`BUILTINS`). The `--task` choices, the Fine-tune and Features pages' options and `load_task` are derived from
these two dicts.

A format is read from a train and a dev file the user gives; a built-in task ships with its data. Both give a
task object (TextTask, TaggingTask, SquadTask, MultipleChoiceTask) that owns the rest: its batching
(`collate`), and through `prepare` its item lengths, its head kind and its dev evaluator (engine.tasks.batching
.Prepared), its metrics and a preview for the page.

Adding a built-in task: write its loader in its own module (a function with no arguments that returns a task
object, like `builtin.bbc_topic_task`) and add one `BuiltinTask` line to `BUILTINS` below (or call
`register_builtin` at run time, as tests/engine/test_finetune.py does).
"""
from dataclasses import dataclass
from typing import Callable

from engine.errors import EngineError
from engine.tasks.bbc_cloze import bbc_cloze_task
from engine.tasks.bbc_next import bbc_next_task
from engine.tasks.bbc_order import bbc_order_task
from engine.tasks.bbc_punct import bbc_punct_task
from engine.tasks.bbc_story import bbc_story_task
from engine.tasks.builtin import bbc_topic_task, wnut16_task
from engine.tasks.glue import load_glue
from engine.tasks.multiple_choice import load_multiple_choice
from engine.tasks.squad import load_squad_task
from engine.tasks.tagging import load_tagging


@dataclass(frozen=True)
class TaskFormat:
    """A downstream file format: its `--task` name, how its files are read, what the studio says about it."""
    name: str  # the --task value
    description: str  # one line for the Fine-tune page
    extensions: tuple  # file types the Fine-tune page accepts for uploads
    load: Callable  # load(train, dev, **options) -> a task object
    options: tuple  # the keyword options `load` takes besides train and dev
    columns: tuple = ()  # (--text-cols first, second, --label-col) as load()'s keywords; () = no columns to pick
    task_type: bool = False  # --task-type (classification | regression) applies
    features: bool = False  # the feature-based classifier (engine.features) handles it


@dataclass(frozen=True)
class BuiltinTask:
    """A task that ships with its data (no files to give)."""
    name: str  # the --task value
    description: str  # one line for the Fine-tune and Features pages
    load: Callable  # load() -> a task object
    format: str  # the FORMATS entry it is an instance of (what the page and the features command can do with it)


FORMATS = {f.name: f for f in (
    TaskFormat("glue", "sentence / pair classification or regression (TSV, CSV, JSONL)", ("tsv", "csv", "jsonl", "json", "txt"),
               load_glue, ("name", "text_a", "text_b", "label", "header", "task_type", "metrics", "metric"),
               columns=("text_a", "text_b", "label"), task_type=True, features=True),
    TaskFormat("tagging", "BIO / CoNLL tagging", ("txt", "conll", "bio", "tsv"), load_tagging, ("name", "token", "label"),
               features=True),
    TaskFormat("squad", "SQuAD v1.1 / v2.0 JSON", ("json",), load_squad_task, ("name",)),
    TaskFormat("swag", "multiple choice (CSV, JSONL)", ("csv", "jsonl", "json"), load_multiple_choice,
               ("name", "context", "start", "endings", "label"), columns=("context", "start", "label")),
)}

# the CLI flag of each loader option, for messages (a notebook passes the option itself)
FLAGS = {"text_a": "--text-cols", "text_b": "--text-cols", "context": "--text-cols", "start": "--text-cols",
         "label": "--label-col", "token": "--token-col", "header": "--header", "task_type": "--task-type",
         "metric": "--metric"}

BUILTINS = {b.name: b for b in (
    BuiltinTask("bbc-topic", "BBC News topic classification (5 classes, 1,781 train / 444 dev)", bbc_topic_task, "glue"),
    BuiltinTask("wnut16", "WNUT-16 Twitter NER (10 entity types, entity F1)", wnut16_task, "tagging"),
    BuiltinTask("bbc-cloze", "BBC cloze-to-span reading (SQuAD format, F1; dev unseen in classroom pre-training)",
                bbc_cloze_task, "squad"),
    BuiltinTask("bbc-punct", "restore punctuation in lower-cased BBC text (COMMA/PERIOD/QUESTION per word, F1)",
                bbc_punct_task, "tagging"),
    BuiltinTask("bbc-next", "does sentence B follow A? negatives from the same article (accuracy)", bbc_next_task, "glue"),
    BuiltinTask("bbc-story", "does sentence B continue A's story? negatives from another article on the same topic "
                "(accuracy)", bbc_story_task, "glue"),
    BuiltinTask("bbc-order", "are these two consecutive sentences of one story in order, or swapped? (accuracy)",
                bbc_order_task, "glue"),
)}


def register_builtin(task: BuiltinTask) -> None:
    """Add a built-in task at run time (a plugin, a test); the CLI choices and the pages pick it up."""
    if task.name in FORMATS:
        raise EngineError(f"built-in task {task.name!r} would hide the file format of that name; pick another name")
    if task.format not in FORMATS:
        raise EngineError(f"built-in task {task.name!r}: format {task.format!r} is not one of {', '.join(FORMATS)}")
    BUILTINS[task.name] = task


def task_names() -> tuple:
    """Every --task value: the built-in tasks, then the file formats."""
    return tuple(BUILTINS) + tuple(FORMATS)


def format_of(name: str) -> TaskFormat:
    """The TaskFormat of a --task value (a built-in task's is the format it is an instance of)."""
    return FORMATS[BUILTINS[name].format] if name in BUILTINS else FORMATS[name]


def feature_task_names() -> tuple:
    """The --task values the feature-based classifier handles (sentence classification/regression and tagging)."""
    return tuple(n for n in task_names() if format_of(n).features)


def load_task(name_or_kind: str, train=None, dev=None, **kw):
    """The task object for a built-in name (no files) or a file format with its files:
    - "bbc-topic" -> TextTask; "wnut16" -> TaggingTask;
    - "glue" (TSV/CSV/JSONL classification or regression) -> TextTask, kw: name, text_a, text_b, label,
      header, task_type, metrics, metric (see load_glue);
    - "tagging" (BIO files) -> TaggingTask, kw: name, token, label (see load_tagging);
    - "squad" (SQuAD v1.1/v2.0 JSON, or dicts from split_squad_articles) -> SquadTask, kw: name;
    - "swag" (multiple choice CSV/JSONL) -> MultipleChoiceTask, kw: name, context, start, endings, label."""
    key = str(name_or_kind).lower()
    if key in BUILTINS:
        if train is not None or dev is not None or kw:
            raise EngineError(f"{key} is a built-in task and takes no files or column options (--train, --dev, "
                              f"--text-cols, --label-col, --token-col, --header)")
        return BUILTINS[key].load()
    if key not in FORMATS:
        raise EngineError(f"unknown task {name_or_kind!r}; use a built-in task ({', '.join(BUILTINS)}) "
                          f"or a file kind ({', '.join(FORMATS)}) with train/dev files")
    if train is None and not (key == "squad" and dev is not None):
        raise EngineError(f"a {key} task needs a train file; give train=PATH (and dev=PATH)")
    fmt = FORMATS[key]
    unknown = sorted(set(kw) - set(fmt.options))
    if unknown:
        flag = lambda k: f"{k} ({FLAGS[k]})" if k in FLAGS else k
        raise EngineError(f"option {', '.join(map(flag, unknown))} does not apply to a {key} task; it takes "
                          f"{', '.join(map(flag, sorted(fmt.options)))}")
    return fmt.load(train, dev, **kw)


def load_task_files(task: str, train=None, dev=None, text_cols: str = None, label_col: str = None, task_type: str = None,
                    token_col: str = None, header: bool = None, metric: str = None):
    """The task object for the command line's options (--task, --train, --dev, --text-cols, --label-col,
    --task-type, --token-col, --header yes|no as True/False, --metric): the column options become the format's
    own keywords (swag: the context and start phrase; tagging: --token-col and --label-col are token= and
    label=). --metric is checked against what the task computes by the fine-tuning loop; glue also orders it
    first."""
    if task in FORMATS and not train:
        raise EngineError(f"--task {task} needs --train FILE and --dev FILE (or use a built-in task: {', '.join(BUILTINS)})")
    if task in FORMATS and not dev:
        raise EngineError(f"--task {task} needs --dev FILE: the dev set selects the best trial")
    given = []
    if text_cols:
        given = [p.strip() for p in str(text_cols).split(",")]
        if len(given) > 2 or not all(given):
            raise EngineError(f"--text-cols {text_cols!r} must be one column or two separated by a comma (A or A,B)")
    cols = dict(zip(("first", "second"), given))
    if label_col:
        cols["label"] = label_col
    kw = {}
    if cols:
        names = format_of(task).columns if task in FORMATS else ()
        if not names:  # a built-in task or a format without columns: load_task names the problem
            kw = {"text_a": cols.get("first"), "text_b": cols.get("second"), "label": cols.get("label")}
            kw = {k: v for k, v in kw.items() if v is not None}
        else:
            kw = {names[i]: cols[k] for i, k in enumerate(("first", "second", "label")) if k in cols}
    tagging = task in FORMATS and "token" in FORMATS[task].options
    if tagging and cols.get("first"):
        raise EngineError(f"--text-cols does not apply to --task {task}; its word column is --token-col (default: the first)")
    if tagging and "label" in cols:
        kw["label"] = cols["label"]
    if token_col is not None:
        if not tagging:
            raise EngineError(f"--token-col applies to --task tagging only, not {task}; sentence tasks take --text-cols")
        kw["token"] = token_col
    if header is not None:
        if not (task in FORMATS and "header" in FORMATS[task].options):
            raise EngineError(f"--header applies to --task glue (TSV/CSV files), not {task}")
        kw["header"] = header
    if metric is not None and task in FORMATS and "metric" in FORMATS[task].options:
        kw["metric"] = metric
    if task_type is not None:
        if not (task in FORMATS and FORMATS[task].task_type):
            raise EngineError(f"--task-type applies to --task {', '.join(n for n, f in FORMATS.items() if f.task_type)} "
                              f"only, not {task}")
        kw["task_type"] = task_type
    if task in BUILTINS:
        return load_task(task, **kw)
    return load_task(task, train=train, dev=dev, **kw)
