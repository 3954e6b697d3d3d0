"""`linear(x, w, b, gelu)`: the model's matrix multiplies, F.linear with a faster CPU path where there is one.

Which library runs an fp32 CPU matrix multiply is decided by the CPU (`ONEDNN_CPUS`, read from
`torch.backends.cpu.get_cpu_capability()`), because the faster one differs by machine:
- AVX-512 (the AMD EPYC Zen 4 this was built on): MKL_VERBOSE reports MKL's generic code path while oneDNN
  (`torch.ops.mkldnn._linear_pointwise`, the kernel `torch.compile` uses on CPU) uses AVX-512, and oneDNN's linear
  is faster in the forward and for the input gradient; the weight gradient stays on MKL (as fast or faster). In
  inference the FFN's exact GELU is fused into the same call.
- AVX2 only (the AMD EPYC without AVX-512): it depends on the product's width, the smaller of its inner size K and
  its output size N. At MiniLM's width (384) MKL's AVX2 sgemm is faster than oneDNN in the forward and for the input
  gradient; at the classroom model's (128) and BERT-mini's (256) oneDNN is (`ONEDNN_CPUS["AVX2"]`, 256).
The figures: BENCHMARKS.md and docs/lab-notes/packing.md. `_OneDNNLinear` is the autograd wrapper. Falls back to
`F.linear` when oneDNN is missing, under autocast (bf16 already runs on oneDNN), under `torch.compile`, for small
products (oneDNN's call overhead is ~20 us), and where `FAST_CPU_LINEAR` (None: by the CPU) says so.
Checked against F.linear in tests/engine/kernels/test_model_fastpaths.py; off with the kernels' switch (engine.kernels).
"""
import torch
import torch.nn.functional as F

from engine import kernels

FAST_CPU_LINEAR = None  # None: oneDNN for large fp32 CPU products as ONEDNN_CPUS says; True / False force it
# torch.backends.cpu.get_cpu_capability() -> the widest product (min(K, N)) whose fp32 linear is faster on oneDNN
# than on MKL (None: every width); a capability not here keeps MKL
ONEDNN_CPUS = {"AVX512": None, "AVX2": 256}
ONEDNN_MIN_MACS = 1 << 25  # below ~32M multiply-adds F.linear (MKL) has less call overhead than oneDNN
ONEDNN_MIN_MACS_GELU = 1 << 20  # with GELU fused into the call (inference) oneDNN wins from ~1M


def linear(x, w, b=None, gelu: bool = False):
    """x W^T + b over the last dim of x (..., K) -> (..., N), then exact GELU when `gelu`.
    Same result as F.linear (+ F.gelu) within fp32 rounding; see the module docstring for the CPU path."""
    grad = torch.is_grad_enabled() and (x.requires_grad or w.requires_grad or (b is not None and b.requires_grad))
    fused = gelu and not grad
    if not _use_onednn(x, w, ONEDNN_MIN_MACS_GELU if fused else ONEDNN_MIN_MACS):
        y = F.linear(x, w, b)
        return F.gelu(y) if gelu else y
    lead = x.shape[:-1]
    x2 = x.reshape(-1, x.shape[-1])  # (M, K)
    if grad:
        y = _OneDNNLinear.apply(x2, w, b)
        if gelu:
            y = F.gelu(y)
    else:
        y = _onednn_linear(x2, w, b, "gelu" if gelu else "none")
    return y.view(*lead, w.shape[0])


_onednn_state = {}  # "ok": whether torch.ops.mkldnn._linear_pointwise exists and computes a linear layer


def onednn_available() -> bool:
    ok = _onednn_state.get("ok")
    if ok is None:
        ok = False
        try:
            if torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise"):
                g = torch.Generator().manual_seed(0)
                x, w, b = (torch.randn(s, generator=g) for s in ((8, 16), (4, 16), (4,)))
                y = torch.ops.mkldnn._linear_pointwise(x, w, b, "none", [], "")
                ok = bool(torch.allclose(y, F.linear(x, w, b), atol=1e-5, rtol=1e-5))
        except Exception:
            ok = False
        _onednn_state["ok"] = ok
    return ok


def _onednn_linear(x2, w, b, act="none"):  # (M, K), (N, K), (N,) or None -> (M, N)
    return torch.ops.mkldnn._linear_pointwise(x2, w, b, act, [], "none" if act == "gelu" else "")


class _OneDNNLinear(torch.autograd.Function):
    """y = x W^T + b with oneDNN forward and backward (x (M, K), W (N, K))."""

    @staticmethod
    def forward(ctx, x2, w, b):
        ctx.save_for_backward(x2, w)
        ctx.has_bias = b is not None
        return _onednn_linear(x2, w, b)  # (M, N)

    @staticmethod
    def backward(ctx, g):  # g (M, N)
        x2, w = ctx.saved_tensors
        g = g.contiguous()
        gx = gw = gb = None
        if ctx.needs_input_grad[0]:
            gx = _onednn_linear(g, w.t(), None)  # (M, N) @ (N, K) -> (M, K)
        if ctx.needs_input_grad[1]:
            gw = g.t() @ x2  # (N, M) @ (M, K) -> (N, K)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            gb = g.sum(0)  # (N,)
        return gx, gw, gb


def onednn_chosen(width: int) -> bool:
    """Whether a large fp32 CPU product whose smaller side (min(K, N)) is `width` goes through oneDNN on this machine
    (FAST_CPU_LINEAR, else ONEDNN_CPUS for the CPU's capability). A model's linear layers all have its hidden size
    as that side."""
    if FAST_CPU_LINEAR is not None:
        return bool(FAST_CPU_LINEAR)
    cap = torch.backends.cpu.get_cpu_capability()
    if cap not in ONEDNN_CPUS:
        return False
    widest = ONEDNN_CPUS[cap]
    return widest is None or width <= widest


def _use_onednn(x, w, min_macs: int) -> bool:
    if not kernels.enabled():
        return False
    if x.device.type != "cpu" or x.dtype != torch.float32 or w.dtype != torch.float32:
        return False
    if not onednn_chosen(min(x.shape[-1], w.shape[0])):
        return False
    if x.numel() * w.shape[0] < min_macs:  # M*K*N multiply-adds
        return False
    if torch.is_autocast_enabled("cpu") or torch.compiler.is_compiling():
        return False
    return onednn_available()
