"""Named recipes: small overlays of a command's paper defaults, declared together, chosen with `--recipe NAME`.

Each command keeps one config dataclass whose defaults are the paper's (`PretrainConfig()` is BERT-BASE as the
paper pre-trains it, engine/pretraining/config.py). A recipe lays a few settings over those defaults (or over
another recipe, `over`), and a flag typed on the command line lays over the recipe:

    the config's defaults (the paper)  <-  the recipe's settings  <-  the flags given

`python -m engine pretrain` without `--recipe` trains `default_recipe(init)`: the classroom run, or with `--init` the
continued pre-training. Studies (engine/ablations/paper.py), lessons, `class prepare` (engine/classroom.py) and the
Pre-train page ask a recipe by name here; none restates its values. A recipe never changes the meaning of a flag
given beside it: `--seq-len` is the first phase's length whatever the recipe, and a combination that no longer makes
sense (a second phase not longer than the first, `--init` with a from-scratch recipe) is an error with its fix.

Why each recipe's values are what they are (measured, with the runs that chose them): the classroom run in
docs/lab-notes/classroom-pretraining-recipe.md, the continued pre-training in docs/lab-notes/probe-ready-model.md,
the lab scale in docs/lab-notes/lab-scale-gpu.md.
"""
from dataclasses import dataclass, field

from engine.errors import EngineError
from engine.objectives import MLM_NSP


@dataclass(frozen=True)
class Recipe:
    name: str  # the --recipe value (unique within its command)
    command: str  # the command whose config it overlays (a config class's `command`)
    about: str  # one line for --help and the pages
    settings: dict = field(default_factory=dict)  # {config field: value} laid over `over`
    over: str = ""  # the recipe it is laid over; "" = the config's own defaults (the paper's)
    continues: bool = False  # continued pre-training: needs --init MODEL (and a from-scratch recipe refuses one)


# The classroom run: a tiny BERT that learns to read context in minutes on a 2-core CPU. It departs from the paper
# in the settings below (short-then-long sequences scaled down, more of the tokens masked, a larger learning rate,
# no dropout, a smaller vocabulary); the measurements behind each are in docs/lab-notes/classroom-pretraining-recipe.md.
CLASSROOM = Recipe(
    "classroom", "pretrain", "the classroom run: a tiny BERT on BBC News, short sequences then longer ones",
    dict(preset="tiny", vocab_size=8000, seq_len=32, phase2_seq_len=128, phase2_fraction=0.3, mask_rate=0.25,
         dropout=0.0, steps=3000, batch_size=64, lr=1e-3, warmup=0.06))

# Continued pre-training of a pre-trained model (`--init`; the studio's probe-ready model): measured on MiniLM,
# held-out accuracy against wall time and the probe set's everyday blanks (docs/lab-notes/probe-ready-model.md): a
# small batch without dropout, a gentler rate, the first steps training only the new heads on the frozen encoder, and
# the built-in text with the everyday conversations (`everyday`: of the corpora tried, the one whose model filled the
# most everyday blanks, by one to three of 26: within what another seed could move, and said so there).
CONTINUED = Recipe(
    "continued", "pretrain", "continued pre-training of a model given with --init (the probe-ready model's recipe)",
    dict(corpus="everyday", objective=MLM_NSP.name, seq_len=128, phase2_seq_len=None, batch_size=16, steps=800, heads_first=0.15, heads_first_lr=1e-3,
         lr=3.5e-4, warmup=40, eval_every=100, save_every=100, log_every=10, dropout=0.0, mask_rate=0.15),
    over="classroom", continues=True)

# Lab scale, for one GPU: the mini preset, 128-token sequences, five segmentations of each document so the many passes
# over BBC News see fresh masks and pairs, and the paper's dropout and masking for the longer run
# (docs/lab-notes/lab-scale-gpu.md).
LAB = Recipe(
    "lab", "pretrain", "lab scale for one GPU: the mini model on 128-token sequences, the paper's dropout and masking",
    dict(preset="mini", steps=5000, batch_size=128, seq_len=128, phase2_seq_len=None, eval_every=500, dupe_factor=5,
         dropout=0.1, mask_rate=0.15, lr=1e-3), over="classroom")

# The probe-ready model: the continued recipe on MiniLM, in this folder under the runs root (the studio's one-step
# button, `class prepare`'s third part, the hub's offline hint)
PROBE_READY_INIT = "minilm"
PROBE_READY_RUN = "minilm-continued"
# Its length is this machine's: as many of the continued recipe's steps as fit in PROBE_READY_BUDGET minutes of wall
# time here, read from `class prepare`'s speed check of a probe-ready step (engine.classroom.probe_ready_steps), so a
# faster CPU trains longer; never fewer or more steps than PROBE_READY_STEP_RANGE (below 400 the held-out NSP is still
# climbing steeply; docs/lab-notes/probe-ready-model.md). Without a reading: the recipe's own steps.
PROBE_READY_BUDGET = 20.0  # minutes
PROBE_READY_STEP_RANGE = (400, 2400)

PAPER = Recipe("paper", "pretrain", "the paper's BERT-BASE pre-training: the config's own defaults")

# Fine-tuning (FinetuneConfig's defaults: the paper's grid, A.3, 18 trials). The classroom grid: 2 learning rates x
# batch 32 x 3 epochs. The paper's grid was meant for BERT-BASE on TPUs; on a classroom's 2-core CPU every trial is a
# whole fine-tuning of MiniLM, so 18 of them are nine times the wait of a grid that still shows what the grid is for,
# the dev set choosing between two learning rates; batch 32 and 3 epochs are the middle of the paper's ranges.
FINETUNE_PAPER = Recipe("paper", "finetune", "the paper's grid (A.3): the config's own defaults")
FINETUNE_CLASSROOM = Recipe("classroom", "finetune", "a classroom-sized grid: two learning rates, batch 32, 3 epochs",
                            dict(lr=(5e-5, 3e-5), batch_size=(32,), epochs=(3,)))

RECIPES = {(r.command, r.name): r for r in (PAPER, CLASSROOM, CONTINUED, LAB, FINETUNE_PAPER, FINETUNE_CLASSROOM)}


def recipe(name: str, command: str = "pretrain") -> Recipe:
    """The recipe called `name` for `command` (EngineError naming the choices)."""
    r = RECIPES.get((command, name))
    if r is None:
        raise EngineError(f"unknown --recipe {name!r}; choose one of {', '.join(names(command))}")
    return r


def names(command: str = "pretrain") -> tuple:
    """The recipes of `command`, in declaration order (the --recipe choices)."""
    return tuple(r.name for r in RECIPES.values() if r.command == command)


def settings(name: str, command: str = "pretrain") -> dict:
    """Every setting the recipe gives, its `over` chain resolved (the config's defaults fill the rest)."""
    r = recipe(name, command)
    return {**(settings(r.over, command) if r.over else {}), **r.settings}


def default_recipe(init=None) -> str:
    """The recipe `python -m engine pretrain` trains when none is named: continued pre-training with --init, else the
    classroom run."""
    return CONTINUED.name if init else CLASSROOM.name


def config(cls, name: str, /, **given):
    """`cls` (a command's config class) with the recipe `name` laid over its defaults and `given` over the recipe."""
    return cls(**{**settings(name, cls.command), **given})


def check_init(name: str, init) -> None:
    """A continued-pre-training recipe needs --init; a from-scratch one refuses it (it would train another model)."""
    r = recipe(name, CLASSROOM.command)
    if r.continues and not init:
        raise EngineError(f"--recipe {name} continues a pre-trained model; give --init MODEL (a run, a checkpoint, a "
                          f"Hugging Face BERT folder or minilm), or pick a from-scratch recipe ({', '.join(scratch())})")
    if init and not r.continues:
        raise EngineError(f"--recipe {name} trains from scratch and --init {init} continues a model; drop --init, or use "
                          f"--recipe {', '.join(x.name for x in RECIPES.values() if x.continues)}")


def scratch(command: str = CLASSROOM.command) -> tuple:
    """The from-scratch pre-training recipes."""
    return tuple(n for n in names(command) if not recipe(n, command).continues)


def help_text(command: str = "pretrain") -> str:
    """--recipe's help: each recipe with its line."""
    return "; ".join(f"{r.name}: {r.about}" for r in RECIPES.values() if r.command == command)
