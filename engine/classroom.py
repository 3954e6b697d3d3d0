"""Prepare a class in one step: `python -m engine class prepare [--runs-root R]` (and `class status`, `class cancel`),
the Start page's "Prepare this machine for a class" button.

What the first class needs on this machine, built in the background in this order, as jobs of the job queue
(engine/jobs.py: one at a time, detached, so a closed tab or a restarted studio loses nothing):

1. `cache`: the classroom run's WordPiece vocabulary and pre-training data (both lengths) in the cache folder
   (`python -m engine class cache`, which builds exactly what `python -m engine pretrain` builds before its first
   step, with `engine.pretraining.run.tokenizer_and_data`), so the class's own step-2 run starts training at once.
2. `reference`: a finished classroom run, `python -m engine pretrain --out <runs>/classroom-reference` with the
   defaults (REFERENCE_RUN): the Start page offers its checkpoints to step 3 while the class's own run trains, and
   does not count it as the class's step 2.
3. `probe_ready`: the probe-ready model, MiniLM continued with MLM + NSP (`probe_ready_argv`, PROBE_READY_RUN).
The two short parts come first: a class that starts before the third one ends has its steps 2 and 3 ready.

`prepare` is safe to run twice: a finished part is skipped, a queued or running one is not queued again, a cancelled
or failed run continues from its last checkpoint (`--resume`). `cancel` cancels the queued parts, then the running
one (which saves a checkpoint first). `status` says, per part, done / running / queued / cancelled / failed / to do,
and the minutes left on this machine: a running run's own pace (its training time so far over its share done), else
the measured figure (engine/measured.py) scaled by the part's own kind of speed check, which `prepare` ran here
(engine.ablations.timing.timed_check: the classroom step for the reference run, a step of the probe-ready recipe for
the probe-ready model), when the figure's machine has a reading of that check, else the figure as measured there.
Prepare's own state (the speed checks, the cache
folders built) is `<runs>/.class/`.
This module imports no torch until a command needs it (`class status` is quick).
"""
import argparse
import json
from dataclasses import dataclass
from pathlib import Path

from engine import measured
from engine.errors import EngineError
from engine.fileio import atomic_write_json
from engine.records import RUN_JSON, read_json_or_empty
from engine.status import CANCELLED, DEAD, FAILED, FINISHED, QUEUED, RUNNING

STOPPED = (CANCELLED.name, FAILED.name)  # a part that stopped before its end: resumed, not queued afresh

REFERENCE_RUN = "classroom-reference"  # the reference run's folder under the runs root (the Start page reads it)
STATE_DIR = ".class"  # under the runs root: prepare.json (the speed checks), cache.json (the cache folders built)
RUN_FLAGS: list = []  # the classroom run: `python -m engine pretrain` with its defaults (tests give tiny settings)
PART_KEYS = ("cache", "reference", "probe_ready")
ACTIVE = (QUEUED.name, RUNNING.name)


@dataclass(frozen=True)
class Part:
    key: str
    title: str
    argv: list  # the engine command the part's job runs
    run_dir: Path  # where its job writes (a run folder; for the cache part, the folder of its log and record)
    minutes: measured.Measured = None  # its measured wall time (None: not measured on its own)
    check: str = "classroom"  # the speed check that scales it to this machine (engine.ablations.timing.timed_check)
    minutes_fp32: measured.Measured = None  # its wall time in fp32, on a CPU without bf16 units (None: not measured)


def probe_ready_argv(root) -> list:
    """The probe-ready model's job: the recipe's defaults, so the command names only the init, corpus and folder."""
    from engine import cli
    from engine.pretraining.config import CONTINUED_PRETRAINING, PROBE_READY_INIT, PROBE_READY_RUN, PretrainConfig
    cfg = PretrainConfig(init=PROBE_READY_INIT, corpus=CONTINUED_PRETRAINING["corpus"], out=str(Path(root) / PROBE_READY_RUN),
                         quiet=True)
    return cli.argv(cfg, only=("init", "corpus", "out", "quiet"))


def parts(root) -> list:
    """The three parts, in the order they run."""
    from engine.pretraining.config import PROBE_READY_RUN
    root = Path(root).absolute()
    state = root / STATE_DIR
    return [
        Part("cache", "the classroom vocabulary and pre-training data, cached",
             ["class", "cache", "--runs-root", str(root), *RUN_FLAGS], state / "cache"),
        Part("reference", "a finished classroom run (the reference)",
             ["pretrain", *RUN_FLAGS, "--out", str(root / REFERENCE_RUN), "--quiet"], root / REFERENCE_RUN,
             measured.fact("classroom_run.minutes_bf16"), minutes_fp32=measured.fact("classroom_run.minutes_fp32")),
        Part("probe_ready", "the probe-ready model (MiniLM continued with MLM + NSP)", probe_ready_argv(root),
             root / PROBE_READY_RUN, measured.fact("probe_ready.minutes"), check="minilm",
             minutes_fp32=measured.fact("probe_ready.minutes_fp32")),
    ]


# ---------------------------------------------------------------------------------------------------------
# state

def _jobs(root, jobs=None):
    if jobs is not None:
        return jobs
    from engine.jobs import Jobs
    return Jobs(root)


def _latest_job(job_list: list, run_dir: Path) -> dict:
    """The newest job of the queue that writes `run_dir` (list_jobs is newest first), or None."""
    for job in job_list:
        if job.get("run_dir") and Path(job["run_dir"]) == Path(run_dir):
            return job
    return None


def cache_ready(root) -> bool:
    """The cache part's folders (recorded by `class cache`) are all still there."""
    data = read_json_or_empty(Path(root).absolute() / STATE_DIR / "cache.json").get("data") or []
    return bool(data) and all((Path(p) / "config.json").is_file() for p in data)


def _run_state(run_dir: Path) -> str:
    """The run folder's status (engine.runs.effective_status: a running run whose writer is gone is dead), or None."""
    if not (run_dir / RUN_JSON).is_file():
        return None
    from engine.runs import effective_status
    try:
        return effective_status(run_dir)
    except EngineError:
        return "failed"


def part_state(root, part: Part, job_list: list) -> str:
    """done | running | queued | cancelled | failed | todo."""
    job = _latest_job(job_list, part.run_dir)
    if part.key == "cache":
        if cache_ready(root):
            return "done"
        return job["status"] if job and job["status"] in ACTIVE + STOPPED else "todo"
    run = _run_state(part.run_dir)
    if run == FINISHED.name:
        return "done"
    if job and job["status"] in ACTIVE:
        return job["status"]
    if run in STOPPED + (DEAD.name, RUNNING.name):  # running: another process writes it (not this queue)
        return FAILED.name if run == DEAD.name else run
    return job["status"] if job and job["status"] in STOPPED else "todo"


def _checks(root) -> dict:
    """{kind: engine.ablations.timing.SpeedCheck} of the speed checks `prepare` ran here (none: {})."""
    recorded = read_json_or_empty(Path(root).absolute() / STATE_DIR / "prepare.json").get("checks") or {}
    from engine.ablations.timing import SpeedCheck
    return {kind: SpeedCheck(c["precision"], c["threads"], c["step_ms"], c.get("gpu", False)) for kind, c in recorded.items()}


def check_kinds(root) -> list:
    """The kinds of speed check the parts' estimates need, in order."""
    return list(dict.fromkeys(p.check for p in parts(root) if p.minutes is not None))


def estimate_minutes(part: Part, checks: dict) -> tuple:
    """(minutes, how): the part's measured time scaled to this machine by its kind of speed check (Part.check) when
    its machine has a reading of that check, else as measured there; (None, why) when it is not measured on its own."""
    m = part.minutes
    if m is None:
        return None, "not measured on its own (the classroom run's measured time started from an empty cache)"
    ref_ms = measured.MACHINES[m.machine].check(part.check)
    check = checks.get(part.check)
    if check is not None and ref_ms and not check.gpu:
        return m.value * check.factor(ref_ms), f"{m.text()} on {m.where}, scaled by this machine's speed check"
    how = f"as measured on {m.where}; no speed check of this machine scales it"
    if part.minutes_fp32 is not None:  # a CPU without bf16 units trains in fp32
        fp32 = part.minutes_fp32
        how += f" (in fp32, on a CPU without bf16 units: {fp32.text()} on {fp32.where})"
    return m.value, how


def _left_from_progress(run_dir: Path):
    """Minutes left from a running run's own pace: training seconds so far over the share of steps done."""
    from engine.runs import read_metrics, run_progress
    frac = run_progress(run_dir)["fraction"]
    elapsed = [r["elapsed"] for r in read_metrics(run_dir) if r.get("split", "train") == "train" and r.get("elapsed")]
    if not frac or frac < 0.02 or not elapsed:
        return None, frac
    return max(elapsed) * (1 - frac) / frac / 60, frac


def status(root, jobs=None) -> list:
    """[{key, title, state, job, minutes_left, how, step, total}] per part, in order (see the module docstring)."""
    from engine.runs import run_progress
    root = Path(root).absolute()
    job_list = _jobs(root, jobs).list_jobs()
    checks = _checks(root)
    out = []
    for p in parts(root):
        state = part_state(root, p, job_list)
        job = _latest_job(job_list, p.run_dir)
        row = {"key": p.key, "title": p.title, "state": state, "job": job["id"] if job else None,
               "minutes_left": None, "how": "", "step": None, "total": None}
        if state != "done":
            est, row["how"] = estimate_minutes(p, checks)
            frac = None
            if (p.run_dir / RUN_JSON).is_file():
                prog = run_progress(p.run_dir)
                row["step"], row["total"], frac = prog["step"], prog["total"], prog["fraction"]
            left, _ = _left_from_progress(p.run_dir) if state == RUNNING.name and frac else (None, None)
            if left is not None:
                row["minutes_left"], row["how"] = left, "from the run's own pace so far"
            elif est is not None:
                row["minutes_left"] = est * (1 - (frac or 0.0))
        out.append(row)
    return out


def minutes_left(rows: list) -> float:
    """The parts still to do, summed (those not measured count nothing)."""
    return sum(r["minutes_left"] or 0.0 for r in rows if r["state"] != "done")


# ---------------------------------------------------------------------------------------------------------
# prepare, cancel

def _resume_argv(part: Part) -> list:
    from engine import cli
    from engine.pretraining.config import PretrainConfig
    return cli.resume_argv(PretrainConfig, part.run_dir, quiet=True)


def prepare(root, jobs=None, speed_check=True) -> list:
    """Queue what is not done (see the module docstring); returns `status` after it. `speed_check`: time this machine
    first, each kind of speed check the parts need (seconds; skipped when recorded or while a part runs, which would
    slow it)."""
    root = Path(root).absolute()
    q = _jobs(root, jobs)
    job_list = q.list_jobs()
    states = {p.key: part_state(root, p, job_list) for p in parts(root)}
    checks = _checks(root)
    missing = [k for k in check_kinds(root) if k not in checks]
    if speed_check and missing and "running" not in states.values():
        from dataclasses import asdict

        from engine.ablations.timing import timed_check
        checks.update({kind: timed_check(kind) for kind in missing})
        atomic_write_json(root / STATE_DIR / "prepare.json", {"checks": {k: asdict(c) for k, c in checks.items()}})
    for p in parts(root):
        state = states[p.key]
        if state in ("done",) + ACTIVE:
            continue
        resumable = p.key != "cache" and (p.run_dir / RUN_JSON).is_file()
        argv = _resume_argv(p) if resumable else p.argv
        try:
            q.submit(argv, name=f"class: {p.key}", run_dir=str(p.run_dir))
        except EngineError as e:  # another prepare queued it in the meantime
            if "already has job" not in str(e):
                raise
    return status(root, jobs=q)


def cancel(root, jobs=None) -> list:
    """Cancel the parts' queued jobs, then the running one (a run saves a checkpoint first); returns `status`."""
    root = Path(root).absolute()
    q = _jobs(root, jobs)
    job_list = q.list_jobs()
    active = [j for p in parts(root) if (j := _latest_job(job_list, p.run_dir)) and j["status"] in ACTIVE]
    for job in sorted(active, key=lambda j: j["status"] == RUNNING.name):  # queued first: nothing starts after
        q.cancel(job["id"])
    return status(root, jobs=q)


def build_cache(root, flags: list) -> list:
    """`class cache`: the vocabulary and pre-training data `python -m engine pretrain FLAGS` builds before its first
    step, into the cache folder; records their folders in <runs>/.class/cache.json. Returns the data folders."""
    import tempfile

    from engine.cli import given
    from engine.corpora import load_corpus
    from engine.distributed import Dist
    from engine.pretraining.config import PretrainConfig, validate
    from engine.pretraining.run import build_parser, config_from_args, tokenizer_and_data
    cfg = config_from_args(given(PretrainConfig, build_parser(), [*flags, "--out", "unused"]))
    validate(cfg)
    with tempfile.TemporaryDirectory() as tmp:  # the run folder tokenizer_and_data saves its tokenizer into
        _, caches = tokenizer_and_data(cfg, load_corpus(cfg.corpus), Path(tmp), Dist(), resuming=False)
    data = [str(c.path) for c in caches]
    atomic_write_json(Path(root).absolute() / STATE_DIR / "cache.json", {"data": data, "flags": list(flags)})
    return data


# ---------------------------------------------------------------------------------------------------------
# the command

STATE_WORDS = {"done": "done", "running": "running", "queued": "queued", "cancelled": "cancelled (prepare resumes it)",
               "failed": "failed (prepare resumes it)", "todo": "to do"}


def describe(rows: list) -> str:
    """The status as lines for a terminal."""
    lines = []
    for i, r in enumerate(rows, 1):
        line = f"{i}. {r['title']}: {STATE_WORDS[r['state']]}"
        if r["step"] is not None and r["state"] != "done":
            line += f", step {r['step']} / {r['total'] or '?'}"
        if r["state"] != "done":
            line += f"; {r['minutes_left']:.0f} min left ({r['how']})" if r["minutes_left"] is not None else f"; {r['how']}"
        lines.append(line)
    left = minutes_left(rows)
    lines.append("everything is ready for the class" if all(r["state"] == "done" for r in rows)
                 else f"about {left:.0f} min left on this machine")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m engine class", description="prepare this machine for the first class")
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name, text in (("prepare", "queue what the first class needs (skips what is done; resumes what stopped)"),
                       ("status", "what is done, what runs and the time left"),
                       ("cancel", "cancel the queued and running parts (resume with prepare)")):
        p = sub.add_parser(name, help=text)
        p.add_argument("--runs-root", default=None, help="the runs folder (default $BERT_STUDIO_RUNS or ./runs)")
        if name == "prepare":
            p.add_argument("--no-speed-check", action="store_true", help="estimate from the measured times unscaled")
    c = sub.add_parser("cache", help="(a job of prepare) build the classroom run's vocabulary and data in the cache")
    c.add_argument("--runs-root", default=None)
    args, rest = ap.parse_known_args(argv)
    if rest and args.cmd != "cache":
        raise EngineError(f"class {args.cmd} takes only --runs-root; drop {' '.join(rest)}")
    from engine.runs import runs_root
    root = Path(args.runs_root) if args.runs_root else runs_root()
    if args.cmd == "cache":
        for d in build_cache(root, rest):
            print(f"cached {d}")
        return 0
    if args.cmd == "prepare":
        rows = prepare(root, speed_check=not args.no_speed_check)
    elif args.cmd == "cancel":
        rows = cancel(root)
    else:
        rows = status(root)
    print(describe(rows))
    return 0
