"""Where a pre-training step's time goes on a GPU: the benchmark's own engine step (`python -m engine bench
--scenario pretrain`, the same models, batches and optimizer) under torch.profiler, with the transformers step beside.

    python docs/lab-notes/gpu_step_profile.py --preset base --seq-len 128 --batch-size 256 [--data FOLDER] [--packing]
        [--steps 6] [--warmup 5] [--compile] [--top 25] [--side engine|transformers|both]

For each side it prints the wall time of a step (synchronised), the GPU's busy time per step (the sum of the kernels'
own times), the idle share between them (what launch overhead and host work cost), the busy time by kind of kernel
(matrix multiplies, attention, normalisation, elementwise, reductions, optimizer, copies), and torch.profiler's table
of the operators by their own GPU time. `--device cpu` runs the same on a CPU (for checking the script: no kernels).
"""
import argparse
import re
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from engine import bench as B  # noqa: E402
from engine.model import BertConfig  # noqa: E402

KINDS = [  # (kind, pattern over the kernel's name), first match wins
    ("attention", r"flash|fmha|attention|sdpa|efficient_attention"),
    ("matmul", r"gemm|cutlass|sm90_xmma|xmma|cublas|nvjet|matmul|wgmma"),
    ("optimizer", r"adam|multi_tensor|foreach"),
    ("normalisation", r"layer_norm|layernorm|norm_"),
    ("softmax / cross-entropy", r"softmax|nll|cross_entropy|log_softmax"),
    ("dropout / random", r"fused_dropout|bernoulli|philox|dropout"),
    ("reduction", r"reduce|sum_|norm_kernel|max_|argmax"),
    ("copy / index", r"copy|cat|index|gather|scatter|fill|memcpy|memset|embedding"),
    ("elementwise", r"elementwise|vectorized|unrolled|gelu|add|mul|triton"),
]


def kind_of(name: str) -> str:
    low = name.lower()
    for kind, pat in KINDS:
        if re.search(pat, low):
            return kind
    return "other"


def self_device_us(evt) -> float:
    for attr in ("self_device_time_total", "self_cuda_time_total"):
        v = getattr(evt, attr, None)
        if v is not None:
            return float(v)
    return 0.0


def profile_side(name, fn, batches, steps, warmup, device, top):
    for i in range(warmup):
        fn(batches[i % len(batches)])
    B._sync(device)
    t = time.perf_counter()
    for i in range(steps):
        fn(batches[i % len(batches)])
    B._sync(device)
    wall = (time.perf_counter() - t) / steps
    acts = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=acts) as prof:
        for i in range(steps):
            fn(batches[i % len(batches)])
        B._sync(device)
    kernels = [e for e in prof.key_averages() if getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA]
    busy = sum(self_device_us(e) for e in kernels) / steps / 1e3  # ms of kernels per step
    by_kind = defaultdict(float)
    launches = 0
    for e in kernels:
        by_kind[kind_of(e.key)] += self_device_us(e) / steps / 1e3
        launches += e.count
    print(f"\n== {name}: {wall * 1e3:.1f} ms/step wall (unprofiled), {busy:.1f} ms/step of kernels, "
          f"GPU idle {max(0.0, 1 - busy / (wall * 1e3)):.0%}, {launches / steps:.0f} kernel launches/step")
    for kind, ms in sorted(by_kind.items(), key=lambda kv: -kv[1]):
        print(f"   {kind:<24} {ms:8.2f} ms  {ms / max(busy, 1e-9):6.1%}")
    sort = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    try:
        print(prof.key_averages().table(sort_by=sort, row_limit=top, max_name_column_width=60))
    except (KeyError, ValueError, AttributeError):
        print(prof.key_averages().table(sort_by="self_device_time_total", row_limit=top, max_name_column_width=60))
    return {"side": name, "wall_ms": wall * 1e3, "kernel_ms": busy, "launches_per_step": launches / steps,
            "by_kind_ms": dict(by_kind)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="base")
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--precision", default="bf16")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--data", default="")
    ap.add_argument("--packing", action="store_true")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--side", default="both", choices=["engine", "transformers", "both"])
    a = ap.parse_args()
    bc = B.BenchConfig(scenario="pretrain", preset=a.preset, seq_len=a.seq_len, batch_size=a.batch_size,
                       precision=a.precision, device=a.device, data=a.data, packing=a.packing, compile=a.compile)
    device = torch.device(a.device)
    mcfg = BertConfig.preset(bc.preset, vocab_size=bc.vocab_size)
    eng, hf = B.build_models(bc, mcfg, device)
    batches = B._pretrain_batches(bc, device)
    eng.train()
    hf.train()
    if a.compile:
        eng = torch.compile(eng)
    fns = {"engine": B._train_step_fn(bc, eng, B._engine_loss, B.make_optimizer(eng, bc.lr, device), a.precision, device),
           "transformers": B._train_step_fn(bc, hf, B._hf_loss, B.make_optimizer(hf, bc.lr, device), a.precision, device)}
    print(f"{a.preset} T={a.seq_len} B={a.batch_size} {a.precision} packing={a.packing} compile={a.compile} "
          f"data={a.data or 'synthetic full rows'} torch {torch.__version__}"
          + (f" {torch.cuda.get_device_name()}" if device.type == "cuda" else ""))
    sides = ["engine", "transformers"] if a.side == "both" else [a.side]
    for s in sides:
        profile_side(s, fns[s], batches, a.steps, a.warmup, device, a.top)


if __name__ == "__main__":
    main()
