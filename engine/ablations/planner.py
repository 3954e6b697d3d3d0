"""A study becomes jobs: per seed and variant, a `pretrain` run, then the study's downstream evaluations of it
(`finetune`, or `features` for the feature-based rows), each one `python -m engine ...` command line.

A study's jobs run one at a time, in `plan`'s order, through the job queue or in the foreground
(`engine.ablations.runner`); each writes its own run folder under `<study folder>/runs/`.
"""
from dataclasses import dataclass, fields, replace
from pathlib import Path

from engine import cli
from engine.ablations.study import Evaluation, FeatureArgs, Study, Variant
from engine.errors import EngineError
from engine.objectives import objective

BUDGETS = ("steps", "flops", "time")


def step_flops(cfg) -> float:
    """Training FLOPs of one pre-training step of a PretrainConfig (engine.flops.model_flops, 3x the forward): every
    sequence at full --seq-len (a second phase's steps: `run_flops`); the LM head at every position for a left-to-right objective, at --mask-rate of them
    (15%) for MLM; the pooler and the 2-way NSP classifier only with NSP; ELECTRA's generator and discriminator both
    (engine.flops.electra_flops)."""
    from engine.flops import model_flops  # (torch: engine.ablations itself loads without it)
    from engine.pretraining.config import model_config
    obj = objective(cfg.objective)
    B, T = cfg.batch_size, cfg.seq_len
    n_pred = B * T if obj.causal else int(round(cfg.mask_rate * B * T))
    if obj.generator:  # ELECTRA and its MLM ablations: the generator's FLOPs as well as the model's
        from engine.electra import generator_config
        from engine.flops import electra_flops, generator_mlm_flops
        m = model_config(cfg, cfg.vocab_size)
        g = generator_config(m, cfg.generator_size)
        if obj.rtd:
            return electra_flops(m, g, [T] * B, n_pred)
        return generator_mlm_flops(m, g, [T] * B, n_pred, B * T if obj.all_tokens else n_pred)
    return model_flops(model_config(cfg, cfg.vocab_size), [T] * B, n_mlm=n_pred, n_cls=2 if obj.nsp else 0,
                       train=True, pooler=obj.nsp)


def run_flops(cfg) -> float:
    """Training FLOPs of a whole pre-training run: each phase's steps (the second phase the last --phase2-fraction of
    them, split as the training loop splits them) x `step_flops` at that phase's length."""
    second = cfg.phase2_steps()
    flops = (cfg.steps - second) * step_flops(cfg)
    return flops + (second * step_flops(replace(cfg, seq_len=cfg.phase2_seq_len)) if second else 0.0)


def pretrain_config(study: Study, variant: Variant):
    """The variant's PretrainConfig under the study's budget: "steps" as given; "flops": steps scaled so that
    steps x step_flops equals the first pre-trained variant's at its steps (a cheaper step gets more steps);
    "time": the same steps (the learning-rate schedule spans them) and --max-minutes budget_minutes. FLOPs are the
    whole run's (`run_flops`: both phases of a two-phase run, each at its own length)."""
    cfg = study.pretrain_args(variant)
    from engine.tasks.heldout import HELD_OUT_TASKS, check_unseen
    if any(e.task in HELD_OUT_TASKS for e in study.evaluations):
        check_unseen(cfg)  # their dev texts must be ones this pre-training holds out
    if study.budget not in BUDGETS:
        raise EngineError(f"study budget {study.budget!r} must be one of {', '.join(BUDGETS)}")
    if study.budget == "steps":
        return cfg
    if study.checkpoint_steps:
        raise EngineError(f"study {study.name} evaluates checkpoints at fixed steps; run it with budget steps")
    if study.budget == "time":
        if not study.budget_minutes or study.budget_minutes <= 0:
            raise EngineError("an equal-time study needs a positive --budget-minutes (training minutes per pre-training run)")
        return replace(cfg, max_minutes=float(study.budget_minutes))
    ref = study.pretrain_args(next(v for v in study.variants if not v.reuse))
    steps = max(1, int(round(run_flops(ref) / (run_flops(cfg) / cfg.steps))))  # the variant's FLOPs per step, averaged
    return replace(cfg, steps=steps)


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


def paths_read(argv: list, run: Path) -> list:
    """The paths under the run folder `run` (itself included) that a job's command line `argv` names, relative to it
    ("" for the run itself, "checkpoints/step-750" for a checkpoint): what the job reads of that run."""
    run = Path(run).absolute()
    out = []
    for a in argv:
        if isinstance(a, str) and a.startswith(("/", ".")):
            p = Path(a).absolute()
            if p == run or run in p.parents:
                out.append("" if p == run else str(p.relative_to(run)))
    return out


def feature_epochs(study: Study) -> int:
    """The feature-based classifier's training epochs in `study`'s jobs: its `feature_epochs` (`with_epochs`), else
    the `features` command's default."""
    from engine.features import FeaturesConfig  # (torch: engine.ablations itself loads without it)
    return study.feature_epochs or next(f.default for f in fields(FeaturesConfig) if f.name == "epochs")


def _eval_argv(study: Study, variant: Variant, ev: Evaluation, model: str, seed: int, out: str, feats: FeatureArgs = None):
    """(kind, argv) of one downstream evaluation of `model`: `engine features` when `feats`, else `engine finetune`."""
    from engine.features import FeaturesConfig  # (torch: engine.ablations itself loads without it)
    from engine.finetune import FinetuneConfig
    fa = study.finetune_args(variant)
    task = dict(model=model, task=ev.task, train=ev.train, dev=ev.dev, max_train=fa.max_train, seed=seed, out=out,
                report_to=study.base.report_to)  # the study's trackers (ablate run --report-to), as its pre-training's
    if feats is not None:
        cfg = FeaturesConfig(**task, layers=cli.ints(feats.layers), combine=feats.combine, classifier=feats.classifier,
                             epochs=feature_epochs(study))
        return "features", cli.argv(cfg)
    cfg = FinetuneConfig(**task, lr=fa.lr, batch_size=fa.batch_size, epochs=fa.epochs, restarts=fa.restarts,
                         max_seq_len=fa.max_seq_len, bilstm=fa.bilstm)
    return "finetune", cli.argv(cfg)


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
                    cfg = replace(pretrain_config(study, v), seed=seed, out=str(study_dir / run_rel))
                    jobs.append(Job(f"pretrain/{v.key()}/s{seed}", "pretrain", cli.argv(cfg), run_rel, v.name, seed))
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
