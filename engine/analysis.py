"""Attention analysis beyond raw maps: rollout, per-head statistics, word-level merging, value-weighted
attention and head importance. Each is a research method named after its paper; each has a pure function on
numpy arrays (hand-checkable in tests) and a bundle-level function for notebooks and the Attention page.

L = layers, A = heads per layer, T = WordPieces, W = words, H = hidden size, D = H / A.

- `attention_rollout(bundle, a, b)` / `rollout(att)`: Abnar & Zuidema 2020, "Quantifying Attention Flow in
  Transformers". Per layer the heads are averaged and the residual connection is modelled as an identity:
  A_hat = 0.5 * mean_h(A) + 0.5 * I, rows renormalised; the rollout is A_hat_L @ ... @ A_hat_1, (T, T), rows
  summing to 1: row i says how much of output token i traces back to each input token.
- `head_statistics(bundle, texts)` / `head_statistics_from_attention(...)`: Clark et al. 2019, "What Does BERT
  Look At?". For every (layer, head), the attention a query token gives to [CLS], to [SEP] (all of them), to
  itself, to the previous and to the next token, to punctuation, and the entropy of its attention (nats),
  averaged over every query token of every text (tokens pooled, so longer texts weigh more; "prev" and "next"
  over the tokens that have one).
- `word_level(tokens, att)`: WordPieces merged into words as Clark et al. do: attention *to* a word is the sum
  over its pieces (columns), attention *from* a word is the mean over its pieces (rows), so rows still sum to 1.
  A piece starting with "##" continues the previous word; [CLS]/[SEP] stay words of their own.
- `value_weighted_attention(bundle, a, b)`: Kobayashi et al. 2020, "Attention is Not Only a Weight": the norm
  ||alpha_ij f_h(x_j)|| with f_h(x) = (x W_V^h + b_V^h) W_O^h, the value vector of head h carried through that
  head's slice of the output projection (the output bias is added once after the sum, so it is left out).
  Since the norm of a scaled vector is the scale times the norm, this is alpha_ij * ||f_h(x_j)||: computed from
  the layer inputs (hidden states) and the weights after the forward pass, so the model's attention code and its
  fast paths are untouched.
- `queries_and_keys(bundle, a, b)` / `queries_keys(model, hidden_states)`: what bertviz's neuron view shows: per
  layer and head, the query q = W_Q^h x + b_Q^h and key k = W_K^h x + b_K^h of every token, from that layer's
  input x (the fused projection's first and second thirds, split into A heads of D); softmax(q . k / sqrt(D))
  over the keys is the layer's attention.
- `head_importance(bundle, texts)`: Michel et al. 2019, "Are Sixteen Heads Really Better than One?": the change
  in held-out MLM loss when one head is masked (its output multiplied by 0, done here by zeroing that head's
  columns of the output projection for the duration of one forward pass), (L, A); positive = the head helps.
  15% of the non-special WordPieces of every text (at least one) are replaced by [MASK], chosen by a seeded
  generator so every head is scored on the same positions. A left-to-right model (LTR) is scored on next-token
  prediction at the same positions, input unmasked (its training task). Needs an MLM head (MiniLM has none).
Rollout, head statistics and word level read only the attention weights, so they work on every encoder engine.load
reads; value-weighted attention, the queries and keys and head importance read BERT's own weights, and on another
encoder (engine.encoders) are one line saying so.
"""
import unicodedata

import numpy as np
import torch
import torch.nn.functional as F

from engine.encoders import require_bert
from engine.errors import EngineError

STATISTICS = ("cls", "sep", "self", "prev", "next", "punct", "entropy")  # the columns of head_statistics
MASK_RATE = 0.15  # head_importance: share of the non-special WordPieces masked per text


# ---------------------------------------------------------------------------------------------------------
# rollout (Abnar & Zuidema 2020)

def rollout(att: np.ndarray, residual: float = 0.5) -> np.ndarray:
    """(L, A, T, T) attention -> (T, T) rollout; rows sum to 1 (see the module docstring)."""
    att = np.asarray(att, dtype=np.float64)
    if att.ndim != 4 or att.shape[-1] != att.shape[-2]:
        raise EngineError(f"rollout needs attention of shape (layers, heads, T, T); got {att.shape}")
    T = att.shape[-1]
    eye = np.eye(T)
    out = eye
    for layer in att:  # (A, T, T)
        a = (1.0 - residual) * layer.mean(axis=0) + residual * eye  # (T, T)
        a = a / a.sum(axis=-1, keepdims=True)
        out = a @ out
    return out


def attention_rollout(bundle, text_a: str, text_b: str = None) -> np.ndarray:
    """The rollout (T, T) of `bundle` on one sentence or a pair; rows sum to 1. The WordPieces are
    `engine.attention(bundle, text_a, text_b)[0]`."""
    from engine.probes.attention_maps import attention
    _, att = attention(bundle, text_a, text_b)
    return rollout(att)


# ---------------------------------------------------------------------------------------------------------
# per-head statistics (Clark et al. 2019)

def is_punctuation(token: str) -> bool:
    """A WordPiece made only of punctuation characters (Unicode category P*), "##" prefix ignored."""
    t = token[2:] if token.startswith("##") else token
    return bool(t) and all(unicodedata.category(c).startswith("P") for c in t)


def _sums(att: np.ndarray, tokens, special) -> dict:
    """Per (layer, head) sums over the query tokens of one text: {stat: (L, A)} plus counts."""
    att = np.asarray(att, dtype=np.float64)  # (L, A, T, T)
    T = att.shape[-1]
    tokens = list(tokens)
    cls = [j for j, t in enumerate(tokens) if t == "[CLS]"]
    sep = [j for j, t in enumerate(tokens) if t == "[SEP]"]
    punct = [j for j, t in enumerate(tokens) if not (special and special[j]) and is_punctuation(t)]
    idx = np.arange(T)
    with np.errstate(divide="ignore", invalid="ignore"):
        ent = -np.where(att > 0, att * np.log(att), 0.0).sum(axis=-1)  # (L, A, T)
    return {
        "cls": att[..., cls].sum(axis=(-1, -2)),
        "sep": att[..., sep].sum(axis=(-1, -2)),
        "self": att[..., idx, idx].sum(axis=-1),
        "prev": att[..., idx[1:], idx[:-1]].sum(axis=-1),
        "next": att[..., idx[:-1], idx[1:]].sum(axis=-1),
        "punct": att[..., punct].sum(axis=(-1, -2)),
        "entropy": ent.sum(axis=-1),
        "n": T, "n_prev": T - 1,
    }


def head_statistics_from_attention(items) -> "object":
    """`items`: (tokens, att (L, A, T, T), special or None) per text -> DataFrame with one row per (layer, head)
    (1-based) and the columns of STATISTICS, averaged over every query token of every text."""
    import pandas as pd
    total, n, n_prev = None, 0, 0
    for tokens, att, special in items:
        s = _sums(att, tokens, special)
        n, n_prev = n + s.pop("n"), n_prev + s.pop("n_prev")
        total = s if total is None else {k: total[k] + v for k, v in s.items()}
    if total is None or n == 0:
        raise EngineError("no texts to compute head statistics on; give at least one sentence")
    L, A = total["cls"].shape
    rows = []
    for l in range(L):
        for h in range(A):
            row = {"layer": l + 1, "head": h + 1}
            for k in STATISTICS:
                d = n_prev if k in ("prev", "next") else n
                row[k] = float(total[k][l, h] / d) if d else float("nan")
            rows.append(row)
    return pd.DataFrame(rows, columns=["layer", "head", *STATISTICS])


def head_statistics(bundle, texts) -> "object":
    """Clark et al.'s per-head statistics of `bundle` over `texts` (strings, or (a, b) pairs): a pandas
    DataFrame, one row per (layer, head), columns layer, head, cls, sep, self, prev, next, punct, entropy."""
    from engine.probes.attention_maps import attention
    texts = [t for t in (texts or []) if (t if isinstance(t, str) else t[0]).strip()]
    if not texts:
        raise EngineError("no texts to compute head statistics on; give at least one non-empty sentence")
    items = []
    for t in texts:
        a, b = (t, None) if isinstance(t, str) else (t[0], t[1])
        tokens, att = attention(bundle, a, b)
        items.append((list(tokens), att, tokens.special))
    return head_statistics_from_attention(items)


# ---------------------------------------------------------------------------------------------------------
# word-level attention (Clark et al. 2019)

def word_spans(tokens) -> list:
    """[(word, [piece indices])]: a "##" piece joins the word before it; [CLS]/[SEP]/[PAD] are words alone."""
    spans = []
    for i, t in enumerate(tokens):
        if t.startswith("##") and spans and spans[-1][0] not in ("[CLS]", "[SEP]", "[PAD]"):
            word, idx = spans[-1]
            spans[-1] = (word + t[2:], idx + [i])
        else:
            spans.append((t, [i]))
    return spans


def word_level(tokens, att: np.ndarray):
    """(words, att_w): `att` (..., T, T) merged into (..., W, W): columns summed over a word's pieces (attention
    to the word), rows averaged over its pieces (attention from the word). Row sums are kept."""
    att = np.asarray(att, dtype=np.float64)
    spans = word_spans(list(tokens))
    W, T = len(spans), att.shape[-1]
    to_word = np.zeros((T, W))  # (T, W): 1 where piece j belongs to word w
    from_word = np.zeros((W, T))  # (W, T): 1/|w| over word w's pieces
    for w, (_, idx) in enumerate(spans):
        to_word[idx, w] = 1.0
        from_word[w, idx] = 1.0 / len(idx)
    return [w for w, _ in spans], from_word @ att @ to_word


# ---------------------------------------------------------------------------------------------------------
# value-weighted attention (Kobayashi et al. 2020)

def value_norms(model, hidden_states) -> np.ndarray:
    """||f_h(x_j)|| for every layer, head and token: (L, A, T) from the layer inputs `hidden_states`
    (L+1 of (1, T, H); layer l reads hidden_states[l])."""
    rows = []
    for l, layer in enumerate(model.bert.layers):
        att = layer.attention
        A, D = att.A, att.D
        H = A * D
        x = hidden_states[l][0].float()  # (T, H)
        w_v, b_v = att.qkv.weight[2 * H:].float(), att.qkv.bias[2 * H:].float()  # (H, H), (H,)
        v = F.linear(x, w_v, b_v).view(-1, A, D)  # (T, A, D)
        w_o = att.out.weight.float().view(H, A, D)  # (H_out, A, D): head h's columns of the output projection
        f = torch.einsum("tad,oad->tao", v, w_o)  # (T, A, H_out) = f_h(x_t)
        rows.append(f.norm(dim=-1).T)  # (A, T)
    return torch.stack(rows).cpu().numpy()  # (L, A, T)


def value_weighted_from(att: np.ndarray, norms: np.ndarray) -> np.ndarray:
    """||alpha_ij f_h(x_j)|| = alpha_ij * ||f_h(x_j)||: (L, A, T, T) from att (L, A, T, T) and norms (L, A, T)."""
    return np.asarray(att) * np.asarray(norms)[:, :, None, :]


def value_weighted_attention(bundle, text_a: str, text_b: str = None):
    """(tokens, vw, att): the WordPieces, the value-weighted norms (L, A, T, T) (not normalised; divide each row
    by its sum to compare with the weights) and the plain attention weights (L, A, T, T)."""
    from engine.probes.attention_maps import attention_and_output
    require_bert(bundle, "value-weighted attention (it reads BERT's own value and output weights)")
    tokens, att, out = attention_and_output(bundle, text_a, text_b, output_hidden_states=True)
    with torch.no_grad():
        norms = value_norms(bundle.model, out.hidden_states)
    return tokens, value_weighted_from(att, norms), att


# ---------------------------------------------------------------------------------------------------------
# queries and keys (the neuron view)

def queries_keys(model, hidden_states):
    """(q, k): numpy (L, A, T, D) each, every layer's per-head queries and keys from the layer inputs
    `hidden_states` (L+1 of (1, T, H); layer l reads hidden_states[l])."""
    qs, ks = [], []
    for l, layer in enumerate(model.bert.layers):
        att = layer.attention
        A, D = att.A, att.D
        H = A * D
        x = hidden_states[l][0].float()  # (T, H)
        w, b = att.qkv.weight.float(), att.qkv.bias.float()  # (3H, H), (3H,): query, key, value rows
        q = F.linear(x, w[:H], b[:H]).view(-1, A, D).transpose(0, 1)  # (A, T, D)
        k = F.linear(x, w[H:2 * H], b[H:2 * H]).view(-1, A, D).transpose(0, 1)  # (A, T, D)
        qs.append(q)
        ks.append(k)
    return torch.stack(qs).cpu().numpy(), torch.stack(ks).cpu().numpy()  # (L, A, T, D) each


def queries_and_keys(bundle, text_a: str, text_b: str = None):
    """(tokens, q, k, att): the WordPieces, per-layer per-head queries and keys (L, A, T, D) each, and the
    attention weights (L, A, T, T) of the same forward pass (att = softmax(q k^T / sqrt(D)) for an encoder)."""
    from engine.probes.attention_maps import attention_and_output
    require_bert(bundle, "the neuron view (it reads BERT's own query and key weights)")
    tokens, att, out = attention_and_output(bundle, text_a, text_b, output_hidden_states=True)
    with torch.no_grad():
        q, k = queries_keys(bundle.model, out.hidden_states)
    return tokens, q, k, att


# ---------------------------------------------------------------------------------------------------------
# head importance (Michel et al. 2019)

def _masked_batch(bundle, texts, seed: int):
    """(ids, type_ids, attention_mask, positions (B, T) bool, labels (N,)): MASK_RATE of each text's non-special
    pieces chosen by a seeded generator; replaced by [MASK] except for a left-to-right model."""
    from engine.tasks.batching import pad_batch
    tok = bundle.tokenizer
    limit = int(bundle.config.max_position_embeddings)
    pairs = [(t, None) if isinstance(t, str) else (t[0], t[1]) for t in texts]
    pairs = [(a, b) for a, b in pairs if isinstance(a, str) and a.strip()]
    if not pairs:
        raise EngineError("no texts to score head importance on; give at least one non-empty sentence")
    encs = tok.encode_batch([a if b is None else (a, b) for a, b in pairs], max_length=limit)
    ids, tt, am = pad_batch([(e.ids, e.type_ids) for e in encs], tok.pad_id)  # (B, T) each
    g = torch.Generator().manual_seed(seed)
    pos = torch.zeros_like(ids, dtype=torch.bool)
    causal = bool(bundle.config.causal)
    for r, e in enumerate(encs):
        cand = [i for i, s in enumerate(e.special_tokens_mask) if not s and (not causal or i > 0)]
        if not cand:
            continue
        k = max(1, round(MASK_RATE * len(cand)))
        chosen = torch.randperm(len(cand), generator=g)[:k]
        pos[r, [cand[int(c)] for c in chosen]] = True
    if not pos.any():
        raise EngineError("the texts have no words to mask; give sentences with at least one word")
    labels = ids[pos]  # (N,)
    if not causal:
        ids = ids.masked_fill(pos, tok.mask_id)
    return ids, tt, am, pos, labels


@torch.no_grad()
def _mlm_loss(model, ids, tt, am, pos, labels, causal: bool) -> float:
    read = pos.roll(-1, dims=1) if causal else pos  # LTR: position p-1 predicts token p
    out = model(ids, token_type_ids=tt, attention_mask=am, mlm_positions=read)
    return float(F.cross_entropy(out.mlm_logits.float(), labels))


def head_importance(bundle, texts, seed: int = 0) -> np.ndarray:
    """(L, A) numpy: held-out MLM loss with head (l, h) masked minus the loss with every head (Michel et al.).
    The result also carries `.base_loss` (the loss with every head) and `.n_positions` (masked pieces scored)."""
    from engine.probes.model_info import require_head
    require_bert(bundle, "head importance (it masks heads in BERT's own output projection)")
    require_head(bundle, "mlm")
    model = bundle.model
    dev = next(model.parameters()).device
    ids, tt, am, pos, labels = (t.to(dev) for t in _masked_batch(bundle, texts, seed))
    causal = bool(bundle.config.causal)
    was_training = model.training
    model.eval()
    try:
        base = _mlm_loss(model, ids, tt, am, pos, labels, causal)
        L, A, D = bundle.config.num_layers, bundle.config.num_heads, bundle.config.head_size
        out = np.zeros((L, A))
        for l, layer in enumerate(model.bert.layers):
            w = layer.attention.out.weight  # (H, H): columns h*D:(h+1)*D carry head h
            for h in range(A):
                saved = w.data[:, h * D:(h + 1) * D].clone()
                w.data[:, h * D:(h + 1) * D] = 0.0
                try:
                    out[l, h] = _mlm_loss(model, ids, tt, am, pos, labels, causal) - base
                finally:
                    w.data[:, h * D:(h + 1) * D] = saved
    finally:
        model.train(was_training)
    result = HeadImportance(out)
    result.base_loss = base
    result.n_positions = int(labels.numel())
    return result


class HeadImportance(np.ndarray):
    """(L, A) numpy array with `base_loss` (MLM loss with every head) and `n_positions` (masked pieces scored)."""

    def __new__(cls, arr):
        return np.asarray(arr, dtype=np.float64).view(cls)

    def __array_finalize__(self, obj):
        self.base_loss = getattr(obj, "base_loss", None)
        self.n_positions = getattr(obj, "n_positions", None)
