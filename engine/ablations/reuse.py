"""A study's pre-training that another run has already done: found under the runs folder and taken over instead of
trained again.

The classroom studies pre-train the same models: Table 5's BERT row is Figure 5's MLM row, Table 6's L=2 row and
Table 8's 80/10/10 row (the same command line but for its run folder and checkpoint cadence), Table 5's LTR row is
Figure 5's. On a 2-core CPU without bf16 units each such run is 15 (MLM) to 35 (LTR) minutes, so a class that runs
Table 5 and then Figure 5 would train both of Figure 5's models a second time (BENCHMARKS.md, "Classroom studies on
a CPU without bf16 units"). Before a study's pre-training job starts (`take_over`, called by
engine.ablations.runner), the runs folder is searched for a run that
- is a finished `pretrain` run (run.json status "finished"), not one of this study's own;
- has the same training settings: every PretrainConfig field except those that do not change what is trained
  (`IGNORED`: where it is written, how often it logs, evaluates and saves, threads, device; engine.pretrain_config
  RUNTIME_FIELDS less the steps and the time budget), with the architecture compared as the model it builds
  (`--preset tiny` and `--preset tiny --layers 2 --hidden 128 --heads 2` are one model);
- was trained by code that trains these settings as today's does (run.json training_version, engine.pretrain_config
  TRAINING_VERSION: a run from before the sorted vocabulary started elsewhere);
- was trained on the same text (run.json corpus_fingerprint against the corpus as it reads now: a corpus folder may
  have changed since);
- holds every checkpoint the study's other jobs read (Figure 5 fine-tunes `checkpoints/step-750`).
Found, it is copied into the job's run folder (checkpoint weights and optimizer state hard-linked where the file
system allows: they are never written again; the rest copied, so the two runs stay independent: deleting either
loses nothing of the other), its run.json says `reused_from`, and study.json records the job finished with
`reused_from` and 0 seconds. Same settings, so the same model in all but rounding: a run trained under bf16 on
another machine is reused as it is (its run.json says where and how it ran).

When the check is made: at launch (a run finished by then is taken over and its job never queued), then again
when the job would start, in every mode: in a terminal or with Jobs at once by engine.ablations.runner, and queued
one job at a time (the Ablations page's default) by the queued command itself, `ablate job STUDY_DIR KEY`, which
takes over or else becomes the job's `pretrain` command (runner.run_job). So a study queued behind another takes
over the other's runs once they have finished. `ablate run --no-reuse` (the page's "Reuse finished pre-trainings"
box) trains every run afresh, e.g. to measure the spread between two starts.
"""
import functools
import os
import shutil
from pathlib import Path

from engine.errors import EngineError
from engine.pretrain_config import RUNTIME_FIELDS, TRAINING_VERSION
from engine.fileio import atomic_write_json
from engine.records import RUN_JSON, read_json_or_empty

# `ablate run --no-reuse` and the Ablations page's "Reuse finished pre-trainings"
REUSE_HELP = ("a pre-training that a finished run under the runs folder has already done with the same settings (another "
              "study's, or a plain run's) is copied into the study instead of trained again, with the checkpoints the "
              "study reads; off, every pre-training is trained afresh (e.g. to see the spread between two starts)")
IGNORED = RUNTIME_FIELDS - {"steps", "max_minutes"}  # what a resume may change, less how long it trains: not the model
LINKED_SUFFIXES = (".safetensors", ".pt", ".bin")  # written once, never modified: hard-linked
KEPT = ("job.log",)  # what a job's run folder may hold before it starts: the queue's log, written by the job itself


def training_key(config: dict) -> dict:
    """What a pre-training run trains, from its config (run.json "config" or a PretrainConfig as a dict): every
    setting but IGNORED, the architecture as (layers, hidden, heads) of the model it builds."""
    from engine.pretrain_config import PretrainConfig, model_config
    known = {k: v for k, v in config.items() if k in PretrainConfig.__dataclass_fields__}
    known["mask_ratios"] = tuple(float(r) for r in known.get("mask_ratios", (0.8, 0.1, 0.1)))
    cfg = PretrainConfig(**known)
    m = model_config(cfg, cfg.vocab_size)
    key = {k: v for k, v in known.items() if k not in IGNORED | {"layers", "hidden", "heads"}}
    key.update(layers=m.num_layers, hidden=m.hidden_size, heads=m.num_heads, mask_ratios=list(key["mask_ratios"]))
    return key


def config_of(argv: list) -> dict:
    """The PretrainConfig (as a dict) of a study's `pretrain` job command line (argv[0] == "pretrain")."""
    from dataclasses import asdict
    from engine import cli
    from engine.pretrain_config import PretrainConfig
    given = cli.given(PretrainConfig, cli.parser(PretrainConfig, ""), argv[1:])
    return asdict(PretrainConfig(**given))


def candidate_runs(runs_root: Path, exclude: Path) -> list:
    """Run folders under `runs_root` that may hold a pre-training: <root>/<run> and <root>/studies/<study>/runs/<run>,
    except those under `exclude` (the study itself)."""
    runs_root, exclude = Path(runs_root).absolute(), Path(exclude).absolute()
    found = list(runs_root.glob(f"*/{RUN_JSON}")) + list(runs_root.glob(f"studies/*/runs/*/{RUN_JSON}"))
    return sorted(p.parent for p in found if exclude not in p.parents)


def matching_run(argv: list, needed: list, runs_root: Path, exclude: Path):
    """The first finished pre-training under `runs_root` (module docstring) that trained what `argv` would and holds
    the relative paths `needed`, else None."""
    key = training_key(config_of(argv))
    if key.get("data"):  # prepared shards: their own key, not compared here
        return None
    fingerprint = None
    for run in candidate_runs(runs_root, exclude):
        info = read_json_or_empty(run / RUN_JSON)
        if info.get("kind") != "pretrain" or info.get("status") != "finished" or not info.get("config"):
            continue
        if info.get("training_version") != TRAINING_VERSION:  # trained by code that trains these settings otherwise
            continue
        try:
            if training_key(info["config"]) != key:
                continue
        except (TypeError, ValueError, EngineError):  # a run.json of another version of the engine
            continue
        if not all((run / rel).is_dir() and (rel == "" or (run / rel / "COMPLETE").is_file()) for rel in needed):
            continue
        if fingerprint is None:
            fingerprint = _fingerprint(key)
        if info.get("corpus_fingerprint") != fingerprint:
            continue
        return run
    return None


def _fingerprint(key: dict) -> str:
    """The corpus's fingerprint as pre-training computes it (engine.tokenizer.corpus_fingerprint of its documents).
    A built-in corpus is an installed package's, read once per process (the page's estimate asks on every rerun); a
    path is read each time (its files may have changed)."""
    from engine.corpora import BUILTIN
    return _builtin_fingerprint(key["corpus"]) if key["corpus"] in BUILTIN else _read_fingerprint(key["corpus"])


def _read_fingerprint(corpus: str) -> str:
    from engine.corpora import load_corpus
    from engine.tokenizer import corpus_fingerprint
    return corpus_fingerprint(load_corpus(corpus))


_builtin_fingerprint = functools.lru_cache(maxsize=None)(_read_fingerprint)


def _link_or_copy(src, dst) -> None:
    if str(src).endswith(LINKED_SUFFIXES):
        try:
            os.link(src, dst)
            return
        except OSError:  # another file system, or links not allowed: copy
            pass
    shutil.copy2(src, dst)


def adopt(src: Path, dst: Path) -> None:
    """Copy the finished run `src` into the empty (or absent) run folder `dst`; dst/run.json names its source."""
    dst = Path(dst)
    if _started(dst):
        raise EngineError(f"{dst} is not empty; a reused run goes into a fresh run folder")
    tmp = dst.with_name(dst.name + ".reusing")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        shutil.copytree(src, tmp, copy_function=_link_or_copy, ignore=shutil.ignore_patterns("run.lock", "job.log", "*.tmp"))
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)  # nothing half-copied stays behind; the job then trains
        raise
    info = read_json_or_empty(tmp / RUN_JSON)
    old, new = str(Path(src).absolute()), str(dst.absolute())
    moved = lambda v: new + v[len(old):] if isinstance(v, str) and (v == old or v.startswith(old + os.sep)) else v
    info = {k: moved(v) for k, v in info.items()}  # e.g. "tokenizer": the run's own tokenizer folder
    info["config"] = {**{k: moved(v) for k, v in info.get("config", {}).items()}, "out": new}
    info["reused_from"] = old
    atomic_write_json(tmp / RUN_JSON, info)
    for name in KEPT:  # the job's own log (open, being written) moves with the folder: the same file
        if (dst / name).is_file():
            os.replace(dst / name, tmp / name)
    os.replace(tmp, dst)  # all or nothing (onto an empty folder): a crash leaves no half-copied run in the job's folder


def _started(run: Path) -> bool:
    """The run folder holds a start of its own (anything but what the queue writes there before the job starts)."""
    return run.is_dir() and any(p.name not in KEPT for p in run.iterdir())


def needed_paths(study_dir: Path, job: dict, jobs: list) -> list:
    """The paths under `job`'s run folder that the study's other jobs read (engine.ablations.planner.paths_read)."""
    from engine.ablations.planner import paths_read
    return sorted({rel for j in jobs if j is not job for rel in paths_read(j["argv"], Path(study_dir) / job["out"])})


def take_over(study_dir: Path, job: dict, jobs: list, runs_root: Path):
    """Before `job` (a study's pre-training) starts: the finished run it takes over (copied into its run folder),
    or None (nothing matches, or its run folder already holds a start of its own)."""
    out = Path(study_dir) / job["out"]
    if job["kind"] != "pretrain" or _started(out):
        return None
    src = matching_run(job["argv"], needed_paths(study_dir, job, jobs), runs_root, study_dir)
    if src is not None:
        adopt(src, out)
    return src
