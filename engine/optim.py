"""The optimizer and learning-rate schedule of pre-training and fine-tuning (paper A.2 and A.3, google-research/
bert's optimization.py); engine.bench uses the same parameter groups.

AdamW (beta 0.9/0.999, eps 1e-6, weight decay 0.01 except LayerNorm weights and biases; its fused kernel on CUDA
and CPU, `fused`), and a linear warmup then a linear decay to 0 at the last step (`linear_schedule`). Pre-training
gives warmup in steps (>= 1) or as a fraction of the steps (< 1, rounded); fine-tuning as a fraction (floored,
`engine.finetune.make_optimizer`).
"""
import torch

from engine.config import steps_or_fraction as warmup_steps  # warmup in steps: given, or a fraction of the steps


def linear_schedule(step: int, steps: int, warmup: int) -> float:
    """The learning-rate factor of optimizer step `step` (0-based) of `steps`: a linear warmup over the first
    `warmup` steps, then a linear decay to 0 at the last step."""
    if step < warmup:
        return (step + 1) / warmup
    return max(0.0, (steps - step) / max(1, steps - warmup))


def schedule(cfg) -> dict:
    """A pre-training run's learning-rate schedule in steps: the heads-first steps (`PretrainConfig.heads_first_steps`)
    with their own warmup over their first tenth and peak cfg.heads_first_lr, then cfg.lr's warmup (cfg.warmup,
    counted in the steps after them) and linear decay to 0 at cfg.steps. What `lr_at` follows and a checkpoint
    records."""
    head = cfg.heads_first_steps()
    return {"heads_first_steps": head, "heads_first_warmup": max(1, round(0.1 * head)) if head else 0,
            "heads_first_lr": float(cfg.heads_first_lr), "warmup_steps": warmup_steps(cfg.warmup, cfg.steps - head),
            "total_steps": int(cfg.steps), "peak_lr": float(cfg.lr)}


def lr_at(step: int, cfg) -> float:
    """Learning rate of pre-training optimizer step `step` (0-based), as `schedule(cfg)` says: during the heads-first
    steps their own linear warmup and decay to 0 at their end, then cfg.lr's `linear_schedule` over the rest."""
    s = schedule(cfg)
    head = s["heads_first_steps"]
    if step < head:
        return s["heads_first_lr"] * linear_schedule(step, head, s["heads_first_warmup"])
    return cfg.lr * linear_schedule(step - head, cfg.steps - head, s["warmup_steps"])


def param_groups(model: torch.nn.Module, weight_decay: float) -> list:
    """AdamW groups: decay on matrices (Linear weights, embeddings), none on LayerNorm weights and biases."""
    decay, no_decay = [], []
    for _, p in model.named_parameters():
        if p.requires_grad:
            (decay if p.dim() >= 2 else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def fused(device) -> dict:
    """AdamW's keyword for its fused kernel on `device`: the pinned torch has one for CUDA and for CPUs. The same
    update as the default per-parameter loop within rounding; on the 2-core AVX2 EPYC (fp32) a MiniLM step's
    optimizer took 20 ms with it against 92-125 ms without (22.7M parameters; `python
    docs/lab-notes/finetune_step_profile.py [--loop-adamw]`, docs/lab-notes/packing.md)."""
    return {"fused": True} if torch.device(device).type in ("cuda", "cpu") else {}


def adamw(model: torch.nn.Module, cfg, device: torch.device) -> torch.optim.AdamW:
    """AdamW over `model`'s trainable parameters with cfg's lr, betas, eps and weight decay (fused, `fused`)."""
    return torch.optim.AdamW(param_groups(model, cfg.weight_decay), lr=cfg.lr, betas=(cfg.adam_beta1, cfg.adam_beta2),
                             eps=cfg.adam_eps, **fused(device))
