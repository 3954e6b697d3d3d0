"""What the pre-training heads predict for typed text (paper section 3.1): `fill_mask`, the MLM head's top-k
(token, probability) at every [MASK] (the cloze task BERT is trained on; a left-to-right model reads the word at a
[MASK] from the position before it), and `next_sentence`, the NSP head's P(IsNext) for `[CLS] a [SEP] b [SEP]`
(index 0 of `nsp_logits` is IsNext, as in google-research/bert). Results are plain lists/floats with extra
attributes (`MaskPredictions`, `NextSentenceProbability`)."""
from engine.errors import EngineError
from engine.objectives import MLM_HEAD, NSP_HEAD
from engine.probes.inputs import MASK_RE, causal_note, encode_input, forward_encoded
from engine.probes.model_info import require_head


class MaskPredictions(list):
    """One list of (token, prob) per [MASK], in order. Attributes: `tokens` (the WordPieces the model saw),
    `mask_positions` (their indices), `probs` (numpy (M, V) full distributions), `token_to_id` (the
    tokenizer's lookup, to read any token's probability from `probs`), `truncated`, `notes`."""

    def __init__(self, items, tokens, mask_positions, probs, truncated=False, notes=(), token_to_id=None):
        super().__init__(items)
        self.token_to_id = token_to_id
        self.tokens = list(tokens)
        self.mask_positions = list(mask_positions)
        self.probs = probs
        self.truncated = bool(truncated)
        self.notes = list(notes)


class NextSentenceProbability(float):
    """P(IsNext) as a float, with `tokens`, `truncated` and `notes`."""

    def __new__(cls, p, tokens=(), truncated=False, notes=()):
        obj = super().__new__(cls, p)
        obj.tokens = list(tokens)
        obj.truncated = bool(truncated)
        obj.notes = list(notes)
        return obj


def fill_mask(bundle, text: str, top_k: int = 5, text_pair: str = None) -> MaskPredictions:
    """Top-k (token, probability) for each [MASK] in `text` (and `text_pair`), in order of appearance."""
    require_head(bundle, MLM_HEAD)
    top_k = int(top_k)
    if top_k < 1:
        raise EngineError(f"top_k must be at least 1 (got {top_k})")
    if not isinstance(text, str) or not text.strip():
        raise EngineError("the text is empty; type a sentence with [MASK] where a word should be predicted")
    if not MASK_RE.search(text) and not MASK_RE.search(text_pair or ""):
        raise EngineError("the text has no [MASK]; write [MASK] where a word should be predicted, e.g. 'the man went to the [MASK] .'")
    enc, truncated, notes = encode_input(bundle, text, text_pair)
    mask_id = bundle.tokenizer.mask_id
    positions = [i for i, t in enumerate(enc.ids) if t == mask_id]
    n_typed = len(MASK_RE.findall(text or "")) + len(MASK_RE.findall(text_pair or ""))
    if len(positions) < n_typed:
        notes.append(f"{n_typed - len(positions)} [MASK] fell beyond the model's positions and was dropped")
    if not positions:
        raise EngineError("every [MASK] was cut off by truncation; move the [MASK] earlier or shorten the text")
    notes += causal_note(bundle)
    out = forward_encoded(bundle, enc)
    # an LTR model's output at position t predicts token t+1, so a [MASK] at p is read from p-1 (left context only)
    rows = [p - 1 for p in positions] if bundle.config.causal else positions
    logits = out.mlm_logits[0, rows].float()  # (M, V)
    probs = logits.softmax(dim=-1)  # (M, V)
    k = min(top_k, probs.shape[-1])
    top_p, top_i = probs.topk(k, dim=-1)  # (M, k)
    tok = bundle.tokenizer
    items = [[(tok.id_to_token(int(i)), float(p)) for p, i in zip(row_p, row_i)] for row_p, row_i in zip(top_p, top_i)]
    return MaskPredictions(items, enc.tokens, positions, probs.cpu().numpy(), truncated, notes, tok.token_to_id)


def next_sentence(bundle, a: str, b: str) -> NextSentenceProbability:
    """P(IsNext) that `b` follows `a`, from the NSP head on [CLS] (paper 3.1, task #2)."""
    require_head(bundle, NSP_HEAD)
    if not isinstance(b, str) or not b.strip():
        raise EngineError("sentence B is empty; next-sentence prediction needs two sentences")
    enc, truncated, notes = encode_input(bundle, a, b)
    out = forward_encoded(bundle, enc)
    p = out.nsp_logits[0].float().softmax(dim=-1)[0].item()  # index 0 = IsNext
    return NextSentenceProbability(p, enc.tokens, truncated, notes)
