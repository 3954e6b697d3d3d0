"""Time one pre-training step of the engine's model, the vocabulary loss plain or in blocks (engine.vocab_loss).

    python examples/step_profile.py                      # the classroom model: MLM and LTR at 32 and 128 tokens
    python examples/step_profile.py --layers 4 --objectives mlm --lengths 128 --steps 40

Each row: forward, loss, backward and an AdamW step of a random batch (token ids drawn uniformly; the MLM rows
select --mask-rate of the positions, the LTR rows every position, with causal attention), bf16 autocast on a CPU
with AVX-512 bf16 or AMX as pre-training uses it (--precision fp32 to turn it off), the median of --steps timed
steps after --warmup. "plain" projects the selected positions onto the vocabulary and calls F.cross_entropy on
the (N, V) logits (what pre-training did before engine.vocab_loss); "blocked" is what it does now. Time it alone:
another CPU-heavy job on the machine makes the figures meaningless.
"""
import argparse
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from engine.flops import pretrain_step_times  # noqa: E402
from engine.config import PRESETS, BertConfig  # noqa: E402
from engine.device import default_precision  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--preset", default="tiny", choices=tuple(PRESETS))
    p.add_argument("--layers", type=int, default=None, help="override the preset's layers")
    p.add_argument("--vocab-size", type=int, default=8000)
    p.add_argument("--objectives", default="mlm,ltr", help="comma list of mlm, ltr")
    p.add_argument("--lengths", default="32,128", help="comma list of sequence lengths")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--mask-rate", type=float, default=0.25)
    p.add_argument("--losses", default="plain,blocked", help="comma list of plain, blocked")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--precision", default=None, help="bf16 or fp32 (default: what pre-training picks on this CPU)")
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    precision = a.precision or default_precision(torch.device("cpu"))
    base = BertConfig.preset(a.preset, vocab_size=a.vocab_size, hidden_dropout=0.0, attention_dropout=0.0,
                             has_nsp_head=False, **({"num_layers": a.layers} if a.layers else {}))
    L, H, A = base.num_layers, base.hidden_size, base.num_heads
    print(f"L={L} H={H} A={A} vocabulary {a.vocab_size}, batch {a.batch_size}, {a.threads} threads, "
          f"{precision}; median of {a.steps} steps (ms)")
    print("objective  tokens  " + "  ".join(f"{x:>8}" for x in a.losses.split(",")))
    for obj in a.objectives.split(","):
        if obj not in ("mlm", "ltr"):
            print(f"unknown objective '{obj}'; choose mlm or ltr", file=sys.stderr)
            return 2
        for T in (int(x) for x in a.lengths.split(",")):
            row = []
            for path in a.losses.split(","):
                cfg = base.replace(causal=obj == "ltr", max_position_embeddings=max(base.max_position_embeddings, T))
                ts = pretrain_step_times(cfg, T, a.batch_size, a.mask_rate, path, a.steps, a.warmup, precision)
                row.append(statistics.median(ts) * 1000)
            print(f"{obj:<9}  {T:>6}  " + "  ".join(f"{x:8.1f}" for x in row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
