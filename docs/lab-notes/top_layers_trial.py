"""The probe-ready recipe with the lower part of MiniLM frozen for the whole run (docs/lab-notes/probe-ready-model.md):
the embeddings (so the tied MLM decoder too) and the first --frozen-layers Transformer layers never train, so
backward runs through the top layers only and a step costs less. The recipe's heads-first start stays. Run from the
repository root:

    python docs/lab-notes/top_layers_trial.py --out RUNS/top-layers --frozen-layers 3

The run folder holds the held-out curve in metrics.jsonl, as any run's; the wall time is printed.
"""
import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from engine.pretraining import loop, run  # noqa: E402 (after the repository root is on the path)


def lower_part(model, k: int) -> list:
    return [p for module in (model.bert.embeddings, *model.bert.layers[:k]) for p in module.parameters()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--corpus", default="all")
    ap.add_argument("--frozen-layers", type=int, default=3)
    ap.add_argument("--steps", type=int, default=None)
    a = ap.parse_args()
    real_build, real_freeze = loop.build_model, loop.set_encoder_frozen

    def build(*args, **kwargs):  # the lower part frozen before the optimizer is made: it never trains
        out = real_build(*args, **kwargs)
        for p in lower_part(out[0], a.frozen_layers):
            p.requires_grad_(False)
        return out

    def freeze(model, frozen: bool) -> None:  # after the heads-first steps, only the top layers unfreeze
        real_freeze(model, frozen)
        for p in lower_part(model, a.frozen_layers):
            p.requires_grad_(False)

    loop.build_model, loop.set_encoder_frozen = build, freeze
    t0 = time.time()
    run.main(["--init", "minilm", "--corpus", a.corpus, "--quiet", "--out", a.out,
              *(["--steps", str(a.steps)] if a.steps else [])])
    print(f"in all {(time.time() - t0) / 60:.1f} min")


if __name__ == "__main__":
    main()
