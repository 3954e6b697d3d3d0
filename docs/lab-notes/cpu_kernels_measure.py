"""Time the two CPU training kernels the engine chooses between (docs/lab-notes/probe-ready-model.md, "A smaller
batch without dropout, and two CPU kernels"): attention forward and backward under bf16 autocast, the fused
`scaled_dot_product_attention` against the explicit softmax path, at the classroom's, MiniLM's and BERT-BASE's
shapes, with and without a padding mask; and the blocked vocabulary loss (engine.vocab_loss) forward and backward
at several block sizes, one block (its gradient kept) included. Medians; 2 threads. Time it alone.

    python docs/lab-notes/cpu_kernels_measure.py [--fp32] [--dropout P]

`--fp32` times everything without autocast (a CPU without bf16 units trains so); `--dropout P` times attention in
training mode with dropout P on the attention probabilities (SDPA's dropout_p, F.dropout on the explicit path), as
fine-tuning runs it.
"""
import argparse, contextlib, math, statistics, sys, time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout
import torch
import torch.nn.functional as F
from engine.vocab_loss import block_rows, vocab_cross_entropy

torch.set_num_threads(2)
_args = argparse.ArgumentParser()
_args.add_argument("--fp32", action="store_true")
_args.add_argument("--dropout", type=float, default=0.0)
ARGS = _args.parse_args()


def autocast():
    return contextlib.nullcontext() if ARGS.fp32 else torch.autocast("cpu", dtype=torch.bfloat16)


def median_ms(fn, n=7):
    fn()
    ts = []
    for _ in range(n):
        t0 = time.perf_counter(); fn(); ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1000


def explicit(q, k, v, mask):
    s = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s.masked_fill(~mask, torch.finfo(s.dtype).min)
    return F.dropout(s.softmax(-1), ARGS.dropout, True) @ v


for B, A, T, D in ((16, 12, 128, 32), (32, 12, 128, 32), (64, 2, 32, 64), (64, 2, 128, 64), (256, 12, 128, 64)):
    q, k, v = [torch.randn(B, A, T, D, requires_grad=True) for _ in range(3)]
    for masked in (False, True):
        mask = None
        if masked:  # half the rows padded to half their length
            mask = torch.ones(B, 1, 1, T, dtype=torch.bool)
            mask[::2, ..., T // 2:] = False
        line = []
        for name, fn in (("fused", lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                                                                    dropout_p=ARGS.dropout)),
                         ("explicit", lambda: explicit(q, k, v, mask))):
            def step():
                with autocast():
                    o = fn()
                o.float().sum().backward()
            line.append(f"{name} {median_ms(step, 3 if B == 256 else 7):.1f} ms")
        print(f"attention B={B} A={A} T={T} D={D} {'mask' if masked else 'no mask'}: " + ", ".join(line))

for N, H, V in ((320, 384, 30522), (512, 128, 8000), (2048, 128, 8000)):
    h = torch.randn(N, H, requires_grad=True)
    w = (torch.randn(V, H) * 0.02).requires_grad_()
    b = torch.zeros(V, requires_grad=True)
    t = torch.randint(0, V, (N,))
    for rows in sorted({block_rows(torch.device("cpu"), V), 256, 512, N}):
        def step():
            with autocast():
                loss, _ = vocab_cross_entropy(h, w, b, t, rows=rows)
            loss.backward()
        print(f"vocabulary loss N={N} H={H} V={V} rows {rows}: {median_ms(step, 5):.1f} ms" + (" (one block, kept)" if rows >= N else ""))
