"""What an ablation study is: a base configuration, named variants (each a small override of the base,
`dataclasses.replace`, design convention 8) and the downstream evaluations that fill its table's columns.

The built-in studies (the paper's Tables 5-8 and Figure 5) are in `engine.ablations.paper`; a study is saved in its
folder's study.json as `Study.to_dict()` and read back with `engine.ablations.folders.study_from_dict`.
"""
from dataclasses import asdict, dataclass, field, replace
from typing import Callable

from engine.errors import EngineError
from engine.pretraining.config import PretrainConfig

# ---------------------------------------------------------------------------------------------------------
# configurations: what a variant can override. Pre-training is `PretrainConfig` itself (its fields are the flags
# of `python -m engine pretrain`); the downstream grids below become FinetuneConfig / FeaturesConfig in the planner.

@dataclass(frozen=True)
class FinetuneArgs:
    """The grid of `python -m engine finetune` (the paper: lr 5e-5,3e-5,2e-5, batch 16,32, epochs 2,3,4)."""
    lr: tuple = (5e-5, 3e-5, 2e-5)
    batch_size: tuple = (16, 32)
    epochs: tuple = (2, 3, 4)
    restarts: int = 1
    max_train: int = None  # cap on training examples (classroom scale)
    max_seq_len: int = 128
    bilstm: bool = False  # Table 5's "+ BiLSTM" row: a randomly initialised BiLSTM on top, for fine-tuning


@dataclass(frozen=True)
class FeatureArgs:
    """The flags of `python -m engine features` (paper Table 7)."""
    layers: str = "-1,-2,-3,-4"  # the hidden states that concat/sum/mean/weighted combine (0 = embeddings, -1 = last)
    combine: str = "concat"  # concat | sum | mean | weighted | all-weighted | last | second-to-last | embeddings
    classifier: str = None  # None: the command's choice (BiLSTM for tagging, logistic regression for sentences)


@dataclass(frozen=True)
class Evaluation:
    """One downstream column of a study's table."""
    name: str  # the column header
    task: str  # finetune/features --task: bbc-topic | wnut16 | glue | tagging | squad | swag
    metric: str  # the eval.json metric shown: accuracy | f1 | mcc | ...
    train: str = None  # files for the generic formats
    dev: str = None
    features: FeatureArgs = None  # set: evaluate frozen features instead of fine-tuning (Table 8's last column)

    def key(self) -> str:
        return _slug(self.name)


@dataclass(frozen=True)
class Variant:
    """One row of a study: a named override of the study's base configuration."""
    name: str  # the row label, as in the paper
    pretrain: dict = field(default_factory=dict)  # overrides of the study's PretrainConfig
    finetune: dict = field(default_factory=dict)  # overrides of the study's FinetuneArgs (e.g. bilstm=True)
    features: FeatureArgs = None  # a feature-based row (Table 7): evaluate with `engine features`
    reuse: str = None  # evaluate the pre-trained model of this other variant (LTR + BiLSTM reuses LTR)
    note: str = ""  # what the row means, for the page

    def key(self) -> str:
        return _slug(self.name)

    def change(self) -> str:
        """What the row changes relative to the study's base, in words ("" for the base itself)."""
        what = ", ".join(f"{k} = {x}" for k, x in self.pretrain.items())
        if self.finetune:
            what = (what + "; " if what else "") + "fine-tune " + ", ".join(f"{k} = {x}" for k, x in self.finetune.items())
        if self.features:
            what = f"features: --combine {self.features.combine} --layers {self.features.layers}"
        if self.reuse:
            what += f" (reuses the {self.reuse} model)"
        return what


@dataclass(frozen=True)
class Study:
    name: str  # the built-in name (`pretraining-tasks`, ...)
    title: str  # "Table 5: pre-training tasks"
    description: str
    finding: str  # the paper's qualitative finding, shown beside the table
    base: PretrainConfig  # pre-training settings of every row (a variant overrides some)
    finetune: FinetuneArgs
    variants: tuple  # of Variant
    evaluations: tuple  # of Evaluation
    seeds: tuple = (0, 1, 2)
    model: str = None  # evaluate this fixed model instead of pre-training (e.g. "minilm"); None = pre-train
    checkpoint_steps: tuple = ()  # Figure 5: evaluate the checkpoints after these steps
    pretrain_columns: tuple = ()  # held-out pre-training metrics shown as extra columns (Table 6: perplexity)
    scale: str = "paper"  # the scale it was built at: "paper" (the study as defined), "classroom" or "lab" (paper.SCALES)
    # what the variants' pre-training runs share (engine.ablations.planner.pretrain_config): "steps" (the paper's
    # protocol: the same steps), "flops" (each variant's steps set so its training FLOPs equal the first variant's at
    # the base steps) or "time" (each run stops after `budget_minutes` of training time: pretrain --max-minutes)
    budget: str = "steps"
    budget_minutes: float = None
    # the feature-based classifier's training epochs (`features --epochs`); None: the command's own (the BiLSTM's 5).
    # Set with the fine-tuning epochs by `with_epochs` (a scale's setting for the study, `ablate run --epochs`)
    feature_epochs: int = None
    # the direction of the means for the paper's finding: (study, summary) -> [{claim, holds, detail}]; not saved in
    # study.json (`study_from_dict` takes it back from the built-in study of the same name)
    finding_check: Callable = field(default=None, compare=False, repr=False)
    # the paper's findings as comparisons of two rows on one column (engine.ablations.verdict.Contrast), each judged
    # with a bootstrap; like finding_check, not saved in study.json but taken back from the built-in study
    contrasts: tuple = field(default=(), compare=False, repr=False)

    def variant(self, name: str) -> Variant:
        for v in self.variants:
            if v.name == name:
                return v
        raise EngineError(f"study {self.name} has no variant '{name}'; it has {', '.join(v.name for v in self.variants)}")

    def pretrain_args(self, variant: Variant) -> PretrainConfig:
        return replace(self.base, **variant.pretrain)

    def finetune_args(self, variant: Variant) -> FinetuneArgs:
        return replace(self.finetune, **variant.finetune)

    def check_finding(self, summary) -> list:
        """[{claim, holds (True/False/None), detail}]: the direction of the means for the paper's finding, given
        `summary` (results.summarise); the verdicts are `findings` (engine.ablations.verdict)."""
        return self.finding_check(self, summary) if self.finding_check is not None else []

    def findings(self) -> tuple:
        """The contrasts whose rows and column this study has (a study run with other --tasks drops the rest)."""
        rows = {v.name for v in self.variants}
        cols = {e.name for e in self.evaluations} | {pretrain_column_name(c) for c in self.pretrain_columns}
        return tuple(c for c in self.contrasts if c.better in rows and c.worse in rows and c.column in cols)

    def to_dict(self) -> dict:
        d = asdict(replace(self, finding_check=None, contrasts=()))
        del d["finding_check"], d["contrasts"]
        return d


def with_epochs(study: Study, epochs: int) -> Study:
    """`study` with every downstream training `epochs` long: its fine-tuning (one grid point) and the feature-based
    classifier alike, so that both arms of a comparison get the same passes over the data."""
    if not isinstance(epochs, int) or epochs < 1:
        raise EngineError(f"--epochs must be a whole number of at least 1 (got {epochs!r})")
    return replace(study, finetune=replace(study.finetune, epochs=(epochs,)), feature_epochs=epochs)


def checkpoint_cadence(steps: int) -> int:
    """Save every eighth of `steps` where a quarter of them is even (750 of 3,000: checkpoints at 750, 1,500, 2,250
    and 3,000 among them), else every quarter: so every study's runs hold the checkpoints Figure 5 reads, and one
    of them can be taken over by another study (engine.ablations.reuse)."""
    q = max(1, steps // 4)
    return q // 2 if q % 2 == 0 else q


def with_steps(study: Study, steps: int) -> Study:
    """`study` with every variant pre-trained `steps` steps. A study that evaluates checkpoints (Figure 5) takes
    them at a quarter, half and all of the steps; it, and every study at the classroom or lab scale, saves at
    `checkpoint_cadence` (a study at its own scale keeps its base's cadence: long runs want frequent checkpoints)."""
    if not isinstance(steps, int) or steps < 1:
        raise EngineError(f"--steps must be a whole number of at least 1 (got {steps!r})")
    base = replace(study.base, steps=steps)
    if study.checkpoint_steps or study.scale != "paper":
        base = replace(base, save_every=checkpoint_cadence(steps))
    if not study.checkpoint_steps:
        return replace(study, base=base)
    q = max(1, steps // 4)
    return replace(study, base=base, checkpoint_steps=tuple(sorted({q, 2 * q if 2 * q < steps else steps, steps})))


# ---------------------------------------------------------------------------------------------------------
# describing a study

def _slug(name: str) -> str:
    out = "".join(c.lower() if c.isalnum() else "-" for c in name)
    while "--" in out:
        out = out.replace("--", "-")
    return out.strip("-") or "x"


def describe(study: Study) -> str:
    """A few lines about a study: title, base, variants, evaluations, seeds and job count."""
    lines = [f"{study.name}: {study.title}", f"  {study.description}", f"  finding: {study.finding}"]
    if study.model:
        lines.append(f"  model: {study.model} (no pre-training)")
    else:
        b = study.base
        lines.append(f"  base: preset {b.preset}" + (f" L={b.layers} H={b.hidden} A={b.heads}" if b.layers else "")
                     + f", objective {b.objective}, {b.steps} steps × batch {b.batch_size} × {b.seq_len} tokens")
        if study.budget != "steps":
            lines.append("  budget: equal " + ("FLOPs (steps per variant from its FLOPs per step)" if study.budget == "flops"
                                               else f"training time ({study.budget_minutes:g} min per pre-training run)"))
    for v in study.variants:
        lines.append(f"  - {v.name}: {v.change() or 'base'}")
    f = study.finetune
    lines.append(f"  fine-tuning: lr {', '.join(map(str, f.lr))}, epochs {', '.join(map(str, f.epochs))}, "
                 f"{f.restarts} restart(s), at most {f.max_train or 'all'} training examples"
                 + (f"; feature classifier {study.feature_epochs} epochs" if study.feature_epochs else ""))
    lines.append("  evaluations: " + ", ".join(e.name for e in study.evaluations)
                 + (f" at steps {', '.join(map(str, study.checkpoint_steps))}" if study.checkpoint_steps else ""))
    lines.append(f"  seeds: {', '.join(map(str, study.seeds))}")
    return "\n".join(lines)


# the table headers of held-out pre-training metrics in `Study.pretrain_columns` (beside the dev scores, not dev scores)
# An NSP run's accuracy on sentence-order pairs (cross_sop_acc) sits under the SOP header, an SOP run's on NSP pairs
# (cross_nsp_acc) under the NSP one (engine.pretraining.pair_tasks): the two pair columns are ALBERT's 2x2 table
PRETRAIN_COLUMN_NAMES = {"mlm_ppl": "held-out MLM ppl", "mlm_acc": "held-out MLM acc", "nsp_acc": "held-out NSP acc",
                         "mlm_mask_acc": "held-out acc at [MASK]", "sop_acc": "held-out SOP acc",
                         "cross_nsp_acc": "held-out NSP acc", "cross_sop_acc": "held-out SOP acc"}


def pretrain_column_name(col: str) -> str:
    """The table header of a held-out pre-training metric in `Study.pretrain_columns`."""
    return PRETRAIN_COLUMN_NAMES.get(col, col)


def is_pretrain_column(name: str) -> bool:
    """A results column that holds a held-out pre-training figure (`pretrain_column_name`), not a dev score."""
    return name in PRETRAIN_COLUMN_NAMES.values() or name in PRETRAIN_COLUMN_NAMES
