"""Ablation studies: the paper's Tables 5, 6, 7 and 8 and Figure 5 at classroom scale.

An ablation study is a base configuration plus named variants, each a small override of the base
(`dataclasses.replace`, design convention 8). A study becomes a list of jobs, each one `python -m engine ...`
command: per seed and variant, a `pretrain` run, then the study's downstream evaluations of it
(`finetune`, or `features` for the feature-based rows). The jobs go to the studio's job queue
(`studio.jobs`), which runs them one at a time and survives restarts, or run here one after another
(`--foreground`). The study's state lives in `<runs_root>/studies/<name>/study.json`, its runs in
`<runs_root>/studies/<name>/runs/`. `collect_results(study_dir)` reads every run's `eval.json` and
`metrics.jsonl` back into the paper's layout (rows variants, columns tasks, mean ± std over seeds and n),
the pre-training curves of all variants, and checks the paper's qualitative finding.

Built-in studies (`STUDIES`):
- `pretraining-tasks` (Table 5): BERT (mlm+nsp), No NSP (mlm), LTR & No NSP (ltr), LTR & No NSP + BiLSTM
  (the ltr model fine-tuned with a randomly initialised BiLSTM on top: `finetune --bilstm`).
- `model-size` (Table 6): a small grid of L/H/A at equal training, plus held-out MLM perplexity.
- `feature-based` (Table 7): frozen-feature combinations (`engine features`, BiLSTM tagger on WNUT-16 NER)
  next to fine-tuning the same model.
- `masking` (Table 8): the six MASK/SAME/RND rows, fine-tuned and feature-based (concat of the last four).
- `training-steps` (Figure 5): downstream score of the checkpoints after k steps, MLM vs LTR.

Departures from the paper, all of scale: tiny/mini models pre-trained for minutes on the BBC corpus instead of
BERT-BASE for a million steps on 3.3B words; the downstream tasks are the built-in `bbc-topic` (topic
classification, standing in for GLUE) and `wnut16` (NER, standing in for CoNLL-2003), plus RTE and CoLA from
`../shared/data` when that folder is present; a "reproduced?" check is a direction (A ≥ B), never a size.
Table 8's rows are printed MASK/SAME/RND as in the paper, while `--mask-ratios` takes MASK,RANDOM,SAME:
`mask_ratios_for_row` maps one to the other.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

from engine.errors import EngineError
from engine.fileio import atomic_write_json, atomic_write_text

STUDY_JSON = "study.json"
REPO_ROOT = Path(__file__).resolve().parents[1]  # `python -m engine` runs from here
SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"  # ../shared/data beside the repo


# ---------------------------------------------------------------------------------------------------------
# configurations: what a variant can override


@dataclass(frozen=True)
class PretrainArgs:
    """The flags of `python -m engine pretrain` that a study sets (None = the command's default)."""
    corpus: str = "bbc"
    preset: str = "tiny"
    layers: int = None  # custom L/H/A on top of the preset
    hidden: int = None
    heads: int = None
    objective: str = "mlm+nsp"  # mlm+nsp (BERT) | mlm (No NSP) | ltr (LTR & No NSP)
    steps: int = 2000
    batch_size: int = 32
    seq_len: int = 128
    mask_rate: float = 0.15
    mask_ratios: tuple = (0.8, 0.1, 0.1)  # MASK, RANDOM, SAME: the order of --mask-ratios (not Table 8's order)
    vocab_size: int = None
    lr: float = None
    warmup: int = None
    save_every: int = None  # Figure 5 needs a checkpoint at every step it evaluates
    eval_every: int = None
    phase2_seq_len: int = None  # a second phase at this length for the last phase2_fraction of the steps
    phase2_fraction: float = None

    def argv(self, out: str, seed: int) -> list:
        a = ["pretrain", "--corpus", self.corpus, "--preset", self.preset]
        for flag, v in (("--layers", self.layers), ("--hidden", self.hidden), ("--heads", self.heads)):
            if v is not None:
                a += [flag, str(v)]
        a += ["--objective", self.objective, "--steps", str(self.steps), "--batch-size", str(self.batch_size),
              "--seq-len", str(self.seq_len), "--mask-rate", _num(self.mask_rate),
              "--mask-ratios", ",".join(_num(r) for r in self.mask_ratios)]
        for flag, v in (("--vocab-size", self.vocab_size), ("--lr", self.lr), ("--warmup", self.warmup),
                        ("--save-every", self.save_every), ("--eval-every", self.eval_every),
                        ("--phase2-seq-len", self.phase2_seq_len), ("--phase2-fraction", self.phase2_fraction)):
            if v is not None:
                a += [flag, _num(v)]
        return a + ["--seed", str(seed), "--out", str(out)]


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

    def argv(self) -> list:
        a = ["--lr", ",".join(_num(x) for x in self.lr), "--batch-size", ",".join(str(x) for x in self.batch_size),
             "--epochs", ",".join(str(x) for x in self.epochs), "--restarts", str(self.restarts)]
        if self.max_train is not None:
            a += ["--max-train", str(self.max_train)]
        if self.max_seq_len is not None:
            a += ["--max-seq-len", str(self.max_seq_len)]
        if self.bilstm:
            a += ["--bilstm"]
        return a


@dataclass(frozen=True)
class FeatureArgs:
    """The flags of `python -m engine features` (paper Table 7)."""
    layers: str = "-1,-2,-3,-4"  # the hidden states that concat/sum/mean/weighted combine (0 = embeddings, -1 = last)
    combine: str = "concat"  # concat | sum | mean | weighted | all-weighted | last | second-to-last | embeddings
    classifier: str = None  # None: the command's choice (BiLSTM for tagging, logistic regression for sentences)

    def argv(self) -> list:
        a = ["--layers", self.layers, "--combine", self.combine]
        if self.classifier:
            a += ["--classifier", self.classifier]
        return a


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
    pretrain: dict = field(default_factory=dict)  # overrides of the study's PretrainArgs
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
    base: PretrainArgs
    finetune: FinetuneArgs
    variants: tuple  # of Variant
    evaluations: tuple  # of Evaluation
    seeds: tuple = (0, 1, 2)
    model: str = None  # evaluate this fixed model instead of pre-training (e.g. "minilm"); None = pre-train
    checkpoint_steps: tuple = ()  # Figure 5: evaluate the checkpoints after these steps
    pretrain_columns: tuple = ()  # held-out pre-training metrics shown as extra columns (Table 6: perplexity)
    classroom: bool = False

    def variant(self, name: str) -> Variant:
        for v in self.variants:
            if v.name == name:
                return v
        raise EngineError(f"study {self.name} has no variant '{name}'; it has {', '.join(v.name for v in self.variants)}")

    def pretrain_args(self, variant: Variant) -> PretrainArgs:
        return replace(self.base, **variant.pretrain)

    def finetune_args(self, variant: Variant) -> FinetuneArgs:
        return replace(self.finetune, **variant.finetune)

    def to_dict(self) -> dict:
        return asdict(self)


# ---------------------------------------------------------------------------------------------------------
# Table 8's rows: MASK / SAME / RND in the paper, MASK,RANDOM,SAME for --mask-ratios

TABLE8_ROWS = [(80, 10, 10), (100, 0, 0), (80, 0, 20), (80, 20, 0), (0, 20, 80), (0, 0, 100)]  # (MASK, SAME, RND) %


def mask_ratios_for_row(mask: int, same: int, rnd: int) -> tuple:
    """A Table 8 row (MASK %, SAME %, RND %) as the (MASK, RANDOM, SAME) fractions `--mask-ratios` takes."""
    if mask + same + rnd != 100 or min(mask, same, rnd) < 0:
        raise EngineError(f"masking row {mask}/{same}/{rnd} must be three non-negative percentages summing to 100")
    return (mask / 100, rnd / 100, same / 100)


def table8_label(mask: int, same: int, rnd: int) -> str:
    return f"MASK {mask} / SAME {same} / RND {rnd}"


# ---------------------------------------------------------------------------------------------------------
# downstream evaluations

BBC = Evaluation("BBC topic (acc)", "bbc-topic", "accuracy")
WNUT = Evaluation("WNUT-16 NER (F1)", "wnut16", "f1")


def shared_evaluations(data_dir=None) -> list:
    """RTE (accuracy) and CoLA (Matthews) from ../shared/data when the files are there, else []."""
    d = Path(data_dir) if data_dir is not None else SHARED_DATA
    out = []
    if (d / "rte" / "train.tsv").is_file() and (d / "rte" / "dev.tsv").is_file():
        out.append(Evaluation("RTE (acc)", "glue", "accuracy", train=str(d / "rte" / "train.tsv"), dev=str(d / "rte" / "dev.tsv")))
    if (d / "cola" / "train.tsv").is_file() and (d / "cola" / "dev.tsv").is_file():
        out.append(Evaluation("CoLA (MCC)", "glue", "mcc", train=str(d / "cola" / "train.tsv"), dev=str(d / "cola" / "dev.tsv")))
    return out


def default_evaluations(data_dir=None) -> tuple:
    return tuple([BBC, WNUT] + shared_evaluations(data_dir))


# ---------------------------------------------------------------------------------------------------------
# the built-in studies

# a tiny model's fine-tuning grid: tiny models from scratch want larger learning rates than BERT-BASE
SMALL_GRID = FinetuneArgs(lr=(1e-4, 5e-5), batch_size=(32,), epochs=(3,), restarts=1, max_train=None, max_seq_len=128)


def pretraining_tasks_study(evaluations=None) -> Study:
    return Study(
        name="pretraining-tasks", title="Table 5: pre-training tasks",
        description="The same tiny model pre-trained with MLM+NSP (BERT), MLM only (No NSP) and a left-to-right LM "
                    "(LTR & No NSP, causal attention kept at fine-tuning); the last row fine-tunes the LTR model "
                    "with a randomly initialised BiLSTM on top.",
        finding="Removing NSP hurts (BERT ≥ No NSP, most on QNLI, MNLI and SQuAD); the left-to-right model is worse "
                "than the MLM model on every task; a BiLSTM on top helps LTR on SQuAD but stays far below the "
                "bidirectional model, and hurts GLUE.",
        base=PretrainArgs(preset="tiny", objective="mlm+nsp", steps=3000, batch_size=32, seq_len=128),
        finetune=SMALL_GRID,
        variants=(
            Variant("BERT (MLM + NSP)", {"objective": "mlm+nsp"}, note="the paper's BERT"),
            Variant("No NSP", {"objective": "mlm"}, note="masked LM only, single-segment inputs"),
            Variant("LTR & No NSP", {"objective": "ltr"}, note="left-to-right LM, causal attention also when fine-tuned"),
            Variant("+ BiLSTM", finetune={"bilstm": True}, reuse="LTR & No NSP",
                    note="the LTR model fine-tuned with a randomly initialised BiLSTM on top"),
        ),
        evaluations=evaluations if evaluations is not None else default_evaluations(),
    )


def model_size_study(evaluations=None) -> Study:
    return Study(
        name="model-size", title="Table 6: model size",
        description="Layers L, hidden size H and heads A grow at equal pre-training (same steps, batch and data).",
        finding="Larger models are better on every task, even the small data sets; held-out MLM perplexity falls "
                "with size.",
        base=PretrainArgs(preset="tiny", objective="mlm+nsp", steps=3000, batch_size=32, seq_len=128),
        finetune=SMALL_GRID,
        variants=(
            Variant("L=2 H=128 A=2", {"layers": 2, "hidden": 128, "heads": 2}),
            Variant("L=4 H=128 A=2", {"layers": 4, "hidden": 128, "heads": 2}),
            Variant("L=4 H=256 A=4", {"layers": 4, "hidden": 256, "heads": 4}),
        ),
        evaluations=evaluations if evaluations is not None else default_evaluations(),
        pretrain_columns=("mlm_ppl",),
    )


FEATURE_ROWS = [
    ("Embeddings", FeatureArgs(combine="embeddings")),
    ("Second-to-last hidden", FeatureArgs(combine="second-to-last")),
    ("Last hidden", FeatureArgs(combine="last")),
    ("Weighted sum last four hidden", FeatureArgs(layers="-1,-2,-3,-4", combine="weighted")),
    ("Concat last four hidden", FeatureArgs(layers="-1,-2,-3,-4", combine="concat")),
    ("Weighted sum all layers", FeatureArgs(layers="-1,-2,-3,-4", combine="all-weighted")),
]


def feature_based_study(evaluations=None) -> Study:
    return Study(
        name="feature-based", title="Table 7: feature-based vs fine-tuning (NER)",
        description="Frozen activations of one model fed to a two-layer BiLSTM tagger, for the paper's combinations of "
                    "layers, next to fine-tuning the whole model. The model is MiniLM (real pre-trained weights, 6 "
                    "layers) so that 'the last four' exist.",
        finding="Concatenating the top four hidden layers is the best feature-based combination, only slightly below "
                "fine-tuning the whole model; the embeddings alone are far worse.",
        base=PretrainArgs(),  # unused: the study evaluates a fixed model
        finetune=FinetuneArgs(lr=(5e-5,), batch_size=(32,), epochs=(3,), restarts=1, max_seq_len=128),
        variants=(Variant("Fine-tuning", note="all parameters trained"),)
        + tuple(Variant(name, features=fa, note=f"--combine {fa.combine} --layers {fa.layers}") for name, fa in FEATURE_ROWS),
        evaluations=evaluations if evaluations is not None else (WNUT,),
        model="minilm",
    )


def masking_study(evaluations=None) -> Study:
    ner_features = Evaluation("WNUT-16 NER feature-based (F1)", "wnut16", "f1",
                              features=FeatureArgs(layers="-1,-2,-3,-4", combine="concat"))
    return Study(
        name="masking", title="Table 8: masking procedure",
        description="Of the 15% selected positions: the share replaced by [MASK] (MASK), kept unchanged (SAME) or "
                    "replaced by a random token (RND). Four layers (L=4 H=128 A=2) so the feature-based column can concatenate the last four.",
        finding="Fine-tuning is robust to the masking strategy; MASK-only hurts the feature-based NER (a mismatch "
                "between pre-training and use); RND-only is clearly worse than BERT's 80/10/10.",
        base=PretrainArgs(preset="tiny", layers=4, hidden=128, heads=2, objective="mlm+nsp", steps=3000, batch_size=32, seq_len=128),
        finetune=SMALL_GRID,
        variants=tuple(Variant(table8_label(m, s, r), {"mask_ratios": mask_ratios_for_row(m, s, r)},
                               note=f"--mask-ratios {','.join(_num(x) for x in mask_ratios_for_row(m, s, r))}")
                       for m, s, r in TABLE8_ROWS),
        evaluations=evaluations if evaluations is not None else (BBC, WNUT, ner_features),
    )


def training_steps_study(evaluations=None) -> Study:
    return Study(
        name="training-steps", title="Figure 5: pre-training steps",
        description="Checkpoints after k pre-training steps, each fine-tuned downstream; BERT's MLM against a "
                    "left-to-right LM.",
        finding="More pre-training steps give better downstream scores; MLM converges slightly slower than LTR in "
                "pre-training but scores higher downstream almost from the start.",
        base=PretrainArgs(preset="tiny", objective="mlm+nsp", steps=3000, batch_size=32, seq_len=128, save_every=500),
        finetune=SMALL_GRID,
        variants=(Variant("MLM (BERT)", {"objective": "mlm+nsp"}), Variant("LTR", {"objective": "ltr"})),
        evaluations=evaluations if evaluations is not None else (BBC,),
        checkpoint_steps=(500, 1000, 2000, 3000),
    )


# a plain dict of the built-in studies (name -> builder)
STUDIES = {
    "pretraining-tasks": pretraining_tasks_study,
    "model-size": model_size_study,
    "feature-based": feature_based_study,
    "masking": masking_study,
    "training-steps": training_steps_study,
}

# Classroom scale: each pre-training run is `python -m engine pretrain`'s classroom default (tiny, batch 16 x 128,
# 2,000 steps; the same values as engine.pretrain.PretrainConfig's defaults, kept here without importing torch),
# one seed and one fine-tuning grid point, so the classroom Table 5 (3 pre-training runs + 8 fine-tunes) finishes
# within an hour on a 2-core CPU (measured: BENCHMARKS.md).
CLASSROOM_PRETRAIN = dict(preset="tiny", steps=2000, batch_size=16, seq_len=128, eval_every=200)
# A tiny model trained for minutes wants a far larger fine-tuning rate than BERT-BASE's 5e-5 (Google's small
# BERTs go up to 5e-4; at 3e-4 three epochs left the tiny models under-fitted in our trials, 1e-3 for five did not).
CLASSROOM_FINETUNE = FinetuneArgs(lr=(1e-3,), batch_size=(32,), epochs=(5,), restarts=1, max_train=None, max_seq_len=128)


def classroom(study: Study) -> Study:
    """The study at classroom scale: tiny pre-training, one seed, one fine-tuning grid point (lr 1e-3, 5 epochs)."""
    base = replace(study.base, **CLASSROOM_PRETRAIN)
    ev = tuple(e for e in study.evaluations if e.task in ("bbc-topic", "wnut16"))
    steps = study.checkpoint_steps
    if steps:
        k = base.steps
        steps = tuple(sorted({max(1, k // 4), k // 2, k}))
        base = replace(base, save_every=max(1, k // 4))
    fin = replace(CLASSROOM_FINETUNE, lr=(5e-5,)) if study.model else CLASSROOM_FINETUNE
    return replace(study, base=base, finetune=fin, evaluations=ev or study.evaluations[:1], seeds=(0,),
                   checkpoint_steps=steps, classroom=True, title=study.title + " (classroom scale)")


def get_study(name: str, classroom_scale: bool = False, seeds: int = None, evaluations=None) -> Study:
    if name not in STUDIES:
        raise EngineError(f"unknown study '{name}'; choose one of {', '.join(STUDIES)}")
    study = STUDIES[name](evaluations)
    if classroom_scale:
        study = classroom(study)
    if seeds is not None:
        if seeds < 1:
            raise EngineError(f"--seeds must be at least 1 (got {seeds})")
        study = replace(study, seeds=tuple(range(seeds)))
    return study


def study_from_dict(d: dict) -> Study:
    """Rebuild a Study from its study.json form (asdict)."""
    def mk(cls, x):
        if x is None:
            return None
        known = {f.name for f in fields(cls)}
        kw = {k: v for k, v in x.items() if k in known}
        for k in ("mask_ratios", "lr", "batch_size", "epochs"):
            if isinstance(kw.get(k), list):
                kw[k] = tuple(kw[k])
        return cls(**kw)

    def variant(x):
        pre = dict(x.get("pretrain") or {})
        if isinstance(pre.get("mask_ratios"), list):
            pre["mask_ratios"] = tuple(pre["mask_ratios"])
        return Variant(name=x["name"], pretrain=pre, finetune=dict(x.get("finetune") or {}),
                       features=mk(FeatureArgs, x.get("features")), reuse=x.get("reuse"), note=x.get("note", ""))

    def evaluation(x):
        return Evaluation(name=x["name"], task=x["task"], metric=x["metric"], train=x.get("train"), dev=x.get("dev"),
                          features=mk(FeatureArgs, x.get("features")))

    return Study(name=d["name"], title=d.get("title", d["name"]), description=d.get("description", ""),
                 finding=d.get("finding", ""), base=mk(PretrainArgs, d["base"]), finetune=mk(FinetuneArgs, d["finetune"]),
                 variants=tuple(variant(v) for v in d["variants"]), evaluations=tuple(evaluation(e) for e in d["evaluations"]),
                 seeds=tuple(d.get("seeds") or (0,)), model=d.get("model"),
                 checkpoint_steps=tuple(d.get("checkpoint_steps") or ()), pretrain_columns=tuple(d.get("pretrain_columns") or ()),
                 classroom=bool(d.get("classroom")))


# ---------------------------------------------------------------------------------------------------------
# study -> jobs


@dataclass
class Job:
    key: str  # unique in the study: "pretrain/<variant>/s0", "eval/<variant>/s0/<evaluation>[/step-k]"
    kind: str  # pretrain | finetune | features
    argv: list  # the engine command line, without `python -m engine`
    out: str  # its run folder, relative to the study folder
    variant: str  # the row it belongs to (a grouped features job: its first row)
    seed: int
    evaluation: str = None  # the Evaluation name (None for pre-training)
    step: int = None  # Figure 5: the checkpoint's step
    combines: dict = None  # features jobs: {variant: --combine value} of every row whose score it produces


def _eval_argv(study: Study, variant: Variant, ev: Evaluation, model: str, seed: int, out: str, feats: FeatureArgs = None):
    """(kind, argv) of one downstream evaluation of `model`: `engine features` when `feats`, else `engine finetune`."""
    files = []
    if ev.train:
        files += ["--train", ev.train]
    if ev.dev:
        files += ["--dev", ev.dev]
    fa = study.finetune_args(variant)
    if feats is not None:
        a = ["features", "--model", model, "--task", ev.task] + files + feats.argv()
        if fa.max_train is not None:
            a += ["--max-train", str(fa.max_train)]
        return "features", a + ["--seed", str(seed), "--out", out]
    a = ["finetune", "--model", model, "--task", ev.task] + files + fa.argv()
    return "finetune", a + ["--seed", str(seed), "--out", out]


def plan(study: Study, study_dir) -> list:
    """The study's jobs in the order they should run: seed by seed, each variant's pre-training then its evaluations.

    Feature-based rows of a fixed model (Table 7) share one `engine features --combine a,b,...` job per seed and
    evaluation: the features are extracted once and each combination's classifier is trained on them."""
    study_dir = Path(study_dir).absolute()
    jobs = []
    for seed in study.seeds:
        grouped = {}  # (evaluation, layers, classifier) -> the shared features job of a fixed model
        for v in study.variants:
            if study.model is not None:
                models = [(study.model, None)]
            else:
                src = study.variant(v.reuse) if v.reuse else v
                run_rel = f"runs/{src.key()}-s{seed}"
                if not v.reuse:
                    jobs.append(Job(f"pretrain/{v.key()}/s{seed}", "pretrain",
                                    study.pretrain_args(v).argv(str(study_dir / run_rel), seed), run_rel, v.name, seed))
                if study.checkpoint_steps:
                    models = [(str(study_dir / run_rel / "checkpoints" / f"step-{k}"), k) for k in study.checkpoint_steps]
                else:
                    models = [(str(study_dir / run_rel), None)]
            for ev in study.evaluations:
                feats = v.features or ev.features
                if study.model is not None and v.features is not None:
                    gkey = (ev.name, v.features.layers, v.features.classifier)
                    if gkey in grouped:
                        grouped[gkey].combines[v.name] = v.features.combine
                        continue
                    rel = f"runs/features-s{seed}-{ev.key()}" + (f"-{len(grouped)}" if grouped else "")
                    kind, argv = _eval_argv(study, v, ev, study.model, seed, str(study_dir / rel), feats)
                    job = Job(f"eval/features/s{seed}/{ev.key()}" + (f"/{len(grouped)}" if grouped else ""), kind, argv, rel,
                              v.name, seed, ev.name, None, {v.name: v.features.combine})
                    grouped[gkey] = job
                    jobs.append(job)
                    continue
                for model, step in models:
                    suffix = f"-step{step}" if step is not None else ""
                    rel = f"runs/{v.key()}-s{seed}-{ev.key()}{suffix}"
                    kind, argv = _eval_argv(study, v, ev, model, seed, str(study_dir / rel), feats)
                    key = f"eval/{v.key()}/s{seed}/{ev.key()}" + (f"/step-{step}" if step is not None else "")
                    jobs.append(Job(key, kind, argv, rel, v.name, seed, ev.name, step,
                                    {v.name: feats.combine} if feats is not None else None))
        for job in grouped.values():  # one extraction, every combination of the group
            job.argv[job.argv.index("--combine") + 1] = ",".join(dict.fromkeys(job.combines.values()))
    return jobs


# ---------------------------------------------------------------------------------------------------------
# study folders


def studies_root(runs_root=None) -> Path:
    if runs_root is None:
        runs_root = os.environ.get("BERT_STUDIO_RUNS") or "runs"
    return Path(runs_root).absolute() / "studies"


def new_study_dir(study: Study, runs_root=None, name: str = None) -> Path:
    """A fresh folder <runs_root>/studies/<name>; an existing name gets -2, -3, ..."""
    from engine.runs import safe_run_name
    root = studies_root(runs_root)
    base = safe_run_name(name or (study.name + ("-classroom" if study.classroom else "")))
    path, i = root / base, 2
    while path.exists():
        path, i = root / f"{base}-{i}", i + 1
    path.mkdir(parents=True)
    return path


def write_study(study_dir, study: Study, jobs: list, **extra) -> dict:
    data = {"study": study.to_dict(), "jobs": [asdict(j) for j in jobs], "created": _now(), **extra}
    atomic_write_json(Path(study_dir) / STUDY_JSON, data)
    return data


def read_study(study_dir) -> dict:
    path = Path(study_dir) / STUDY_JSON
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise EngineError(f"{study_dir} is not a study folder (no {STUDY_JSON}); give a folder under <runs>/studies/") from None
    except ValueError as e:
        raise EngineError(f"{path} is not valid JSON ({e}); fix or delete it") from e
    if not isinstance(data, dict) or "study" not in data:
        raise EngineError(f"{path} does not describe a study; give a folder written by `ablate run`")
    return data


def update_job(study_dir, key: str, **fields) -> None:
    """Merge fields into one job's entry of study.json (the only writer is the launcher, one at a time)."""
    data = read_study(study_dir)
    for j in data["jobs"]:
        if j["key"] == key:
            j.update(fields)
    atomic_write_json(Path(study_dir) / STUDY_JSON, data)


def list_studies(runs_root=None) -> list:
    """[{name, path, study, title, created, jobs}] for every study folder, newest first."""
    root = studies_root(runs_root)
    out = []
    if root.is_dir():
        for d in root.iterdir():
            if (d / STUDY_JSON).is_file():
                try:
                    data = read_study(d)
                except EngineError:
                    continue
                s = data["study"]
                out.append({"name": d.name, "path": str(d), "study": s.get("name"), "title": s.get("title"),
                            "created": data.get("created", ""), "jobs": len(data.get("jobs", []))})
    out.sort(key=lambda r: (r["created"], r["name"]), reverse=True)
    return out


# ---------------------------------------------------------------------------------------------------------
# launching


def _print(*a) -> None:
    print(*a, flush=True)


def launch(study: Study, runs_root=None, name: str = None, foreground: bool = False, log=_print) -> Path:
    """Write the study folder and queue its jobs (studio.jobs), or run them here one by one (`foreground`)."""
    root = studies_root(runs_root).parent
    study_dir = new_study_dir(study, root, name)
    jobs = plan(study, study_dir)
    write_study(study_dir, study, jobs, mode="foreground" if foreground else "queue", runs_root=str(root))
    if foreground:
        run_foreground(study_dir, log=log)
        return study_dir
    from studio import jobs as queue  # the studio's persistent job queue (stdlib only, no streamlit)
    ids = {}
    for j in jobs:
        rec = queue.submit(j.argv, name=f"{study_dir.name}: {j.key}", run_dir=str(study_dir / j.out), root=root)
        ids[j.key] = rec["id"]
    data = read_study(study_dir)
    for j in data["jobs"]:
        j["job_id"] = ids.get(j["key"])
    atomic_write_json(study_dir / STUDY_JSON, data)
    log(f"queued {len(jobs)} jobs for study {study_dir.name}; follow them on the Jobs page or with "
        f"`python -m engine ablate show {study_dir}`")
    return study_dir


def run_foreground(study_dir, log=_print) -> dict:
    """Run the study's unfinished jobs here, one at a time; each job's output goes to <out>/job.log."""
    study_dir = Path(study_dir)
    data = read_study(study_dir)
    counts = {"finished": 0, "failed": 0, "skipped": 0}
    for j in data["jobs"]:
        out = study_dir / j["out"]
        if j.get("status") == "finished" and _job_output_ok(j, out):
            counts["skipped"] += 1
            continue
        out.mkdir(parents=True, exist_ok=True)
        argv = list(j["argv"])
        if j["kind"] == "pretrain" and "--resume" not in argv:
            from engine.runs import latest_checkpoint
            if latest_checkpoint(out) is not None:  # an interrupted run: continue from its last checkpoint
                argv.append("--resume")
        cmd = [sys.executable, "-m", "engine"] + argv
        log(f"[{time.strftime('%H:%M:%S')}] {j['key']}: {' '.join(j['argv'][:1])} ...")
        t0 = time.time()
        with open(out / "job.log", "ab") as logf:
            try:
                rc = subprocess.call(cmd, stdout=logf, stderr=subprocess.STDOUT, cwd=REPO_ROOT)
            except KeyboardInterrupt:
                update_job(study_dir, j["key"], status="cancelled")
                raise
        status = "finished" if rc == 0 else "failed"
        err = None if rc == 0 else _last_error_line(out / "job.log")
        update_job(study_dir, j["key"], status=status, rc=rc, seconds=round(time.time() - t0, 1), error=err)
        counts[status] += 1
        log(f"    {status} in {time.time() - t0:.0f}s" + (f": {err}" if err else ""))
    return counts


def _job_output_ok(job: dict, out: Path) -> bool:
    if job["kind"] == "pretrain":
        return (out / "run.json").is_file()
    return (out / "eval.json").is_file()


def _last_error_line(log_path: Path) -> str:
    try:
        lines = [l.strip() for l in log_path.read_text(errors="replace").splitlines() if l.strip()]
    except OSError:
        return "no log"
    for l in reversed(lines):
        if l.startswith("error:") or "Error" in l:
            return l[:300]
    return lines[-1][:300] if lines else "no output"


def job_states(study_dir) -> list:
    """Each job of the study with its state: finished | failed | running | queued | cancelled.

    A queued study asks the job queue (the newest queue job writing the job's run folder, so a Retry from the
    Jobs page counts); a foreground study uses what study.json recorded, else the job's own run folder."""
    study_dir = Path(study_dir)
    data = read_study(study_dir)
    by_dir = {}
    if data.get("mode") == "queue":
        try:
            from studio import jobs as queue
            for rec in reversed(queue.list_jobs(root=data.get("runs_root"))):  # oldest first: newest wins
                if rec.get("run_dir"):
                    by_dir[str(Path(rec["run_dir"]))] = rec
        except Exception:  # the queue is unreadable: fall back to the run folders
            by_dir = {}
    rows = []
    for j in data["jobs"]:
        out = study_dir / j["out"]
        state, error = j.get("status"), j.get("error")
        rec = by_dir.get(str(out.absolute()))
        if rec is not None:
            state, error = rec.get("status"), rec.get("error")
        if not state:
            state = _state_from_run(j, out)
        rows.append({"key": j["key"], "kind": j["kind"], "variant": j["variant"], "seed": j["seed"],
                     "evaluation": j.get("evaluation"), "step": j.get("step"), "state": state, "error": error,
                     "job_id": rec.get("id") if rec else j.get("job_id"), "out": str(out)})
    return rows


def _state_from_run(job: dict, out: Path) -> str:
    info = {}
    try:
        info = json.loads((out / "run.json").read_text())
    except (OSError, ValueError):
        pass
    if job["kind"] != "pretrain" and (out / "eval.json").is_file() and info.get("status") in (None, "finished"):
        return "finished"
    return info.get("status") or "queued"


# ---------------------------------------------------------------------------------------------------------
# reading results back

_METRIC_ALIASES = {
    "accuracy": ("accuracy", "acc", "dev_accuracy", "eval_accuracy"),
    "f1": ("f1", "entity_f1", "micro_f1", "dev_f1", "eval_f1"),
    "mcc": ("mcc", "matthews", "matthews_corrcoef", "matthews_correlation"),
    "exact_match": ("exact_match", "em", "exact"),
    "pearson": ("pearson",),
    "spearman": ("spearman",),
}


def _pick_metric(d, metric: str):
    if not isinstance(d, dict):
        return None
    for name in _METRIC_ALIASES.get(metric, (metric,)):
        v = d.get(name)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            return float(v)
    for sub in ("metrics", "dev", "dev_metrics", "best_metrics", "scores"):
        if isinstance(d.get(sub), dict):
            v = _pick_metric(d[sub], metric)
            if v is not None:
                return v
    return None


def best_score(eval_data: dict, metric: str):
    """The best dev score of `metric` in an eval.json written by `finetune` or `features` (None when absent)."""
    if not isinstance(eval_data, dict):
        return None
    for key in ("best", "best_dev", "result", "dev"):
        v = _pick_metric(eval_data.get(key), metric)
        if v is not None:
            return v
    v = _pick_metric(eval_data, metric)
    if v is not None:
        return v
    trials = eval_data.get("trials") or eval_data.get("results") or []
    vals = [x for x in (_trial_score(t, metric) for t in trials) if x is not None]
    return max(vals) if vals else None


def combination_score(eval_data: dict, combine: str, metric: str):
    """The dev `metric` of one combination in an eval.json written by `engine features` (its "results" list)."""
    for r in (eval_data or {}).get("results") or []:
        if isinstance(r, dict) and r.get("combine") == combine:
            v = _pick_metric(r.get("dev"), metric)
            if v is None and r.get("metric") == metric and isinstance(r.get("score"), (int, float)):
                v = float(r["score"])
            return v
    return None


def _trial_score(t, metric: str):
    if not isinstance(t, dict):
        return None
    v = _pick_metric(t.get("best") or t.get("dev") or t, metric)
    if v is not None:
        return v
    epochs = t.get("epochs") or t.get("history") or []
    vals = [x for x in (_pick_metric(e, metric) for e in epochs if isinstance(e, dict)) if x is not None]
    return max(vals) if vals else None


def _read_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _read_jsonl(path: Path) -> list:
    out = []
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return out
    for line in text.splitlines():
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if isinstance(r, dict):
            out.append(r)
    return out


def pretrain_eval_records(records: list) -> list:
    """The held-out records of a pre-training metrics.jsonl without their `eval_` prefix: {step, mlm_loss, mlm_acc,
    mlm_ppl, nsp_loss, nsp_acc, ...} (an `ltr` run has lm_loss, lm_acc, lm_ppl: next-token, not masked-token)."""
    out = []
    for r in records:
        step = r.get("step")
        if not isinstance(step, (int, float)):
            continue
        ev = {}
        if r.get("split") == "eval":  # engine.pretrain: {"step", "split": "eval", "eval_mlm_loss", ...}
            ev = {(k[len("eval_"):] if k.startswith("eval_") else k): v for k, v in r.items()}
        elif isinstance(r.get("eval"), dict):
            ev = dict(r["eval"])
        else:
            for k, v in r.items():
                for p in ("eval_", "heldout_", "held_out_", "val_"):
                    if k.startswith(p) and isinstance(v, (int, float)) and not isinstance(v, bool):
                        ev[k[len(p):]] = v
        if not ev:
            continue
        ev = {k: float(v) for k, v in ev.items() if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "step"}
        for a, b in (("mlm_ppl", "mlm_perplexity"), ("mlm_ppl", "perplexity"), ("mlm_ppl", "ppl"), ("mlm_acc", "mlm_accuracy"), ("nsp_acc", "nsp_accuracy")):
            if a not in ev and b in ev:
                ev[a] = ev[b]
        if "mlm_ppl" not in ev and isinstance(ev.get("mlm_loss"), float) and ev["mlm_loss"] < 50:
            ev["mlm_ppl"] = math.exp(ev["mlm_loss"])
        ev["step"] = int(step)
        out.append(ev)
    return out


@dataclass
class StudyResults:
    study: Study
    table: "object"  # pandas DataFrame, the paper's layout: one row per variant, "mean ± std (n)" per column
    summary: "object"  # DataFrame: variant, column, step, mean, std, n (numbers behind `table`)
    scores: "object"  # DataFrame: variant, column, step, seed, value (one row per finished evaluation)
    curves: "object"  # DataFrame: variant, seed, step, metric, split (train|eval), value (pre-training curves)
    checks: list  # [{claim, reproduced (True/False/None), detail}]
    finding: str
    jobs: list  # job_states()
    progress: dict  # {total, finished, failed, running, queued}

    def to_csv(self, path=None) -> str:
        """The summary as CSV (variant, column, step, mean, std, n); written atomically to `path` when given."""
        text = self.summary.to_csv(index=False)
        if path is not None:
            atomic_write_text(Path(path), text)
        return text


def collect_results(study_dir) -> StudyResults:
    """Read a study folder back: the paper's table, the pre-training curves, and the finding's checks."""
    import pandas as pd

    study_dir = Path(study_dir)
    data = read_study(study_dir)
    study = study_from_dict(data["study"])
    jobs = data["jobs"]
    score_rows, curve_rows = [], []
    for j in jobs:
        out = study_dir / j["out"]
        if j["kind"] == "pretrain":
            recs = _read_jsonl(out / "metrics.jsonl")
            for r in recs:
                if isinstance(r.get("step"), (int, float)) and r.get("split") != "eval":
                    for m in ("loss", "mlm_loss", "mlm_acc", "lm_loss", "lm_acc", "nsp_loss", "nsp_acc", "lr", "tokens_per_s"):
                        if isinstance(r.get(m), (int, float)) and not isinstance(r.get(m), bool):
                            curve_rows.append({"variant": j["variant"], "seed": j["seed"], "step": int(r["step"]),
                                               "metric": m, "split": "train", "value": float(r[m])})
            evals = pretrain_eval_records(recs)
            for ev in evals:
                for m, val in ev.items():
                    if m != "step":
                        curve_rows.append({"variant": j["variant"], "seed": j["seed"], "step": ev["step"],
                                           "metric": m, "split": "eval", "value": val})
            if evals:
                for col in study.pretrain_columns:
                    if col in evals[-1]:
                        score_rows.append({"variant": j["variant"], "column": _pretrain_column_name(col), "step": None,
                                           "seed": j["seed"], "value": evals[-1][col]})
            continue
        ev_data = _read_json(out / "eval.json")
        if ev_data is None:
            continue
        try:
            ev = next(e for e in study.evaluations if e.name == j["evaluation"])
        except StopIteration:
            continue
        for variant, combine in (j.get("combines") or {j["variant"]: None}).items():
            val = combination_score(ev_data, combine, ev.metric) if combine else best_score(ev_data, ev.metric)
            if val is not None:
                score_rows.append({"variant": variant, "column": ev.name, "step": j.get("step"), "seed": j["seed"], "value": val})
    scores = pd.DataFrame(score_rows, columns=["variant", "column", "step", "seed", "value"])
    curves = pd.DataFrame(curve_rows, columns=["variant", "seed", "step", "metric", "split", "value"])
    summary = summarise(scores)
    table = paper_table(study, summary)
    states = job_states(study_dir)
    progress = {"total": len(states)}
    for s in ("finished", "failed", "running", "queued", "cancelled"):
        progress[s] = sum(1 for r in states if r["state"] == s)
    progress["seconds"] = round(sum(j.get("seconds") or 0 for j in jobs), 1)  # foreground runs record each job's time
    return StudyResults(study=study, table=table, summary=summary, scores=scores, curves=curves,
                        checks=check_findings(study, summary), finding=study.finding, jobs=states, progress=progress)


def final_pretrain_metrics(curves):
    """Held-out pre-training metrics at each run's last evaluation: one row per (variant, seed)."""
    import pandas as pd

    ev = curves[curves["split"] == "eval"] if len(curves) else curves
    rows = []
    for (variant, seed), g in ev.groupby(["variant", "seed"], sort=False):
        last = g[g["step"] == g["step"].max()]
        row = {"variant": variant, "seed": int(seed), "step": int(last["step"].iloc[0])}
        for m in ("mlm_acc", "mlm_ppl", "nsp_acc", "lm_acc", "lm_ppl"):
            hit = last[last["metric"] == m]
            if len(hit):
                row[m] = round(float(hit["value"].iloc[0]), 4)
        rows.append(row)
    return pd.DataFrame(rows)


def _pretrain_column_name(col: str) -> str:
    return {"mlm_ppl": "held-out MLM ppl", "mlm_acc": "held-out MLM acc", "nsp_acc": "held-out NSP acc"}.get(col, col)


def summarise(scores):
    """mean, std (sample, 0 for n=1) and n per (variant, column, step)."""
    import pandas as pd

    cols = ["variant", "column", "step", "mean", "std", "n"]
    if scores.empty:
        return pd.DataFrame(columns=cols)
    s = scores.copy()
    s["step"] = s["step"].astype("object").where(s["step"].notna(), -1)
    g = s.groupby(["variant", "column", "step"], sort=False)["value"]
    out = g.agg(["mean", "std", "count"]).reset_index().rename(columns={"count": "n"})
    out["std"] = out["std"].fillna(0.0)
    out["step"] = out["step"].map(lambda x: None if x == -1 else int(x))
    return out[cols]


def _column_label(col: str, step) -> str:
    return col if step is None else f"{col} @ {step}"


def fmt_cell(mean: float, std: float, n: int, percent: bool = True) -> str:
    if percent:
        return f"{100 * mean:.1f} ± {100 * std:.1f} (n={n})"
    return f"{mean:.2f} ± {std:.2f} (n={n})"


def paper_table(study: Study, summary):
    """Rows variants (in the study's order), columns the evaluations (and pre-training columns), "mean ± std (n)"."""
    import pandas as pd

    columns = []
    steps = list(study.checkpoint_steps) or [None]
    for ev in study.evaluations:
        for k in steps:
            columns.append((ev.name, k))
    for c in study.pretrain_columns:
        columns.append((_pretrain_column_name(c), None))
    rows = []
    for v in study.variants:
        row = {"variant": v.name}
        for col, k in columns:
            hit = summary[(summary["variant"] == v.name) & (summary["column"] == col)
                          & (summary["step"].map(lambda x: x == k if k is not None else x is None))] if len(summary) else summary
            if len(hit):
                r = hit.iloc[0]
                row[_column_label(col, k)] = fmt_cell(r["mean"], r["std"], int(r["n"]), percent="ppl" not in col)
            else:
                row[_column_label(col, k)] = "–"
        rows.append(row)
    return pd.DataFrame(rows).set_index("variant")


# ---------------------------------------------------------------------------------------------------------
# the paper's findings, checked


def _means(summary, step="last") -> dict:
    """{variant: {column: mean}}; for Figure 5 (`step`="last") the last evaluated step of each column."""
    out = {}
    if summary is None or len(summary) == 0:
        return out
    for _, r in summary.iterrows():
        if r["step"] is not None and step == "last":
            prev = out.get(r["variant"], {}).get(("_step", r["column"]))
            if prev is not None and prev > r["step"]:
                continue
            out.setdefault(r["variant"], {})[("_step", r["column"])] = r["step"]
        out.setdefault(r["variant"], {})[r["column"]] = float(r["mean"])
    return {v: {c: m for c, m in d.items() if not isinstance(c, tuple)} for v, d in out.items()}


def _task_columns(study: Study) -> list:
    return [e.name for e in study.evaluations]


def _compare(means: dict, a: str, b: str, cols: list, every: bool, strict: bool) -> dict:
    """Is variant a better than b (on every column, or on the average)?"""
    common = [c for c in cols if c in means.get(a, {}) and c in means.get(b, {})]
    if not common:
        return {"reproduced": None, "detail": "not enough results yet"}
    # a task on which both scored 0 (e.g. entity F1 of a model too small to find any entity) says nothing
    silent = [c for c in common if abs(means[a][c]) < 1e-9 and abs(means[b][c]) < 1e-9]
    common = [c for c in common if c not in silent]
    if not common:
        return {"reproduced": None, "detail": "both score 0 on every task: no signal to compare"}
    diffs = {c: means[a][c] - means[b][c] for c in common}
    ok = (lambda d: d > 0) if strict else (lambda d: d >= 0)
    res = all(ok(d) for d in diffs.values()) if every else ok(sum(diffs.values()) / len(diffs))
    detail = "; ".join(f"{c}: {100 * means[a][c]:.1f} vs {100 * means[b][c]:.1f}" for c in common)
    if silent:
        detail += "; ignored (both 0): " + ", ".join(silent)
    return {"reproduced": bool(res), "detail": detail}


def check_findings(study: Study, summary) -> list:
    """The paper's qualitative findings for this study, each checked against the results where meaningful."""
    means = _means(summary)
    cols = _task_columns(study)
    checks = []

    def add(claim, res):
        checks.append({"claim": claim, **res})

    if study.name == "pretraining-tasks":
        bert, nonsp, ltr, bilstm = (v.name for v in study.variants[:4])
        add(f"{bert} ≥ {nonsp} on average (removing NSP hurts)", _compare(means, bert, nonsp, cols, every=False, strict=False))
        add(f"{nonsp} > {ltr} on every task (MLM beats left-to-right)", _compare(means, nonsp, ltr, cols, every=True, strict=True))
        add(f"{nonsp} > LTR {bilstm} on every task (the BiLSTM does not close the gap)", _compare(means, nonsp, bilstm, cols, every=True, strict=True))
    elif study.name == "model-size":
        small, big = study.variants[0].name, study.variants[-1].name
        add(f"{big} ≥ {small} on every task (bigger is better)", _compare(means, big, small, cols, every=True, strict=False))
        ppl_col = _pretrain_column_name("mlm_ppl")
        ppl = [means.get(v.name, {}).get(ppl_col) for v in study.variants]
        if any(p is None for p in ppl):
            add("held-out MLM perplexity falls with size", {"reproduced": None, "detail": "not enough results yet"})
        else:
            add("held-out MLM perplexity falls with size",
                {"reproduced": all(b <= a for a, b in zip(ppl, ppl[1:])), "detail": " → ".join(f"{p:.1f}" for p in ppl)})
    elif study.name == "feature-based":
        col = cols[0]
        ft = means.get("Fine-tuning", {}).get(col)
        fb = {v.name: means.get(v.name, {}).get(col) for v in study.variants if v.features is not None}
        fb = {k: x for k, x in fb.items() if x is not None}
        concat = next((v.name for v in study.variants if v.features is not None and v.features.combine == "concat"), None)
        emb = next((v.name for v in study.variants if v.features is not None and v.features.combine == "embeddings"), None)
        if len(fb) < 2 or concat not in fb:
            add("concatenating the last four layers is the best feature-based combination", {"reproduced": None, "detail": "not enough results yet"})
        else:
            best = max(fb, key=fb.get)
            add("concatenating the last four layers is the best feature-based combination",
                {"reproduced": fb[concat] >= fb[best] - 1e-12, "detail": f"best: {best} {100 * fb[best]:.1f}; concat {100 * fb[concat]:.1f}"})
        if ft is None or not fb:
            add("fine-tuning ≥ the best feature-based combination", {"reproduced": None, "detail": "not enough results yet"})
        else:
            best = max(fb, key=fb.get)
            add("fine-tuning ≥ the best feature-based combination",
                {"reproduced": ft >= fb[best], "detail": f"fine-tuning {100 * ft:.1f} vs {best} {100 * fb[best]:.1f}"})
        if emb in fb and len(fb) >= 2:
            add("the embeddings alone are the worst", {"reproduced": fb[emb] <= min(fb.values()), "detail": f"embeddings {100 * fb[emb]:.1f}, worst {100 * min(fb.values()):.1f}"})
    elif study.name == "masking":
        rows = [v.name for v in study.variants]
        bert, mask_only, rnd_only = rows[0], rows[1], rows[-1]
        ft_cols = [e.name for e in study.evaluations if e.features is None]
        fb_cols = [e.name for e in study.evaluations if e.features is not None]
        spreads = {}
        for c in ft_cols:
            vals = [means[r][c] for r in rows if c in means.get(r, {})]
            if len(vals) >= 2:
                spreads[c] = max(vals) - min(vals)
        if spreads:
            add("fine-tuning is robust to the masking strategy (spread across rows ≤ 3 points)",
                {"reproduced": all(s <= ROBUST_SPREAD for s in spreads.values()),
                 "detail": "; ".join(f"{c}: spread {100 * s:.1f}" for c, s in spreads.items())})
        else:
            add("fine-tuning is robust to the masking strategy (spread across rows ≤ 3 points)", {"reproduced": None, "detail": "not enough results yet"})
        if fb_cols:
            add(f"feature-based: {bert} ≥ {mask_only} (MASK-only hurts)", _compare(means, bert, mask_only, fb_cols, every=True, strict=False))
        add(f"{bert} > {rnd_only} (RND-only is worse)", _compare(means, bert, rnd_only, ft_cols + fb_cols, every=False, strict=True))
    elif study.name == "training-steps":
        steps_means = {}
        for _, r in summary.iterrows() if len(summary) else []:
            if r["step"] is not None:
                steps_means.setdefault((r["variant"], r["column"]), {})[int(r["step"])] = float(r["mean"])
        for v in study.variants:
            pairs = [(c, d) for (vv, c), d in steps_means.items() if vv == v.name and len(d) >= 2]
            if not pairs:
                add(f"{v.name}: more pre-training steps score higher", {"reproduced": None, "detail": "not enough results yet"})
                continue
            ok = all(d[max(d)] >= d[min(d)] for _, d in pairs)
            add(f"{v.name}: more pre-training steps score higher",
                {"reproduced": ok, "detail": "; ".join(f"{c}: step {min(d)} {100 * d[min(d)]:.1f} → step {max(d)} {100 * d[max(d)]:.1f}" for c, d in pairs)})
        if len(study.variants) >= 2:
            a, b = study.variants[0].name, study.variants[1].name
            add(f"{a} > {b} at the last checkpoint", _compare(means, a, b, cols, every=True, strict=True))
    return checks


ROBUST_SPREAD = 0.03  # "robust": the best and worst of the six rows within 3 points (the paper's MNLI spread is under 1)


# ---------------------------------------------------------------------------------------------------------
# helpers


def _num(x) -> str:
    """A number for a command line: 0.8 -> '0.8', 1.0 -> '1', 5e-05 -> '5e-05'."""
    if isinstance(x, float) and x.is_integer():
        return str(int(x))
    return str(x)


def _slug(name: str) -> str:
    out = "".join(c.lower() if c.isalnum() else "-" for c in name)
    while "--" in out:
        out = out.replace("--", "-")
    return out.strip("-") or "x"


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def describe(study: Study) -> str:
    """A few lines about a study: title, base, variants, evaluations, seeds and job count."""
    lines = [f"{study.name}: {study.title}", f"  {study.description}", f"  finding: {study.finding}"]
    if study.model:
        lines.append(f"  model: {study.model} (no pre-training)")
    else:
        b = study.base
        lines.append(f"  base: preset {b.preset}" + (f" L={b.layers} H={b.hidden} A={b.heads}" if b.layers else "")
                     + f", objective {b.objective}, {b.steps} steps × batch {b.batch_size} × {b.seq_len} tokens")
    for v in study.variants:
        lines.append(f"  - {v.name}: {v.change() or 'base'}")
    lines.append("  evaluations: " + ", ".join(e.name for e in study.evaluations)
                 + (f" at steps {', '.join(map(str, study.checkpoint_steps))}" if study.checkpoint_steps else ""))
    lines.append(f"  seeds: {', '.join(map(str, study.seeds))}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------
# CLI


def _parse_tasks(arg: str) -> tuple:
    known = {"bbc-topic": BBC, "wnut16": WNUT}
    for e in shared_evaluations():
        known[e.name.split()[0].lower()] = e
    out = []
    for t in [x.strip() for x in arg.split(",") if x.strip()]:
        if t not in known:
            raise EngineError(f"unknown evaluation '{t}' for --tasks; choose from {', '.join(known)}"
                              + ("" if SHARED_DATA.is_dir() else " (rte and cola need ../shared/data)"))
        out.append(known[t])
    if not out:
        raise EngineError("--tasks is empty; give e.g. bbc-topic,wnut16")
    return tuple(out)


def main(argv: list) -> int:
    p = argparse.ArgumentParser(prog="python -m engine ablate", description="Run or summarise an ablation study (paper Tables 5-8, Figure 5).")
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="plan a study and queue its jobs (or run them here with --foreground)")
    r.add_argument("study", help=", ".join(STUDIES))
    r.add_argument("--classroom", action="store_true", help="classroom scale: the classroom pre-training default, one seed, one fine-tuning grid point (about 20-30 min on 2 CPU cores)")
    r.add_argument("--seeds", type=int, default=None, help="number of seeds (0..N-1); default: 3, or 1 at classroom scale")
    r.add_argument("--tasks", default=None, help="downstream evaluations, e.g. bbc-topic,wnut16,rte,cola (default: the study's)")
    r.add_argument("--steps", type=int, default=None, help="override the pre-training steps of every variant")
    r.add_argument("--runs-root", default=None, help="runs folder (default $BERT_STUDIO_RUNS or ./runs)")
    r.add_argument("--name", default=None, help="study folder name (default: the study's name)")
    r.add_argument("--foreground", action="store_true", help="run the jobs here one after another instead of queueing them")
    r.add_argument("--dry-run", action="store_true", help="print the job command lines and stop")
    s = sub.add_parser("show", help="print a study's results table and the paper's finding")
    s.add_argument("study_dir")
    s.add_argument("--csv", default=None, help="also write the results (mean, std, n per variant and task) to this CSV file")
    c = sub.add_parser("resume", help="run a study's unfinished jobs here (foreground)")
    c.add_argument("study_dir")
    sub.add_parser("list", help="list the built-in studies and the studies under the runs folder")
    a = p.parse_args(argv)

    if a.cmd == "list":
        for name in STUDIES:
            print(describe(get_study(name)) + "\n")
        found = list_studies()
        if found:
            print("studies under the runs folder:")
            for s_ in found:
                print(f"  {s_['path']}  ({s_['study']}, {s_['jobs']} jobs, created {s_['created']})")
        return 0
    if a.cmd == "run":
        ev = _parse_tasks(a.tasks) if a.tasks else None
        study = get_study(a.study, classroom_scale=a.classroom, seeds=a.seeds, evaluations=ev)
        if a.tasks and a.classroom:
            study = replace(study, evaluations=ev)
        if a.steps is not None:
            if a.steps < 1:
                raise EngineError(f"--steps must be positive (got {a.steps})")
            study = replace(study, base=replace(study.base, steps=a.steps))
        print(describe(study))
        if a.dry_run:
            for j in plan(study, studies_root(a.runs_root) / (a.name or study.name)):
                print(" ".join(["python -m engine"] + j.argv))
            return 0
        d = launch(study, runs_root=a.runs_root, name=a.name, foreground=a.foreground)
        if a.foreground:
            _print_results(collect_results(d))
        print(f"study folder: {d}")
        return 0
    if a.cmd == "resume":
        counts = run_foreground(a.study_dir)
        print(json.dumps(counts))
        _print_results(collect_results(a.study_dir))
        return 0
    res = collect_results(a.study_dir)
    _print_results(res)
    if a.csv:
        res.to_csv(a.csv)
        print(f"wrote {a.csv}")
    return 0


def _print_results(res: StudyResults) -> None:
    import pandas as pd

    pr = res.progress
    print(f"\n{res.study.title}: {pr.get('finished', 0)}/{pr['total']} jobs finished"
          + (f", {pr['failed']} failed" if pr.get("failed") else "")
          + (f" ({pr['seconds'] / 60:.1f} min of jobs)" if pr.get("seconds") else ""))
    with pd.option_context("display.max_columns", None, "display.width", 200):
        print(res.table.to_string())
    final = final_pretrain_metrics(res.curves)
    if len(final):
        print("\nheld-out pre-training metrics at the last step (lm_* = next-token for LTR):")
        print(final.to_string(index=False))
    print(f"\npaper: {res.finding}")
    for c in res.checks:
        mark = {True: "yes", False: "NO", None: "?"}[c["reproduced"]]
        print(f"  [{mark}] {c['claim']}: {c['detail']}")
