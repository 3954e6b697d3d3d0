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
3. `probe_ready`: the probe-ready model, MiniLM continued with MLM + NSP (`probe_ready_argv`, PROBE_READY_RUN), as
   many steps as fit in its budget at this machine's measured speed (`probe_ready_steps`: a faster CPU trains longer).
4. `bert_base`, optional: Google's bert-base-uncased (engine.hub.BERT_BASE) into the user's Hugging Face cache, with
   progress (`python -m engine class fetch`, `fetch_bert_base`), which the Probe and Attention pages then offer
   first. Offline (HF_HUB_OFFLINE set) prepare queues no job for it and the part is `skipped` with one line; with
   the Hub out of reach its job says so in one line and succeeds: the class needs it not.
The two short parts come first: a class that starts before the third one ends has its steps 2 and 3 ready.

`prepare` is safe to run twice: a finished part is skipped, a queued or running one is not queued again, a cancelled
or failed run continues from its last checkpoint (`--resume`). One prepare at a time per runs folder: it holds an
flock on `<runs>/.class/prepare.lock` throughout, and a second one refuses in one line naming the holder's pid.
What it finds is checked, not trusted:
- the cache part is done when every data folder `class cache` recorded opens as the run will open it (the loader's
  own checks, engine.pretraining.prepare.open_prepared); one that fails them is `damaged` (the loader's reason
  said), and the `class cache` job prepare queues sets it aside (renamed `.bad-*`, never deleted) and builds it again;
- a run part is done when its folder holds a finished run of the part's recipe (engine.ablations.reuse.training_key
  of its run.json config against that of the part's command line), not any finished run: a run of other settings
  there is `foreign`, named with what differs, never overwritten or queued into (move it away);
- its own state files are checked against what this code writes; a damaged one is set aside (`.bad-*`) with one
  line on stderr and its state recomputed;
- the states are decided after the speed check, which can take a minute; a check is skipped while a job of this
  runs folder runs (it would slow the job and read slow), and one during which a job started or taken at a load
  average above LOAD_FACTOR times the cores is recorded `under_load` (prepare.json "loaded"), not used, and not
  saved as the machine's speed (a good reading is kept; the next idle prepare times it again).
`cancel` cancels the queued parts, then the running one (which saves a checkpoint first). `status` says, per part,
done / running / queued / cancelled / failed / to do / damaged / not this part's run, and the time on this machine,
from the one estimator (`estimate`, which the Start page's steps and its Prepare panel ask too): a running run's own
pace (its training time so far over its share done); else the measured figure (engine/measured.py) x this machine's
reading of the part's kind of work (`readings`: the classroom step for the reference run, a step of the probe-ready
recipe for the probe-ready model) / that kind's reading where the figure was measured. A reading is, first, the
clock: a part of that kind that finished here in one go implies it (`clock_minutes`); else the speed check `prepare`
ran here (engine.ablations.timing.timed_check, the fastest of timing.CHECK_ROUNDS); without either, the figure as measured
there. A part done here in one go shows what it took beside what prepare estimated when it queued it.
Prepare's own state (the speed checks, the cache folders built, its lock) is `<runs>/.class/`.
This module imports no torch until a command needs it (`class status` imports it to check what it finds: a cached
data folder, opened as the run opens it, and a finished run's settings against its part's command line).
"""
import argparse
import functools
import json
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from engine import measured
from engine.errors import EngineError
from engine.fileio import atomic_write_json, held_flock
from engine.records import RUN_JSON, read_json_or_empty
from engine.commands import PRETRAIN, kind_of
from engine.status import CANCELLED, DEAD, FAILED, FINISHED, QUEUED, RUNNING, Status, status_of

REFERENCE_RUN = "classroom-reference"  # the reference run's folder under the runs root (the Start page reads it)
STATE_DIR = ".class"  # under the runs root: prepare.json (the speed checks), cache.json (the cache folders built)
LOCK = "prepare.lock"  # in STATE_DIR: held (flock) by the one prepare at work, its pid inside
RUN_FLAGS: list = []  # flags over the classroom recipe for the reference run (none: the recipe itself; tests give tiny ones)
PART_KEYS = ("cache", "reference", "probe_ready")
LOAD_FACTOR = 2.0  # a load average above this many times the cores: a speed check taken then reads the machine slow


@dataclass(frozen=True)
class PartState:
    """What a part can be, each state described once: its own (done, to do, damaged, someone else's run) or its
    job's status (engine.status) while a job builds it, or after one stopped. A `status` row's "state" is the name;
    callers ask the object (`part_state_of(row["state"]) is DONE`, `.queued_by_prepare`) instead of comparing names."""
    name: str  # a `status` row's "state"
    icon: str  # how the Start page's Prepare panel marks it
    words: str  # how `class status` says it in a terminal
    panel: str  # how the Start page's Prepare panel says it
    queued_by_prepare: bool  # prepare queues a job for it: neither done, nor someone else's run, nor in the queue
    status: Status | None = None  # the job status (engine.status) it shows; None for a part's own states
    ready: bool = False  # nothing left to do for the class (done, or an optional part skipped)


DONE = PartState("done", "✅", "done", "done", False, ready=True)
# an optional part (Google's bert-base-uncased) that could not be fetched: offline, or the Hub out of reach; the
# class needs it not, and prepare tries again when online
SKIPPED = PartState("skipped", "⏭️", "skipped", "skipped", True, ready=True)
TODO = PartState("todo", "▫️", "to do", "to do", True)
# the cache part's folders are there but fail the checks the loader makes when it opens them
DAMAGED = PartState("damaged", "⚠️", "damaged (prepare builds it again)", "damaged (the Prepare button builds it again)", True)
# a run part's folder holds a finished run of other settings: named, never overwritten
FOREIGN = PartState("foreign", "⛔", "not this part's run", "not this part's run", False)
# its job's statuses, as a part shows them (a dead run shows as failed)
PART_STATES = {s.name: s for s in (
    DONE, TODO, DAMAGED, FOREIGN, SKIPPED,
    PartState(QUEUED.name, "⏳", "queued", "queued", False, QUEUED),
    PartState(RUNNING.name, "🟢", "running", "running", False, RUNNING),
    PartState(CANCELLED.name, "⏹️", "cancelled (prepare resumes it)", "cancelled: the Prepare button continues it", True,
              CANCELLED),
    PartState(FAILED.name, "❌", "failed (prepare resumes it)",
              "failed: the Prepare button continues it (the Jobs page has its log)", True, FAILED))}


def part_state_of(name) -> PartState:
    """The PartState called `name` (a `status` row's "state", or a job status); another name (a queue record of
    another version) is shown as itself and queued again, as a part that is not done."""
    known = PART_STATES.get(name) if isinstance(name, str) else None
    return known or PartState(str(name), "❔", str(name), str(name), True)


@dataclass(frozen=True)
class Part:
    key: str
    title: str
    argv: list  # the engine command the part's job runs
    run_dir: Path  # where its job writes (a run folder; for the cache part, the folder of its log and record)
    minutes: measured.Measured = None  # its measured wall time (None: not measured on its own)
    check: str = "classroom"  # the speed check that scales it to this machine (engine.ablations.timing.timed_check)
    minutes_fp32: measured.Measured = None  # its wall time in fp32, on a CPU without bf16 units (None: not measured)
    no_time: str = "not measured on its own (the classroom run's measured time started from an empty cache)"
    scale: float = 1.0  # its share of the measured figure's work (the probe-ready model's steps here over the figure's)
    length: str = ""  # how its length was chosen, in words ("" when it is the recipe's)
    scale_fp32: float = 1.0  # the same share of the fp32 figure's work (measured at its own length)


def _recorded_steps(run_dir: Path):
    """The steps a started run trains to (its run.json config), or None (no run, or a record this code never writes)."""
    steps = (read_json_or_empty(run_dir / RUN_JSON).get("config") or {}).get("steps")
    return steps if type(steps) is int and 1 <= steps <= 10 ** 7 else None


def probe_ready_steps(root, record: dict = None) -> tuple:
    """(steps, how in words): the probe-ready model's length on this machine. Once its run has started, the steps it
    trains to (its run.json: a resumed or finished run keeps its length whatever a later check reads). Else as many
    of the continued recipe's steps as fit in engine/recipes.py PROBE_READY_BUDGET minutes here, by the one estimator
    (`estimate` of the recipe's measured time x this machine's speed check of a probe-ready step, prepare.json), within
    PROBE_READY_STEP_RANGE, rounded to 50. Without a good reading on this CPU: the recipe's own steps."""
    from engine import recipes
    base = recipes.CONTINUED.settings["steps"]
    run_dir = Path(root).absolute() / recipes.PROBE_READY_RUN
    started = _recorded_steps(run_dir)
    if started is not None:
        return started, (f"{started} steps, as its run started" if started != base else "")
    c = _checks(root, record).get("minilm")
    if c is None or c.gpu:
        return base, ""
    reading = Reading(c.step_ms, f"this machine's speed check read {c.step_ms:.0f} ms")
    est = estimate(measured.fact("probe_ready.minutes"), "minilm", {"minilm": reading})
    if not est.here:  # the figure's machine has no reading to scale it by
        return base, ""
    lo, hi = recipes.PROBE_READY_STEP_RANGE
    measured_steps = measured.fact("probe_ready.steps").value  # the steps the measured minutes trained
    steps = min(hi, max(lo, 50 * round(measured_steps * recipes.PROBE_READY_BUDGET / est.minutes / 50)))
    return steps, (f"{steps} steps, what fits in {recipes.PROBE_READY_BUDGET:g} min here ({measured_steps:.0f} would "
                   f"take {est.minutes:.1f} min)")


def probe_ready_argv(root, steps: int = None) -> list:
    """The probe-ready model's job: the recipe's defaults, so the command names only the init, corpus and folder, and
    its length here when that is not the recipe's (`probe_ready_steps`; `steps` given: that one)."""
    from engine import cli
    from engine import recipes
    from engine.pretraining.config import PretrainConfig
    steps = probe_ready_steps(root)[0] if steps is None else steps
    cfg = PretrainConfig.for_init(recipes.PROBE_READY_INIT, out=str(Path(root) / recipes.PROBE_READY_RUN), quiet=True,
                                  steps=steps)
    own = ("steps",) if steps != recipes.CONTINUED.settings["steps"] else ()
    command, *flags = cli.argv(cfg, only=("init", "corpus", *own, "out", "quiet"))
    return [command, "--recipe", recipes.CONTINUED.name, *flags]


BERT_BASE_PART = "bert_base"  # the optional part: Google's bert-base-uncased into the Hugging Face cache, when online


def parts(root) -> list:
    """The four parts, in the order they run (the last one only when online: `fetch_bert_base`)."""
    from engine import recipes
    from engine.recipes import PROBE_READY_RUN
    root = Path(root).absolute()
    state = root / STATE_DIR
    steps, length = probe_ready_steps(root)
    return [
        Part("cache", "the classroom vocabulary and pre-training data, cached",
             ["class", "cache", "--runs-root", str(root), *RUN_FLAGS], state / "cache"),
        Part("reference", "a finished classroom run (the reference)",
             ["pretrain", "--recipe", recipes.CLASSROOM.name, *RUN_FLAGS, "--out", str(root / REFERENCE_RUN), "--quiet"],
             root / REFERENCE_RUN,
             measured.fact("classroom_run.minutes_bf16"), minutes_fp32=measured.fact("classroom_run.minutes_fp32")),
        Part("probe_ready", "the probe-ready model (MiniLM continued with MLM + NSP)", probe_ready_argv(root, steps),
             root / PROBE_READY_RUN, measured.fact("probe_ready.minutes"), check="minilm",
             minutes_fp32=measured.fact("probe_ready.minutes_fp32"),
             scale=steps / measured.fact("probe_ready.steps").value, length=length,
             scale_fp32=steps / measured.fact("probe_ready.steps_fp32").value),
        Part(BERT_BASE_PART, "Google's bert-base-uncased in the Hugging Face cache (when online)",
             ["class", "fetch", "--runs-root", str(root)], state / "bert-base",
             no_time="a download: its time is the network's"),
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


def _state_file(root, name: str) -> Path:
    return Path(root).absolute() / STATE_DIR / name


def _read_state(root, name: str, check) -> dict:
    """<runs>/.class/<name> as a dict after `check(data)` (ValueError, TypeError or KeyError on a record this code
    never writes); {} when it is missing, and when it is damaged, which is set aside as <name>.bad-<ns> with one line
    on stderr so that its state is recomputed (and the file kept for a look)."""
    path = _state_file(root, name)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        check(data)
        return data
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, TypeError, KeyError) as e:  # UnicodeDecodeError is a ValueError
        why = str(e) or type(e).__name__
    bad = path.with_name(f"{name}.bad-{time.time_ns()}")
    try:
        os.replace(path, bad)
    except OSError as e:
        if path.exists():
            print(f"warning: {path} is damaged ({why}) and could not be set aside ({e.strerror or e}); it is ignored",
                  file=sys.stderr)
        return {}  # (else another reader set it aside first)
    print(f"warning: {path} was damaged ({why}); set aside as {bad.name}, its state recomputed", file=sys.stderr)
    return {}


def _check_cache_record(d) -> None:
    """cache.json as `build_cache` writes it: {"data": [folder, ...], "flags": [str, ...]}."""
    if not isinstance(d, dict):
        raise ValueError("not a JSON object")
    data, flags = d.get("data", []), d.get("flags", [])
    if not isinstance(data, list) or not all(isinstance(p, str) and p for p in data):
        raise ValueError(f"its data is {json.dumps(data)[:80]}, not a list of folders")
    if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
        raise ValueError(f"its flags are {json.dumps(flags)[:80]}, not a list of strings")


def _check_speed_record(kind, c) -> None:
    number = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)  # noqa: E731
    if not (isinstance(c, dict) and isinstance(c.get("precision"), str) and type(c.get("threads")) is int
            and c["threads"] >= 1 and number(c.get("step_ms")) and math.isfinite(c["step_ms"]) and c["step_ms"] > 0
            and isinstance(c.get("gpu", False), bool)):
        raise ValueError(f"its {kind} check {json.dumps(c)[:80]} is not a speed check")


def _check_prepare_record(d) -> None:
    """prepare.json as `prepare` writes it: {"checks": {kind: SpeedCheck}, "loaded": {kind: SpeedCheck + why},
    "estimates": {part key: minutes}}."""
    if not isinstance(d, dict):
        raise ValueError("not a JSON object")
    for group in ("checks", "loaded"):
        checks = d.get(group, {})
        if not isinstance(checks, dict):
            raise ValueError(f"its {group} is not an object")
        for kind, c in checks.items():
            _check_speed_record(kind, c)
    estimates = d.get("estimates", {})
    if not isinstance(estimates, dict) or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                  and math.isfinite(v) and v >= 0 for v in estimates.values()):
        raise ValueError(f"its estimates {json.dumps(estimates)[:80]} are not minutes per part")


def _prepare_record(root) -> dict:
    return _read_state(root, "prepare.json", _check_prepare_record)


def _complete(folder) -> bool:
    """The data folder `class cache` prepares (one part, engine.pretraining.prepare.build_pretraining_data) has its
    manifest, written last."""
    return (Path(folder) / "part-0-of-1" / "manifest.json").is_file()


def data_problem(folder) -> str:
    """Why a pre-training run could not open the data folder (the checks the loader makes at open:
    engine.pretraining.prepare.open_prepared, its one-line reason), or "" when it opens."""
    from engine.pretraining.prepare import open_prepared
    try:
        open_prepared(folder)
    except EngineError as e:
        return str(e)
    return ""


def cache_state(root) -> tuple:
    """(DONE, "") when every data folder `class cache` recorded (cache.json) opens as the run opens it; (DAMAGED, the
    loader's reason) when one is there but fails those checks; (TODO, "") when none is recorded or one is gone."""
    data = _read_state(root, "cache.json", _check_cache_record).get("data") or []
    if not data or not all(_complete(p) for p in data):  # a folder of the in-memory builder's layout: built again
        return TODO, ""
    for p in data:
        problem = data_problem(p)
        if problem:
            return DAMAGED, problem
    return DONE, ""


def cache_ready(root) -> bool:
    """The cache part's folders (recorded by `class cache`) are all there and open as the run will open them."""
    return cache_state(root)[0] is DONE


def _run_state(run_dir: Path) -> str:
    """The run folder's status (engine.runs.effective_status: a running run whose writer is gone is dead), or None."""
    if not (run_dir / RUN_JSON).is_file():
        return None
    from engine.runs import effective_status
    try:
        return effective_status(run_dir)
    except EngineError:
        return FAILED.name


def recipe_config(argv) -> dict:
    """The config (as run.json records it) of a run of a part's command `python -m engine ARGV` (Part.argv): the
    settings the command reads, an init's architecture laid over them as the run lays it (engine.pretraining.init)."""
    from dataclasses import replace

    from engine.cli import given
    from engine.pretraining.config import PretrainConfig, config_dict
    from engine.pretraining.init import read_init_settings
    from engine.pretraining.run import build_parser, config_from_args
    cfg = config_from_args(given(PretrainConfig, build_parser(), list(argv[1:])))
    if cfg.init:
        cfg = replace(cfg, **read_init_settings(cfg.init))
    return config_dict(cfg)


@functools.lru_cache(maxsize=8)
def _recipe_key(argv: tuple) -> dict:
    """What a part's command trains: engine.ablations.reuse.training_key of its `recipe_config`."""
    from engine.ablations.reuse import training_key
    return training_key(recipe_config(argv))


def run_config(config: dict):
    """The PretrainConfig a run trained, from its run.json config (a setting it does not record: the classroom
    recipe's, the default of the code that wrote it; a key this code does not know: left out)."""
    from engine.pretraining.config import PretrainConfig
    known = {k: v for k, v in config.items() if k in PretrainConfig.__dataclass_fields__}
    if "mask_ratios" in known:
        known["mask_ratios"] = tuple(known["mask_ratios"])
    return PretrainConfig.classroom(**known)


def _run_key(config: dict) -> dict:
    """What a run trained, from its run.json config (`run_config`)."""
    from engine.ablations.reuse import training_key
    from engine.pretraining.config import config_dict
    return training_key(config_dict(run_config(config)))


DEFINING = ("init", "objective", "corpus", "steps", "layers", "hidden", "heads", "seq_len", "phase2_seq_len")


def foreign_run(part: Part) -> str:
    """"" when the part's folder holds a finished run of the part's recipe; else one line naming the folder and
    what differs (the run is someone else's: the class's own must not be overwritten or counted as it)."""
    d = part.run_dir
    fix = "move it away (or rename it), then prepare again"
    info = read_json_or_empty(d / RUN_JSON)
    if kind_of(info.get("kind", PRETRAIN.name)) is not PRETRAIN:  # (a run.json without a kind: a pre-training)
        return f"{d} holds a finished {info.get('kind')} run, not this part's pre-training; {fix}"
    config = info.get("config")
    if not isinstance(config, dict):
        return f"{d} holds a finished run whose run.json records no settings; {fix}"
    try:
        theirs = _run_key(config)
    except (TypeError, ValueError, EngineError) as e:
        return f"{d} holds a finished run whose settings cannot be read ({e}); {fix}"
    ours = _recipe_key(tuple(part.argv))
    differ = [k for k in ours.keys() | theirs.keys() if ours.get(k) != theirs.get(k)]
    if not differ:
        return ""
    differ.sort(key=lambda k: (DEFINING.index(k) if k in DEFINING else len(DEFINING), k))
    word = lambda v: "none" if v is None else v  # noqa: E731
    said = "; ".join(f"{k.replace('_', '-')} {word(theirs.get(k))} there, {word(ours.get(k))} in this part's recipe"
                     for k in differ[:3])
    more = f" and {len(differ) - 3} more" if len(differ) > 3 else ""
    return f"{d} holds a finished run of other settings ({said}{more}); {fix}"


def part_state_and_note(root, part: Part, job_list: list) -> tuple:
    """(PartState, note): done | running | queued | cancelled | failed | todo | damaged | foreign, and for the last
    two one line saying why (the loader's reason; the folder and what differs)."""
    job = _latest_job(job_list, part.run_dir)
    active = job is not None and status_of(job["status"]).active
    # stopped before its end (failed or cancelled: a queue holds no "dead"): resumed, not queued afresh
    stopped = job is not None and status_of(job["status"]).resumable
    if part.key == BERT_BASE_PART:
        return _bert_base_state(root, job, active, stopped)
    if part.key == "cache":
        if active:  # its job builds or finds it: not checked while it writes
            return part_state_of(job["status"]), ""
        state, note = cache_state(root)
        if state is not TODO:
            return state, note
        return (part_state_of(job["status"]), "") if stopped else (TODO, "")
    run = status_of(_run_state(part.run_dir))
    if run is FINISHED:
        note = foreign_run(part)
        return (FOREIGN, note) if note else (DONE, "")
    if active:
        return part_state_of(job["status"]), ""
    if run.resumable or run is RUNNING:  # running: another process writes it (not this queue)
        return part_state_of((FAILED if run is DEAD else run).name), ""
    return (part_state_of(job["status"]), "") if stopped else (TODO, "")


def _check_fetch_record(d) -> None:
    """bert-base.json as `fetch_bert_base` writes it: {} or {"skipped": its line}."""
    if not isinstance(d, dict) or not isinstance(d.get("skipped", ""), str):
        raise ValueError("not {} or {\"skipped\": a line}")


def _bert_base_state(root, job, active: bool, stopped: bool) -> tuple:
    """The optional part's (PartState, note): done once the hub cache holds it; skipped, saying why, while
    HF_HUB_OFFLINE is set (prepare queues nothing then) or after its job found the Hub out of reach."""
    from engine import hub
    if active:
        return part_state_of(job["status"]), ""
    if hub.cached(hub.BERT_BASE) is not None:
        return DONE, ""
    if hub.offline():
        return SKIPPED, skipped_line("HF_HUB_OFFLINE is set")
    line = _read_state(root, "bert-base.json", _check_fetch_record).get("skipped")
    if line and job is not None and status_of(job["status"]) is FINISHED:
        return SKIPPED, line
    return (part_state_of(job["status"]), "") if stopped else (TODO, "")


def skipped_line(why: str) -> str:
    """The one line of a skipped fetch of Google's bert-base-uncased."""
    from engine import hub
    return (f"{hub.BERT_BASE} not fetched: {why}; the class does not need it (the Probe and Attention pages offer the "
            f"probe-ready model), and `python -m engine class prepare` fetches it once online")


def fetch_bert_base(root, stream=None) -> str:
    """`class fetch`, the optional part's job: Google's bert-base-uncased into the user's Hugging Face cache with
    progress (engine.hub.download); nothing to do when the cache holds it; offline (HF_HUB_OFFLINE) or with the Hub
    out of reach, skipped, never an error: the class needs it not. Records the skip for `status` (.class/
    bert-base.json) and returns the one line it says."""
    from engine import hub
    skipped = ""
    if hub.cached(hub.BERT_BASE) is not None:
        line = f"{hub.BERT_BASE} is in the Hugging Face cache {hub.cache_dir()}; the Probe and Attention pages offer it first"
    elif hub.offline():
        line = skipped = skipped_line("HF_HUB_OFFLINE is set")
    else:
        try:
            hub.download(hub.BERT_BASE, stream=stream)
            line = f"fetched {hub.BERT_BASE} into the Hugging Face cache {hub.cache_dir()}; the Probe and Attention pages offer it first"
        except hub.NotCached:
            line = skipped = skipped_line("the Hugging Face Hub could not be reached")
        except EngineError as e:
            line = skipped = skipped_line(str(e))
    atomic_write_json(_state_file(root, "bert-base.json"), {"skipped": skipped} if skipped else {})
    return line


def part_state(root, part: Part, job_list: list) -> PartState:
    """done | running | queued | cancelled | failed | todo | damaged | foreign (`part_state_and_note`)."""
    return part_state_and_note(root, part, job_list)[0]


def _checks(root, record: dict = None) -> dict:
    """{kind: engine.ablations.timing.SpeedCheck} of the good speed checks `prepare` ran here (none: {}), not those
    taken under load."""
    recorded = (_prepare_record(root) if record is None else record).get("checks") or {}
    from engine.ablations.timing import SpeedCheck
    return {kind: SpeedCheck(c["precision"], c["threads"], c["step_ms"], c.get("gpu", False)) for kind, c in recorded.items()}


def check_kinds(root) -> list:
    """The kinds of speed check the parts' estimates need, in order."""
    return list(dict.fromkeys(p.check for p in parts(root) if p.minutes is not None))


# ---------------------------------------------------------------------------------------------------------
# the one estimator: every time the class preparation and the Start page show

@dataclass(frozen=True)
class Reading:
    """This machine's speed at one kind of work, as the step time (ms) of that kind's speed check
    (engine.ablations.timing.timed_check): read by the check itself, or implied by a part's own wall time here."""
    step_ms: float
    said: str  # how it was read, in words


@dataclass(frozen=True)
class Estimate:
    """How long some work takes on this machine (`estimate`): its minutes (None: not estimated), how they were
    reached (a help icon's text), whether they are scaled to this machine (`here`) and whether they are an upper
    bound (`under`: a CPU's figure where a GPU trains)."""
    minutes: float | None
    how: str
    here: bool = True
    under: bool = False

    def clause(self, minutes: float = None, left: bool = False) -> str:
        """One short clause: "about N min here", "about H h MM min left here", "about N min" (as measured on
        another machine), "under N min here" (a GPU); "" when not estimated. `minutes`: another share of it."""
        m = self.minutes if minutes is None else minutes
        if m is None:
            return ""
        whole = int(round(m))
        text = ("under a minute" if m < 1 else f"about {whole} min" if whole < 90
                else f"about {whole // 60} h {whole % 60:02d} min")
        if self.under and m >= 1:
            text = "under " + text.removeprefix("about ")
        return text + (" left" if left else "") + (" here" if self.here else "")


def estimate(figure: measured.Measured, kind: str, readings: dict, fp32: measured.Measured = None,
             precision: str = "bf16", device: str = "cpu") -> Estimate:
    """THE estimator (class prepare before and after its speed check, `class status`, the Start page's steps and its
    Prepare panel all ask it): the measured figure (engine/measured.py, wall minutes on a 2-core CPU) x this
    machine's reading of the figure's kind of work (`readings`: {kind: Reading}) / the same kind's reading on the
    machine the figure was measured on (Machine.check). Without a reading here, or where the figure's machine has
    none of that kind: the figure as measured there (`fp32`'s, when this CPU trains in fp32 and it is given), not
    scaled (`here` False). On a GPU (`device` "cuda"): at most the CPU's figure."""
    if device == "cuda":
        return Estimate(figure.value, f"{figure.text()} on {figure.where}, a 2-core CPU; a GPU trains faster (not "
                                      "measured)", under=True)
    reading, ref_ms = readings.get(kind), measured.MACHINES[figure.machine].check(kind)
    if reading is not None and ref_ms:
        ratio = reading.step_ms / ref_ms
        return Estimate(figure.value * ratio, f"{figure.text()} on {figure.where} x {ratio:.2f}: {reading.said}, "
                                              f"{reading.step_ms:.0f} ms a step, against {ref_ms:.0f} ms there")
    if precision == "fp32" and fp32 is not None:
        figure = fp32
    why = ("no reading of this machine yet (`class prepare`, the Start page's Prepare button, times it)" if reading is None
           else f"{measured.MACHINES[figure.machine].name} has no reading of this kind of step to scale it by")
    return Estimate(figure.value, f"{figure.text()} as measured on {figure.where}; {why}", here=False)


@functools.lru_cache(maxsize=1)
def machine() -> tuple:
    """(the precision pre-training picks here, "cpu" | "cuda"): what `--device auto` trains on."""
    from engine.device import default_precision, resolve_device
    dev = resolve_device("auto").type
    return default_precision(dev), dev


def clock_minutes(part: Part) -> float | None:
    """The part's own wall time on this machine, in minutes: its run finished in one go here (run.json: finished,
    one start, this host, its start and end times); else None (resumed, copied from another machine, not done)."""
    import socket
    from datetime import datetime
    info = read_json_or_empty(part.run_dir / RUN_JSON)
    if status_of(info.get("status")) is not FINISHED or info.get("starts") != 1 or info.get("host") != socket.gethostname():
        return None
    try:
        seconds = (datetime.fromisoformat(info["ended"]) - datetime.fromisoformat(info["started"])).total_seconds()
    except (KeyError, TypeError, ValueError):
        return None
    return seconds / 60 if seconds > 0 else None


def readings(root, record: dict = None, done: set = None) -> dict:
    """{kind: Reading}: this machine's speed at each kind of work the estimates scale by. The clock first: a part
    of that kind that finished here in one go (`clock_minutes`) is the work itself timed here, so it implies the
    kind's step time (the figure's machine's reading x the time here / the figure). Else the good speed check
    `prepare` recorded. `done`: the keys of the parts known done (else each finished run's recipe is checked)."""
    out = {kind: Reading(c.step_ms, f"this machine's speed check read {c.step_ms:.0f} ms") for kind, c in
           _checks(root, record).items() if not c.gpu}
    for p in parts(root):
        ref_ms = measured.MACHINES[p.minutes.machine].check(p.check) if p.minutes is not None else None
        took = clock_minutes(p) if ref_ms and (done is None or p.key in done) else None
        if took is None or (done is None and foreign_run(p)):
            continue
        out[p.check] = Reading(ref_ms * took / (p.minutes.value * p.scale), f"{p.title} took {took:.1f} min here")
    return out


def part_estimate(root, key: str, found: dict = None, on: tuple = None) -> Estimate:
    """A part's whole time on this machine (`estimate` of its measured figure; `found`: `readings` already read;
    `on`: (precision, device), default `machine()`). The reference part is the classroom run, so this is also the
    class's own step-2 run (the Start page asks it)."""
    p = next(p for p in parts(root) if p.key == key)
    if p.minutes is None:
        return Estimate(None, p.no_time)
    precision, device = on or machine()
    est = estimate(p.minutes, p.check, readings(root) if found is None else found, p.minutes_fp32, precision, device)
    # the share of the figure's work at this part's length: of the fp32 figure where `estimate` gave it unscaled
    scale = p.scale_fp32 if not est.here and precision == "fp32" and p.minutes_fp32 is not None else p.scale
    if scale == 1.0 or est.minutes is None:
        return est
    return Estimate(est.minutes * scale, f"{est.how}; x {scale:.2f}: {p.length or 'its steps'}", est.here, est.under)


def work_fraction(config: dict, step: int, total: int = None) -> float | None:
    """The share of a pre-training's work done after `step` of its `total` steps (default: the config's): its steps
    weighted by each phase's FLOPs a step (engine.ablations.planner.step_flops: the classroom run's last 30% at 128
    tokens cost about four times its first steps at 32), the heads-first steps a third of a step (the frozen encoder
    runs forward only: no backward, no update of its weights), from its run.json `config`; None when that cannot be
    read."""
    from dataclasses import replace

    from engine.ablations.planner import step_flops
    try:
        cfg = run_config(config)
        cfg = replace(cfg, steps=int(total)) if total else cfg
        second = cfg.phase2_steps()
        first = cfg.steps - second
        f1 = step_flops(cfg)
        f2 = step_flops(replace(cfg, seq_len=cfg.phase2_seq_len)) if second else 0.0
    except (TypeError, ValueError, KeyError, EngineError):
        return None
    frozen = min(cfg.heads_first_steps(), first)

    def work(s):  # the work of the first s steps
        return (min(s, frozen) * f1 / 3 + max(0, min(s, first) - frozen) * f1
                + max(0, min(s, cfg.steps) - first) * f2)
    return work(step) / work(cfg.steps)


def _left_from_progress(run_dir: Path):
    """Minutes left from a running run's own pace: training seconds so far over the share of its work done
    (`work_fraction`; the share of steps when its settings cannot be read)."""
    from engine.runs import read_metrics, run_progress
    prog = run_progress(run_dir)
    frac = prog["fraction"]
    elapsed = [r["elapsed"] for r in read_metrics(run_dir) if r.get("split", "train") == "train" and r.get("elapsed")]
    if not frac or frac < 0.02 or not elapsed:
        return None, frac
    config = read_json_or_empty(run_dir / RUN_JSON).get("config")
    work = work_fraction(config, prog["step"], prog["total"]) if isinstance(config, dict) and prog["step"] else None
    share = work if work else frac
    return max(elapsed) * (1 - share) / share / 60, frac


def _row_time(root, p: Part, state: PartState, found: dict, record: dict) -> dict:
    """A status row's time fields: a part to do or under way, its estimate (`part_estimate`) less the share done, or
    its own pace once it runs; a part done here in one go, what it took (`clock_minutes`) and what prepare
    estimated for it when it queued it (prepare.json "estimates")."""
    from engine.runs import run_progress
    row = {"minutes_left": None, "how": "", "here": True, "step": None, "total": None, "took": None,
           "estimated": (record.get("estimates") or {}).get(p.key)}
    if state.ready:
        row["took"] = clock_minutes(p) if p.minutes is not None and state is DONE else None
        return row
    est = part_estimate(root, p.key, found)
    row["how"], row["here"] = est.how, est.here
    slow = (record.get("loaded") or {}).get(p.check)
    if est.minutes is not None and slow and p.check not in found:
        row["how"] += (f"; this machine's last speed check of it ({slow['step_ms']:.0f} ms) was taken under load "
                       f"({slow.get('why') or 'busy'}), so it is not used")
    frac = None
    if state is not FOREIGN and (p.run_dir / RUN_JSON).is_file():  # (a foreign run's progress is not this part's)
        prog = run_progress(p.run_dir)
        row["step"], row["total"], frac = prog["step"], prog["total"], prog["fraction"]
    left, _ = _left_from_progress(p.run_dir) if state.status is RUNNING and frac else (None, None)
    if left is not None:
        row["minutes_left"], row["how"], row["here"] = left, "from the run's own pace so far", True
    elif est.minutes is not None:
        row["minutes_left"] = est.minutes * (1 - (frac or 0.0))
    return row


def status(root, jobs=None) -> list:
    """[{key, title, state, note, job, minutes_left, how, here, step, total, took, estimated}] per part, in order
    (see the module docstring; the time fields: `_row_time`)."""
    root = Path(root).absolute()
    job_list = _jobs(root, jobs).list_jobs()
    record = _prepare_record(root)
    states = [(p, *part_state_and_note(root, p, job_list)) for p in parts(root)]
    found = readings(root, record, done={p.key for p, state, _ in states if state is DONE})
    out = []
    for p, state, note in states:
        job = _latest_job(job_list, p.run_dir)
        out.append({"key": p.key, "title": p.title, "state": state.name, "note": note, "job": job["id"] if job else None,
                    **_row_time(root, p, state, found, record)})
    return out


def minutes_left(rows: list) -> float:
    """The parts still to do, summed (those not measured count nothing)."""
    return sum(r["minutes_left"] or 0.0 for r in rows if not part_state_of(r["state"]).ready)


# ---------------------------------------------------------------------------------------------------------
# prepare, cancel

def _resume_argv(part: Part) -> list:
    from engine import cli
    from engine.pretraining.config import PretrainConfig
    return cli.resume_argv(PretrainConfig, part.run_dir, quiet=True)


def prepare_lock(root):
    """Hold <runs>/.class/prepare.lock while one prepare works (engine.fileio.held_flock), else refuse in one line
    naming the holder's pid: two at once would queue parts twice and time the machine while the other's parts run."""
    root_text = Path(root).absolute()
    return held_flock(_state_file(root, LOCK), f"pid {os.getpid()}",
                      lambda holder: f"another `class prepare` ({holder or 'pid unknown'}) is preparing {root_text} now; "
                                     "wait for it to end (`python -m engine class status` shows the parts), then prepare "
                                     "again if anything is left",
                      "check the runs folder's permissions")


def _busy(root: Path, job_list: list) -> str:
    """What of this runs folder is training now, as words ("" when nothing): its queue's running jobs, and runs
    under it whose writer is alive (a run started in a terminal)."""
    from engine.runs import effective_status
    said = [f"job {j['id']} ({j.get('name') or 'unnamed'}) was running" for j in job_list if status_of(j.get("status")) is RUNNING]
    queued = {str(Path(j["run_dir"])) for j in job_list if isinstance(j.get("run_dir"), str) and status_of(j.get("status")) is RUNNING}
    for run_json in [*root.glob(f"*/{RUN_JSON}"), *root.glob(f"studies/*/runs/*/{RUN_JSON}")]:
        try:
            if str(run_json.parent) not in queued and status_of(effective_status(run_json.parent)) is RUNNING:
                said.append(f"run {run_json.parent.name} was training")
        except (EngineError, OSError):
            continue
    return "; ".join(said)


def _offline() -> bool:
    from engine import hub
    return hub.offline()


def _machine_load() -> str:
    """The load average over the last minute as words when it is above LOAD_FACTOR times the cores, else ""."""
    try:
        load = os.getloadavg()[0]
    except (OSError, AttributeError):
        return ""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return f"load average {load:.1f} on {cores} cores" if load > LOAD_FACTOR * cores else ""


def _best_check(root: Path, q, kind: str) -> tuple:
    """(the fastest of CHECK_ROUNDS readings of speed check `kind`, as a dict; "" or why it was taken under load).
    Other work on the machine only slows a reading, and a few seconds of it (a browser repainting, another process's
    burst) are enough to read the machine several times slower than it trains; the 1-minute load average lags such
    bursts. A round during which a job of this runs folder started, or taken at a high load average, ends it."""
    from dataclasses import asdict

    from engine.ablations.timing import CHECK_ROUNDS, timed_check
    best = None
    for _ in range(CHECK_ROUNDS):
        before = _machine_load()
        check = asdict(timed_check(kind))
        why = "; ".join(w for w in (before, _busy(root, q.list_jobs())) if w)
        if why:
            return check, why
        best = check if best is None or check["step_ms"] < best["step_ms"] else best
    return best, ""


def _time_machine(root: Path, q) -> None:
    """Run each kind of speed check the parts need that has no good reading yet (`_best_check`); none while a job
    of this runs folder runs (it would slow the job and read slow). A reading taken at a high load average, or
    during which a job started, is recorded under "loaded" with `under_load` and why, not under "checks": it is not
    the machine's speed, and the next prepare times it again."""
    record = _prepare_record(root)
    good, loaded = dict(record.get("checks") or {}), dict(record.get("loaded") or {})
    missing = [k for k in check_kinds(root) if k not in good]
    if not missing or _busy(root, q.list_jobs()):
        return
    for kind in missing:
        check, why = _best_check(root, q, kind)
        if why:
            loaded[kind] = {**check, "under_load": True, "why": why}
        else:
            good[kind] = check
            loaded.pop(kind, None)
    _write_prepare_record(root, {**record, "checks": good, "loaded": loaded})


def _write_prepare_record(root, record: dict) -> None:
    """<runs>/.class/prepare.json, its empty groups left out."""
    atomic_write_json(_state_file(root, "prepare.json"), {k: v for k, v in record.items() if v or k == "checks"})


def _note_estimates(root, rows: list, queued: set) -> None:
    """Record in prepare.json what this prepare estimated for each part it queued (prepare.json "estimates"), so
    that `status` can set it beside what the part took (the clock) once done."""
    record = _prepare_record(root)
    estimates = dict(record.get("estimates") or {})
    estimates.update({r["key"]: round(r["minutes_left"], 2) for r in rows if r["key"] in queued
                      and r["minutes_left"] is not None and r["step"] is None})
    if estimates != (record.get("estimates") or {}):
        _write_prepare_record(root, {**record, "estimates": estimates})


def prepare(root, jobs=None, speed_check=True) -> list:
    """Queue what is not done (see the module docstring); returns `status` after it. `speed_check`: time this machine
    first, each kind of speed check the parts need (seconds; skipped when recorded or while a job runs here, which it
    would slow). Holds `prepare_lock` throughout: a second prepare at the same time refuses (EngineError)."""
    root = Path(root).absolute()
    q = _jobs(root, jobs)
    with prepare_lock(root):
        if speed_check:
            _time_machine(root, q)
        job_list = q.list_jobs()  # the states after the check: a part may have finished or been queued meanwhile
        queued = set()
        for p in parts(root):
            state = part_state(root, p, job_list)
            # done, someone else's run (never queued into) or active: nothing; a damaged cache is queued like a
            # missing one (its job sets the damaged folder aside)
            if not state.queued_by_prepare or (p.key == BERT_BASE_PART and _offline()):
                continue
            resumable = p.key != "cache" and (p.run_dir / RUN_JSON).is_file()
            argv = _resume_argv(p) if resumable else p.argv
            try:
                q.submit(argv, name=f"class: {p.key}", run_dir=str(p.run_dir))
                queued.add(p.key)
            except EngineError as e:  # queued in the meantime (by the Jobs page, a study...)
                if "already has job" not in str(e):
                    raise
        rows = status(root, jobs=q)
        _note_estimates(root, rows, queued)
    return rows


def cancel(root, jobs=None) -> list:
    """Cancel the parts' queued jobs, then the running one (a run saves a checkpoint first); returns `status`."""
    root = Path(root).absolute()
    q = _jobs(root, jobs)
    job_list = q.list_jobs()
    active = [j for p in parts(root) if (j := _latest_job(job_list, p.run_dir)) and status_of(j["status"]).active]
    for job in sorted(active, key=lambda j: status_of(j["status"]) is RUNNING):  # queued first: nothing starts after
        q.cancel(job["id"])
    return status(root, jobs=q)


def build_cache(root, flags: list) -> list:
    """`class cache`: the vocabulary and pre-training data `python -m engine pretrain FLAGS` builds before its first
    step, into the cache folder; records their folders in <runs>/.class/cache.json. Returns the data folders.
    A folder recorded before that no longer opens as the run would open it (`data_problem`) is set aside first
    (renamed <folder>.bad-<ns>, kept for a look), so that it is built again instead of found and refused."""
    import tempfile

    from engine.cli import given
    from engine.corpora import load_corpus
    from engine.distributed import Dist
    from engine.pretraining.config import PretrainConfig
    from engine.pretraining.plan import resolve
    from engine.pretraining.run import build_parser, config_from_args, tokenizer_and_data
    cfg = resolve(config_from_args(given(PretrainConfig, build_parser(), [*flags, "--out", "unused"])))
    for folder in map(Path, _read_state(root, "cache.json", _check_cache_record).get("data") or []):
        why = data_problem(folder) if _complete(folder) else ""
        if why:
            bad = folder.with_name(f"{folder.name}.bad-{time.time_ns()}")
            os.replace(folder, bad)
            print(f"set aside {folder} as {bad.name} ({why}); building it again", flush=True)
    with tempfile.TemporaryDirectory() as tmp:  # the run folder tokenizer_and_data saves its tokenizer into
        _, caches = tokenizer_and_data(cfg, load_corpus(cfg.corpus), Path(tmp), Dist(), resuming=False)
    data = [str(c.path) for c in caches]
    atomic_write_json(Path(root).absolute() / STATE_DIR / "cache.json", {"data": data, "flags": list(flags)})
    return data


# ---------------------------------------------------------------------------------------------------------
# the command

def time_words(row: dict) -> tuple:
    """(one short clause, its details for a help icon or "") of a `status` row: what is left ("about N min left
    here"), or for a part done here in one go what it took and, beside it, what prepare estimated for it."""
    state = part_state_of(row["state"])
    if state.ready:
        took, est = row.get("took"), row.get("estimated")
        if took is None:
            return "", ""
        return f"took {took:.0f} min here", (f"{took:.1f} min by the clock; estimated {est:.1f} min when prepare "
                                             f"queued it ({(took - est) / est:+.0%})" if est else "")
    if row["minutes_left"] is None:
        return "", row["how"]
    return Estimate(row["minutes_left"], row["how"], row.get("here", True)).clause(left=True), row["how"]


def summary_clause(rows: list) -> str:
    """What is left in all, in one clause ("about N min left here"); "" when every part is done."""
    todo = [r for r in rows if not part_state_of(r["state"]).ready]
    if not todo:
        return ""
    here = all(r.get("here", True) for r in todo if r["minutes_left"] is not None)
    return Estimate(minutes_left(rows), "", here).clause(left=True)


def describe(rows: list) -> str:
    """The status as lines for a terminal: per part its state and time (`time_words`, the details after " · ")."""
    lines = []
    for i, r in enumerate(rows, 1):
        state = part_state_of(r["state"])
        line = f"{i}. {r['title']}: {state.words}"
        if r.get("note"):
            line += f": {r['note']}"
        if r["step"] is not None and not state.ready:
            line += f", step {r['step']} / {r['total'] or '?'}"
        clause, details = time_words(r)
        line += "".join(f"{sep}{t}" for sep, t in (("; ", clause), (" · " if clause else "; ", details)) if t)
        lines.append(line)
    lines.append(summary_clause(rows) or "everything is ready for the class")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m engine class", description="prepare this machine for the first class")
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name, text in (("prepare", "queue what the first class needs (skips what is done; resumes what stopped)"),
                       ("status", "what is done, what runs and the time left"),
                       ("cancel", "cancel the queued and running parts (resume with prepare)"),
                       ("fetch", "(a job of prepare) fetch Google's bert-base-uncased into the Hugging Face cache")):
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
    if args.cmd == "fetch":
        print(fetch_bert_base(root), flush=True)
        return 0
    if args.cmd == "prepare":
        rows = prepare(root, speed_check=not args.no_speed_check)
    elif args.cmd == "cancel":
        rows = cancel(root)
    else:
        rows = status(root)
    print(describe(rows))
    return 0
