"""`python -m engine ablate run|lesson|show|resume|cancel|job|list|estimate`: plan and launch a study, print its table and the paper's finding."""
import argparse
import json
import sys
from dataclasses import asdict, replace

from engine.ablations.control import cancel_study, find_study, resume_study
from engine.ablations.folders import list_studies, read_study, studies_root, study_dir_name
from engine.ablations.lessons import LESSONS, describe_lesson, get_lesson
from engine.ablations.run_args import add_run_arguments, study_of_run
from engine.ablations.paper import PARALLEL_HELP, STUDIES, get_study
from engine.ablations.planner import plan
from engine.ablations.results import StudyResults, collect_results, final_pretrain_metrics
from engine.ablations.runner import launch, run_foreground, run_job
from engine.ablations.study import describe, with_steps
from engine.ablations.timing import REFERENCE_MACHINE, describe_check, estimate, fastest_check
from engine.ablations.verdict import describe_entry
from engine.errors import EngineError
from engine.status import FAILED, FINISHED, status_of


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m engine ablate", description="Run or summarise an ablation study (paper Tables 5-8, Figure 5).")
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="plan a study and queue its jobs (or run them here with --foreground)")
    add_run_arguments(r)
    le = sub.add_parser("lesson", help="run a lesson: a classroom study with the settings measured to show something "
                        "(engine/ablations/lessons.py); without KEY, list the lessons with their commands and times")
    le.add_argument("key", nargs="?", default=None, help=", ".join(l.key for l in LESSONS))
    le.add_argument("--runs-root", default=None, help="runs folder (default $BERT_STUDIO_RUNS or ./runs); a lesson that "
                    "builds on another takes over its runs here")
    le.add_argument("--foreground", action="store_true", help="run the jobs here one after another instead of queueing them")
    le.add_argument("--dry-run", action="store_true", help="print the job command lines and stop")
    s = sub.add_parser("show", help="print a study's results table and the paper's finding")
    s.add_argument("study_dir")
    s.add_argument("--csv", default=None, help="also write the results (mean, std, n per variant and task) to this CSV file")
    s.add_argument("--json", action="store_true", help="print one JSON object: the table, progress and each finding's "
                   "verdict (reproduced | not reproduced | inconclusive) with the compared numbers and their 95%% interval")
    c = sub.add_parser("resume", help="continue a study: one queued one job at a time has its unfinished jobs queued "
                       "again, each after the pre-training it reads; any other (or with --foreground) runs them here")
    c.add_argument("study_dir", help="the study's folder, or its name under the runs folder")
    c.add_argument("--parallel", type=int, default=1, help=PARALLEL_HELP + " (runs them here)")
    c.add_argument("--foreground", action="store_true", help="run the unfinished jobs here, one after another")
    c.add_argument("--runs-root", default=None, help="runs folder a study's name is looked up in (default $BERT_STUDIO_RUNS or ./runs)")
    x = sub.add_parser("cancel", help="cancel every queued or running job of a study (a running pre-training saves "
                       "its checkpoint first); `ablate resume` continues it")
    x.add_argument("study_dir", help="the study's folder, or its name under the runs folder")
    x.add_argument("--runs-root", default=None, help="runs folder a study's name is looked up in (default $BERT_STUDIO_RUNS or ./runs)")
    j = sub.add_parser("job", help="run one job of a study (what the job queue runs for a queued study's pre-training): "
                       "take over a finished pre-training with the same settings when the study allows it, else run "
                       "the job's command")
    j.add_argument("study_dir")
    j.add_argument("key", help="the job's key, e.g. pretrain/bert-mlm-nsp/s0 (study.json lists them)")
    sub.add_parser("list", help="list the built-in studies and the studies under the runs folder")
    e = sub.add_parser("estimate", help="time the classroom model's steps here (seconds) and estimate each classroom "
                       "study's wall time on this machine from its measured reference, or for a study never measured (the family's) from "
                       "its FLOPs and Table 5's measured evaluations (engine/ablations/timing.py)")
    e.add_argument("study", nargs="?", default=None, help="one study (default: every built-in study)")
    e.add_argument("--classroom", action="store_true", help="the classroom scale, as `ablate run --classroom`: the "
                   "only scale estimated, so the default too")
    e.add_argument("--epochs", type=int, default=None, help="the downstream epochs you will run it with (default: the study's)")
    e.add_argument("--seeds", type=int, default=None, help="the seeds you will run it with (default: the study's, 1 at classroom scale)")
    e.add_argument("--steps", type=int, default=None, help="the pre-training steps you will run it with (default: the study's)")
    e.add_argument("--budget", choices=("steps", "flops"), default=None,
                   help="the budget you will run it with (default: the study's at classroom scale: `ablate run --help`)")
    e.add_argument("--json", action="store_true", help="print one JSON object: the speed check and each estimate")
    e.add_argument("--runs-root", default=None, help="take off the pre-trainings finished runs here have already done, "
                   "those jobs queued in its job queue will do, and the evaluations other studies here have already "
                   "done of the models it takes over (default $BERT_STUDIO_RUNS or ./runs)")
    return p


def main(argv: list) -> int:
    a = build_parser().parse_args(argv)
    if getattr(a, "parallel", 1) < 1:  # run and resume
        raise EngineError(f"--parallel {a.parallel}: give a number of jobs >= 1")
    if a.cmd == "list":
        for name in STUDIES:
            print(describe(get_study(name)) + "\n")
        found = list_studies()
        if found:
            print("studies under the runs folder:")
            for s_ in found:
                print(f"  {s_['path']}  " + (f"(unreadable: {s_['error']})" if s_["error"] else
                                             f"({s_['study']}, {s_['jobs']} jobs, created {s_['created']})"))
        return 0
    if a.cmd == "estimate":
        return _estimate(a)
    if a.cmd == "lesson":
        if a.key is None:
            print("\n\n".join(describe_lesson(l) for l in LESSONS))
            return 0
        extra = [f for f, on in (("--foreground", a.foreground), ("--dry-run", a.dry_run)) if on]
        extra += ["--runs-root", a.runs_root] if a.runs_root else []
        return main(get_lesson(a.key).argv() + extra)  # a lesson is an `ablate run` command line
    if a.cmd == "job":
        return run_job(a.study_dir, a.key)
    if a.cmd == "run":
        study = study_of_run(a)
        scale = study.scale if study.scale in ("classroom", "lab") else None
        print(describe(study))
        if scale == "classroom":
            flags = "".join(f" --{k} {v}" for k, v in (("seeds", a.seeds), ("epochs", a.epochs), ("steps", a.steps),
                                                    ("budget", a.budget if a.budget in ("steps", "flops") else None),
                                                    ("runs-root", a.runs_root))
                            if v is not None)
            print(f"  time on this machine: python -m engine ablate estimate {study.name}{flags} (a speed check of seconds)")
        if a.dry_run:
            for j in plan(study, studies_root(a.runs_root) / study_dir_name(study, a.name)):
                print(" ".join(["python -m engine"] + j.argv))
            return 0
        d = launch(study, runs_root=a.runs_root, name=a.name, foreground=a.foreground, parallel=a.parallel,
                   reuse=not a.no_reuse)
        if a.foreground:
            _print_results(collect_results(d))
        print(f"study folder: {d}")
        return _failed_jobs(d) if a.foreground else 0
    if a.cmd == "cancel":
        cancel_study(find_study(a.study_dir, a.runs_root))
        return 0
    if a.cmd == "resume":
        a.study_dir = find_study(a.study_dir, a.runs_root)
        if read_study(a.study_dir).get("mode") == "queue" and not a.foreground and a.parallel == 1:
            resume_study(a.study_dir)
            return 0
        counts = run_foreground(a.study_dir, parallel=a.parallel)
        print(json.dumps(counts))
        _print_results(collect_results(a.study_dir))
        return _failed_jobs(a.study_dir)
    res = collect_results(a.study_dir)
    if a.json:
        print(json.dumps(results_json(a.study_dir, res), indent=1, default=str))
    else:
        _print_results(res)
    if a.csv:
        res.to_csv(a.csv)
        print(f"wrote {a.csv}")
    return 0


def _failed_jobs(study_dir) -> int:
    """Exit status of a run that ran the jobs here: 1, with one line saying how many failed and what to do, when
    any did (so a script, or the job queue running a parallel study, sees it), else 0."""
    jobs = read_study(study_dir)["jobs"]
    failed = [j for j in jobs if status_of(j.get("status")).resumable]  # failed or cancelled (study.json holds no "dead")
    if not failed:
        return 0
    print(f"error: {len(failed)} of {len(jobs)} jobs did not finish (first: {failed[0]['key']}: {failed[0].get('error')}); "
          f"fix the cause, then `python -m engine ablate resume {study_dir}`", file=sys.stderr)
    return 1


def _estimate(a) -> int:
    names = [a.study] if a.study else list(STUDIES)
    studies = [get_study(n, scale="classroom", epochs=a.epochs, seeds=a.seeds) for n in names]  # a bad name or --epochs: one line first
    if a.steps is not None:
        studies = [with_steps(s, a.steps) for s in studies]
    if a.budget is not None:
        # every study but one of a fixed model or of checkpoints (Figure 5), which has one budget, steps; named alone,
        # such a study is told so in one line (plan's check, as `ablate run` does)
        studies = [replace(s, budget=a.budget) if a.study or not (s.model or s.checkpoint_steps) else s for s in studies]
        for s in studies:
            plan(s, "/")
    check = fastest_check()
    root = studies_root(a.runs_root).parent
    out = {n: estimate(s, check, runs_root=root) for n, s in zip(names, studies)}
    if a.json:
        print(json.dumps({"speed_check": {**asdict(check), "factor": check.factor()}, "reference_machine": REFERENCE_MACHINE,
                          "estimates": out}, indent=1))
        return 0
    print(f"speed check: {describe_check(check)}")
    for n in names:
        print(f"  {n}: {out[n]['text']}")
    return 0


def results_json(study_dir, res: StudyResults) -> dict:
    """`ablate show --json`: {study, title, study_dir, progress, reused ({job key: the run it took over}), table (rows of the summary: variant, column, step,
    mean, std, n), finding, findings (engine.ablations.verdict.judge per finding: the verdicts), checks (the direction of the means,
    {claim, holds, detail}: no uncertainty, so not verdicts)}."""
    return {"study": res.study.name, "title": res.study.title, "study_dir": str(study_dir), "progress": res.progress,
            "reused": {r["key"]: r["reused_from"] for r in res.jobs if r.get("reused_from")},
            "table": res.summary.to_dict(orient="records"), "finding": res.finding, "findings": res.findings,
            "checks": res.checks}


def _print_results(res: StudyResults) -> None:
    import pandas as pd

    pr = res.progress
    print(f"\n{res.study.title}: {pr.get(FINISHED.name, 0)}/{pr['total']} jobs finished"
          + (f", {pr[FAILED.name]} failed" if pr.get(FAILED.name) else "")
          + (f" ({pr['seconds'] / 60:.1f} min of jobs)" if pr.get("seconds") else ""))
    for r in (r for r in res.jobs if r.get("reused_from")):
        print(f"  {r['key']}: reused the finished run {r['reused_from']} (same settings; --no-reuse trains afresh)")
    with pd.option_context("display.max_columns", None, "display.width", 200):
        print(res.table.to_string())
    final = final_pretrain_metrics(res.curves)
    if len(final):
        print("\nheld-out pre-training metrics at the last step (lm_* = next-token for LTR):")
        print(final.to_string(index=False))
    print(f"\npaper: {res.finding}")
    if res.findings:
        print("\nverdicts (difference of the two rows, 95% bootstrap interval; engine/ablations/verdict.py):")
    for f in res.findings:
        print(f"  [{f['verdict']}] {f['statement']} ({f['column']}): {describe_entry(f)}")
    if res.checks:
        print("\nthe direction of the means, without their uncertainty (a hint, not a verdict):")
    for c in res.checks:
        mark = {True: "holds", False: "does not hold", None: "not yet"}[c["holds"]]
        print(f"  [{mark}] {c['claim']}: {c['detail']}")
