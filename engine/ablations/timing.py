"""How long a classroom study will take on this machine, said before it runs: a speed check against the machine
the classroom study was measured on.

Each classroom study's wall time is measured once, on one machine, and kept in engine/measured.py with that
machine's speed check. A CPU without bf16 units (AVX2 only: most laptops before 2023) trains in fp32
(engine.device.default_precision) and is several times slower. So the page and `ablate estimate` time one step of
the kind the studies are made of, here, and scale the reference minutes by the ratio:

    estimate = reference minutes x (MLM step here) / (MLM step on the machine the study was measured on)

where the step is one MLM pre-training step of the classroom model (tiny: L=2 H=128, vocabulary 8,000, batch 64 x
128 tokens, 25% of the positions on the blocked vocabulary loss) at the precision pre-training picks on this CPU
(`engine.flops.pretrain_step_times`). A study's time is mostly the encoder at 32 and 128 tokens with some
projection onto the vocabulary, which this step mixes in about that share (docs/lab-notes/family-studies.md, "The
time estimate", has how well it predicts on a host where it runs low, and why).
A study whose settings differ from its classroom defaults (a second seed, more epochs, other tasks or steps) is
estimated job by job (`job_minutes`): each pre-training from its FLOPs (`training_seconds`), and each evaluation
from its counterpart's equal share of what the defaults' reference time leaves after their pre-trainings, scaled by
its epochs, restarts and training examples; at the defaults that sum is the reference time x the factor.
A pre-training the study would take over (engine.ablations.reuse) is taken off the estimate, with `runs_root` (as
`ablate estimate` and the page give it): one a finished run under the runs folder has done (`reusable`), and one a
job queued or running in that folder's job queue will have done by the time the study's own pre-training starts
when the queue runs one job at a time (`queued_twins`). What is taken off is what that pre-training would train
here (`training_seconds`: its FLOPs at the speed check's rate), not the finished run's own time, which another
machine or a loaded one makes shorter or longer. So is an evaluation another study has already done of a model this
study takes over (`reusable_evaluations`), at its `job_minutes`.
What the estimate cannot see: other jobs on the machine (time it idle), memory bandwidth unlike the step's, and how
one evaluation's time differs from another's (equal shares). Table 7 evaluates MiniLM (6 layers, hidden 384), whose
steps the tiny model's stand in for: a rough figure there. On a 2-core machine the browser showing the page competes
with the check, so the page's estimate runs high there; `python -m engine ablate estimate` in a terminal gives the
idle figure.
"""
import statistics
from dataclasses import dataclass
from typing import NamedTuple

from engine.measured import MACHINES, STUDIES
from engine.commands import PRETRAIN, kind_of, written_by
from engine.status import FINISHED, status_of


# The machine most classroom wall times were measured on, and its speed check (engine/measured.py).
REFERENCE_MACHINE = MACHINES["xeon"].description
REFERENCE_STEP_MS = MACHINES["xeon"].check_ms  # the MLM row at 128 tokens


class Reference(NamedTuple):
    """A classroom study's wall time at its classroom defaults, idle, on the machine it was measured on, with that
    machine's speed check (the estimate scales by the ratio of the checks)."""
    minutes: float
    date: str
    step_ms: float = REFERENCE_STEP_MS
    machine: str = REFERENCE_MACHINE


def _reference(m) -> Reference:
    machine = MACHINES[m.machine]
    return Reference(m.value, m.date, machine.check_ms, machine.name)


# Each classroom study's wall time at its classroom defaults, idle, from an empty cache (engine/measured.py).
REFERENCE_MINUTES = {key: _reference(s.minutes) for key, s in STUDIES.items()}
CLASSROOM_HOUR = 60.0  # the promise: each classroom study within the hour on an idle 2-core CPU
SPEED_CHECK_TOKENS = 128
SPEED_CHECK_BATCH = 64


@dataclass(frozen=True)
class SpeedCheck:
    """One speed check of this machine: a step time (ms, the median), the classroom model's MLM step at 128 tokens
    (`speed_check`) or the probe-ready recipe's (`minilm_check`)."""
    precision: str  # what pre-training uses here: bf16 (native units) or fp32
    threads: int
    step_ms: float
    gpu: bool = False  # the jobs would run on a GPU here (`--device auto`); the check and the references are CPU times

    def factor(self, reference_ms: float = REFERENCE_STEP_MS) -> float:
        """How many times longer the studies' steps take here than on the machine whose check read `reference_ms`
        (REFERENCE_MACHINE by default)."""
        return self.step_ms / reference_ms


def speed_check(steps: int = 5, warmup: int = 1) -> SpeedCheck:
    """Time the classroom model's MLM step on this CPU (about a second on the reference machine, 3 s on the AVX2
    EPYC)."""
    import torch

    from engine.flops import pretrain_step_times
    from engine.config import BertConfig
    from engine.device import default_precision
    precision = default_precision(torch.device("cpu"))
    base = BertConfig.preset("tiny", vocab_size=8000, hidden_dropout=0.0, attention_dropout=0.0, has_nsp_head=False)
    ts = pretrain_step_times(base, SPEED_CHECK_TOKENS, SPEED_CHECK_BATCH, 0.25, "blocked", steps, warmup, precision)
    # the median, as the reference's: on the AVX2 EPYC single steps ranged 530-800 ms, and the fastest would read
    # the machine 15% faster than the jobs ran
    return SpeedCheck(precision, torch.get_num_threads(), statistics.median(ts) * 1000, torch.cuda.is_available())


def minilm_check(steps: int = 5, warmup: int = 2) -> SpeedCheck:
    """Time one step of the probe-ready recipe on this CPU: MiniLM's shape (L=6 H=384, vocabulary 30,522, random
    weights) at the recipe's batch, length, masked share and dropout (engine.pretraining.config.CONTINUED_PRETRAINING),
    the median of `steps` after `warmup` (three after one read 1,493 ms inside `class prepare` where three runs alone
    just before read 791-894 ms on the same host). The classroom step stands in for it badly: on an AMD EPYC Zen 4 it read 2.3-2.7x the Xeon's
    while MiniLM's steps took 1.3x (docs/lab-notes/class-prepare.md), as the two models lean on other kernels (a
    128-wide model's small matrices against MiniLM's 384-wide ones, and dropout's random numbers)."""
    import torch

    import dataclasses
    import json

    from engine.config import BertConfig
    from engine.device import default_precision
    from engine.flops import pretrain_step_times
    from engine.minilm import minilm_path
    from engine.pretraining.config import CONTINUED_PRETRAINING as R
    precision = default_precision(torch.device("cpu"))
    shape = BertConfig.from_hf_dict(json.loads((minilm_path() / "config.json").read_text()))
    base = dataclasses.replace(shape, hidden_dropout=R["dropout"], attention_dropout=R["dropout"], has_nsp_head=False)
    ts = pretrain_step_times(base, R["seq_len"], R["batch_size"], R["mask_rate"], "blocked", steps, warmup, precision)
    return SpeedCheck(precision, torch.get_num_threads(), statistics.median(ts) * 1000, torch.cuda.is_available())


def timed_check(kind: str) -> SpeedCheck:
    """Run the speed check of kind `kind`, whose reading on a measured machine is Machine.check(kind) in
    engine/measured.py: "classroom" (`speed_check`) scales the classroom model's runs and studies, "minilm"
    (`minilm_check`) the probe-ready model's."""
    return {"classroom": speed_check, "minilm": minilm_check}[kind]()


CHECK_ROUNDS = 3  # each speed check taken this many times, the fastest kept (other work only slows a reading)


def fastest_check(kind: str = "classroom", rounds: int = CHECK_ROUNDS) -> SpeedCheck:
    """The fastest of `rounds` readings of speed check `kind` (`timed_check`): a few seconds of other work during one
    reading (a browser repainting, a burst of another process) read the machine slower than it trains, and only
    slow it, never speed it up. What `ablate estimate` and the Ablations page time a study by; `class prepare` takes
    the same rounds and also refuses readings taken while its own jobs run (engine.classroom)."""
    return min((timed_check(kind) for _ in range(rounds)), key=lambda c: c.step_ms)


def reusable(study, runs_root) -> list:
    """[{key, run, minutes}] for each of `study`'s pre-trainings that a finished run under `runs_root` has already
    done (engine.ablations.reuse: what launching it now would take over), `minutes` that run's own training time
    (its last "elapsed": steps only, not its data, evaluation or saving)."""
    from dataclasses import asdict
    from pathlib import Path

    from engine.ablations.planner import plan
    from engine.ablations.reuse import matching_run, needed_paths
    from engine.runs import read_metrics
    where = Path(runs_root).absolute() / "studies" / f".estimate-{study.name}"  # a study folder never written
    jobs = [asdict(j) for j in plan(study, where)]
    out = []
    for j in (j for j in jobs if kind_of(j["kind"]) is PRETRAIN):
        run = matching_run(j["argv"], needed_paths(where, j, jobs), runs_root, where)
        if run is not None:
            elapsed = [r["elapsed"] for r in read_metrics(run) if r.get("split") == "train" and r.get("elapsed")]
            out.append({"key": j["key"], "run": str(run), "minutes": max(elapsed, default=0.0) / 60})
    return out


def training_seconds(cfg, check: SpeedCheck) -> float:
    """About how many seconds pre-training `cfg` (a PretrainConfig) trains on the machine `check` timed: each phase's
    steps x its FLOPs per step (engine.ablations.planner.run_flops) over the FLOPs of the
    check's step, x the check's time (module docstring: how close it came), x the measured cost per FLOP of a step
    with a generator where the objective trains one (engine/measured.py "estimate.generator_step_cost": its narrow
    network and its sampling take more time than their FLOPs say); a --max-minutes budget caps it."""
    from engine.ablations.planner import run_flops, step_flops
    from engine.measured import fact
    from engine.objectives import objective
    from engine.pretraining.config import PretrainConfig
    ref = PretrainConfig.classroom(preset="tiny", vocab_size=8000, batch_size=SPEED_CHECK_BATCH, seq_len=SPEED_CHECK_TOKENS,
                                   mask_rate=0.25, objective="mlm")  # the speed check's step
    per_flop = fact("estimate.generator_step_cost").value if objective(cfg.objective).generator else 1.0
    seconds = run_flops(cfg) / step_flops(ref) * check.step_ms / 1000 * per_flop
    return min(seconds, 60.0 * cfg.max_minutes) if cfg.max_minutes else seconds


def queued_twins(study, runs_root, skip=()) -> list:
    """[{key, job, name}] for each of `study`'s pre-trainings (but the keys in `skip`: those a finished run has done)
    that a job queued or running in the job queue under `runs_root` (engine.jobs) will train with the same settings
    (engine.ablations.reuse.training_key), saving every checkpoint the study reads: a `pretrain` job, a study's
    pre-training queued as `ablate job STUDY KEY`, or one a study run with jobs at once (`ablate resume STUDY`) has
    still to train. Queued one job at a time, that job finishes before this study's pre-training starts, which then
    takes it over."""
    from dataclasses import asdict
    from pathlib import Path

    from engine.ablations.planner import plan
    from engine.ablations.reuse import config_of, needed_paths, training_key
    from engine.jobs import Jobs
    where = Path(runs_root).absolute() / "studies" / f".estimate-{study.name}"  # a study folder never written
    jobs = [asdict(j) for j in plan(study, where)]
    ahead = [(job, cfg) for job in Jobs(runs_root).list_jobs() if status_of(job.get("status")).active
             for cfg in _pretrain_configs(job.get("argv") or [])]
    out = []
    for j in (j for j in jobs if kind_of(j["kind"]) is PRETRAIN and j["key"] not in skip):
        key, needed = training_key(config_of(j["argv"])), needed_paths(where, j, jobs)
        twin = next((job for job, cfg in ahead if training_key(cfg) == key and _would_save(cfg, needed)), None)
        if twin is not None:
            out.append({"key": j["key"], "job": twin["id"], "name": twin.get("name")})
    return out


def _pretrain_configs(argv: list) -> list:
    """The pre-trainings (PretrainConfigs as dicts) a queued job will run: its own `pretrain` command, or a study's
    it runs (`ablate job STUDY KEY`: that job; `ablate resume STUDY`: those not finished, read from study.json). A
    command line that does not parse (it will fail when it runs) or a study folder deleted since: none."""
    from engine.ablations.folders import read_study
    from engine.ablations.reuse import config_of
    from engine.errors import EngineError
    try:
        if argv and written_by(argv[0]) is PRETRAIN:  # a `pretrain` command
            return [config_of(argv)]
        if argv[:2] not in (["ablate", "job"], ["ablate", "resume"]) or len(argv) < 3:
            return []
        jobs = read_study(argv[2])["jobs"]
        if argv[1] == "job":
            return [config_of(j["argv"]) for j in jobs if j["key"] in argv[3:4] and kind_of(j["kind"]) is PRETRAIN]
        return [config_of(j["argv"]) for j in jobs if kind_of(j["kind"]) is PRETRAIN and status_of(j.get("status")) is not FINISHED]
    except (OSError, EngineError, SystemExit, TypeError, ValueError, KeyError):
        return []


def _would_save(cfg, needed: list) -> bool:
    """Whether a pre-training with settings `cfg` (a dict) will leave the run paths `needed` ("" for the run,
    "checkpoints/step-N"): a step is saved at the end, or every save_every steps when none is pruned (keep 0)."""
    for rel in needed:
        if not rel:
            continue
        step = int(rel.rsplit("-", 1)[1]) if rel.startswith("checkpoints/step-") else None
        if step is None:
            return False
        every = cfg["save_every"] if not cfg["keep"] else 0
        if step != cfg["steps"] and not (every and step % every == 0 and step < cfg["steps"]):
            return False
    return True


def estimate(study, check: SpeedCheck, runs_root=None) -> dict:
    """{"minutes" (None when there is no reference), "reference_minutes", "measured" (its date), "factor",
    "defaults" (the study is exactly its classroom defaults), "jobs" ({job key: minutes here}, `job_minutes`),
    "reused" (`reusable`), "queued" (`queued_twins`) and "reused_evaluations" (`reusable_evaluations`), with
    `runs_root`, each entry with "here_minutes", "over_hour", "text"}: how long `study` (a classroom study) should
    take here, from `check`; less what the jobs it would take over would take here."""
    from engine.ablations.paper import get_study
    if study.scale != "classroom":
        return {"minutes": None, "text": f"no estimate at the {study.scale} scale: only the classroom studies have "
                                         "reference times (engine/measured.py)"}
    if check.gpu:
        return {"minutes": None, "text": "no estimate: the jobs run on this machine's GPU, and the reference times are "
                                         "for a 2-core CPU (a GPU is faster; not measured for the classroom studies)"}
    measured = study.name in REFERENCE_MINUTES
    ref, when, ref_ms, machine = REFERENCE_MINUTES[reference_study(study)]
    f = check.factor(ref_ms)
    on = machine
    here = job_minutes(study, check)
    minutes = sum(here.values())
    defaults = study == get_study(study.name, scale="classroom")
    text = f"about {_hm(minutes)} on this machine ({ref:g} min on {on} on {when}, x{f:.2f})"
    if not measured:
        text = (f"about {_hm(minutes)} on this machine, estimated, never measured: each pre-training from its FLOPs, "
                f"each evaluation at the share of {ANALOGUE}'s measured time that its evaluation of the same kind of "
                f"task took ({ref:g} min on {on} on {when}; this machine x{f:.2f}), so a rougher figure than a measured "
                "study's")
    elif not defaults:
        text = (f"about {_hm(minutes)} on this machine; your settings differ from its classroom defaults (epochs, "
                f"seeds, tasks or steps), so that is summed job by job: each pre-training from its FLOPs, each "
                f"evaluation from its share of the defaults' time scaled by its epochs, restarts and examples: a "
                f"rougher figure than for the defaults (they took {ref:g} min on {on} on {when}; "
                f"this machine x{f:.2f})")
    reused = reusable(study, runs_root) if runs_root is not None else []
    queued = queued_twins(study, runs_root, skip={r["key"] for r in reused}) if runs_root is not None else []
    evals = reusable_evaluations(study, runs_root, reused) if runs_root is not None else []
    for r in reused + queued + evals:
        r["here_minutes"] = here[r["key"]]
    if reused or queued:
        saved = sum(r["here_minutes"] for r in reused + queued)
        minutes = max(0.0, minutes - saved)
        n = len(reused) + len(queued)
        done = f"{len(reused)} done already by finished runs with the same settings" if reused else ""
        ahead = (f"{len(queued)} to be done by jobs queued ahead of it with the same settings "
                 f"({', '.join(sorted({q['name'] or q['job'] for q in queued}))}), taken over once they have run"
                 if queued else "")
        text += (f"; {n} of its pre-trainings {'needs' if n == 1 else 'need'} no training of its own "
                 f"({', '.join(p for p in (done, ahead) if p)}): less the {saved:.0f} min {'it' if n == 1 else 'they'} "
                 f"would train here, about {_hm(minutes)}")
    if evals:
        saved = sum(r["here_minutes"] for r in evals)
        minutes = max(0.0, minutes - saved)
        n = len(evals)
        text += (f"; {n} of its evaluations {'is' if n == 1 else 'are'} done already by another study's finished "
                 f"{'job' if n == 1 else 'jobs'} with the same model and settings: less the {saved:.0f} min "
                 f"{'it' if n == 1 else 'they'} would take here, about {_hm(minutes)}")
    if minutes > CLASSROOM_HOUR:
        text += ("; over the classroom hour here" + ("" if check.precision == "bf16" else
                 ": this CPU has no bf16 units, so it trains in fp32"))
    return {"minutes": minutes, "reference_minutes": ref, "measured": when, "factor": f, "defaults": defaults,
            "jobs": here, "reused": reused, "queued": queued, "reused_evaluations": evals,
            "over_hour": minutes > CLASSROOM_HOUR, "text": text}


def job_minutes(study, check: SpeedCheck) -> dict:
    """{job key: minutes here} for each of `study`'s jobs (a classroom study with a reference time): a pre-training
    is `training_seconds`; the rest of the reference time of the study's classroom defaults (their evaluations, and
    their pre-trainings' data, held-out evaluation and saving) is shared equally among the defaults' evaluation jobs,
    and each of `study`'s evaluations takes the share of its counterpart there (the same row, column and checkpoint,
    any seed), scaled by `_work` and by the check's factor. So the study at its defaults sums to the reference time x
    the factor, and a second seed or more epochs add their jobs' share. Equal shares are rough: one classroom Table 5
    fine-tuning can take over twice another's time."""
    from pathlib import Path

    from engine.ablations.paper import get_study
    from engine.ablations.planner import plan
    from engine.ablations.reuse import config_of
    from engine.pretraining.config import PretrainConfig
    where = Path("/nonexistent-estimate")
    ref = REFERENCE_MINUTES[reference_study(study)]
    reference = SpeedCheck(check.precision, check.threads, ref.step_ms)

    def pretraining(job, c):
        return training_seconds(PretrainConfig(**config_of(job.argv)), c) / 60

    default = plan(get_study(reference_study(study), scale="classroom"), where)
    default_evals = [j for j in default if kind_of(j.kind) is not PRETRAIN]
    rest = max(0.0, ref.minutes - sum(pretraining(j, reference) for j in default if kind_of(j.kind) is PRETRAIN))
    share = rest / max(1, len(default_evals))
    out = {}
    for j in plan(study, where):
        if kind_of(j.kind) is PRETRAIN:
            out[j.key] = pretraining(j, check)
            continue
        c = counterpart(j, default_evals)
        out[j.key] = share * check.factor(ref.step_ms) * (_work(j.argv, like=c.argv) / _work(c.argv, like=j.argv) if c else 1.0)
    return out


# The measured study whose evaluations stand in for those of a study never measured (the family's): Table 5 at
# classroom scale fine-tunes the classroom tasks at the classroom grid, as they do
ANALOGUE = "pretraining-tasks"


def reference_study(study) -> str:
    """The measured study `study`'s estimate scales from: itself, or ANALOGUE for a study with no reference time."""
    return study.name if study.name in REFERENCE_MINUTES else ANALOGUE


def counterpart(job, default_evals: list):
    """The evaluation job of the reference study's defaults that `job` takes its share from: the same row, column and
    checkpoint; else the same column (another row); else one of a task of the same format (engine.tasks.registry:
    a sentence pair for bbc-order); else the same kind of job; else the first (None without any)."""
    from engine.tasks.registry import BUILTINS

    def task(j):
        return j.argv[j.argv.index("--task") + 1] if "--task" in j.argv[:-1] else None

    def fmt(j):
        return BUILTINS[task(j)].format if task(j) in BUILTINS else None

    tries = (lambda d: (d.variant, d.evaluation, d.step) == (job.variant, job.evaluation, job.step),
             lambda d: d.evaluation == job.evaluation, lambda d: fmt(d) is not None and fmt(d) == fmt(job),
             lambda d: d.kind == job.kind)
    return next((d for t in tries for d in default_evals if t(d)), default_evals[0] if default_evals else None)


def _work(argv: list, like: list = None) -> float:
    """How much downstream training an evaluation's command line asks for, up to a constant: grid points x the
    epochs (summed over the grid's) x restarts x training examples (--max-train). A flag given on only one of `argv`
    and `like` (say --max-train: the whole task) counts as equal on both."""
    def values(a, flag):
        return [float(x) for x in str(a[a.index(flag) + 1]).split(",")] if a and flag in a[:-1] else None

    out = 1.0
    for flag, fold in (("--lr", len), ("--batch-size", len), ("--epochs", sum), ("--restarts", max), ("--max-train", max)):
        v = values(argv, flag)
        if v is not None and (like is None or values(like, flag) is not None):
            out *= fold(v)
    return out


def reusable_evaluations(study, runs_root, reused: list) -> list:
    """[{key, run}] for each of `study`'s evaluations (fine-tunings, feature jobs) that launching it now would take
    over (engine.ablations.reuse.matching_evaluation): another study's finished job under `runs_root` that computed
    it from a model this study takes over (`reused`: `reusable`'s entries) or from a fixed model."""
    from dataclasses import asdict
    from pathlib import Path

    from engine.ablations.planner import paths_read, plan
    from engine.ablations.reuse import finished_evaluation, origin, other_studies
    where = Path(runs_root).absolute() / "studies" / f".estimate-{study.name}"  # a study folder never written
    jobs = [asdict(j) for j in plan(study, where)]
    taken = {r["key"]: r["run"] for r in reused}
    ours, untrained = {}, set()
    for j in (j for j in jobs if kind_of(j["kind"]) is PRETRAIN):
        run = where / j["out"]
        ours[run] = origin(Path(taken[j["key"]])) if j["key"] in taken else str(run)
        if j["key"] not in taken:
            untrained.add(run)  # trained by this study: no other study has evaluated it
    out, others = [], other_studies(runs_root, where)
    for j in (j for j in jobs if kind_of(j["kind"]) is not PRETRAIN):
        if any(paths_read(j["argv"], run) for run in untrained):
            continue
        found = finished_evaluation(where, j, ours, others)
        if found is not None:
            out.append({"key": j["key"], "run": str(found[0])})
    return out


def describe_check(check: SpeedCheck) -> str:
    """One line: what the speed check measured, against the reference machine."""
    return (f"a classroom MLM step takes {check.step_ms:.0f} ms here ({check.precision}, {check.threads} threads) against "
            f"{REFERENCE_STEP_MS:.0f} ms on the reference machine ({REFERENCE_MACHINE}): x{check.factor():.2f}")


def _hm(minutes: float) -> str:
    if minutes < 90:
        return f"{minutes:.0f} min"
    return f"{int(minutes // 60)} h {int(round(minutes % 60)):02d} min"

