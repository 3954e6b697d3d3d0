"""A probe's input and its one forward pass: typed text to WordPieces (`encode_input`: [MASK] in any case is the
mask token, a typed [CLS]/[SEP]/[PAD]/[UNK] is plain text, inputs longer than the model's position table are
truncated longest side first and say so), one eval-mode, no-grad forward pass on it (`forward_encoded`) or on a
padded batch (`forward_ids`), and the note a left-to-right model's results carry (`causal_note`)."""
import re

import torch

from engine.errors import EngineError

MASK_RE = re.compile(r"\[mask\]", re.IGNORECASE)
# the tokenizer matches its special tokens in raw text; typed [CLS], [SEP], [PAD], [UNK] are text ("[", "sep", "]"),
# only the [MASK] marker is special: spaces inside the brackets give the pieces the text has without them
_TYPED_SPECIAL_RE = re.compile(r"\[(CLS|SEP|PAD|UNK)\]")


def _as_text(s: str) -> str:
    """User text with [MASK] (any case) as the mask token and every other special token as plain text."""
    return MASK_RE.sub("[MASK]", _TYPED_SPECIAL_RE.sub(r"[ \1 ]", s))


def encode_input(bundle, a: str, b=None, max_length=None):
    """Encode, truncating to the model's positions (or `max_length`); returns (encoding, truncated, notes)."""
    if not isinstance(a, str) or not a.strip():
        raise EngineError("the text is empty; type a sentence")
    if b is not None and (not isinstance(b, str) or not b.strip()):
        b = None
    a = _as_text(a)
    b = _as_text(b) if b is not None else None
    limit = int(bundle.config.max_position_embeddings)
    if max_length is not None:
        if int(max_length) < 3:
            raise EngineError(f"max_length {max_length} is too short; it must leave room for [CLS] and [SEP]")
        limit = min(limit, int(max_length))
    tok = bundle.tokenizer
    full = tok.encode(a, b)
    if len(full.ids) <= limit:
        return full, False, []
    enc = tok.encode(a, b, max_length=limit)
    note = (f"the input has {len(full.ids)} WordPieces but the probe takes at most {limit}; "
            f"it was truncated to {len(enc.ids)} (longest side first)")
    return enc, True, [note]


@torch.no_grad()
def forward_encoded(bundle, enc, output_attentions=False, output_hidden_states=False):
    """One eval-mode, no-grad forward pass of `bundle`'s model on an `encode_input` encoding (batch of one)."""
    model = bundle.model
    was_training = model.training
    model.eval()
    try:
        dev = next(model.parameters()).device
        ids = torch.tensor([enc.ids], dtype=torch.long, device=dev)  # (1, T)
        tt = torch.tensor([enc.type_ids], dtype=torch.long, device=dev)  # (1, T)
        return model(ids, token_type_ids=tt, output_attentions=output_attentions, output_hidden_states=output_hidden_states)
    finally:
        model.train(was_training)


@torch.no_grad()
def forward_ids(bundle, ids, tt, am, mlm_positions=None):
    """One eval-mode, no-grad forward pass of `bundle`'s model on a padded batch: ids, token types and attention
    mask (B, T) each, the MLM head at `mlm_positions` (B, T) bool when given (the probe set's batched scoring)."""
    model = bundle.model
    was_training = model.training
    model.eval()
    try:
        dev = next(model.parameters()).device
        return model(ids.to(dev), token_type_ids=tt.to(dev), attention_mask=am.to(dev),
                     mlm_positions=None if mlm_positions is None else mlm_positions.to(dev))
    finally:
        model.train(was_training)


def causal_note(bundle) -> list:
    """The note a left-to-right model's probe results carry (none for a bidirectional model)."""
    if getattr(bundle.config, "causal", False):
        return ["this is a left-to-right (LTR) model: each position sees only the words to its left, and a [MASK] is "
                "predicted from the position before it (the next-word prediction it was trained for)"]
    return []
