"""`vocab_cross_entropy(h, weight, bias, target)`: the MLM / LTR output layer and its cross-entropy in one step,
a block of rows at a time, without keeping the (N, V) logits.

Pre-training's loss is the cross-entropy of a projection onto the whole vocabulary (paper section 3.1: "the final
hidden vectors ... are fed into an output softmax over the vocabulary"). Written plainly (`F.linear` then
`F.cross_entropy`) it materialises N x V logits in fp32, their softmax and their gradient: for the left-to-right
objective, which predicts at every position, 8,128 x 8,000 x 4 bytes = 260 MB per array at the classroom's 64 x
128 tokens (4 GB at BERT-BASE's 256 x 128 x 30,522). Streaming those arrays through memory, not the multiplies,
was most of an LTR step on the 2-core CPU (BENCHMARKS.md, "the vocabulary loss in blocks").

Here the forward computes each block's logits, keeps only its log-sum-exp (N floats) and argmax, and drops the
block; the backward recomputes the block's logits (one more N x H x V multiply) and forms the gradient
softmax - onehot in place. When all N rows fit one block on a CPU (KEEP_ELEMENTS: MLM's predictions, not LTR's
every position), the forward forms that gradient at once and keeps it, in the multiplies' dtype, and the backward
only multiplies. Same mathematics as the plain form; the numerics match it within rounding: the
multiplies run in the autocast dtype when autocast is on (bf16 inputs, as `F.linear` under autocast), the
log-sum-exp, softmax and loss in fp32, as `.float()` then `F.cross_entropy`. Checked against the plain form in
tests/engine/test_vocab_loss.py. Under `torch.compile` (which fuses the plain form itself) the plain form is used.
"""
import torch
import torch.nn.functional as F

# logits kept at once, per device type: 8 MB of fp32 on a CPU (measured on the 2-core Xeon, 8,128 x 8,000 under bf16
# autocast: blocks of 64 / 131 / 256 / 512 / 1,024 rows took 316 / 274 / 221 / 232 / 348 ms forward and backward),
# 256 MB on a GPU (large enough that each block's multiply runs at full speed)
BLOCK_ELEMENTS = {"cpu": 1 << 21, "cuda": 1 << 26}
# Up to this many logits (N x V) a CPU keeps them all as one block and saves its gradient for the backward instead of
# recomputing the logits there: one multiply fewer. Measured on the 2-core AMD EPYC Zen 4 under bf16 autocast,
# forward and backward: MiniLM's 320 x 30,522 (16 x 20 predictions) took 174 ms kept against 415 ms in blocks of 68
# rows; the classroom's 512 x 8,000 28 ms against 37; at 2,048 x 8,000 keeping was slower (177 ms against 140),
# memory traffic outgrowing the saved multiply. Not measured on a GPU, so a GPU always recomputes.
KEEP_ELEMENTS = {"cpu": 3 << 22}


def block_rows(device: torch.device, vocab_size: int, n_rows: int = None) -> int:
    """Rows of h per block on `device` for a vocabulary of `vocab_size`: all `n_rows` (one block, its gradient kept)
    when they fit KEEP_ELEMENTS there."""
    if n_rows and n_rows * vocab_size <= KEEP_ELEMENTS.get(device.type, 0):
        return n_rows
    return max(16, BLOCK_ELEMENTS.get(device.type, 1 << 26) // max(1, vocab_size))


IGNORE_INDEX = -100  # a target of this value adds nothing to the loss (PyTorch cross_entropy's default)


def vocab_cross_entropy(h, weight, bias, target, rows: int = None):
    """(loss_sum, predictions) of h (N, H) projected on weight (V, H) + bias (V,) against target (N,) token ids:
    the summed cross-entropy (fp32 scalar, differentiable in h, weight and bias) and each row's argmax (N,),
    exactly `F.cross_entropy(F.linear(h, weight, bias).float(), target, reduction="sum")` and `.argmax(-1)`
    within rounding. A target of IGNORE_INDEX (the unused slots of a fixed number of predictions per sequence)
    adds nothing to the loss or the gradients. `rows`: rows per block (default: block_rows); when one block holds
    every row, its gradient is formed in the forward and kept, so the backward does not recompute the logits."""
    if torch.compiler.is_compiling():
        logits = F.linear(h, weight, bias).float()  # (N, V)
        return F.cross_entropy(logits, target, reduction="sum", ignore_index=IGNORE_INDEX), logits.detach().argmax(-1)
    dtype = torch.get_autocast_dtype(h.device.type) if torch.is_autocast_enabled(h.device.type) else h.dtype
    rows = rows or block_rows(h.device, weight.shape[0], h.shape[0])
    return _VocabCrossEntropy.apply(h, weight, bias, target, dtype, rows)


class _VocabCrossEntropy(torch.autograd.Function):
    """The blocked projection + cross-entropy; `dtype` is the multiplies' dtype (bf16 under autocast)."""

    @staticmethod
    def forward(ctx, h, weight, bias, target, dtype, rows):
        with torch.autocast(h.device.type, enabled=False):
            hc, wc = h.to(dtype), weight.to(dtype)  # (N, H), (V, H) in the multiplies' dtype
            bc = None if bias is None else bias.to(dtype)  # (V,)
            N = h.shape[0]
            valid = target != IGNORE_INDEX  # (N,)
            target = target.clamp(min=0)  # an index the gather can read at ignored rows
            lse = torch.empty(N, dtype=torch.float32, device=h.device)  # log-sum-exp of each row's logits
            pred = torch.empty(N, dtype=torch.long, device=h.device)
            loss = torch.zeros((), dtype=torch.float32, device=h.device)
            kept = None
            for i in range(0, N, rows):
                logits = F.linear(hc[i:i + rows], wc, bc).float()  # (n, V)
                lse[i:i + rows] = torch.logsumexp(logits, -1)
                pred[i:i + rows] = logits.argmax(-1)
                picked = logits.gather(1, target[i:i + rows, None]).squeeze(1)  # (n,)
                loss += ((lse[i:i + rows] - picked) * valid[i:i + rows]).sum()
            if 0 < N <= rows:  # one block: keep its gradient (softmax - onehot) instead of recomputing its logits
                kept = _logit_grad(logits, lse, target, valid)  # (N, V) fp32
        ctx.kept = kept is not None
        if ctx.kept:
            ctx.save_for_backward(hc, wc, kept.to(dtype), None if bias is None else kept.sum(0))
        else:
            ctx.save_for_backward(hc, wc, bc, target, lse, valid)
        ctx.h_dtype, ctx.w_dtype, ctx.rows = h.dtype, weight.dtype, rows
        ctx.b_dtype = None if bias is None else bias.dtype  # None: no bias
        ctx.mark_non_differentiable(pred)
        return loss, pred

    @staticmethod
    def backward(ctx, g_loss, g_pred):
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        if ctx.kept:
            hc, wc, pc, gb = ctx.saved_tensors  # pc: (N, V) softmax - onehot in the multiplies' dtype; gb: (V,)
            with torch.autocast(hc.device.type, enabled=False):
                gh = (pc @ wc).float() * g_loss if need_h else None  # (N, V) @ (V, H)
                gw = (pc.t() @ hc).float() * g_loss if need_w else None  # (V, N) @ (N, H)
                gb = gb * g_loss if need_b and gb is not None else None
            return (None if gh is None else gh.to(ctx.h_dtype), None if gw is None else gw.to(ctx.w_dtype),
                    None if gb is None else gb.to(ctx.b_dtype), None, None, None)
        hc, wc, bc, target, lse, valid = ctx.saved_tensors
        rows, N = ctx.rows, hc.shape[0]
        gh = torch.empty_like(hc) if need_h else None  # (N, H)
        gw = torch.zeros(wc.shape, dtype=torch.float32, device=wc.device) if need_w else None  # (V, H)
        gb = torch.zeros(wc.shape[0], dtype=torch.float32, device=wc.device) if need_b and ctx.b_dtype is not None else None
        with torch.autocast(hc.device.type, enabled=False):
            for i in range(0, N, rows):
                hb = hc[i:i + rows]  # (n, H)
                p = _logit_grad(F.linear(hb, wc, bc).float(), lse[i:i + rows], target[i:i + rows], valid[i:i + rows])
                p.mul_(g_loss)
                if gb is not None:
                    gb += p.sum(0)
                pc = p.to(wc.dtype)
                if gh is not None:
                    gh[i:i + rows] = pc @ wc  # (n, V) @ (V, H)
                if gw is not None:
                    gw += (pc.t() @ hb).float()  # (V, n) @ (n, H)
        return (None if gh is None else gh.to(ctx.h_dtype), None if gw is None else gw.to(ctx.w_dtype),
                None if gb is None else gb.to(ctx.b_dtype), None, None, None)


def _logit_grad(logits, lse, target, valid):
    """d loss_sum / d logits of a block, in place of its fp32 (n, V) logits: softmax - onehot at the target, zero
    at ignored rows."""
    p = logits.sub_(lse[:, None]).exp_()  # softmax
    p[torch.arange(len(p), device=p.device), target] -= 1.0  # - onehot
    return p.mul_(valid[:, None])  # ignored rows: no gradient
