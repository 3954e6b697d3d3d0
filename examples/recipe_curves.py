"""Held-out pre-training quality against wall time, for several pre-training runs side by side (the classroom
recipe search in BENCHMARKS.md).

    python examples/recipe_curves.py runs/old-default runs/new-default [--every 2]

For each run folder it prints one markdown row per held-out evaluation: the step, the tokens seen, the training
time so far (the training records' `elapsed`: optimizer steps only, no evaluation or saving), held-out MLM
accuracy (masked-token; an LTR run's next-token accuracy is not comparable and is printed as lm), the accuracy where
the input is [MASK] beside the most frequent token's share there (what context taught: no copying) and NSP accuracy,
at the held-out length (the length being trained: a two-phase run's last evaluations score the second length),
then the run's wall time from run.json's started/ended (everything: vocabulary, data, evaluation, saving) and its settings that
differ from the first run's. Held-out sets are the same for runs that share the corpus, vocabulary, sequence
length and held-out fraction (engine.pretraining.evaluation.eval_batches masks them once with a fixed seed).
"""
import argparse
import json
import sys
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from engine import records, runs  # noqa: E402

SETTINGS = ("preset", "steps", "batch_size", "seq_len", "lr", "warmup", "dropout", "mask_rate", "vocab_size",
            "max_grad_norm", "phase2_seq_len", "num_threads", "objective")


def curve(run_dir: Path) -> list:
    """[(step, tokens, elapsed, eval record)] for every held-out evaluation of the run."""
    recs = runs.read_metrics(run_dir)
    seen = {r["step"]: r for r in recs if r.get("split") != "eval" and isinstance(r.get("step"), int)}
    out = []
    for ev in map(records.eval_record, recs):
        if ev is not None:
            tr = seen.get(ev["step"], {})
            out.append((ev["step"], tr.get("tokens", ev.get("tokens")), tr.get("elapsed"), ev))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="pre-training run folders")
    ap.add_argument("--every", type=int, default=1, help="print every k-th evaluation (the last is always printed)")
    a = ap.parse_args(argv)
    base = None
    for d in map(Path, a.runs):
        info = json.loads((d / "run.json").read_text(encoding="utf-8"))
        cfg = info.get("config", {})
        base = base or cfg
        diff = {k: cfg.get(k) for k in SETTINGS if cfg.get(k) != base.get(k)}
        wall = ""
        if info.get("started") and info.get("ended"):
            wall = f"wall {(datetime.fromisoformat(info['ended']) - datetime.fromisoformat(info['started'])).total_seconds():.0f} s, "
        print(f"\n### {d.name}: {wall}status {info.get('status')}"
              + (f"; differs: {diff}" if diff else ""))
        print("| step | tokens | training time (s) | held-out length | held-out MLM acc | acc at [MASK] (most frequent token) | held-out NSP acc |")
        print("|---|---|---|---|---|---|---|")
        pts = curve(d)
        for i, (step, tokens, elapsed, ev) in enumerate(pts):
            if i % a.every and i != len(pts) - 1:
                continue
            mlm = ev.get("mlm_acc")
            mlm_s = f"{mlm:.3f}" if mlm is not None else (f"lm {ev['lm_acc']:.3f}" if "lm_acc" in ev else "")
            nsp = f"{ev['nsp_acc']:.3f}" if "nsp_acc" in ev else ""
            at_mask = f"{ev['mlm_mask_acc']:.3f} ({ev.get('mlm_mask_baseline', float('nan')):.3f})" if "mlm_mask_acc" in ev else ""
            t = f"{elapsed:.0f}" if elapsed is not None else ""
            length = f"{ev['seq_len']:.0f}" if "seq_len" in ev else ""  # a two-phase run switches with its phase
            print(f"| {step} | {tokens or ''} | {t} | {length} | {mlm_s} | {at_mask} | {nsp} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
