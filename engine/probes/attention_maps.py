"""Where a model looks (paper Appendix A.1, Figure 1): `attention`, every layer's and head's attention
probabilities for one input, numpy (L, A, T, T) (`attention_and_output` also gives that forward pass's output), and
`compare_attention`, the per-head difference between two models on the same input (L, A), e.g. BERT vs No NSP or
step 1,000 vs step 10,000, with the heads that changed most (Jensen-Shannon divergence, `jensen_shannon`, or mean
absolute difference)."""
import numpy as np
import torch

from engine.errors import EngineError, quoted
from engine.probes.inputs import causal_note, encode_input, forward_encoded
from engine.probes.model_info import model_name


class AttentionTokens(list):
    """The WordPieces of an attention probe, with `type_ids`, `special` (1 for [CLS]/[SEP]), `truncated`, `notes`."""

    def __init__(self, tokens, type_ids=(), special=(), truncated=False, notes=()):
        super().__init__(tokens)
        self.type_ids = list(type_ids)
        self.special = list(special)
        self.truncated = bool(truncated)
        self.notes = list(notes)


def attention(bundle, a: str, b: str = None, max_length: int = None):
    """(tokens, att): the WordPieces and every layer's attention probabilities, numpy (L, A, T, T) float32.
    att[l, h, i, j] is how much query token i attends to key token j in layer l+1, head h+1; rows sum to 1."""
    tokens, att, _ = attention_and_output(bundle, a, b, max_length=max_length)
    return tokens, att


def attention_and_output(bundle, a: str, b: str = None, max_length: int = None, output_hidden_states: bool = False):
    """(tokens, att, out): `attention` plus the model's output of that one forward pass (with every layer's
    hidden states when `output_hidden_states`), for analyses that need more than the weights."""
    enc, truncated, notes = encode_input(bundle, a, b, max_length=max_length)
    out = forward_encoded(bundle, enc, output_attentions=True, output_hidden_states=output_hidden_states)
    att = torch.stack([x[0] for x in out.attentions]).float().cpu().numpy()  # (L, A, T, T)
    tokens = AttentionTokens(enc.tokens, enc.type_ids, enc.special_tokens_mask, truncated, notes + causal_note(bundle))
    return tokens, att, out


def _same_vocab(b1, b2) -> bool:
    t1, t2 = b1.tokenizer, b2.tokenizer
    return t1.vocab_size == t2.vocab_size and t1.lowercase == t2.lowercase and t1.vocab() == t2.vocab()


def jensen_shannon(p: np.ndarray, q: np.ndarray, axis: int = -1) -> np.ndarray:
    """Jensen-Shannon divergence in bits (0 = same distribution, 1 = disjoint) along `axis`."""
    p = np.asarray(p, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    m = 0.5 * (p + q)

    def kl(x, y):
        with np.errstate(divide="ignore", invalid="ignore"):
            t = np.where(x > 0, x * (np.log2(x) - np.log2(np.where(y > 0, y, 1.0))), 0.0)
        return t.sum(axis=axis)

    return np.clip(0.5 * kl(p, m) + 0.5 * kl(q, m), 0.0, 1.0)


def compare_attention(bundle1, bundle2, a: str, b: str = None, metric: str = "jsd", top: int = 10,
                      max_length: int = None) -> dict:
    """Per-head difference of two models' attention on the same input.

    metric "jsd": mean over query tokens of the Jensen-Shannon divergence (bits) between the two rows;
    "l1": mean |delta| over all (query, key) cells. Returns {"tokens", "diff" (L, A), "metric", "top" (list of
    (layer, head, value), 1-based, largest first), "att1", "att2", "truncated", "notes"}."""
    if metric not in ("jsd", "l1"):
        raise EngineError(f"unknown metric {quoted(metric)}; use jsd (Jensen-Shannon) or l1 (mean absolute difference)")
    n1, n2 = model_name(bundle1), model_name(bundle2)
    if not _same_vocab(bundle1, bundle2):
        raise EngineError(f"{n1} and {n2} use different vocabularies ({bundle1.tokenizer.vocab_size} vs "
                          f"{bundle2.tokenizer.vocab_size} tokens), so their tokens do not line up; compare checkpoints "
                          "of one run or models trained with the same vocab.txt")
    c1, c2 = bundle1.config, bundle2.config
    if (c1.num_layers, c1.num_heads) != (c2.num_layers, c2.num_heads):
        raise EngineError(f"{n1} has {c1.num_layers} layers x {c1.num_heads} heads but {n2} has {c2.num_layers} x "
                          f"{c2.num_heads}; a head-by-head comparison needs the same shape (compare checkpoints of one run)")
    limit = min(c1.max_position_embeddings, c2.max_position_embeddings, max_length or 10**9)
    tokens, att1 = attention(bundle1, a, b, max_length=limit)
    _, att2 = attention(bundle2, a, b, max_length=limit)
    if metric == "jsd":
        diff = jensen_shannon(att1, att2, axis=-1).mean(axis=-1)  # (L, A, T) -> (L, A)
    else:
        diff = np.abs(att1.astype(np.float64) - att2).mean(axis=(-2, -1))  # (L, A)
    diff = diff.astype(np.float32)
    order = np.argsort(-diff, axis=None)[: max(1, int(top))]
    ranked = [(int(i // diff.shape[1]) + 1, int(i % diff.shape[1]) + 1, float(diff.flat[i])) for i in order]
    return {"tokens": tokens, "diff": diff, "metric": metric, "top": ranked, "att1": att1, "att2": att2,
            "names": (n1, n2), "truncated": tokens.truncated, "notes": tokens.notes}
