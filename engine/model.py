"""The BERT encoder with its pre-training heads (paper section 3, Figure 1; Vaswani et al. 2017).

B = batch size, T = sequence length, H = hidden size, A = attention heads, D = H / A, V = vocabulary size,
N = number of positions the MLM head is evaluated at, R = number of real (non-padding) tokens in a batch.

- `BertEmbeddings`: token + segment + learned position embeddings, then LayerNorm and dropout.
- `BertSelfAttention`, `BertLayer`: post-LN Transformer block as in the paper: x = LN(x + Attn(x));
  x = LN(x + FFN(x)), GELU. Query, key and value come from one fused (H, 3H) projection (one matrix multiply
  instead of three; the checkpoint code splits it into Hugging Face's query/key/value on save and joins them on
  load). Attention runs through `scaled_dot_product_attention` (flash / memory-efficient kernels on CUDA); when
  the caller asks for attention maps, or a CPU trains (`explicit_attention`: faster there), an explicit softmax
  path (`softmax_attention`: scale and mask inside one baddbmm) computes the same thing (and returns the
  probabilities when asked). `config.causal` masks every position's right context (the paper's LTR ablation, 5.1).
- `BertPooler`: dense + tanh on the [CLS] vector, giving C.
- `BertModel`: embeddings, L layers, pooler.
- `BertLMHead` and `BertForPreTraining`: the MLM head (dense + GELU + LayerNorm, then the word-embedding
  matrix, tied, plus a bias) and the NSP classifier on C. The MLM head can be evaluated only at selected
  positions (`mlm_positions`), which is how pre-training uses it: the vocabulary projection over all T positions
  would dominate the cost of a small model and only ~15% of positions carry a label.
Departures from the paper: none in the architecture. Dropout sits where Hugging Face's BertModel puts it
(embeddings, attention probabilities, after each sub-layer), so weights and outputs match `transformers` exactly.
On a CPU dropout draws its mask 15 bits an element (`_drop_bits`, faster than F.dropout's bernoulli_), so its
rate is quantised to 1/32768 (0.100006 for 0.1), and applies it as a 0/1 tensor of the activations' dtype
(`cpu_dropout_mask`); elsewhere it is F.dropout.

Fast paths (each checked against the plain path in tests/engine/test_model_fastpaths.py; numbers in BENCHMARKS.md):
- `unpad=True` (opt-in): padded positions cost nothing. The batch is cut to its last real column, the R real
  tokens are packed into an (M, H) tensor for every linear layer, GELU, LayerNorm and dropout (M: R rounded up
  to a multiple of UNPAD_ROWS with copies of a padded slot where the linear layers run on oneDNN, so the matrix
  shapes recur from step to step and oneDNN builds their kernels once, `unpadded_rows`, `unpad_multiple`), and
  only the attention sees the padded (B, T, .) layout (one index_copy in, one index_select out per layer). Outputs at
  real positions equal the padded path's; at padded positions they are 0 (the padded path leaves values
  there that nothing should read). Falls back to the padded path when padding is under 10% of the batch.
- `pooled_only=True`: for heads that read only the pooled C, the last layer is computed at each sequence's
  [CLS] alone (its keys and values still come from every token; its queries, output projection, feed-forward
  network and LayerNorms from [CLS] only), and `last_hidden_state` is None. Exact in value; dropout draws a
  different random stream than the full path, so it is exact in distribution, not bit-identical per seed.
- Every matrix multiply goes through `engine.fast_linear.linear`: oneDNN instead of MKL for large fp32 CPU
  products on the CPUs where it is faster (AVX-512), with GELU fused in inference (see that module).
- On a CPU while training, the word embeddings' (V, H) gradient is accumulated into memory kept between steps
  (`word_embedding`, `KeptGradient`) instead of a fresh zeroed tensor (and its page faults) every step.
- Per layer there are no module calls besides the layer itself (functional linear / layer_norm / dropout),
  no dropout calls in eval mode, no (B, T) position or segment id tensors, and the attention-mask check runs
  once per forward; together these matter for batch-1 latency, where Python overhead is most of the time.
bf16 autocast, fused AdamW and torch.compile are the caller's switches (engine/device.py, engine/pretraining/run.py,
engine/bench.py).
"""
import math
from dataclasses import dataclass
from typing import Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from engine.config import BertConfig
from engine.errors import EngineError
from engine.fast_linear import linear, onednn_chosen
from engine.vocab_loss import vocab_cross_entropy

UNPAD_MIN_PADDING = 0.10  # unpad only when at least this fraction of the (cut) batch is padding
UNPAD_ROWS = 64  # where oneDNN runs the linear layers, the unpadded path's rows are rounded up to a multiple of this


@dataclass
class BertOutput:
    """What a forward returns; a field is None when the model has no such head or the caller did not ask."""

    last_hidden_state: torch.Tensor  # (B, T, H)
    pooled_output: Optional[torch.Tensor] = None  # (B, H), C in the paper
    mlm_logits: Optional[torch.Tensor] = None  # (B, T, V), or (N, V) at mlm_positions; None without an MLM head
    mlm_loss_sum: Optional[torch.Tensor] = None  # () fp32: summed cross-entropy at mlm_positions, given mlm_targets
    mlm_predictions: Optional[torch.Tensor] = None  # (N,) argmax token ids at mlm_positions, given mlm_targets
    nsp_logits: Optional[torch.Tensor] = None  # (B, 2): index 0 IsNext, 1 NotNext (as google-research/bert)
    hidden_states: Optional[Tuple[torch.Tensor, ...]] = None  # L+1 of (B, T, H): embeddings, then each layer
    attentions: Optional[Tuple[torch.Tensor, ...]] = None  # L of (B, A, T, T)


class BertEmbeddings(nn.Module):
    """Token + segment + learned position embeddings, then LayerNorm and dropout (paper Figure 2)."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.word = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.position = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.segment = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout)
        self.word_grad = KeptGradient()  # the word embeddings' (V, H) gradient on a CPU (word_embedding)

    def train(self, mode: bool = True):
        if not mode:
            self.word_grad.release()  # evaluation and inference keep no gradient memory
        return super().train(mode)

    def forward(self, input_ids, token_type_ids=None, position_ids=None):
        # (B, T) ids -> (B, T, H); or packed (R,) ids with their (R,) positions -> (R, H)
        x = word_embedding(input_ids, self.word.weight, self.word.padding_idx, self.word_grad)
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
    """Multi-head self-attention from one fused (H, 3H) query/key/value projection, then the output projection."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.A, self.D = config.num_heads, config.head_size
        self.qkv = nn.Linear(config.hidden_size, 3 * config.hidden_size)
        self.out = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout_p = config.attention_dropout

    def forward(self, x, mask, need_weights: bool, packed=None):
        # x (B, T, H), or (M, H) rows when packed = (index (R,) of the real tokens in the B*T grid, B, T, rows (M,)
        # the grid slot each row reads back: index, then M - R padded slots, engine.model.unpadded_rows)
        # mask: None, or bool (B|1, 1, 1|T, T), True where a query may attend to a key
        qkv = linear(x, self.qkv.weight, self.qkv.bias)  # (B, T, 3H) or (M, 3H)
        if packed is not None:
            index, B, T, _ = packed
            qkv = qkv.new_zeros(B * T, qkv.shape[-1]).index_copy(0, index, qkv[:index.numel()])  # (B*T, 3H), 0 at padding
        else:
            B, T = x.shape[0], x.shape[1]
        H = self.A * self.D
        q, k, v = qkv.view(B, T, 3, self.A, self.D).permute(2, 0, 3, 1, 4)  # 3 x (B, A, T, D)
        if need_weights or explicit_attention(x):
            y, probs = softmax_attention(q, k, v, mask, self.dropout_p, self.training)  # (B, A, T, D), (B, A, T, T)
            probs = probs if need_weights else None
        else:
            probs = None
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=self.dropout_p if self.training else 0.0)
        y = y.transpose(1, 2).reshape(B, T, H)  # (B, T, H); free when SDPA returns the (B, T, A, D) layout
        if packed is not None:
            y = y.view(B * T, H).index_select(0, packed[3])  # (M, H)
        return linear(y, self.out.weight, self.out.bias), probs

    def attend_at(self, x, mask, query, packed=None):
        """The attention output at the query positions only, keys and values from every token: (S, H).
        `query` = (rows (S,) into x flattened to (B*T | R, H), the batch row b (S,) of each query or None when
        query i is in row i, its column c (S,)); x and packed as in `forward`."""
        rows, b, c = query
        H = self.A * self.D
        W, bias = self.qkv.weight, self.qkv.bias
        kv = linear(x, W[H:], bias[H:])  # (B, T, 2H) or (R, 2H)
        if packed is not None:
            index, B, T, _ = packed
            kv = kv.new_zeros(B * T, 2 * H).index_copy(0, index, kv[:index.numel()])  # (B*T, 2H), 0 at padding
        else:
            B, T = x.shape[0], x.shape[1]
        k, v = kv.view(B, T, 2, self.A, self.D).permute(2, 0, 3, 1, 4)  # 2 x (B, A, T, D)
        S = rows.numel()
        q = linear(x.reshape(-1, H)[rows], W[:H], bias[:H]).view(S, self.A, 1, self.D)  # (S, A, 1, D)
        if b is not None:  # several queries in a row (packing): each query its row's keys and values
            k, v = k[b], v[b]  # (S, A, T, D)
        if mask is not None:
            if mask.shape[2] > 1:  # a mask per query (packing's blocks, causal): the query's own line of it
                r = b if b is not None else torch.arange(S, device=c.device)
                mask = mask[r if mask.shape[0] > 1 else torch.zeros_like(r), :, c][:, :, None]  # (S, 1, 1, T)
            elif b is not None and mask.shape[0] > 1:
                mask = mask[b]  # (S, 1, 1, T)
        if explicit_attention(x):
            y = softmax_attention(q, k, v, mask, self.dropout_p, self.training)[0]  # (S, A, 1, D)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=self.dropout_p if self.training else 0.0)
        return linear(y.reshape(S, H), self.out.weight, self.out.bias)  # (S, H)


class BertLayer(nn.Module):
    """One post-LN Transformer block: x = LN(x + Attn(x)); x = LN(x + FFN(x)), GELU in the FFN."""

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

    def forward_at(self, x, mask, query, packed=None):  # (B, T, H) or (R, H) -> (S, H) at the query positions
        """The block's output at the query positions only (`BertSelfAttention.attend_at`): what a head that reads
        only the [CLS] vectors needs from the last layer."""
        p, train = self.dropout.p, self.training
        a = self.attention.attend_at(x, mask, query, packed)
        n = self.attn_norm
        x = F.layer_norm(x.reshape(-1, x.shape[-1])[query[0]] + _dropout(a, p, train), n.normalized_shape, n.weight, n.bias, n.eps)
        h = linear(x, self.ffn_in.weight, self.ffn_in.bias, gelu=True)  # (S, I)
        h = linear(h, self.ffn_out.weight, self.ffn_out.bias)  # (S, H)
        n = self.ffn_norm
        return F.layer_norm(x + _dropout(h, p, train), n.normalized_shape, n.weight, n.bias, n.eps)


class BertPooler(nn.Module):
    """Dense + tanh on the [CLS] vector: C, the sentence representation NSP and classifiers read."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, x, starts=None):  # (B, T, H) -> (B, H); packed: (S, 2) (row, column) of each [CLS] -> (S, H)
        return self.pool(x[:, 0] if starts is None else x[starts[:, 0], starts[:, 1]])

    def pool(self, cls):  # (S, H) final [CLS] vectors -> (S, H) C
        return torch.tanh(linear(cls, self.dense.weight, self.dense.bias))


class BertModel(nn.Module):
    """The encoder: embeddings, L layers, pooler. Forward returns a `BertOutput` without head logits."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        self.embeddings = BertEmbeddings(config)
        self.layers = nn.ModuleList([BertLayer(config) for _ in range(config.num_layers)])
        self.pooler = BertPooler(config)

    def forward(self, input_ids, token_type_ids=None, attention_mask=None, output_attentions=False,
                output_hidden_states=False, unpad=False, packing=None, pooled_only=False):
        """`packing` (engine.packing.PackedBatch of these ids): several sequences per row, each attending only to
        itself, with its own positions; the pooled output is then one row per sequence, (S, H).
        `pooled_only`: only C is wanted (last_hidden_state comes back None); the last layer runs at the [CLS]
        positions only."""
        B, T = input_ids.shape
        if T > self.config.max_position_embeddings:
            raise EngineError(f"sequence of {T} tokens is longer than the model's {self.config.max_position_embeddings} positions; truncate the input or use a shorter --seq-len")
        if pooled_only and (output_hidden_states or output_attentions):
            raise EngineError("pooled_only computes the last layer at [CLS] only, so it has no hidden states or attention maps to return; drop pooled_only to get them")
        if unpad and attention_mask is not None and not output_attentions and packing is None:
            return self._forward_unpadded(input_ids, token_type_ids, attention_mask, output_hidden_states, pooled_only)
        if packing is not None:
            mask, positions = packing.attention_mask(self.config.causal), packing.position_ids
        else:
            mask, positions = attention_mask_4d(attention_mask, T, self.config.causal, input_ids.device), None
        x = self.embeddings(input_ids, token_type_ids, positions)
        if pooled_only and len(self.layers):
            if packing is not None:  # each sequence's [CLS]: several per row
                b, c = packing.starts[:, 0], packing.starts[:, 1]
                query = (b * T + c, b, c)
            else:  # column 0 of every row
                b = torch.arange(B, device=x.device)
                query = (b * T, None, torch.zeros_like(b))
            return self._pooled_at(x, mask, query)
        hidden = [x] if output_hidden_states else None
        attns = [] if output_attentions else None
        for layer in self.layers:
            x, probs = layer(x, mask, output_attentions)
            if output_hidden_states:
                hidden.append(x)
            if output_attentions:
                attns.append(probs)
        if pooled_only:  # no layers: C from the embeddings
            return BertOutput(last_hidden_state=None, pooled_output=self.pooler(x, packing.starts if packing is not None else None))
        return BertOutput(
            last_hidden_state=x,
            pooled_output=self.pooler(x, packing.starts if packing is not None else None),
            hidden_states=tuple(hidden) if hidden is not None else None,
            attentions=tuple(attns) if attns is not None else None,
        )

    def _pooled_at(self, x, mask, query, packed=None):
        """`pooled_only`'s encoder from the embeddings x: every layer but the last in full, the last at the `query`
        ([CLS]) positions only (`BertLayer.forward_at`), then the pooler."""
        for layer in self.layers[:-1]:
            x, _ = layer(x, mask, False, packed=packed)
        return BertOutput(last_hidden_state=None, pooled_output=self.pooler.pool(self.layers[-1].forward_at(x, mask, query, packed)))

    def _forward_unpadded(self, input_ids, token_type_ids, attention_mask, output_hidden_states, pooled_only=False):
        """The `unpad=True` path: linear layers on the (M, H) rows only (the R real tokens, then M - R copies of a
        padded slot, `unpadded_rows`); 0 at padded positions."""
        B, T = input_ids.shape
        real = attention_mask.bool()  # (B, T)
        cols = real.any(0).nonzero()  # real columns (one host sync)
        Tc = int(cols[-1]) + 1 if len(cols) else 1  # cut the batch after its last real column
        real_c = real[:, :Tc]
        index = real_c.reshape(-1).nonzero().squeeze(1)  # (R,) positions of real tokens in the (B*Tc) grid
        R = index.numel()
        tt = token_type_ids[:, :Tc] if token_type_ids is not None else None
        if R > (1.0 - UNPAD_MIN_PADDING) * B * Tc:  # little padding: the padded path on the cut batch is faster
            out = self.forward(input_ids[:, :Tc], tt, attention_mask[:, :Tc], False, output_hidden_states,
                               pooled_only=pooled_only)
            if pooled_only:
                return out
            keep = real_c[..., None].to(out.last_hidden_state.dtype)  # (B, Tc, 1)
            full = lambda h: F.pad(h * keep, (0, 0, 0, T - Tc))  # (B, T, H), 0 at padding
            out.last_hidden_state = full(out.last_hidden_state)
            if out.hidden_states is not None:
                out.hidden_states = tuple(full(h) for h in out.hidden_states)
            return out
        mask = real_c[:, None, None, :]  # (B, 1, 1, Tc)
        if self.config.causal:
            mask = mask & torch.ones(Tc, Tc, dtype=torch.bool, device=input_ids.device).tril()[None, None]
        rows = unpadded_rows(index, real_c, unpad_multiple(input_ids.device, self.config.hidden_size))  # (M,): index, then padded slots
        pos = rows % Tc  # (M,)
        x = self.embeddings(input_ids[:, :Tc].reshape(-1)[rows], tt.reshape(-1)[rows] if tt is not None else None, pos)  # (M, H)
        packed = (index, B, Tc, rows)

        def full(h):  # (M, H) -> (B, T, H), 0 at padding
            return F.pad(h.new_zeros(B * Tc, h.shape[-1]).index_copy(0, index, h[:R]).view(B, Tc, -1), (0, 0, 0, T - Tc))

        if pooled_only and len(self.layers) and bool(real_c[:, 0].all()):  # the last layer at each row's [CLS] only
            cls = torch.searchsorted(index, torch.arange(B, device=index.device) * Tc)  # (B,) [CLS] rows of x
            return self._pooled_at(x, mask, (cls, None, torch.zeros_like(cls)), packed=packed)
        hidden = [full(x)] if output_hidden_states else None
        for layer in self.layers:
            x, _ = layer(x, mask, False, packed=packed)
            if output_hidden_states:
                hidden.append(full(x))
        last = hidden[-1] if output_hidden_states else full(x)
        if pooled_only:
            return BertOutput(last_hidden_state=None, pooled_output=self.pooler(last))
        return BertOutput(last_hidden_state=last, pooled_output=self.pooler(last),
                          hidden_states=tuple(hidden) if hidden is not None else None)


def unpad_multiple(device, hidden_size: int) -> int:
    """What the unpadded path rounds its rows up to: UNPAD_ROWS where the linear layers run on oneDNN (a CPU under
    bf16 autocast, or in fp32 where engine.fast_linear chooses oneDNN for this hidden size) and on accelerators; 1
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
    so their gradients are 0 (tests/engine/test_model_fastpaths.py)."""
    R = index.numel()
    M = -(-R // multiple) * multiple
    if M == R:
        return index
    slot = torch.argmin(real.reshape(-1).to(torch.uint8))  # the first padded slot (the unpadded path has padding)
    return torch.cat([index, slot.expand(M - R)])


class BertLMHead(nn.Module):
    """Dense + GELU + LayerNorm, then the (tied) word-embedding matrix and an output bias."""

    def __init__(self, config: BertConfig, word_embeddings: nn.Embedding):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.word_embeddings = [word_embeddings]  # a list so the tied weight is not registered twice
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def transform(self, x):  # (..., H) -> (..., H): what the vocabulary projection reads
        x = linear(x, self.dense.weight, self.dense.bias, gelu=True)
        return F.layer_norm(x, self.norm.normalized_shape, self.norm.weight, self.norm.bias, self.norm.eps)

    def forward(self, x):  # (..., H) -> (..., V)
        return linear(self.transform(x), self.word_embeddings[0].weight, self.bias)

    def loss(self, x, target):  # (N, H), (N,) -> summed cross-entropy (fp32 scalar), argmax (N,); no (N, V) logits
        return vocab_cross_entropy(self.transform(x), self.word_embeddings[0].weight, self.bias, target)


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
                output_hidden_states=False, mlm_positions=None, unpad=False, mlm_targets=None,
                packing=None) -> BertOutput:
        """`mlm_positions` (B, T) bool, or a (rows (N,), columns (N,)) pair of indices: the MLM head reads only
        those positions. `mlm_targets` (N,) token ids at them: the head returns their summed cross-entropy and
        argmax instead of the (N, V) logits (engine.vocab_loss: pre-training's loss without materialising the
        logits). `packing`: see BertModel.forward; NSP then reads each sequence's [CLS], (S, 2) logits."""
        out = self.bert(input_ids, token_type_ids, attention_mask, output_attentions, output_hidden_states, unpad,
                        packing)
        if self.mlm is not None:
            h = out.last_hidden_state
            if isinstance(mlm_positions, tuple):
                h = h[mlm_positions[0], mlm_positions[1]]  # (N, H): gathered at fixed indices, no host sync
            elif mlm_positions is not None:
                h = h[mlm_positions]  # (N, H): only the positions that carry a label
            if mlm_targets is not None:
                out.mlm_loss_sum, out.mlm_predictions = self.mlm.loss(h, mlm_targets)
            else:
                out.mlm_logits = self.mlm(h)
        if self.nsp is not None:
            out.nsp_logits = self.nsp(out.pooled_output)
        return out

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    @property
    def device(self):
        return next(self.parameters()).device


# ------------------------------------------------------------------ helpers
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


def explicit_attention(x) -> bool:
    """Whether attention takes the explicit softmax path instead of `scaled_dot_product_attention`: on a CPU while
    gradients are recorded (training). There the pinned torch's fused CPU kernel is fast forward but slow backward:
    forward and backward under bf16 autocast on the 2-core AMD EPYC Zen 4 took 67 / 109 ms per layer with it against
    23 / 32 ms explicit at MiniLM's shape (12 heads of 32, 128 tokens, batch 16 / 32), 46 against 12 ms at the
    classroom model's (2 heads of 64, 64 x 128), 9.3 against 2.2 ms at 64 x 32, with or without a padding mask,
    and 1,065 against 853 ms at BERT-BASE's 256 x 128 (BENCHMARKS.md, "The probe-ready model"). Forward only
    (evaluation, features, the Probe page) the fused kernel is faster (7 against 17 ms at MiniLM's shape), and on
    a GPU it is the flash kernel: both keep it."""
    return x.device.type == "cpu" and torch.is_grad_enabled()


def softmax_attention(q, k, v, mask, p: float, training: bool):
    """The explicit attention: (y = dropout(softmax(q k^T / sqrt(D) + bias)) v (N, A, Tq, D), the probabilities
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


def word_embedding(ids, weight, padding_idx, kept: "KeptGradient"):
    """F.embedding(ids, weight, padding_idx), whose (V, H) weight gradient, on a CPU, is built in memory kept
    between steps (`kept`) instead of a new zeroed tensor every step. The plain backward's fresh 47 MB tensor
    (MiniLM's 30,522 x 384 fp32) is a new memory mapping every step on Linux, 11,500 page faults: 13-16 ms a
    step for the gradient against 2.2-2.7 ms in kept memory, at 2 threads on the AMD EPYC Zen 4
    (docs/lab-notes/packing.md). The gradient is the same, value for value (tests/engine/test_model_fastpaths.py).
    Elsewhere (a GPU's caching allocator has no such cost, torch.compile, no gradient wanted) it is F.embedding."""
    if (weight.device.type != "cpu" or not torch.is_grad_enabled() or not weight.requires_grad
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


def _dropout(x, p: float, training: bool):
    if not training or p <= 0:
        return x
    if x.device.type != "cpu" or p >= 1:
        return F.dropout(x, p, True)
    mask, scale = cpu_dropout_mask(x.shape, p, x.dtype)
    return _MaskedScale.apply(x, mask, scale)


DROP_LEVELS = 1 << 15  # a CPU draws 15 random bits per element for dropout (_drop_bits)


def _drop_bits(n: int, p: float, generator: torch.Generator = None):
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
    dropout's mask on a CPU from `_drop_bits`, as numbers of the activations' dtype. Products of one dtype run vectorised on a CPU; an operation that reads a
    bool tensor (torch.where, a product with it, masked_fill, a cast) took 1.1-1.7 against 0.2 ms at 1.9M bf16
    elements, and dropout's forward and backward 3.8 against 5.9 ms there (AMD EPYC Zen 4,
    docs/lab-notes/dropout_measure.py). So the mask is made by integer arithmetic on the draws, not a comparison:
    draw - threshold is negative exactly where dropped; clamped to [-1, 0], plus one, it is the mask. In a 16-bit
    dtype the 0/1 integers times the bit pattern of 1.0 are the mask's own bits (`_ONE_BITS`), written in the draws'
    memory: no conversion and no new tensor."""
    bits, drop = _drop_bits(math.prod(shape), p, generator)
    keep = bits.sub_(drop).clamp_(-1, 0).add_(1)  # int16: 1 kept, 0 dropped
    one = _ONE_BITS.get(dtype)
    mask = keep.mul_(one).view(dtype) if one is not None else keep.to(dtype)
    return mask.view(shape), DROP_LEVELS / (DROP_LEVELS - drop)


_ONE_BITS = {torch.bfloat16: 0x3F80, torch.float16: 0x3C00}  # 1.0 as int16 bits; 0.0 is 0 in both


class _MaskedScale(torch.autograd.Function):
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
