"""Dropout on a CPU, forward and backward, three ways: F.dropout (bernoulli_), the 15-bit draws applied with
torch.where on a bool mask (the code before the 0/1 mask), and the engine's `_dropout` (the same draws applied as a
0/1 tensor of the activations' dtype, engine.kernels.dropout.cpu_dropout_mask); plus single operations that read a bool
tensor against ones that read only the activations' dtype.

    python docs/lab-notes/dropout_measure.py [--threads 2] [--reps 40]

Shapes: MiniLM fine-tuning on RTE at 16 x 100 tokens, attention probabilities (16, 12, 100, 100) and hidden states
(16, 100, 384); bf16 and fp32. Medians of --reps, each a fresh draw.
"""
import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from engine.kernels.dropout import DROP_LEVELS, drop_bits as _drop_bits, dropout as _dropout  # noqa: E402


def median_ms(fn, reps):
    fn()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts) * 1e3


def where_form(x, g, p):
    """The code before: the same draws as a bool mask, torch.where forward and backward."""
    bits, drop = _drop_bits(x.numel(), p)
    keep, scale = (bits >= drop).view(x.shape), DROP_LEVELS / (DROP_LEVELS - drop)
    return torch.where(keep, x * scale, 0), torch.where(keep, g * scale, 0)


def engine_form(x, g, p):
    y = _dropout(x, p, True)
    y.backward(g)
    return y


def bernoulli_form(x, g, p):
    y = F.dropout(x, p, True)
    y.backward(g)
    return y


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=40)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    print(f"torch {torch.__version__}, {a.threads} threads, p = 0.1, forward and backward, median ms")
    for shape in ((16, 12, 100, 100), (16, 100, 384)):
        for dtype in (torch.bfloat16, torch.float32):
            x = torch.randn(shape).to(dtype)
            g = torch.randn(shape).to(dtype)
            xr = x.clone().requires_grad_(True)
            row = {"F.dropout": median_ms(lambda: bernoulli_form(xr, g, 0.1), a.reps),
                   "15-bit, torch.where": median_ms(lambda: where_form(x, g, 0.1), a.reps),
                   "15-bit, 0/1 mask (engine)": median_ms(lambda: engine_form(xr, g, 0.1), a.reps)}
            print(f"{str(tuple(shape)):18s} {str(dtype).replace('torch.', ''):9s} "
                  + "  ".join(f"{k} {v:6.2f}" for k, v in row.items()))
    x = torch.randn(16, 12, 100, 100).to(torch.bfloat16)
    keep = torch.rand(x.shape) > 0.1
    ones = keep.to(x.dtype)
    ops = {"torch.where(keep, x, 0)": lambda: torch.where(keep, x, 0), "x * keep (bool)": lambda: x * keep,
           "x.masked_fill(~keep, 0)": lambda: x.masked_fill(~keep, 0), "keep.to(bf16)": lambda: keep.to(x.dtype),
           "x * mask (bf16 0/1)": lambda: x * ones, "x * 1.11": lambda: x * 1.11}
    print("one operation at (16, 12, 100, 100) bf16: " + "; ".join(f"{k} {median_ms(f, a.reps):.2f}" for k, f in ops.items()))


if __name__ == "__main__":
    main()
