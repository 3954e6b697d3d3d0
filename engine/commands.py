"""The engine's commands, each written once: its name, the module whose `main(argv)` runs it, and its line in
`python -m engine --help`. The shell interface (engine/__main__.py) dispatches and prints help from this table, and
the job queue (engine.jobs) accepts a job only when it starts with one of these names. Standard library only, and
nothing imported: the queue reads it without loading the entry point.

The run kinds, each described once (RUN_KINDS): the commands that write a run folder (run.json's "kind", a study
job's "kind") and what each kind of run is.

| name     | written by        | checkpoints | reusable | resumes | page                 |
|----------|-------------------|-------------|----------|---------|----------------------|
| pretrain | `pretrain`        | yes         | yes      | yes     | pages/2_Pretrain.py  |
| finetune | `finetune`        | no          | no       | yes     | pages/3_Finetune.py  |
| features | `features`        | no          | no       | yes     | pages/4_Features.py  |
| layers   | `layers`          | no          | no       | no      | pages/10_Layers.py   |

`checkpoints`: its folder holds checkpoints/step-N, a model to load and pre-training to resume or continue from (a
fine-tuning's best model is its result, not a checkpoint). `reusable`: a finished run of it anywhere under the runs
folder stands in for a study's job with the same settings (engine.ablations.reuse.matching_run); a study's other
jobs are taken over only from another study's job (matching_evaluation). `resumes`: `--resume` continues its folder
(the job queue's retry adds it). Callers ask the kind (`kind_of(info.get("kind")) is PRETRAIN`, `.checkpoints`,
`.page`) instead of comparing names; `kind_of` answers every name, an unknown or absent one with a kind that is none
of these (no checkpoints, not reusable, no page), so no caller checks for None."""
from dataclasses import dataclass

COMMANDS = {  # name -> (module with main(argv), what it does)
    "tokenizer": ("engine.tokenizer", "train a WordPiece vocabulary on a corpus"),
    "prepare": ("engine.pretraining.prepare", "prepare pre-training data from a corpus of any size into shards "
                                              "(worker processes)"),
    "pretrain": ("engine.pretraining.run", "pre-train BERT (MLM+NSP, MLM only, LTR, or MLM+SOP) into a run folder"),
    "finetune": ("engine.finetune", "fine-tune on a downstream task over a learning-rate grid with restarts"),
    "features": ("engine.features", "extract frozen features (any layer or the paper's combinations) and train a "
                                    "classifier on them"),
    "probe": ("engine.probes", "masked-token fill, next-sentence probability and attention maps"),
    "layers": ("engine.layers", "probes per layer with control tasks and the expected layer, over a run's checkpoints; "
                                "--heads: head roles"),
    "ablate": ("engine.ablations", "run or summarise an ablation study (paper Tables 5-8, Figure 5)"),
    "bench": ("engine.bench", "benchmark the engine against transformers"),
    "class": ("engine.classroom", "prepare this machine for the first class in one step (prepare, status, cancel)"),
    "measured": ("engine.measured", "the measured facts the product states (engine/measured.py); --readme prints "
                                    "README.md's table"),
}


@dataclass(frozen=True)
class RunKind:
    name: str  # run.json's "kind" and a study job's "kind"
    command: str  # the COMMANDS entry that writes it into its --out folder
    checkpoints: bool  # its folder holds checkpoints/step-N: a model to load, pre-training to resume or continue from
    reusable: bool  # a finished one under the runs folder stands in for a study's job of the same settings
    resumes: bool  # `--resume` continues its folder
    page: str  # the page that launches and shows it (streamlit_app.PAGES); "" for none


PRETRAIN = RunKind("pretrain", "pretrain", checkpoints=True, reusable=True, resumes=True, page="pages/2_Pretrain.py")
FINETUNE = RunKind("finetune", "finetune", checkpoints=False, reusable=False, resumes=True, page="pages/3_Finetune.py")
FEATURES = RunKind("features", "features", checkpoints=False, reusable=False, resumes=True, page="pages/4_Features.py")
LAYERS = RunKind("layers", "layers", checkpoints=False, reusable=False, resumes=False, page="pages/10_Layers.py")
RUN_KINDS = {k.name: k for k in (PRETRAIN, FINETUNE, FEATURES, LAYERS)}


def kind_of(name) -> RunKind:
    """The RunKind called `name` (run.json's or a study job's "kind"); for a name no command writes (an absent kind,
    None, a damaged file's) a kind that is none of RUN_KINDS: `is PRETRAIN` is false and it has no checkpoints, is
    neither reused nor resumed, and has no page."""
    known = RUN_KINDS.get(name) if isinstance(name, str) else None
    return known or RunKind(str(name), "", checkpoints=False, reusable=False, resumes=False, page="")


def written_by(command) -> RunKind | None:
    """The RunKind the engine command `command` (a job's argv[0]) writes into its --out folder; None for a command
    that writes no run folder (tokenizer, prepare, probe, ...)."""
    return next((k for k in RUN_KINDS.values() if k.command == command), None)


def help_text() -> str:
    """The command list `python -m engine --help` prints."""
    lines = [f"  {name:<11} {what}" for name, (_, what) in COMMANDS.items()]
    return "\n".join(["commands:", *lines, "run `python -m engine <command> --help` for its flags"])
