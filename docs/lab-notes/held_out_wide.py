"""Score finished pre-training runs on more of the held-out split than a run evaluates while it trains.

A run scores its checkpoints on `eval_max_instances` (512) held-out instances spread over the split; a 512-pair
NSP accuracy near 0.87 has a standard error of about 0.015, so two recipes 0.01-0.02 apart on it are not told apart.
This script reloads each run's checkpoint at STEP (its last by default) and scores it the same way (the same fixed
15% masking seed, the same spread) on N held-out instances (all of them by default), printing one JSON line per run
with the binomial standard errors.

    python docs/lab-notes/held_out_wide.py RUN_DIR [RUN_DIR ...] [--n 0] [--step -1] [--batch 32]

Every run must be of the same corpus and sequence length for their figures to compare (the script refuses others).
"""
import argparse
import dataclasses
import json
import math
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from engine.corpora import load_corpus  # noqa: E402
from engine.device import amp, resolve_device, resolve_precision  # noqa: E402
from engine.distributed import dist_from_env  # noqa: E402
from engine.objectives import objective  # noqa: E402
from engine.vocab_loss import IGNORE_INDEX  # noqa: E402
from engine.pretraining.config import PretrainConfig  # noqa: E402
from engine.pretraining.evaluation import eval_batches, evaluate  # noqa: E402
from engine.pretraining.loop import build_model  # noqa: E402
from engine.pretraining.run import tokenizer_and_data  # noqa: E402


def checkpoint_of(run_dir: Path, step: int) -> Path:
    ckpts = sorted((run_dir / "checkpoints").glob("step-*"), key=lambda p: int(p.name.split("-")[1]))
    if not ckpts:
        raise SystemExit(f"{run_dir} has no checkpoints")
    if step < 0:
        return ckpts[-1]
    pick = [p for p in ckpts if int(p.name.split("-")[1]) == step]
    if not pick:
        raise SystemExit(f"{run_dir} has no checkpoint at step {step}: {[p.name for p in ckpts]}")
    return pick[0]


def score(run_dir: Path, n: int, step: int, batch: int) -> dict:
    config = json.loads((run_dir / "run.json").read_text())["config"]
    known = {f.name for f in dataclasses.fields(PretrainConfig)}
    cfg = PretrainConfig(**{k: v for k, v in config.items() if k in known})
    docs = load_corpus(cfg.corpus)
    tok, caches = tokenizer_and_data(cfg, docs, run_dir, dist_from_env(), resuming=True)
    cache = caches[-1]  # the last phase's length: what the run's final evaluations score
    n_all = cache.eval.num_instances
    cfg = dataclasses.replace(cfg, eval_max_instances=n_all if n <= 0 else min(n, n_all))
    device = resolve_device("cpu")
    precision = resolve_precision(cfg.precision, device)
    ckpt = checkpoint_of(run_dir, step)
    model, *_ = build_model(cfg, tok, ckpt, device)
    t0 = time.time()
    batches = eval_batches(cache, cfg, batch)
    n_mlm = sum(int((b["labels"] != IGNORE_INDEX).sum()) for b in batches)  # the labelled positions scored
    n_mask = sum(int(b["mask_input"].sum()) for b in batches if "mask_input" in b)
    rec = evaluate(model, batches, objective(cfg.objective), device, lambda: amp(device, precision))
    out = {"run": str(run_dir), "checkpoint": ckpt.name, "held_out": cfg.eval_max_instances, "of": n_all,
           "seconds": round(time.time() - t0, 1)}
    for key in ("eval_mlm_acc", "eval_nsp_acc", "eval_mlm_mask_acc"):
        if key in rec:
            p = rec[key]
            m = {"eval_nsp_acc": cfg.eval_max_instances, "eval_mlm_acc": n_mlm, "eval_mlm_mask_acc": n_mask}[key]
            out[key] = round(p, 4)
            if m:
                out[key + "_se"] = round(math.sqrt(p * (1 - p) / m), 4)
    out["eval_nsp_baseline"] = round(rec.get("eval_nsp_baseline", float("nan")), 4)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--n", type=int, default=0, help="held-out instances (0: all of the split)")
    ap.add_argument("--step", type=int, default=-1, help="checkpoint step (-1: the last)")
    ap.add_argument("--batch", type=int, default=32)
    a = ap.parse_args()
    torch.set_num_threads(2)
    for run in a.runs:
        print(json.dumps(score(run, a.n, a.step, a.batch)), flush=True)


if __name__ == "__main__":
    main()
