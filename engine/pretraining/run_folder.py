"""The run folder of a pre-training: checks before starting, checkpoints with their training state, RNG state,
and stop signals.

- `preflight` refuses, before any work, what would overwrite or collide (a live run, a finished folder without
  `--resume`, a resume with other settings); `elastic_restart` makes a restart under `torchrun --max-restarts` a
  resume of the run it restarts.
- `save_checkpoint` writes `checkpoints/step-N/`: Hugging Face layout (config.json, model.safetensors,
  vocab.txt; an ELECTRA run's discriminator, with its pair in `discriminator/` and `generator/`, engine/electra.py)
  + training_state.json (step, phase, data position, tokens, elapsed) + training_state.pt
  (optimizer, scheduler, RNG states, the open metrics window), into a temporary folder published with a
  COMPLETE marker. `load_training_state` reads it back with `torch.load(weights_only=True)`.
- `StopFlag`: SIGTERM / Ctrl-C ask the loop to checkpoint at the end of the step and stop.
"""
import json
import random
import shutil
import signal
import sys
import threading
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from engine import runs
from engine.checkpoint import save as save_checkpoint_weights
from engine.commands import PRETRAIN, kind_of
from engine.distributed import Dist, all_reduce_
from engine.electra import save_pair
from engine.span_boundary import save_head
from engine.errors import EngineError
from engine.fileio import atomic_save_with
from engine.objectives import objective
from engine.optim import schedule
from engine.pretraining.config import RUNTIME_FIELDS, PretrainConfig, config_dict
from engine.tokenizer import Tokenizer

STATE_FORMAT = 1


# ================================================================ run folder checks
_IGNORED_ENTRIES = {runs.LOCK_FILE, ".run.json.lock", "job.log"}  # the launcher writes job.log before we start


def run_entries(run_dir: Path) -> list:
    """What in `run_dir` a new run would collide with: anything but lock files and the launcher's job.log
    (and a tokenizer/ left by a start that died before it wrote run.json)."""
    try:
        names = [p.name for p in run_dir.iterdir() if p.name not in _IGNORED_ENTRIES]
    except FileNotFoundError:
        return []
    except NotADirectoryError:
        raise EngineError(f"--out {run_dir} is a file; give a folder for the run")
    if runs.RUN_JSON not in names:
        names = [n for n in names if n != "tokenizer"]
    return names


def resolve_out(cfg: PretrainConfig) -> Path:
    if cfg.out:
        return runs.run_dir_for(cfg.out)
    if cfg.name:
        return runs.resolve_run_dir(runs.runs_root(), cfg.name)
    raise EngineError("no run folder given; pass --out DIR (or --name NAME for runs/NAME)")


def preflight(cfg: PretrainConfig, run_dir: Path):
    """Refuse what would overwrite or collide, before any work. Returns (checkpoint to resume from or None,
    restart): restart is True for `--resume` of a run that died before its first checkpoint (it starts again
    from step 0 with its own settings; nothing resumable is lost)."""
    holder = runs.lock_holder(run_dir) if run_dir.is_dir() else None
    if holder is not None:
        raise EngineError(f"run {run_dir} is in use by process {holder.get('pid', '?')} (started {holder.get('started', '?')}); wait for it or cancel it, or choose another --out")
    if not cfg.resume:
        if run_entries(run_dir):
            raise EngineError(f"run folder {run_dir} already holds a run; continue it with --resume, or choose another --out")
        return None, False
    info = runs.read_run_json(run_dir) if run_dir.is_dir() else {}
    has_ck = runs.latest_checkpoint(run_dir) is not None
    if not has_ck and not info:
        where = "does not exist" if not run_dir.exists() else "holds no run (no run.json, no checkpoint)"
        raise EngineError(f"cannot resume: {run_dir} {where}; start a new run without --resume (into an empty or new --out)")
    if info.get("kind") is not None and kind_of(info["kind"]) is not PRETRAIN:
        raise EngineError(f"{run_dir} is a {info.get('kind')} run, not a pre-training run; choose another --out")
    saved = info.get("config")
    if not isinstance(saved, dict) or not saved:
        raise EngineError(f"cannot resume: {run_dir}/{runs.RUN_JSON} is missing or records no settings, so the run's sequence "
                          f"length, seed, masking and data cannot be established; restore run.json, or start a new run")
    mine = config_dict(cfg)
    for k, v in saved.items():
        if k in RUNTIME_FIELDS or k not in mine:
            continue
        if mine[k] != v:
            raise EngineError(f"the run was started with {k}={v!r} but this resume asks for {mine[k]!r}; --resume continues with the run's own settings, drop that flag or use another --out")
    ck = loadable_checkpoint(run_dir)
    return ck, ck is None


def elastic_restart(cfg: PretrainConfig, run_dir: Path, restarts: int) -> PretrainConfig:
    """`cfg` as a restart under `torchrun --max-restarts` runs it: torchrun starts the same command again (`restarts`,
    engine.distributed.group_restart_count, > 0), so when the run folder holds the pre-training this command started
    (its run.json, with these settings) the restart continues it from its last complete checkpoint, as `--resume`
    does (`preflight`: from step 0 when it died before its first one). The first attempt, and a restart of a run
    that wrote no run.json yet, start as the command says."""
    if cfg.resume or restarts == 0:
        return cfg
    info = runs.read_run_json(run_dir) if (run_dir / runs.RUN_JSON).is_file() else {}
    saved = info.get("config") if kind_of(info.get("kind")) is PRETRAIN else None
    mine = config_dict(cfg)
    if not isinstance(saved, dict) or any(saved.get(k) != v for k, v in mine.items() if k in saved and k not in RUNTIME_FIELDS):
        return cfg  # not this command's run: refused as any start into a folder that holds a run
    print(f"elastic restart {restarts} (torchrun): continuing {run_dir} from its last complete checkpoint",
          file=sys.stderr, flush=True)
    return replace(cfg, resume=True)


def loadable_checkpoint(run_dir: Path):
    """The newest complete checkpoint whose weights and training state load (None when the run has none);
    a damaged newer one is skipped, and the skip is said. Every checkpoint damaged: EngineError."""
    from engine.checkpoint import load as load_checkpoint
    skipped = []
    for ck in reversed(runs.list_checkpoints(run_dir)):
        try:
            load_checkpoint(ck)
            load_training_state(ck)
        except EngineError as e:
            skipped.append(f"{ck.name} ({e})")
            continue
        if skipped:
            print(f"warning: checkpoint {'; '.join(skipped)} could not be loaded; resuming from {ck.name} instead",
                  file=sys.stderr, flush=True)
        return ck
    if skipped:
        raise EngineError(f"cannot resume: no checkpoint of {run_dir} loads ({'; '.join(skipped)[:300]}); restore one or start a new run")
    return None


def remove_partial_checkpoints(run_dir: Path) -> None:
    """Delete the temporary folders a killed save left in checkpoints/ (all dot-named; we hold the run lock)."""
    ckdir = run_dir / runs.CHECKPOINTS
    if ckdir.is_dir():
        for p in ckdir.iterdir():
            if p.name.startswith(".") and p.is_dir():
                shutil.rmtree(p, ignore_errors=True)


def last_eval(run_dir) -> dict:
    """The last held-out record in the run's metrics.jsonl ({} when none)."""
    recs = [r for r in runs.read_metrics(run_dir) if r.get("split") == "eval"]
    return recs[-1] if recs else {}


# ================================================================ RNG state
def rng_state() -> dict:
    """The global torch / Python / NumPy (and CUDA) generator states, as tensors and plain values."""
    np_state = np.random.get_state()
    py = random.getstate()
    st = {"torch": torch.get_rng_state(), "python": list(py[1]), "python_version": py[0], "python_gauss": py[2],
          "numpy": torch.from_numpy(np.asarray(np_state[1], dtype=np.int64)), "numpy_pos": int(np_state[2]),
          "numpy_gauss": [int(np_state[3]), float(np_state[4])]}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        st["cuda"] = torch.cuda.get_rng_state()
    return st


def set_rng_state(st: dict) -> None:
    torch.set_rng_state(st["torch"])
    random.setstate((st["python_version"], tuple(int(x) for x in st["python"]), st.get("python_gauss")))
    np.random.set_state(("MT19937", st["numpy"].numpy().astype(np.uint32), st["numpy_pos"],
                         st["numpy_gauss"][0], st["numpy_gauss"][1]))
    if "cuda" in st and torch.cuda.is_available():
        torch.cuda.set_rng_state(st["cuda"])


# ================================================================ checkpoints
def save_checkpoint(run_dir: Path, model, tokenizer: Tokenizer, optimizer, state: dict, window: torch.Tensor,
                    cfg: PretrainConfig) -> Path:
    """Write checkpoints/step-N (HF layout + training state) atomically; returns its path."""
    step = int(state["step"])
    tmp = runs.new_checkpoint_dir(run_dir, step)
    try:
        save_checkpoint_weights(model, tmp, tokenizer=tokenizer, extra_files={"training_state.json": state})
        if objective(cfg.objective).generator:  # ELECTRA: discriminator/ and generator/ in transformers' layout (its
            # MLM ablations: generator/ only), beside
            save_pair(model, tmp, tokenizer)
        if cfg.span_boundary:  # SpanBERT's span boundary head, in its own file beside
            save_head(model, tmp)
        blob = {"format": STATE_FORMAT, "step": step, "optimizer": optimizer.state_dict(),
                "scheduler": {"kind": "linear_warmup_linear_decay", **schedule(cfg), "last_step": step},
                "rng": rng_state(), "metrics_window": window.detach().cpu().clone(),
                "state_json": json.dumps(state)}
        atomic_save_with(tmp / "training_state.pt", lambda p: torch.save(blob, p))
        final = runs.publish_checkpoint(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if cfg.keep:
        runs.prune_checkpoints(run_dir, cfg.keep)
    return final


def checkpoint(run_dir, raw_model, tok, optimizer, state, window, cfg, dist: Dist) -> None:
    """Every rank calls this at the same step; rank 0 saves (unless that step is already saved)."""
    if dist.enabled:  # the open metrics window, summed over ranks, travels in rank 0's checkpoint
        all_reduce_(dist, window)
        if not dist.main:
            window.zero_()
    dist.barrier()
    if dist.main:
        existing = run_dir / runs.CHECKPOINTS / f"step-{int(state['step'])}"
        if not (existing / runs.COMPLETE).is_file():
            save_checkpoint(run_dir, raw_model, tok, optimizer, dict(state), window, cfg)
    dist.barrier()


def load_training_state(ckpt: Path) -> dict:
    path = Path(ckpt) / "training_state.pt"
    if not path.is_file():
        raise EngineError(f"{ckpt} has no training_state.pt, so the run cannot continue exactly from it; resume from another checkpoint or start a new run")
    try:
        blob = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as e:
        raise EngineError(f"{path} could not be read ({type(e).__name__}); the checkpoint is damaged, delete it to resume from the one before") from e
    if not isinstance(blob, dict) or blob.get("format") != STATE_FORMAT:
        raise EngineError(f"{path} is not a training state this version can read; start a new run")
    blob["state"] = json.loads(blob["state_json"])
    return blob


# ================================================================ signals
@dataclass(frozen=True)
class RunFolder:
    """A pre-training's run folder as the run sees it: where a run in it starts, its checkpoints, and what a resume
    removes first. The functions above do the work; the plan (engine/pretraining/plan.py) holds one, and the loop
    asks it instead of passing the path to each."""
    path: Path

    def start(self, cfg: PretrainConfig) -> tuple:
        """(checkpoint to continue from or None, restart) for `cfg`, refusing what would collide (`preflight`)."""
        return preflight(cfg, self.path)

    def entries(self) -> list:
        """What the folder holds of a run (`run_entries`): a fresh start into it is refused."""
        return run_entries(self.path)

    def rewind(self, step: int) -> None:
        """Before continuing from a checkpoint at `step` (a restart: 0): metrics logged after it and the temporary
        folders of a killed save go."""
        runs.truncate_metrics(self.path, step)
        remove_partial_checkpoints(self.path)

    def save(self, raw_model, tok, optimizer, state, window, cfg, dist: Dist) -> None:
        """A complete checkpoint of the run's state now (`checkpoint`: rank 0 writes, barriers around it)."""
        checkpoint(self.path, raw_model, tok, optimizer, state, window, cfg, dist)

    def last_eval(self) -> dict:
        return last_eval(self.path)


class StopFlag:
    """SIGTERM / Ctrl-C set a flag; the loop checkpoints at the end of the current step and stops. A second
    signal does not abort that checkpoint (two quick Cancels, or a launcher's TERM then the group's, would lose
    it): it is only acknowledged. A third raises KeyboardInterrupt at once (the run then continues from its last
    complete checkpoint)."""

    def __init__(self):
        self.signal = None
        self.count = 0
        self.old = {}

    def install(self):
        if threading.current_thread() is not threading.main_thread():
            return self
        for sig in (signal.SIGTERM, signal.SIGINT):
            self.old[sig] = signal.signal(sig, self._on)
        return self

    def _on(self, signum, frame):
        self.count += 1
        if self.count == 1:
            self.signal = signum
        elif self.count == 2:
            print(f"{signal.Signals(signum).name}: already stopping after this step's checkpoint; a third signal aborts "
                  f"without it", file=sys.stderr, flush=True)
        else:
            raise KeyboardInterrupt(f"third {signal.Signals(signum).name}")

    def restore(self):
        for sig, h in self.old.items():
            signal.signal(sig, h)
        self.old = {}

    def name(self) -> str:
        return signal.Signals(self.signal).name if self.signal else "another rank"
