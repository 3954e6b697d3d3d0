"""Fast paths for the paper's model (engine/model.py), behind one switch.

engine/model.py is the reference: the encoder and heads as the paper describes them, in plain PyTorch. Each module
here replaces one of its steps with a faster one that computes the same thing, and each is checked against the
plain path in tests/engine/kernels/test_model_fastpaths.py (the figures that justify them: BENCHMARKS.md and
docs/lab-notes/packing.md):

- `linear`: the matrix multiplies, on oneDNN instead of MKL for large fp32 CPU products where that is faster,
  GELU fused in inference.
- `dropout`: dropout's mask drawn 15 bits an element on a CPU and applied as a 0/1 tensor of the activations' dtype.
- `attention`: the explicit attention in one baddbmm (scale and mask inside it), chosen over the fused
  `scaled_dot_product_attention` on a CPU while training.
- `embedding`: the word embeddings' (V, H) gradient accumulated into memory kept between steps on a CPU.
- `unpad`: padded positions cost nothing: the linear layers run on the real tokens' rows only, rounded up to a
  multiple of rows where oneDNN builds a kernel per shape.

The switch: `enabled()` (default on). `use(False)` (a context manager) or `set_enabled(False)` turns every one
of them off, so the model runs its plain path: F.linear, F.dropout, F.embedding, `scaled_dot_product_attention`
(or the plain softmax formula when attention maps are asked for) and the padded batch.
"""
from contextlib import contextmanager

_STATE = {"enabled": True}


def enabled() -> bool:
    """Whether the model's fast paths are on (the default)."""
    return _STATE["enabled"]


def set_enabled(flag: bool) -> None:
    _STATE["enabled"] = bool(flag)


@contextmanager
def use(flag: bool):
    """`with engine.kernels.use(False): ...` runs the model on its plain path inside the block."""
    before = _STATE["enabled"]
    _STATE["enabled"] = bool(flag)
    try:
        yield
    finally:
        _STATE["enabled"] = before
