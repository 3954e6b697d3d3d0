"""A study's pre-training that another run has already done, or an evaluation of it that another study has: found
under the runs folder and taken over instead of run again.

The classroom studies pre-train the same models: Table 5's BERT row is Figure 5's MLM row, Table 6's L=2 row and
Table 8's 80/10/10 row (the same command line but for its run folder and checkpoint cadence), Table 5's LTR row is
Figure 5's. On a 2-core CPU without bf16 units each such run is 15 (MLM) to 35 (LTR) minutes, so a class that runs
Table 5 and then Figure 5 would train both of Figure 5's models a second time (BENCHMARKS.md, "Classroom studies on
a CPU without bf16 units"). Before a study's pre-training job starts (`take_over`, called by
engine.ablations.runner), the runs folder is searched for a run that
- is a finished `pretrain` run (run.json status "finished"), not one of this study's own;
- has the same training settings: every PretrainConfig field except those that do not change what is trained
  (`IGNORED`: where it is written, how often it logs, evaluates and saves, threads, device; engine.pretraining.config
  RUNTIME_FIELDS less the steps and the time budget), with the architecture compared as the model it builds
  (`--preset tiny` and `--preset tiny --layers 2 --hidden 128 --heads 2` are one model);
- was trained by code that trains these settings as today's does (run.json training_version, engine.pretraining.config
  TRAINING_VERSION: a run from before the sorted vocabulary started elsewhere);
- was trained on the same text (run.json corpus_fingerprint against the data these settings make from the corpus as
  it reads now, engine.pretraining.run.data_fingerprint: the data folder's key with the run's own vocabulary, or for a
  run from before the one data builder the corpus's own fingerprint; a corpus folder may have changed since);
- holds every checkpoint the study's other jobs read (Figure 5 fine-tunes `checkpoints/step-750`).
Found, it is copied into the job's run folder (checkpoint weights and optimizer state hard-linked where the file
system allows: they are never written again; the rest copied, so the two runs stay independent: deleting either
loses nothing of the other), its run.json says `reused_from`, and study.json records the job finished with
`reused_from` and 0 seconds. Same settings, so the same model in all but rounding: a run trained under bf16 on
another machine is reused as it is (its run.json says where and how it ran).

A study's evaluation (a fine-tuning or feature-based job) is taken over the same way (`take_over`,
`matching_evaluation`) from a finished job of another study under the runs folder that
- has the same kind and, with --out set aside, the same command line, where a path into one of its study's
  pre-training runs counts as the same path into ours when both runs hold the same model (`origin`: the content of
  its latest checkpoint's weights, never its folder: a study deleted and run again with other settings trains other
  weights into the same folders): so `ablate run pretraining-tasks --classroom --seeds 2` after the one-seed study
  takes over seed 0's pre-trainings (the same weights, copied) and then their fine-tunings, and trains seed 1 only;
- reads no data file (`--train`, `--dev`: a file may have changed since; the built-in tasks are made from pinned
  packages);
- finished (its run.json) with its eval.json, run by code of this EVALUATION_VERSION (engine.records:
  what a fine-tuning computes from the same command line; runs before it record none and are never taken over).
A fine-tuning is deterministic on one machine (every seed-0 fine-tuning of a two-seed study reproduced the one-seed
study's dev records exactly: docs/lab-notes/table5.md), so this changes no number; what it saves is the time. Its files are copied (they are small),
paths in its run.json and eval.json moved to the study's own folders.

When the check is made: at launch (a run finished by then is taken over and its job never queued), then again
when the job would start, in every mode: in a terminal or with Jobs at once by engine.ablations.runner, and queued
one job at a time (the Ablations page's default) by the queued command itself, `ablate job STUDY_DIR KEY`, which
takes over or else becomes the job's `pretrain` command (runner.run_job). So a study queued behind another takes
over the other's runs once they have finished. `ablate run --no-reuse` (the page's "Reuse finished runs"
box) trains every run afresh, e.g. to measure the spread between two starts. An evaluation is checked at launch
and, in a terminal or with Jobs at once, when it would start; queued one job at a time it is queued as its own
command, so one whose pre-training is taken over only when that job starts (a twin still training at launch) runs.
`ablate estimate` takes off the pre-trainings and the evaluations a launch now would take over (engine.ablations.timing).
"""
import functools
import hashlib
import json
import os
import shutil
from pathlib import Path

from engine.commands import PRETRAIN, kind_of
from engine.errors import EngineError
from engine.pretraining.config import RUNTIME_FIELDS, TRAINING_VERSION
from engine.fileio import atomic_write_json
from engine.records import EVAL_JSON, EVALUATION_VERSION, RUN_JSON, STUDY_JSON, read_json_or_empty
from engine.runs import latest_checkpoint
from engine.status import FINISHED, status_of
from engine.trackers import TRACKER_FILES

# `ablate run --no-reuse` and the Ablations page's "Reuse finished runs"
REUSE_HELP = ("a pre-training that a finished run under the runs folder has already done with the same settings (another "
              "study's, or a plain run's) is copied into the study instead of trained again, with the checkpoints the "
              "study reads, and so is a fine-tuning another study has already done of the same model with the same "
              "settings (a second seed after a one-seed study trains the second seed only); off, every job is trained "
              "afresh (e.g. to see the spread between two starts)")
IGNORED = RUNTIME_FIELDS - {"steps", "max_minutes"}  # what a resume may change, less how long it trains: not the model
# settings added after runs were recorded without them, whose default (off) is what those runs trained with: a run
# that does not record one is taken over by a study whose config has it at the default
ADDED_OFF = ("span_mask", "static_masking", "input_format")
LINKED_SUFFIXES = (".safetensors", ".pt", ".bin")  # written once, never modified: hard-linked
KEPT = ("job.log",)  # what a job's run folder may hold before it starts: the queue's log, written by the job itself


def training_key(config: dict) -> dict:
    """What a pre-training run trains, from its config (run.json "config" or a PretrainConfig as a dict): every
    setting but IGNORED, the architecture as (layers, hidden, heads) of the model it builds."""
    from engine.pretraining.config import PretrainConfig, model_config
    known = {k: v for k, v in config.items() if k in PretrainConfig.__dataclass_fields__}
    known["mask_ratios"] = tuple(float(r) for r in known.get("mask_ratios", (0.8, 0.1, 0.1)))
    cfg = PretrainConfig.classroom(**known)  # a setting not recorded: the classroom recipe's, the command's default
    for name in ADDED_OFF:  # a setting added since a run was recorded trained as its default, off
        known.setdefault(name, getattr(cfg, name))
    m = model_config(cfg, cfg.vocab_size)
    key = {k: v for k, v in known.items() if k not in IGNORED | {"layers", "hidden", "heads"}}
    key.update(layers=m.num_layers, hidden=m.hidden_size, heads=m.num_heads, mask_ratios=list(key["mask_ratios"]))
    if key.get("phase2_seq_len") is None:
        key.pop("phase2_fraction", None)  # the share of a second phase there is not trains nothing
    return key


def config_of(argv: list) -> dict:
    """The PretrainConfig (as a dict) of a study's `pretrain` job command line (argv[0] == "pretrain")."""
    from dataclasses import asdict
    from engine import cli
    from engine.pretraining.config import PretrainConfig
    given = cli.given(PretrainConfig, cli.parser(PretrainConfig, ""), argv[1:])
    from engine import recipes  # as the command reads it: the recipe it trains when none is named, the flags over it
    return asdict(recipes.config(PretrainConfig, recipes.default_recipe(given.get("init")), **given))


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
        if kind_of(info.get("kind")) is not PRETRAIN or status_of(info.get("status")) is not FINISHED or not info.get("config"):
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
        if not _same_text(info.get("corpus_fingerprint"), run, fingerprint, key):
            continue
        return run
    return None


def _same_text(recorded, run: Path, corpus_fp: str, key: dict) -> bool:
    """Whether run.json's corpus_fingerprint `recorded` is that of the data the settings `key` (the study job's, which
    the run's equal) make from the corpus of fingerprint `corpus_fp` with the run's own vocabulary
    (engine.pretraining.run.data_fingerprint, which also reads a run's from before the one data builder)."""
    from engine.pretraining.config import PretrainConfig
    from engine.pretraining.run import data_fingerprint
    if not isinstance(recorded, str):
        return False
    cfg = PretrainConfig(**{k: v for k, v in key.items() if k in PretrainConfig.__dataclass_fields__})
    return recorded == data_fingerprint(recorded, cfg, corpus_fp, run / "tokenizer")


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


def adopt(src: Path, dst: Path, moves: dict = None) -> None:
    """Copy the finished run `src` (a pre-training or an evaluation) into the empty (or absent) run folder `dst`,
    paths in its run.json and eval.json that lie in `src` or in a key of `moves` ({old: new}: an evaluation's model,
    another study's pre-training run) moved to `dst` or to the new path; dst/run.json names its source."""
    dst = Path(dst)
    if _started(dst):
        raise EngineError(f"{dst} is not empty; a reused run goes into a fresh run folder")
    old, new = str(Path(src).absolute()), str(dst.absolute())
    moves = {**(moves or {}), old: new}
    tmp = dst.with_name(dst.name + ".reusing")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        shutil.copytree(src, tmp, copy_function=_link_or_copy,
                        ignore=shutil.ignore_patterns("run.lock", ".run.json.lock", "job.log", "*.tmp", *TRACKER_FILES))
        for name in (RUN_JSON, EVAL_JSON):  # e.g. "tokenizer": the run's own tokenizer folder; "model_path"
            if not (tmp / name).is_file():
                continue
            data = {k: _moved(v, moves) for k, v in read_json_or_empty(tmp / name).items()}
            if name == RUN_JSON:
                data["config"] = {**{k: _moved(v, moves) for k, v in (data.get("config") or {}).items()}, "out": new}
                data["reused_from"] = old
            atomic_write_json(tmp / name, data)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)  # nothing half-copied stays behind; the job then runs
        raise
    for name in KEPT:  # the job's own log (open, being written) moves with the folder: the same file
        if (dst / name).is_file():
            os.replace(dst / name, tmp / name)
    os.replace(tmp, dst)  # all or nothing (onto an empty folder): a crash leaves no half-copied run in the job's folder


def _moved(value, moves: dict):
    """`value` with a path that lies in one of `moves`' keys moved to its value (the longest key first)."""
    if not isinstance(value, str):
        return value
    for old in sorted(moves, key=len, reverse=True):
        if value == old or value.startswith(old + os.sep):
            return moves[old] + value[len(old):]
    return value


def _started(run: Path) -> bool:
    """The run folder holds a start of its own (anything but what the queue writes there before the job starts)."""
    return run.is_dir() and any(p.name not in KEPT for p in run.iterdir())


def needed_paths(study_dir: Path, job: dict, jobs: list) -> list:
    """The paths under `job`'s run folder that the study's other jobs read (engine.ablations.planner.paths_read)."""
    from engine.ablations.planner import paths_read
    return sorted({rel for j in jobs if j is not job for rel in paths_read(j["argv"], Path(study_dir) / job["out"])})


def take_over(study_dir: Path, job: dict, jobs: list, runs_root: Path):
    """Before `job` (a study's pre-training or evaluation) starts: the finished run it takes over (copied into its
    run folder), or None (nothing matches, or its run folder already holds a start of its own)."""
    out = Path(study_dir) / job["out"]
    if _started(out):
        return None
    if not kind_of(job["kind"]).reusable:  # an evaluation: taken over from another study's job only
        found = matching_evaluation(study_dir, job, jobs, runs_root)
        if found is None:
            return None
        src, moves = found
        adopt(src, out, moves)
        return src
    src = matching_run(job["argv"], needed_paths(study_dir, job, jobs), runs_root, study_dir)
    if src is not None:
        adopt(src, out)
    return src


DATA_FLAGS = ("--train", "--dev")  # an evaluation that reads a file is never taken over: the file may have changed


_FILE_HASHES = {}  # (device, inode, size, mtime) of a weights file -> its sha256: each file read once per process


def origin(run: Path):
    """The model the pre-training run `run` holds, named by its content: a hash of the weights (*.safetensors) of its
    latest complete checkpoint (engine.runs.latest_checkpoint), None without one. A run taken over holds the same
    files, hard-linked or copied, so it names the same model as the run it came from; a new training in the same
    folder names another."""
    ck = latest_checkpoint(run)
    files = sorted(ck.glob("*.safetensors")) if ck is not None else []
    if not files:
        return None
    h = hashlib.sha256()
    for f in files:
        h.update(f"{f.name}={_file_hash(f)};".encode())
    return h.hexdigest()


def _file_hash(path: Path) -> str:
    st = path.stat()
    key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    if key not in _FILE_HASHES:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        _FILE_HASHES[key] = h.hexdigest()
    return _FILE_HASHES[key]


def _pretrain_runs(study_dir: Path, jobs: list) -> list:
    """The absolute run folders of the study's pre-training jobs."""
    return [Path(study_dir).absolute() / j["out"] for j in jobs if kind_of(j.get("kind")) is PRETRAIN and j.get("out")]


def evaluation_key(job: dict, study_dir: Path, runs, model=origin):
    """What an evaluation job computes, comparable across studies: (kind, combines, its command line with --out
    dropped and every path into one of its study's pre-training run folders `runs` written from the model that run
    holds, `model(run)`: `origin`); None when it reads a data file (DATA_FLAGS) or a run that holds no model."""
    argv = list(job.get("argv") or [])
    if any(f in argv for f in DATA_FLAGS):
        return None
    for flag in ("--out", "--report-to"):  # where it is written and which trackers watch it: not what it computes
        if flag in argv:
            i = argv.index(flag)
            del argv[i:i + 2]
    key = []
    for a in argv:
        if isinstance(a, str) and a.startswith(("/", ".")):
            p = Path(a) if a.startswith("/") else Path(study_dir).absolute() / a
            for run in runs:
                if p == run or run in p.parents:
                    held = model(run)
                    if held is None:
                        return None
                    a = "<model " + held + ">" + ("" if p == run else "/" + str(p.relative_to(run)))
                    break
        key.append(a)
    return job.get("kind"), json.dumps(job.get("combines"), sort_keys=True), tuple(key)


def matching_evaluation(study_dir: Path, job: dict, jobs: list, runs_root: Path):
    """(the run folder of a finished evaluation of another study under `runs_root` that computed what `job` would,
    {its study's pre-training runs: ours} to move in its records), else None (module docstring)."""
    from engine.ablations.planner import paths_read
    study_dir = Path(study_dir).absolute()
    runs = _pretrain_runs(study_dir, jobs)
    if any(status_of(read_json_or_empty(run / RUN_JSON).get("status")) is not FINISHED for run in runs if paths_read(job["argv"], run)):
        return None  # its model is not there yet (at launch, a pre-training still to train): nothing to look for
    return finished_evaluation(study_dir, job, {run: origin(run) for run in runs}, other_studies(runs_root, study_dir))


def other_studies(runs_root: Path, study_dir: Path) -> list:
    """[(study folder, its jobs, its pre-training run folders)] of every readable study under `runs_root` but
    `study_dir`: what `finished_evaluation` searches, read once for all of a study's evaluations."""
    from engine.ablations.folders import read_study
    study_dir, out = Path(study_dir).absolute(), []
    for other in sorted(Path(runs_root).absolute().glob(f"studies/*/{STUDY_JSON}")):
        if other.parent == study_dir:
            continue
        try:
            jobs = read_study(other.parent)["jobs"]
        except EngineError:  # a damaged study.json: nothing of it is taken over (its listing says what is wrong)
            continue
        out.append((other.parent, jobs, _pretrain_runs(other.parent, jobs)))
    return out


def finished_evaluation(study_dir: Path, job: dict, ours: dict, others: list):
    """`matching_evaluation` once the runs `job` reads are known: `ours` is {each of the study's pre-training run
    folders: the model it holds (`origin`)}, `others` the studies to search (`other_studies`). Also asked by
    `ablate estimate` (engine.ablations.timing) before the study exists, with the models of the runs its
    pre-trainings would take over."""
    study_dir = Path(study_dir).absolute()
    key = evaluation_key(job, study_dir, ours, model=ours.get)
    if key is None:
        return None
    shape = evaluation_key(job, study_dir, ours, model=lambda run: "")  # the command line alone: no weights read
    by_model = {m: run for run, m in ours.items() if m is not None}
    for other_dir, their_jobs, theirs in others:
        # finished: its run.json says (a study queued one job at a time records the status in its queue, not study.json)
        for j in (j for j in their_jobs if j.get("kind") == job["kind"]):
            src = other_dir / str(j.get("out"))
            if evaluation_key(j, other_dir, theirs, model=lambda run: "") != shape or not (src / EVAL_JSON).is_file():
                continue
            info = read_json_or_empty(src / RUN_JSON)
            if status_of(info.get("status")) is not FINISHED or info.get("evaluation_version") != EVALUATION_VERSION:
                continue
            if evaluation_key(j, other_dir, theirs) != key:  # another model behind the same command line
                continue
            return src, {str(run): str(by_model[origin(run)]) for run in theirs if origin(run) in by_model}
    return None
