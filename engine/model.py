"""The BERT encoder with its pre-training heads (paper section 3, Figure 1; Vaswani et al. 2017).

B = batch size, T = sequence length, H = hidden size, A = attention heads, D = H / A, V = vocabulary size,
N = number of positions the MLM head is evaluated at, R = number of real (non-padding) tokens in a batch.

- `BertEmbeddings`: token + segment + learned position embeddings, then LayerNorm and dropout.
- `BertSelfAttention`, `BertLayer`: post-LN Transformer block as in the paper: x = LN(x + Attn(x));
  x = LN(x + FFN(x)), GELU. Query, key and value come from one fused (H, 3H) projection (one matrix multiply
  instead of three; the checkpoint code splits it into Hugging Face's query/key/value on save and joins them on
  load). Attention runs through `scaled_dot_product_attention` (flash / memory-efficient kernels on CUDA); when
  the caller asks for attention maps, the explicit formula (`softmax_attention`) computes the same thing and
  returns the probabilities. `config.causal` masks every position's right context (the paper's LTR ablation, 5.1).
- `BertPooler`: dense + tanh on the [CLS] vector, giving C.
- `BertModel`: embeddings, L layers, pooler.
- `BertLMHead` and `BertForPreTraining`: the MLM head (dense + GELU + LayerNorm, then the word-embedding
  matrix, tied, plus a bias) and the NSP classifier on C. The MLM head can be evaluated only at selected
  positions (`mlm_positions`), which is how pre-training uses it: the vocabulary projection over all T positions
  would dominate the cost of a small model and only ~15% of positions carry a label.
Departures from the paper: none in the architecture. Dropout sits where Hugging Face's BertModel puts it
(embeddings, attention probabilities, after each sub-layer), so weights and outputs match `transformers` exactly.

Fast paths live in engine/kernels/, behind one switch (`engine.kernels.use(False)` runs everything here plainly):
the matrix multiplies (`linear`), dropout's CPU mask (quantised to a rate of 1/32768), the explicit attention on a
CPU while training, the word embeddings' kept gradient, and `unpad=True` (padded positions cost nothing). One more
lives here because it is a choice of what to compute, not how: `pooled_only=True`, for heads that read only C,
runs the last layer at each sequence's [CLS] alone (its keys and values still from every token); exact in value,
exact in distribution under dropout. Each is checked against the plain path in tests/engine/kernels/test_model_fastpaths.py.
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
from engine import kernels
from engine.kernels.attention import explicit_attention, fast_softmax_attention
from engine.kernels.dropout import dropout
from engine.kernels.embedding import KeptGradient, word_embedding
from engine.kernels.linear import linear
from engine.kernels.unpad import forward_unpadded
from engine.vocab_loss import vocab_cross_entropy


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
        return dropout(x, self.dropout.p, self.training)


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
        # the grid slot each row reads back: index, then M - R padded slots, engine.kernels.unpad.unpadded_rows)
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
            y, probs = explicit_softmax_attention(q, k, v, mask, self.dropout_p, self.training)  # (B, A, T, D), (B, A, T, T)
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
            y = explicit_softmax_attention(q, k, v, mask, self.dropout_p, self.training)[0]  # (S, A, 1, D)
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
        x = F.layer_norm(x + dropout(a, p, train), n.normalized_shape, n.weight, n.bias, n.eps)
        h = linear(x, self.ffn_in.weight, self.ffn_in.bias, gelu=True)  # (.., I)
        h = linear(h, self.ffn_out.weight, self.ffn_out.bias)  # (.., H)
        n = self.ffn_norm
        x = F.layer_norm(x + dropout(h, p, train), n.normalized_shape, n.weight, n.bias, n.eps)
        return x, probs

    def forward_at(self, x, mask, query, packed=None):  # (B, T, H) or (R, H) -> (S, H) at the query positions
        """The block's output at the query positions only (`BertSelfAttention.attend_at`): what a head that reads
        only the [CLS] vectors needs from the last layer."""
        p, train = self.dropout.p, self.training
        a = self.attention.attend_at(x, mask, query, packed)
        n = self.attn_norm
        x = F.layer_norm(x.reshape(-1, x.shape[-1])[query[0]] + dropout(a, p, train), n.normalized_shape, n.weight, n.bias, n.eps)
        h = linear(x, self.ffn_in.weight, self.ffn_in.bias, gelu=True)  # (S, I)
        h = linear(h, self.ffn_out.weight, self.ffn_out.bias)  # (S, H)
        n = self.ffn_norm
        return F.layer_norm(x + dropout(h, p, train), n.normalized_shape, n.weight, n.bias, n.eps)


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
        if unpad and kernels.enabled() and attention_mask is not None and not output_attentions and packing is None:
            last, pooled, hidden = forward_unpadded(self, input_ids, token_type_ids, attention_mask,
                                                    output_hidden_states, pooled_only)
            return BertOutput(last_hidden_state=last, pooled_output=pooled, hidden_states=hidden)
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


def softmax_attention(q, k, v, mask, p: float, training: bool):
    """The attention as the Transformer paper writes it: (y = dropout(softmax(q k^T / sqrt(D), masked)) v
    (N, A, Tq, D), the probabilities before dropout (N, A, Tq, T)), from q (N, A, Tq, D), k and v (N, A, T, D), and
    mask None or bool (N|1, 1, Tq|1, T), True where a query may attend to a key. The reference for
    engine.kernels.attention.fast_softmax_attention (the same values in fewer passes)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (N, A, Tq, T)
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    probs = scores.softmax(dim=-1)
    return F.dropout(probs, p, training) @ v, probs


def explicit_softmax_attention(q, k, v, mask, p: float, training: bool):
    """`softmax_attention`, on the kernels' faster formula when they are on (engine.kernels)."""
    attend = fast_softmax_attention if kernels.enabled() else softmax_attention
    return attend(q, k, v, mask, p, training)
