"""The BERT encoder with its pre-training heads (paper section 3, Figure 1; Vaswani et al. 2017).

B = batch size, T = sequence length, H = hidden size, A = attention heads, D = H / A, V = vocabulary size,
N = number of positions the MLM head is evaluated at, R = number of real (non-padding) tokens in a batch.

- `BertEmbeddings`: token + segment + learned position embeddings, then LayerNorm and dropout.
- `BertLayer`: post-LN Transformer block as in the paper: x = LN(x + Attn(x)); x = LN(x + FFN(x)), GELU.
  Query, key and value come from one fused (H, 3H) projection (one matrix multiply instead of three; the
  checkpoint code splits it into Hugging Face's query/key/value on save and joins them on load).
  Attention runs through `scaled_dot_product_attention` (flash / memory-efficient kernels on CUDA); when the
  caller asks for attention maps an explicit softmax path computes the same thing and returns the probabilities.
  `config.causal` masks every position's right context (the paper's LTR ablation, 5.1).
- `BertPooler`: dense + tanh on the [CLS] vector, giving C.
- `BertPreTrainingHeads`: the MLM head (dense + GELU + LayerNorm, then the word-embedding matrix, tied, plus a
  bias) and the NSP classifier on C. The MLM head can be evaluated only at selected positions
  (`mlm_positions`), which is how pre-training uses it: the vocabulary projection over all T positions would
  dominate the cost of a small model and only ~15% of positions carry a label.
Departures from the paper: none in the architecture. Dropout sits where Hugging Face's BertModel puts it
(embeddings, attention probabilities, after each sub-layer), so weights and outputs match `transformers` exactly.

Fast paths (each checked against the plain path in tests/test_model_fastpaths.py; numbers in BENCHMARKS.md):
- `unpad=True` (opt-in): padded positions cost nothing. The batch is cut to its last real column, the R real
  tokens are packed into an (R, H) tensor for every linear layer, GELU, LayerNorm and dropout, and only the
  attention sees the padded (B, T, .) layout (one index_copy in, one index_select out per layer). Outputs at
  real positions equal the padded path's; at padded positions they are 0 (the padded path leaves values
  there that nothing should read). Falls back to the padded path when padding is under 10% of the batch.
- CPU matrix multiplies in fp32 go through oneDNN (`torch.ops.mkldnn._linear_pointwise`, the kernel
  `torch.compile` uses on CPU) instead of MKL's sgemm when the product is large enough (ONEDNN_MIN_MACS): on
  the AMD EPYC (Zen 4) this was built on, MKL_VERBOSE reports MKL's generic code path while oneDNN uses
  AVX-512, and oneDNN's linear was 1.2-1.45x faster in the forward and up to 1.25x for the input gradient;
  the weight gradient stays on MKL (as fast or faster).
  In inference the FFN's exact GELU is fused into the same call. `_OneDNNLinear` is the autograd wrapper.
  Falls back to `F.linear` when oneDNN is missing, under autocast (bf16 already runs on oneDNN), under
  `torch.compile`, for small products (oneDNN's call overhead is ~20 us), and when `FAST_CPU_LINEAR` is False.
- Per layer there are no module calls besides the layer itself (functional linear / layer_norm / dropout),
  no dropout calls in eval mode, no (B, T) position or segment id tensors, and the attention-mask check runs
  once per forward; together these matter for batch-1 latency, where Python overhead is most of the time.
bf16 autocast, fused AdamW and torch.compile are the caller's switches (engine/pretrain.py, engine/bench.py);
`default_precision(device)` says which precision the engine picks by default.
"""
import math
from dataclasses import dataclass
from typing import Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from engine.config import BertConfig
from engine.errors import EngineError

FAST_CPU_LINEAR = True  # route large fp32 CPU matrix multiplies through oneDNN (set False to compare)
ONEDNN_MIN_MACS = 1 << 25  # below ~32M multiply-adds F.linear (MKL) has less call overhead than oneDNN
ONEDNN_MIN_MACS_GELU = 1 << 20  # with GELU fused into the call (inference) oneDNN wins from ~1M
UNPAD_MIN_PADDING = 0.10  # unpad only when at least this fraction of the (cut) batch is padding


@dataclass
class BertOutput:
    last_hidden_state: torch.Tensor  # (B, T, H)
    pooled_output: Optional[torch.Tensor] = None  # (B, H), C in the paper
    mlm_logits: Optional[torch.Tensor] = None  # (B, T, V), or (N, V) at mlm_positions; None without an MLM head
    nsp_logits: Optional[torch.Tensor] = None  # (B, 2): index 0 IsNext, 1 NotNext (as google-research/bert)
    hidden_states: Optional[Tuple[torch.Tensor, ...]] = None  # L+1 of (B, T, H): embeddings, then each layer
    attentions: Optional[Tuple[torch.Tensor, ...]] = None  # L of (B, A, T, T)


# ------------------------------------------------------------------ precision and the CPU linear fast path
def default_precision(device) -> str:
    """"bf16" where bf16 autocast is the engine's default (CUDA with bf16 support; CPUs with native bf16
    matrix units, AVX512-BF16 or AMX, where it measured faster), else "fp32"."""
    device = torch.device(device)
    if device.type == "cuda":
        return "bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "fp32"
    if device.type == "cpu":
        cpu = getattr(torch, "cpu", None)
        for probe in ("_is_amx_tile_supported", "_is_avx512_bf16_supported"):
            try:
                if getattr(cpu, probe)():
                    return "bf16"
            except Exception:
                pass
    return "fp32"


PRECISIONS = ("auto", "fp32", "bf16")


def check_precision(precision: str) -> None:
    if precision not in PRECISIONS:
        raise EngineError(f"unknown --precision '{precision}'; choose one of {', '.join(PRECISIONS)}")


def resolve_precision(precision: str, device: torch.device) -> str:
    """"bf16" or "fp32". auto: bf16 autocast (fp32 weights and optimizer) on CUDA with bf16 and on CPUs with
    native bf16 units (AVX512-BF16 / AMX), where it measured faster (BENCHMARKS.md);
    fp32 elsewhere, where bf16 would be emulated and slower."""
    device = torch.device(device)
    check_precision(precision)
    if precision == "auto":
        return default_precision(device)
    if precision == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise EngineError("--precision bf16 was asked for but this GPU has no bf16 support; use --precision fp32")
    return precision


def amp(device, precision: str):
    """bf16 autocast on `device` when `precision` (resolved) is "bf16"; weights, gradients and optimizer stay
    fp32. A disabled context otherwise."""
    return torch.autocast(torch.device(device).type, dtype=torch.bfloat16, enabled=precision == "bf16")


def to_device(t: torch.Tensor, device) -> torch.Tensor:
    """Host batch tensor -> device. On CUDA through pinned (page-locked) memory, so the copy is truly
    asynchronous: from pageable memory the host waits for the GPU's queued work before every step and the GPU
    then idles while the next batch is prepared. The training loops have no per-step synchronisation, so batch
    preparation overlaps the previous step's kernels."""
    if torch.device(device).type == "cuda":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


_onednn_state = {}  # "ok": whether torch.ops.mkldnn._linear_pointwise exists and computes a linear layer


def _onednn_available() -> bool:
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


def _use_onednn(x, w, min_macs: int) -> bool:
    if not FAST_CPU_LINEAR or x.device.type != "cpu" or x.dtype != torch.float32 or w.dtype != torch.float32:
        return False
    if x.numel() * w.shape[0] < min_macs:  # M*K*N multiply-adds
        return False
    if torch.is_autocast_enabled("cpu") or torch.compiler.is_compiling():
        return False
    return _onednn_available()


def linear(x, w, b=None, gelu: bool = False):
    """x W^T + b over the last dim of x (..., K) -> (..., N), then exact GELU when `gelu`.
    Same result as F.linear (+ F.gelu) within fp32 rounding; see the module docstring for the CPU fast path."""
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


def _dropout(x, p: float, training: bool):
    return F.dropout(x, p, True) if training and p > 0 else x


# ------------------------------------------------------------------ modules
class BertEmbeddings(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.word = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.position = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.segment = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout)

    def forward(self, input_ids, token_type_ids=None, position_ids=None):
        # (B, T) ids -> (B, T, H); or packed (R,) ids with their (R,) positions -> (R, H)
        x = F.embedding(input_ids, self.word.weight, self.word.padding_idx)
        if token_type_ids is None:
            x = x + self.segment.weight[0]
        else:
            x = x + F.embedding(token_type_ids, self.segment.weight)
        if position_ids is None:
            x = x + self.position.weight[: input_ids.shape[-1]]  # (T, H) broadcast over B
        else:
            x = x + F.embedding(position_ids, self.position.weight)
        x = F.layer_norm(x, self.norm.normalized_shape, self.norm.weight, self.norm.bias, self.norm.eps)
        return _dropout(x, self.dropout.p, self.training)


class BertSelfAttention(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.A, self.D = config.num_heads, config.head_size
        self.qkv = nn.Linear(config.hidden_size, 3 * config.hidden_size)
        self.out = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout_p = config.attention_dropout
        self.attn_dropout = nn.Dropout(config.attention_dropout)

    def forward(self, x, mask, need_weights: bool, packed=None):
        # x (B, T, H), or (R, H) real tokens when packed = (index (R,) into the B*T grid, B, T)
        # mask: None, or bool (B|1, 1, 1|T, T), True where a query may attend to a key
        qkv = linear(x, self.qkv.weight, self.qkv.bias)  # (B, T, 3H) or (R, 3H)
        if packed is not None:
            index, B, T = packed
            qkv = qkv.new_zeros(B * T, qkv.shape[-1]).index_copy(0, index, qkv)  # (B*T, 3H), zeros at padding
        else:
            B, T = x.shape[0], x.shape[1]
        H = self.A * self.D
        q, k, v = qkv.view(B, T, 3, self.A, self.D).permute(2, 0, 3, 1, 4)  # 3 x (B, A, T, D)
        if need_weights:
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(self.D)  # (B, A, T, T)
            if mask is not None:
                scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
            probs = scores.softmax(dim=-1)
            y = _dropout(probs, self.dropout_p, self.training) @ v  # (B, A, T, D)
        else:
            probs = None
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=self.dropout_p if self.training else 0.0)
        y = y.transpose(1, 2).reshape(B, T, H)  # (B, T, H); free when SDPA returns the (B, T, A, D) layout
        if packed is not None:
            y = y.view(B * T, H).index_select(0, packed[0])  # (R, H)
        return linear(y, self.out.weight, self.out.bias), probs


class BertLayer(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.attention = BertSelfAttention(config)
        self.attn_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.ffn_in = nn.Linear(config.hidden_size, config.intermediate_size)
        self.ffn_out = nn.Linear(config.intermediate_size, config.hidden_size)
        self.ffn_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout)

    def forward(self, x, mask, need_weights: bool = False, packed=None):  # (B, T, H) or (R, H) -> same
        p, train = self.dropout.p, self.training
        a, probs = self.attention(x, mask, need_weights, packed)
        n = self.attn_norm
        x = F.layer_norm(x + _dropout(a, p, train), n.normalized_shape, n.weight, n.bias, n.eps)
        h = linear(x, self.ffn_in.weight, self.ffn_in.bias, gelu=True)  # (.., I)
        h = linear(h, self.ffn_out.weight, self.ffn_out.bias)  # (.., H)
        n = self.ffn_norm
        x = F.layer_norm(x + _dropout(h, p, train), n.normalized_shape, n.weight, n.bias, n.eps)
        return x, probs


class BertPooler(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, x):  # (B, T, H) -> (B, H)
        return torch.tanh(linear(x[:, 0], self.dense.weight, self.dense.bias))


def attention_mask_4d(attention_mask, T: int, causal: bool, device):
    """Boolean (B|1, 1, 1|T, T) mask, True = may attend; None when every key is visible to every query."""
    mask = None
    # an all-real mask is dropped (SDPA's fastest kernels take no mask); under torch.compile the check would
    # break the graph, so the mask is kept there
    if attention_mask is not None and (torch.compiler.is_compiling() or not bool(attention_mask.all())):
        mask = attention_mask.bool()[:, None, None, :]  # (B, 1, 1, T)
    if causal:
        tri = torch.ones(T, T, dtype=torch.bool, device=device).tril()[None, None]  # (1, 1, T, T)
        mask = tri if mask is None else (mask & tri)
    return mask


class BertModel(nn.Module):
    """The encoder: embeddings, L layers, pooler. Forward returns a `BertOutput` without head logits."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        self.embeddings = BertEmbeddings(config)
        self.layers = nn.ModuleList([BertLayer(config) for _ in range(config.num_layers)])
        self.pooler = BertPooler(config)

    def forward(self, input_ids, token_type_ids=None, attention_mask=None, output_attentions=False,
                output_hidden_states=False, unpad=False):
        B, T = input_ids.shape
        if T > self.config.max_position_embeddings:
            raise EngineError(f"sequence of {T} tokens is longer than the model's {self.config.max_position_embeddings} positions; truncate the input or use a shorter --seq-len")
        if unpad and attention_mask is not None and not output_attentions:
            return self._forward_unpadded(input_ids, token_type_ids, attention_mask, output_hidden_states)
        mask = attention_mask_4d(attention_mask, T, self.config.causal, input_ids.device)
        x = self.embeddings(input_ids, token_type_ids)
        hidden = [x] if output_hidden_states else None
        attns = [] if output_attentions else None
        for layer in self.layers:
            x, probs = layer(x, mask, output_attentions)
            if output_hidden_states:
                hidden.append(x)
            if output_attentions:
                attns.append(probs)
        return BertOutput(
            last_hidden_state=x,
            pooled_output=self.pooler(x),
            hidden_states=tuple(hidden) if hidden is not None else None,
            attentions=tuple(attns) if attns is not None else None,
        )

    def _forward_unpadded(self, input_ids, token_type_ids, attention_mask, output_hidden_states):
        """The `unpad=True` path: linear layers on the (R, H) real tokens only; 0 at padded positions."""
        B, T = input_ids.shape
        real = attention_mask.bool()  # (B, T)
        cols = real.any(0).nonzero()  # real columns (one host sync)
        Tc = int(cols[-1]) + 1 if len(cols) else 1  # cut the batch after its last real column
        real_c = real[:, :Tc]
        index = real_c.reshape(-1).nonzero().squeeze(1)  # (R,) positions of real tokens in the (B*Tc) grid
        R = index.numel()
        tt = token_type_ids[:, :Tc] if token_type_ids is not None else None
        if R > (1.0 - UNPAD_MIN_PADDING) * B * Tc:  # little padding: the padded path on the cut batch is faster
            out = self.forward(input_ids[:, :Tc], tt, attention_mask[:, :Tc], False, output_hidden_states)
            keep = real_c[..., None].to(out.last_hidden_state.dtype)  # (B, Tc, 1)
            full = lambda h: F.pad(h * keep, (0, 0, 0, T - Tc))  # (B, T, H), 0 at padding
            out.last_hidden_state = full(out.last_hidden_state)
            if out.hidden_states is not None:
                out.hidden_states = tuple(full(h) for h in out.hidden_states)
            return out
        mask = real_c[:, None, None, :]  # (B, 1, 1, Tc)
        if self.config.causal:
            mask = mask & torch.ones(Tc, Tc, dtype=torch.bool, device=input_ids.device).tril()[None, None]
        pos = index % Tc  # (R,)
        x = self.embeddings(input_ids[:, :Tc].reshape(-1)[index], tt.reshape(-1)[index] if tt is not None else None, pos)  # (R, H)

        def full(h):  # (R, H) -> (B, T, H), 0 at padding
            return F.pad(h.new_zeros(B * Tc, h.shape[-1]).index_copy(0, index, h).view(B, Tc, -1), (0, 0, 0, T - Tc))

        hidden = [full(x)] if output_hidden_states else None
        for layer in self.layers:
            x, _ = layer(x, mask, False, packed=(index, B, Tc))
            if output_hidden_states:
                hidden.append(full(x))
        last = hidden[-1] if output_hidden_states else full(x)
        return BertOutput(last_hidden_state=last, pooled_output=self.pooler(last),
                          hidden_states=tuple(hidden) if hidden is not None else None)


class BertLMHead(nn.Module):
    """Dense + GELU + LayerNorm, then the (tied) word-embedding matrix and an output bias."""

    def __init__(self, config: BertConfig, word_embeddings: nn.Embedding):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.word_embeddings = [word_embeddings]  # a list so the tied weight is not registered twice
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, x):  # (..., H) -> (..., V)
        x = linear(x, self.dense.weight, self.dense.bias, gelu=True)
        x = F.layer_norm(x, self.norm.normalized_shape, self.norm.weight, self.norm.bias, self.norm.eps)
        return linear(x, self.word_embeddings[0].weight, self.bias)


class BertForPreTraining(nn.Module):
    """BERT with the MLM and NSP heads (either may be absent: `config.has_mlm_head`, `config.has_nsp_head`)."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        self.bert = BertModel(config)
        self.mlm = BertLMHead(config, self.bert.embeddings.word) if config.has_mlm_head else None
        self.nsp = nn.Linear(config.hidden_size, 2) if config.has_nsp_head else None
        self.apply(self._init_weights)

    def _init_weights(self, m):
        std = self.config.initializer_range
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0.0, std)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, 0.0, std)
            if m.padding_idx is not None:
                with torch.no_grad():
                    m.weight[m.padding_idx].zero_()
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)

    def forward(self, input_ids, token_type_ids=None, attention_mask=None, output_attentions=False,
                output_hidden_states=False, mlm_positions=None, unpad=False) -> BertOutput:
        out = self.bert(input_ids, token_type_ids, attention_mask, output_attentions, output_hidden_states, unpad)
        if self.mlm is not None:
            h = out.last_hidden_state
            if mlm_positions is not None:
                h = h[mlm_positions]  # (N, H): only the positions that carry a label
            out.mlm_logits = self.mlm(h)
        if self.nsp is not None:
            out.nsp_logits = self.nsp(out.pooled_output)
        return out

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    @property
    def device(self):
        return next(self.parameters()).device
