"""The optimizer and learning-rate schedule of pre-training (paper A.2, google-research/bert's optimization.py).

AdamW (beta 0.9/0.999, eps 1e-6, weight decay 0.01 except LayerNorm weights and biases; fused on CUDA), and a
linear warmup then a linear decay to 0 at the last step. Warmup is given in steps (>= 1) or as a fraction of
the steps (< 1).
"""
import torch


def warmup_steps(warmup: float, steps: int) -> int:
    """Warmup in optimizer steps: `warmup` steps when >= 1, else that fraction of `steps`."""
    return int(round(warmup * steps)) if warmup < 1 else int(warmup)


def lr_at(step: int, cfg) -> float:
    """Learning rate of optimizer step `step` (0-based): linear warmup, then linear decay to 0 at cfg.steps."""
    w = warmup_steps(cfg.warmup, cfg.steps)
    if step < w:
        return cfg.lr * (step + 1) / w
    return cfg.lr * max(0.0, (cfg.steps - step) / max(1, cfg.steps - w))


def param_groups(model: torch.nn.Module, weight_decay: float) -> list:
    """AdamW groups: decay on matrices (Linear weights, embeddings), none on LayerNorm weights and biases."""
    decay, no_decay = [], []
    for _, p in model.named_parameters():
        if p.requires_grad:
            (decay if p.dim() >= 2 else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def adamw(model: torch.nn.Module, cfg, device: torch.device) -> torch.optim.AdamW:
    """AdamW over `model`'s trainable parameters with cfg's lr, betas, eps and weight decay (fused on CUDA)."""
    return torch.optim.AdamW(param_groups(model, cfg.weight_decay), lr=cfg.lr, betas=(cfg.adam_beta1, cfg.adam_beta2),
                             eps=cfg.adam_eps, **({"fused": True} if device.type == "cuda" else {}))
