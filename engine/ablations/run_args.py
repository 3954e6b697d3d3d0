"""The arguments of `python -m engine ablate run` and the study they make (`study_of_run`): the command and a
lesson (engine.ablations.lessons, whose `build` parses its own argv here) share them."""
import argparse
from dataclasses import replace

from engine.ablations.paper import (CLASSROOM, PARALLEL_HELP, SHARED_DATA, STUDIES, available_evaluations, get_study,
                                    study_settings_text)
from engine.ablations.planner import plan
from engine.ablations.reuse import REUSE_HELP
from engine.ablations.study import Study, with_steps
from engine.errors import EngineError
from engine.trackers import HELP as TRACKERS_HELP, check_trackers, report_to


def parse_tasks(arg: str) -> tuple:
    # by --task name for the built-in tasks, "rte" / "cola" for the shared files
    known = {(e.task if e.train is None else e.name.split()[0].lower()): e for e in available_evaluations()}
    out = []
    for t in [x.strip() for x in arg.split(",") if x.strip()]:
        if t not in known:
            raise EngineError(f"unknown evaluation '{t}' for --tasks; choose from {', '.join(known)}"
                              + ("" if SHARED_DATA.is_dir() else " (rte and cola need ../shared/data)"))
        out.append(known[t])
    if not out:
        raise EngineError("--tasks is empty; give e.g. bbc-topic,wnut16")
    return tuple(out)


def add_run_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """`ablate run`'s arguments on `p` (its subparser in engine.ablations.cli, or `run_parser`)."""
    p.add_argument("study", help=", ".join(STUDIES))
    size = p.add_mutually_exclusive_group()
    size.add_argument("--classroom", action="store_true", help="classroom scale: the classroom pre-training default, one seed, one fine-tuning grid point with "
                      f"{CLASSROOM.finetune.restarts} restarts; what single studies set differently: "
                      f"{study_settings_text(CLASSROOM)} (wall time: BENCHMARKS.md)")
    size.add_argument("--lab", action="store_true", help="lab scale, for one GPU: the mini preset for 5,000 steps of 128 x 128, two seeds, every training example (engine/ablations/paper.py LAB_PRETRAIN)")
    p.add_argument("--seeds", type=int, default=None, help="number of seeds (0..N-1): a study that pre-trains pre-trains each row once per seed (a fixed model's study: fine-tuning seeds); default: 3, 1 at classroom scale, 2 at lab scale")
    p.add_argument("--tasks", default=None, help="downstream evaluations, e.g. bbc-cloze,bbc-punct,bbc-next,bbc-topic,wnut16,rte,cola (default: the study's)")
    p.add_argument("--steps", type=int, default=None, help="override the pre-training steps of every variant")
    p.add_argument("--epochs", type=int, default=None,
                   help="train every downstream evaluation this many epochs: the fine-tuning and the feature-based "
                        f"classifier alike (default: the study's; {max(CLASSROOM.finetune.epochs)} at classroom scale unless the "
                        "study sets its own: --classroom's help)")
    p.add_argument("--budget", choices=("steps", "flops", "time"), default=None,
                   help="what the variants' pre-training shares: steps (the paper's protocol), flops (each variant's "
                        "steps from its FLOPs per step) or time (--budget-minutes of training each); default: the "
                        "study's: steps, unless its scale sets another (--classroom's help)")
    p.add_argument("--budget-minutes", type=float, default=None, help="with --budget time: training minutes per pre-training run")
    p.add_argument("--runs-root", default=None, help="runs folder (default $BERT_STUDIO_RUNS or ./runs)")
    p.add_argument("--name", default=None, help="study folder name (default: the study's name)")
    p.add_argument("--foreground", action="store_true", help="run the jobs here one after another instead of queueing them")
    p.add_argument("--parallel", type=int, default=1, help=PARALLEL_HELP)
    p.add_argument("--no-reuse", action="store_true", help="turn reuse off; by default " + REUSE_HELP)
    p.add_argument("--dry-run", action="store_true", help="print the job command lines and stop")
    p.add_argument("--report-to", type=report_to, default=None, help=TRACKERS_HELP + "; every job of the study reports "
                   "there (MLflow: one experiment named after the study folder, a run per job tagged with its variant and seed)")
    return p


def run_parser() -> argparse.ArgumentParser:
    """A parser of `ablate run`'s arguments alone (what follows "run")."""
    return add_run_arguments(argparse.ArgumentParser(prog="python -m engine ablate run"))


def study_of_run(a) -> Study:
    """The study `ablate run` runs, from its parsed arguments (a lesson's `build` parses its argv through this too)."""
    ev = parse_tasks(a.tasks) if a.tasks else None
    scale = "classroom" if a.classroom else "lab" if a.lab else None
    study = get_study(a.study, scale=scale, seeds=a.seeds, evaluations=ev, epochs=a.epochs)
    if a.tasks and scale:
        study = replace(study, evaluations=ev)
    if a.steps is not None:
        study = with_steps(study, a.steps)
    budget = a.budget or study.budget
    if a.budget_minutes is not None and budget != "time":
        raise EngineError("--budget-minutes goes with --budget time; drop it or add --budget time")
    study = replace(study, budget=budget, budget_minutes=a.budget_minutes)
    if getattr(a, "report_to", None):  # the jobs' trackers travel in the base settings (planner: every job's --report-to)
        check_trackers(a.report_to)
        study = replace(study, base=replace(study.base, report_to=a.report_to))
    plan(study, "/")  # a budget the study cannot take is one line before anything is written
    return study
