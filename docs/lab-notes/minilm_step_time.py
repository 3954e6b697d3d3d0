"""Time one MiniLM-shaped MLM + NSP pre-training step on this CPU (random weights and batch: 32 x 128, 20 predictions
per sequence, 2 threads): forward, backward and AdamW, median of --steps after 2 untimed; --precision bf16|fp32,
--profile for the torch profiler table; --fused-attention and --recompute-vocab time the code before this CPU's two
training kernels were chosen. Time it alone.

    python docs/lab-notes/minilm_step_time.py --steps 4 --precision bf16
"""
import sys, time, statistics, argparse
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout
import torch, torch.nn.functional as F
from engine.config import BertConfig
from engine.model import BertForPreTraining
from engine.device import amp
p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=8)
p.add_argument("--profile", action="store_true")
p.add_argument("--fused", action="store_true")
p.add_argument("--batch", type=int, default=32)
p.add_argument("--precision", default="bf16")
p.add_argument("--dropout", type=float, default=0.1)
p.add_argument("--fused-attention", action="store_true", help="train with the fused SDPA kernel (the code before "
               "engine.model.explicit_attention)")
p.add_argument("--recompute-vocab", action="store_true", help="the vocabulary loss in blocks even where one block "
               "fits (the code before engine.vocab_loss.KEEP_ELEMENTS)")
a = p.parse_args()
import engine.model, engine.vocab_loss
if a.fused_attention:
    engine.model.explicit_attention = lambda x: False
if a.recompute_vocab:
    engine.vocab_loss.KEEP_ELEMENTS = {}
torch.set_num_threads(2)
cfg = BertConfig(vocab_size=30522, hidden_size=384, num_layers=6, num_heads=12, intermediate_size=1536,
                 max_position_embeddings=512, has_nsp_head=True, hidden_dropout=a.dropout, attention_dropout=a.dropout)
torch.manual_seed(0)
model = BertForPreTraining(cfg).train()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, **({"fused": True} if a.fused else {}))
B, T, P = a.batch, 128, 20
g = torch.Generator().manual_seed(0)
ids = torch.randint(5, 30522, (B, T), generator=g); tt = torch.zeros_like(ids); tt[:, 64:] = 1
rows = torch.arange(B).repeat_interleave(P); cols = torch.randint(1, T, (B * P,), generator=g)
target = torch.randint(5, 30522, (B * P,), generator=g); nsp_t = torch.randint(0, 2, (B,), generator=g)
def step(times):
    t0 = time.perf_counter()
    with amp("cpu", a.precision):
        out = model(ids, tt, None, mlm_positions=(rows, cols), mlm_targets=target)
    loss = out.mlm_loss_sum / len(target) + F.cross_entropy(out.nsp_logits.float(), nsp_t)
    t1 = time.perf_counter(); loss.backward(); t2 = time.perf_counter()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step(); opt.zero_grad(set_to_none=True); t3 = time.perf_counter()
    times.append((t1 - t0, t2 - t1, t3 - t2, t3 - t0))
ts = []
for _ in range(2): step([])
if a.profile:
    from torch.profiler import profile, ProfilerActivity
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(3): step(ts)
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=30))
else:
    for _ in range(a.steps): step(ts)
for i, n in enumerate(("fwd", "bwd", "opt", "total")):
    print(n, f"{statistics.median(t[i] for t in ts) * 1000:.0f} ms")
