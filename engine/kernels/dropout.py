"""Dropout on a CPU from 15 random bits an element, applied as a 0/1 tensor of the activations' dtype.

Departure from the paper's dropout: the rate is quantised to 1/32768 (0.100006 for 0.1). Elsewhere (an accelerator,
a rate of 1, the kernels switched off) it is F.dropout.
"""
import math

import torch
import torch.nn.functional as F

from engine import kernels


def dropout(x, p: float, training: bool):
    """F.dropout(x, p, training), with the CPU's mask from `cpu_dropout_mask`."""
    if not training or p <= 0:
        return x
    if x.device.type != "cpu" or p >= 1 or not kernels.enabled():
        return F.dropout(x, p, True)
    mask, scale = cpu_dropout_mask(x.shape, p, x.dtype)
    return MaskedScale.apply(x, mask, scale)


DROP_LEVELS = 1 << 15  # a CPU draws 15 random bits per element for dropout (drop_bits)


def drop_bits(n: int, p: float, generator: torch.Generator = None):
    """((n,) int16 uniform on [0, 2^15), the threshold round(p * 2^15)): dropout's draws on a CPU, an element
    dropped where its value is under the threshold, so with probability round(p * 2^15) / 2^15 (0.100006 for 0.1).

    Why not F.dropout: its bernoulli_ draws one random number per element, 10-13 ns each at 2 threads on the AMD
    EPYCs this was measured on, so dropout's draws were 13.6% of a MiniLM fine-tuning step (fp32, 16 x 128, AVX2
    EPYC). Here each 64-bit draw of the generator (`random_`, 63 uniform bits) gives four elements 15 bits each:
    3.1 against 11.2 ns an element; dropout forward 8.2 against 24.7 ms at 2M elements, forward and backward 18.1
    against 35.2 (docs/lab-notes/packing.md, the AVX2 EPYC entry). Departure from the paper's dropout: the rate is
    quantised to 1/32768. The draws come from `generator` (default: torch's), so torch.manual_seed makes
    them repeatable."""
    words = torch.empty((n + 3) // 4, dtype=torch.int64).random_(generator=generator)  # [0, 2^63): 63 uniform bits
    return words.view(torch.int16)[:n].bitwise_and_(DROP_LEVELS - 1), round(p * DROP_LEVELS)  # four 15-bit values a word


def cpu_dropout_mask(shape, p: float, dtype, generator: torch.Generator = None):
    """(mask (shape) of `dtype`, 1 kept and 0 dropped; scale, the 1 / (1 - rate) the kept elements are scaled by):
    dropout's mask on a CPU from `drop_bits`, as numbers of the activations' dtype. Products of one dtype run vectorised on a CPU; an operation that reads a
    bool tensor (torch.where, a product with it, masked_fill, a cast) took 1.1-1.7 against 0.2 ms at 1.9M bf16
    elements, and dropout's forward and backward 3.8 against 5.9 ms there (AMD EPYC Zen 4,
    docs/lab-notes/dropout_measure.py). So the mask is made by integer arithmetic on the draws, not a comparison:
    draw - threshold is negative exactly where dropped; clamped to [-1, 0], plus one, it is the mask. In a 16-bit
    dtype the 0/1 integers times the bit pattern of 1.0 are the mask's own bits (`_ONE_BITS`), written in the draws'
    memory: no conversion and no new tensor."""
    bits, drop = drop_bits(math.prod(shape), p, generator)
    keep = bits.sub_(drop).clamp_(-1, 0).add_(1)  # int16: 1 kept, 0 dropped
    one = _ONE_BITS.get(dtype)
    mask = keep.mul_(one).view(dtype) if one is not None else keep.to(dtype)
    return mask.view(shape), DROP_LEVELS / (DROP_LEVELS - drop)


_ONE_BITS = {torch.bfloat16: 0x3F80, torch.float16: 0x3C00}  # 1.0 as int16 bits; 0.0 is 0 in both


class MaskedScale(torch.autograd.Function):
    """y = x * mask * scale (mask 0 or 1, of x's dtype); the backward applies the same to the gradient. The same
    values, element for element, as torch.where(keep, x * scale, 0) for finite x (a dropped inf or nan becomes
    nan here, 0 there): the product with 0 or 1 is exact and the scale is applied once, as there. It keeps the
    mask in x's dtype for the backward, as F.dropout does (twice a bool mask's bytes in bf16)."""

    @staticmethod
    def forward(ctx, x, mask, scale: float):
        ctx.save_for_backward(mask)
        ctx.scale = scale
        return x.mul(mask).mul_(scale)

    @staticmethod
    def backward(ctx, grad):
        mask, = ctx.saved_tensors
        return grad.mul(mask).mul_(ctx.scale), None, None