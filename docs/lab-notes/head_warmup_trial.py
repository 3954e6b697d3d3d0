"""The probe-ready recipe with its new heads trained first on a frozen encoder (docs/lab-notes/probe-ready-model.md).

Phase A: `pretrain --init minilm` for --warm-steps steps with MiniLM's embeddings and layers frozen (so only the MLM
transform and bias, the pooler and the NSP head learn, and the frozen encoder runs forward only); phase B: the
recipe continued from phase A's model for --steps steps (both with --heads-first 0: the trial as first run, before
the recipe had that setting; `--heads-first` now does the same in one run). Run from the repository root:

    python docs/lab-notes/head_warmup_trial.py --out RUNS/head-warmup --warm-steps 100 --steps 300

Each phase is a run folder of its own (RUNS/head-warmup-a, RUNS/head-warmup-b) with its held-out curve in
metrics.jsonl; the wall time of each is printed.
"""
import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from engine.pretraining import loop, run  # noqa: E402 (after the repository root is on the path)


def frozen_encoder(build_model):
    """build_model with the encoder's embeddings and layers frozen (the pooler, which NSP reads, stays trainable)."""
    def build(*args, **kwargs):
        out = build_model(*args, **kwargs)
        model = out[0]
        for module in (model.bert.embeddings, model.bert.layers):
            for p in module.parameters():
                p.requires_grad_(False)
        return out
    return build


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--corpus", default="all")
    ap.add_argument("--warm-steps", type=int, default=100)
    ap.add_argument("--warm-lr", type=float, default=1e-3)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--lr", default=None, help="phase B's peak rate (default: the recipe's)")
    a = ap.parse_args()
    t0 = time.time()
    real = loop.build_model
    loop.build_model = frozen_encoder(real)
    try:
        run.main(["--init", "minilm", "--corpus", a.corpus, "--steps", str(a.warm_steps), "--lr", str(a.warm_lr),
                  "--warmup", "10", "--heads-first", "0", "--eval-every", "50", "--save-every", "0", "--quiet", "--out", a.out + "-a"])
    finally:
        loop.build_model = real
    t1 = time.time()
    run.main(["--init", a.out + "-a", "--corpus", a.corpus, "--steps", str(a.steps), *(["--lr", a.lr] if a.lr else []),
              "--heads-first", "0", "--eval-every", "50", "--save-every", "0", "--quiet", "--out", a.out + "-b"])
    t2 = time.time()
    print(f"phase A {t1 - t0:.0f} s, phase B {t2 - t1:.0f} s, in all {(t2 - t0) / 60:.1f} min")


if __name__ == "__main__":
    main()
