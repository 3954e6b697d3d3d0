"""The word embeddings' (V, H) gradient on a CPU, built in memory kept between steps (`KeptGradient`)."""
import torch
import torch.nn.functional as F

from engine import kernels


def word_embedding(ids, weight, padding_idx, kept: "KeptGradient"):
    """F.embedding(ids, weight, padding_idx), whose (V, H) weight gradient, on a CPU, is built in memory kept
    between steps (`kept`) instead of a new zeroed tensor every step. The plain backward's fresh 47 MB tensor
    (MiniLM's 30,522 x 384 fp32) is a new memory mapping every step on Linux, 11,500 page faults: 13-16 ms a
    step for the gradient against 2.2-2.7 ms in kept memory, at 2 threads on the AMD EPYC Zen 4
    (docs/lab-notes/packing.md). The gradient is the same, value for value (tests/engine/kernels/test_model_fastpaths.py).
    Elsewhere (a GPU's caching allocator has no such cost, torch.compile, no gradient wanted) it is F.embedding."""
    if (not kernels.enabled() or weight.device.type != "cpu" or not torch.is_grad_enabled() or not weight.requires_grad
            or torch.compiler.is_compiling()):
        return F.embedding(ids, weight, padding_idx)
    return _KeptGradEmbedding.apply(ids, weight, padding_idx, kept)


def _storage_users(t) -> int:
    return torch._C._storage_Use_Count(t.untyped_storage()._cdata)


class KeptGradient:
    """Memory for one parameter's dense gradient, reused by the next backward when nothing holds it any more:
    the training loops' zero_grad(set_to_none=True) drops the .grad that shares it, so the next step zeroes it
    and accumulates into it. While any tensor still shares it (.grad kept for accumulation over micro-batches,
    a caller's reference to an old gradient or to a view of it) the next backward takes new memory, as F.embedding
    does, so no gradient anybody can read is overwritten."""

    def __init__(self):
        self.memory = None  # (V, H) tensor, or None

    def zeros(self, shape, dtype, device) -> torch.Tensor:
        m = self.memory
        if (m is None or m.shape != shape or m.dtype != dtype or m.device != device
                or _storage_users(m) != _STORAGE_ALONE):
            self.memory = m = torch.zeros(shape, dtype=dtype, device=device)
        else:
            m.zero_()
        return m

    def release(self) -> None:
        self.memory = None


try:
    _STORAGE_ALONE = _storage_users(torch.empty(1))  # the count of a storage only one tensor uses
except (AttributeError, RuntimeError):  # a torch without the counter: the memory is never reused
    _STORAGE_ALONE = -1


class _KeptGradEmbedding(torch.autograd.Function):
    """F.embedding with its weight gradient accumulated into `kept`'s memory: index_add of the output gradient's
    rows in the order of the ids, as the plain CPU backward does, and 0 at `padding_idx`. The gradient is handed
    to autograd as a new tensor on that memory (`detach`), which AccumulateGrad takes as .grad without a copy."""

    @staticmethod
    def forward(ctx, ids, weight, padding_idx, kept):
        ctx.save_for_backward(ids)
        ctx.like, ctx.padding_idx, ctx.kept = (weight.shape, weight.dtype, weight.device), padding_idx, kept
        return F.embedding(ids, weight, padding_idx)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):  # grad (..., H)
        ids, = ctx.saved_tensors
        g = ctx.kept.zeros(*ctx.like)  # (V, H) zeros
        g.index_add_(0, ids.reshape(-1), grad.reshape(-1, grad.shape[-1]).to(g.dtype))
        if ctx.padding_idx is not None:
            g[ctx.padding_idx] = 0  # the padding row gets no gradient (nn.Embedding's padding_idx)
        return None, g.detach(), None, None
