"""The explicit attention, fast on a CPU while training: scale and mask inside one baddbmm, dropout's scale on the
output. Checked against engine.model.softmax_attention (the plain formula) with the same dropout mask."""
import math

import torch
import torch.nn.functional as F

from engine import kernels
from engine.kernels.dropout import cpu_dropout_mask


def explicit_attention(x) -> bool:
    """Whether attention takes the explicit softmax path instead of `scaled_dot_product_attention`: on a CPU while
    gradients are recorded (training). There the pinned torch's fused CPU kernel is fast forward but slow backward:
    forward and backward under bf16 autocast on the 2-core AMD EPYC Zen 4 took 67 / 109 ms per layer with it against
    23 / 32 ms explicit at MiniLM's shape (12 heads of 32, 128 tokens, batch 16 / 32), 46 against 12 ms at the
    classroom model's (2 heads of 64, 64 x 128), 9.3 against 2.2 ms at 64 x 32, with or without a padding mask,
    and 1,065 against 853 ms at BERT-BASE's 256 x 128 (BENCHMARKS.md, "The probe-ready model"). Forward only
    (evaluation, features, the Probe page) the fused kernel is faster (7 against 17 ms at MiniLM's shape), and on
    a GPU it is the flash kernel: both keep it."""
    return kernels.enabled() and x.device.type == "cpu" and torch.is_grad_enabled()


def fast_softmax_attention(q, k, v, mask, p: float, training: bool):
    """engine.model.softmax_attention, faster: (y = dropout(softmax(q k^T / sqrt(D) + bias)) v (N, A, Tq, D), the probabilities
    before dropout (N, A, Tq, T)), from q (N, A, Tq, D), k and v (N, A, T, D), and mask None or bool
    (N|1, 1, Tq|1, T), True where a query may attend to a key (bias 0 there, the dtype's lowest number elsewhere).

    The same values as scores = q k^T / sqrt(D), masked_fill, softmax, dropout, then @ v, within rounding, in fewer
    passes over the (N, A, Tq, T) scores, which are the largest tensors of a small model's step: the scale and the
    mask are applied inside one batched matrix multiply (`baddbmm`: bias + alpha q k^T), and on a CPU dropout's
    1 / (1 - rate) scales the (N, A, Tq, D) output instead of the probabilities (dropout(P) v = ((P * mask) v) *
    scale). Forward and backward at MiniLM's shape under bf16 autocast: docs/lab-notes/packing.md."""
    N, A, Tq, D = q.shape
    T = k.shape[2]
    qf, kf = q.reshape(N * A, Tq, D), k.transpose(-2, -1).reshape(N * A, D, T)
    if mask is None:
        scores = torch.bmm(qf, kf).mul_(1 / math.sqrt(D))
    else:
        bias = torch.zeros(mask.shape, dtype=q.dtype, device=q.device).masked_fill_(~mask, torch.finfo(q.dtype).min)
        bias = bias.expand(N, A, mask.shape[2], T).reshape(N * A, mask.shape[2], T)  # (N*A, Tq|1, T)
        scores = torch.baddbmm(bias, qf, kf, alpha=1 / math.sqrt(D))
    probs = scores.view(N, A, Tq, T).softmax(dim=-1)
    if not training or p <= 0:
        return probs @ v, probs
    if probs.device.type != "cpu" or p >= 1:
        return F.dropout(probs, p, True) @ v, probs
    keep, scale = cpu_dropout_mask(probs.shape, p, probs.dtype)
    return ((probs * keep) @ v) * scale, probs
