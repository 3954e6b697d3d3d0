"""The unpadded encoder (`BertModel.forward(unpad=True)`): padded positions cost nothing.

The batch is cut to its last real column and the R real tokens are packed into an (M, H) tensor for every linear
layer, GELU, LayerNorm and dropout (M: R rounded up to a multiple of UNPAD_ROWS with copies of a padded slot where
the linear layers run on oneDNN, so the matrix shapes recur from step to step and oneDNN builds their kernels
once: `unpadded_rows`, `unpad_multiple`); only the attention sees the padded (B, T, .) layout (one index_copy in,
one index_select out per layer). Outputs at real positions equal the padded path's; at padded positions they are 0
(the padded path leaves values there that nothing should read). Falls back to the padded path when padding is
under UNPAD_MIN_PADDING of the batch, and always when the kernels are switched off.
"""
import torch
import torch.nn.functional as F

from engine.kernels.linear import onednn_chosen

UNPAD_MIN_PADDING = 0.10  # unpad only when at least this fraction of the (cut) batch is padding
UNPAD_ROWS = 64  # where oneDNN runs the linear layers, the unpadded path's rows are rounded up to a multiple of this


def forward_unpadded(model, input_ids, token_type_ids, attention_mask, output_hidden_states, pooled_only=False):
    """`model` (engine.model.BertModel) on the (M, H) rows only (the R real tokens, then M - R copies of a padded
    slot, `unpadded_rows`) -> (last_hidden_state (B, T, H) or None when `pooled_only`, pooled_output (B, H),
    hidden_states or None), 0 at padded positions."""
    B, T = input_ids.shape
    real = attention_mask.bool()  # (B, T)
    cols = real.any(0).nonzero()  # real columns (one host sync)
    Tc = int(cols[-1]) + 1 if len(cols) else 1  # cut the batch after its last real column
    real_c = real[:, :Tc]
    index = real_c.reshape(-1).nonzero().squeeze(1)  # (R,) positions of real tokens in the (B*Tc) grid
    R = index.numel()
    tt = token_type_ids[:, :Tc] if token_type_ids is not None else None
    if R > (1.0 - UNPAD_MIN_PADDING) * B * Tc:  # little padding: the padded path on the cut batch is faster
        out = model.forward(input_ids[:, :Tc], tt, attention_mask[:, :Tc], False, output_hidden_states,
                            pooled_only=pooled_only)
        if pooled_only:
            return None, out.pooled_output, None
        keep = real_c[..., None].to(out.last_hidden_state.dtype)  # (B, Tc, 1)
        full = lambda h: F.pad(h * keep, (0, 0, 0, T - Tc))  # (B, T, H), 0 at padding
        hidden = tuple(full(h) for h in out.hidden_states) if out.hidden_states is not None else None
        return full(out.last_hidden_state), out.pooled_output, hidden
    mask = real_c[:, None, None, :]  # (B, 1, 1, Tc)
    if model.config.causal:
        mask = mask & torch.ones(Tc, Tc, dtype=torch.bool, device=input_ids.device).tril()[None, None]
    rows = unpadded_rows(index, real_c, unpad_multiple(input_ids.device, model.config.hidden_size))  # (M,): index, then padded slots
    pos = rows % Tc  # (M,)
    x = model.embeddings(input_ids[:, :Tc].reshape(-1)[rows], tt.reshape(-1)[rows] if tt is not None else None, pos)  # (M, H)
    packed = (index, B, Tc, rows)

    def full(h):  # (M, H) -> (B, T, H), 0 at padding
        return F.pad(h.new_zeros(B * Tc, h.shape[-1]).index_copy(0, index, h[:R]).view(B, Tc, -1), (0, 0, 0, T - Tc))

    if pooled_only and len(model.layers) and bool(real_c[:, 0].all()):  # the last layer at each row's [CLS] only
        cls = torch.searchsorted(index, torch.arange(B, device=index.device) * Tc)  # (B,) [CLS] rows of x
        return None, model._pooled_at(x, mask, (cls, None, torch.zeros_like(cls)), packed=packed).pooled_output, None
    hidden = [full(x)] if output_hidden_states else None
    for layer in model.layers:
        x, _ = layer(x, mask, False, packed=packed)
        if output_hidden_states:
            hidden.append(full(x))
    last = hidden[-1] if output_hidden_states else full(x)
    return (None if pooled_only else last), model.pooler(last), (tuple(hidden) if hidden is not None else None)


def unpad_multiple(device, hidden_size: int) -> int:
    """What the unpadded path rounds its rows up to: UNPAD_ROWS where the linear layers run on oneDNN (a CPU under
    bf16 autocast, or in fp32 where engine.kernels.linear chooses oneDNN for this hidden size) and on accelerators; 1
    where they run on MKL's sgemm (fp32 at MiniLM's width on an AVX2-only CPU), which builds no kernel per shape, so
    rounding would only add rows (measured: docs/lab-notes/packing.md)."""
    if device.type != "cpu" or torch.is_autocast_enabled("cpu") or onednn_chosen(hidden_size):
        return UNPAD_ROWS
    return 1


def unpadded_rows(index, real, multiple: int = UNPAD_ROWS):
    """The grid slots the unpadded path's rows read, (M,): the R real tokens' `index` (R,) into the (B*T) grid of
    `real` (B, T), then M - R copies of the first padded slot, M being R rounded up to a multiple of `multiple`.

    Why: the rows' count is the M of every linear layer's matrix multiplies, and a CPU's oneDNN builds (JIT-compiles)
    a kernel for each new shape it meets, 18-33 ms for one bf16 (M, 384) x (384, 1536) layer forward and backward
    against 9 ms once built (2 threads, Intel Xeon with AMX). R, a batch's count of real tokens, is new nearly every
    step; rounded up, the shapes recur and their kernels are built once. The extra rows cost their share of the
    linear layers (under 64 rows) and change nothing: they hold a padded slot's values, which no real token reads,
    so their gradients are 0 (tests/engine/kernels/test_model_fastpaths.py)."""
    R = index.numel()
    M = -(-R // multiple) * multiple
    if M == R:
        return index
    slot = torch.argmin(real.reshape(-1).to(torch.uint8))  # the first padded slot (the unpadded path has padding)
    return torch.cat([index, slot.expand(M - R)])
