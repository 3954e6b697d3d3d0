"""Where a fine-tuning step's time goes: the engine's own loop pieces (prepare, TaskModel, packing, AdamW, clipping)
on a task's real batches, each phase timed apart, then torch.profiler's table of the operators.

    python docs/lab-notes/finetune_step_profile.py --train ../shared/data/rte/train.tsv \
        --dev ../shared/data/rte/dev.tsv [--steps 20] [--warmup 3] [--batch 16] [--dropout 0.1] \
        [--packing] [--loop-adamw] [--profile] [--malloc-no-mmap] [--plain-embedding-grad]

The phases are timed with the step's own synchronous CPU execution (no GPU here): collate and pack, forward and the
loss, backward, clipping, the optimizer and its schedule. The optimizer is the engine's (`make_optimizer`: AdamW's
fused kernel); `--loop-adamw` builds AdamW's per-parameter loop instead (the code before the fused CPU kernel).
`--packing` packs each batch as `finetune --packing` does. Each phase's minor page faults and system time are
counted too (getrusage). The page faults a step took before the word embeddings' gradient kept its memory (a fresh
47 MB glibc mapping every step for MiniLM): `--plain-embedding-grad` puts back the plain F.embedding gradient;
`--malloc-no-mmap` has glibc serve every allocation from its heap and never trim it (mallopt M_MMAP_MAX 0,
M_TRIM_THRESHOLD 2^62).
"""
import argparse
import ctypes
import importlib
import resource
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

ft = importlib.import_module("engine.finetune")  # the module (engine.finetune is also the function)
from engine.device import amp, resolve_device, resolve_precision  # noqa: E402
from engine.heads import TaskModel, pack_inputs  # noqa: E402
from engine.optim import linear_schedule, param_groups  # noqa: E402
from engine.tasks.batching import length_batches  # noqa: E402


def malloc_no_mmap() -> None:
    """glibc: every allocation from the heap (no mmap), and the heap never trimmed (freed memory is reused)."""
    libc = ctypes.CDLL("libc.so.6")
    M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4
    assert libc.mallopt(M_MMAP_MAX, 0) == 1 and libc.mallopt(M_TRIM_THRESHOLD, ctypes.c_int(2**31 - 1)) == 1


def use_plain_embedding_grad() -> None:
    """The word embeddings on plain F.embedding: a new zeroed (V, H) gradient every step (the code before
    engine.model.word_embedding kept its memory)."""
    import engine.model as em
    em.word_embedding = lambda ids, weight, padding_idx, kept: F.embedding(ids, weight, padding_idx)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--train", required=True)
    ap.add_argument("--dev", required=True)
    ap.add_argument("--model", default="minilm")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--packing", action="store_true")
    ap.add_argument("--loop-adamw", action="store_true")
    ap.add_argument("--precision", default="auto")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--malloc-no-mmap", action="store_true")
    ap.add_argument("--plain-embedding-grad", action="store_true")
    a = ap.parse_args()
    if a.malloc_no_mmap:
        malloc_no_mmap()
    torch.set_num_threads(2)
    if a.plain_embedding_grad:
        use_plain_embedding_grad()
    cfg = ft.FinetuneConfig(model=a.model, task="glue", train=a.train, dev=a.dev, out="/tmp/unused-profile",
                            dropout=a.dropout, packing=a.packing, precision=a.precision)
    device = resolve_device("cpu")
    precision = resolve_precision(cfg.precision, device)
    bundle, base = ft._load_encoder(cfg)
    max_len = min(cfg.max_seq_len, bundle.config.max_position_embeddings)
    data = ft.prepare(ft.load_task(cfg), bundle.tokenizer, cfg, max_len)
    g = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    model = TaskModel(base, data.kind, data.num_labels, dropout=a.dropout, generator=g)
    ft.set_dropout(model, a.dropout)
    model.train()
    total = a.steps + a.warmup
    opt, sched = ft.make_optimizer(model, 5e-5, cfg.weight_decay, total, cfg.warmup)
    if a.loop_adamw:
        opt = torch.optim.AdamW(param_groups(model, cfg.weight_decay), lr=5e-5, betas=(0.9, 0.999), eps=1e-6)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: linear_schedule(s, total, int(cfg.warmup * total)))
    batches = []
    while len(batches) < total:
        batches += list(length_batches(data.train_lengths, a.batch, g))
    batches = batches[:total]
    phases = {k: [] for k in ("collate+pack", "forward+loss", "backward", "clip", "optimizer", "step")}
    tokens = 0
    faults, system = [], []

    def step(idx, record: bool):
        nonlocal tokens
        r0 = resource.getrusage(resource.RUSAGE_SELF)
        t0 = time.perf_counter()
        batch = data.collate([data.train[i] for i in idx])
        packing = pack_inputs(batch) if cfg.packing else None
        t1 = time.perf_counter()
        with amp(device, precision):
            logits = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"], packing=packing)
        loss = model.loss(logits, batch)
        t2 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        t3 = time.perf_counter()
        nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
        t4 = time.perf_counter()
        opt.step()
        sched.step()
        loss.item()
        t5 = time.perf_counter()
        r5 = resource.getrusage(resource.RUSAGE_SELF)
        if record:
            faults.append(r5.ru_minflt - r0.ru_minflt)
            system.append((r5.ru_stime - r0.ru_stime) * 1000)
            for k, v in zip(phases, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t5 - t0)):
                phases[k].append(v * 1000)
            tokens += int(batch["attention_mask"].sum())

    for i in range(a.warmup):
        step(batches[i], False)
    if a.profile:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for i in range(a.warmup, total):
                step(batches[i], True)
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=30))
    else:
        for i in range(a.warmup, total):
            step(batches[i], True)
    n = len(phases["step"])
    print(f"{a.model}, {n} steps of {a.batch}, precision {precision}, dropout {a.dropout}, "
          f"packing {cfg.packing}, AdamW {'loop' if a.loop_adamw else 'fused'}; {tokens / n:.0f} real tokens a step")
    for k, v in phases.items():
        print(f"  {k:13s} median {statistics.median(v):8.1f} ms   mean {statistics.mean(v):8.1f} ms")
    print(f"  real tokens/s {tokens / (sum(phases['step']) / 1000):,.0f}")
    print(f"  minor page faults a step: median {statistics.median(faults):,.0f}; system time a step: median "
          f"{statistics.median(system):.1f} ms (both threads); malloc no mmap {a.malloc_no_mmap}, plain embedding "
          f"gradient {a.plain_embedding_grad}")


if __name__ == "__main__":
    main()
