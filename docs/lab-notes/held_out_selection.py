"""Score pre-training checkpoints on two selections of the same held-out split: its first N instances (what runs
scored before the held-out sample was spread) and N spread evenly over it (`held_out_sample`, what runs score now),
so a recipe measured on the first can be set beside one measured on the second (docs/lab-notes/probe-ready-model.md).
Run from the repository root:

    python docs/lab-notes/held_out_selection.py --cache CACHE/pretraining_data/prepared-mlm_nsp-T128-KEY CKPT [CKPT ...]

(a folder of the in-memory builder's earlier layout, mlm_nsp-T128-KEY with a config.json, opens too).

One JSON line per checkpoint and selection: held-out MLM and NSP accuracy, and the no-model NSP rule's score.
"""
import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import engine  # noqa: E402 (after the repository root is on the path)
from engine.objectives import objective  # noqa: E402
from engine.pretraining.cache import open_pretraining_data  # noqa: E402
from engine.pretraining.prepare import open_prepared  # noqa: E402
from engine.pretraining.config import PretrainConfig  # noqa: E402
from engine.pretraining.evaluation import eval_batches, evaluate  # noqa: E402
from engine.pretraining.masking import EVAL_MASK_SEED, PAPER_RATE, PAPER_RATIOS, fixed_eval_masking  # noqa: E402
from engine.pretraining.step_inputs import add_prediction_slots, max_predictions  # noqa: E402


def first_batches(cache, n: int, batch_size: int) -> list:
    """The first n held-out instances, masked as the whole split is (the earlier selection, exactly)."""
    masked = fixed_eval_masking(cache.eval, cache.vocab_size, cache.mask_id, cache.special_ids, rate=PAPER_RATE,
                                ratios=PAPER_RATIOS, seed=EVAL_MASK_SEED)
    out, seen = [], 0
    for b in masked.batches(batch_size):
        if seen >= n:
            break
        take = min(len(b["input_ids"]), n - seen)
        b = {k: v[:take] for k, v in b.items()}
        b["mask_input"] = b["input_ids"] == cache.mask_id
        out.append(add_prediction_slots(b, max_predictions(b["input_ids"].shape[1], PAPER_RATE)))
        seen += take
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", required=True, help="a pre-training data folder (prepared-mlm_nsp-T128-...)")
    ap.add_argument("--instances", type=int, default=PretrainConfig.eval_max_instances)
    ap.add_argument("checkpoints", nargs="+")
    a = ap.parse_args()
    cache = open_pretraining_data(Path(a.cache)) if (Path(a.cache) / "config.json").is_file() else open_prepared(Path(a.cache))
    obj = objective("mlm+nsp")
    cfg = PretrainConfig(objective=obj.name, eval_max_instances=a.instances)
    selections = {"first": first_batches(cache, a.instances, 32), "spread": eval_batches(cache, cfg, 32)}
    amp = (lambda: torch.autocast("cpu", dtype=torch.bfloat16))
    for ckpt in a.checkpoints:
        model = engine.load(ckpt).model
        for name, batches in selections.items():
            m = evaluate(model, batches, obj, torch.device("cpu"), amp)
            print(json.dumps({"checkpoint": ckpt, "selection": name, "mlm": round(m["eval_mlm_acc"], 4),
                              "nsp": round(m["eval_nsp_acc"], 4), "nsp_rule": round(m["eval_nsp_baseline"], 4)}), flush=True)


if __name__ == "__main__":
    main()
