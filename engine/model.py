"""The BERT encoder with its pre-training heads (paper section 3, Figure 1; Vaswani et al. 2017).

B = batch size, T = sequence length, H = hidden size, A = attention heads, D = H / A, V = vocabulary size,
N = number of positions the MLM head is evaluated at.

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
"""
import math
from dataclasses import dataclass
from typing import Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from engine.config import BertConfig
from engine.errors import EngineError


@dataclass
class BertOutput:
    last_hidden_state: torch.Tensor  # (B, T, H)
    pooled_output: Optional[torch.Tensor] = None  # (B, H), C in the paper
    mlm_logits: Optional[torch.Tensor] = None  # (B, T, V), or (N, V) at mlm_positions; None without an MLM head
    nsp_logits: Optional[torch.Tensor] = None  # (B, 2): index 0 IsNext, 1 NotNext (as google-research/bert)
    hidden_states: Optional[Tuple[torch.Tensor, ...]] = None  # L+1 of (B, T, H): embeddings, then each layer
    attentions: Optional[Tuple[torch.Tensor, ...]] = None  # L of (B, A, T, T)


class BertEmbeddings(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.word = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.position = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.segment = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout)

    def forward(self, input_ids, token_type_ids):  # (B, T), (B, T) -> (B, T, H)
        T = input_ids.shape[1]
        pos = torch.arange(T, device=input_ids.device)
        x = self.word(input_ids) + self.segment(token_type_ids) + self.position(pos)[None]
        return self.dropout(self.norm(x))


class BertSelfAttention(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.A, self.D = config.num_heads, config.head_size
        self.qkv = nn.Linear(config.hidden_size, 3 * config.hidden_size)
        self.out = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout_p = config.attention_dropout
        self.attn_dropout = nn.Dropout(config.attention_dropout)

    def forward(self, x, mask, need_weights: bool):
        # x (B, T, H); mask: None, or bool (B, 1, 1|T, T), True where a query may attend to a key
        B, T, H = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.A, self.D).permute(2, 0, 3, 1, 4)  # 3 x (B, A, T, D)
        if need_weights:
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(self.D)  # (B, A, T, T)
            if mask is not None:
                scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
            probs = scores.softmax(dim=-1)
            y = self.attn_dropout(probs) @ v  # (B, A, T, D)
        else:
            probs = None
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=self.dropout_p if self.training else 0.0)
        y = y.transpose(1, 2).reshape(B, T, H)
        return self.out(y), probs


class BertLayer(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.attention = BertSelfAttention(config)
        self.attn_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.ffn_in = nn.Linear(config.hidden_size, config.intermediate_size)
        self.ffn_out = nn.Linear(config.intermediate_size, config.hidden_size)
        self.ffn_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout)

    def forward(self, x, mask, need_weights: bool = False):  # (B, T, H) -> (B, T, H)
        a, probs = self.attention(x, mask, need_weights)
        x = self.attn_norm(x + self.dropout(a))
        h = self.ffn_out(F.gelu(self.ffn_in(x)))  # (B, T, I) -> (B, T, H)
        x = self.ffn_norm(x + self.dropout(h))
        return x, probs


class BertPooler(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, x):  # (B, T, H) -> (B, H)
        return torch.tanh(self.dense(x[:, 0]))


def attention_mask_4d(attention_mask, T: int, causal: bool, device):
    """Boolean (B|1, 1, 1|T, T) mask, True = may attend; None when every key is visible to every query."""
    mask = None
    if attention_mask is not None and not bool(attention_mask.all()):
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

    def forward(self, input_ids, token_type_ids=None, attention_mask=None, output_attentions=False, output_hidden_states=False):
        B, T = input_ids.shape
        if T > self.config.max_position_embeddings:
            raise EngineError(f"sequence of {T} tokens is longer than the model's {self.config.max_position_embeddings} positions; truncate the input or use a shorter --seq-len")
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        mask = attention_mask_4d(attention_mask, T, self.config.causal, input_ids.device)
        x = self.embeddings(input_ids, token_type_ids)
        hidden = [x] if output_hidden_states else None
        attns = [] if output_attentions else None
        for layer in self.layers:
            x, probs = layer(x, mask, need_weights=output_attentions)
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


class BertLMHead(nn.Module):
    """Dense + GELU + LayerNorm, then the (tied) word-embedding matrix and an output bias."""

    def __init__(self, config: BertConfig, word_embeddings: nn.Embedding):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.word_embeddings = [word_embeddings]  # a list so the tied weight is not registered twice
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, x):  # (..., H) -> (..., V)
        x = self.norm(F.gelu(self.dense(x)))
        return F.linear(x, self.word_embeddings[0].weight, self.bias)


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
                output_hidden_states=False, mlm_positions=None) -> BertOutput:
        out = self.bert(input_ids, token_type_ids, attention_mask, output_attentions, output_hidden_states)
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
