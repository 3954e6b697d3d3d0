"""Probes: what a pre-trained BERT predicts and where it looks (paper section 3.1, Figure 1; Appendix A.1).

- `fill_mask(bundle, text)`: the MLM head's distribution at every [MASK] (the cloze task BERT is trained on),
  top-k (token, probability) per mask in order.
- `next_sentence(bundle, a, b)`: the NSP head's P(IsNext) for the pair `[CLS] a [SEP] b [SEP]`
  (index 0 of `nsp_logits` is IsNext, as in google-research/bert).
- `attention(bundle, a, b)`: the attention probabilities of every layer and head, numpy (L, A, T, T).
- `compare_attention(b1, b2, a, b)`: per-head difference between two models on the same input (L, A), e.g.
  BERT vs No NSP or step 1,000 vs step 10,000, and the heads that changed most.
- `probe_checkpoints(paths, ...)`: the same probes over several checkpoints of one run (training dynamics).
- `PROBE_SET` / `probe_set_accuracy(bundle)`: the fixed classroom probe set, cloze sentences in three sections
  (everyday facts, grammar, BBC-news-flavoured) and true/false next-sentence pairs, scored per checkpoint;
  `compare_probe_set(bundles)` scores several models side by side (one row per model and per item).
(The probe set's sentences and pairs are engine.probe_set; what the Model page shows of a model is
engine.model_view.)

For a left-to-right model (`config.causal`, the LTR ablation, trained to predict the next token) the word at a
[MASK] is read from the output one position earlier, which has seen only the words to its left.
Not in the paper (tooling): inputs longer than the model's position table are truncated (longest side first,
as the released code truncates pairs) and every result carries `.truncated` and `.notes` saying so. A model
shipped without a head (MiniLM has neither MLM nor NSP head) raises `EngineError` instead of faking one.
Results are plain lists/floats with extra attributes, so `engine.fill_mask(...)[0][0]` is the best
(token, prob) for the first mask and `float(engine.next_sentence(...))` is the probability.
"""
import json
import re
import sys
from pathlib import Path

import numpy as np
import torch

from engine.errors import EngineError, quoted
from engine.objectives import MLM_HEAD, NSP_HEAD
from engine.probe_set import CLOZE_SECTION_OF, PROBE_SET
from engine.tasks.batching import pad_batch

_MASK_RE = re.compile(r"\[mask\]", re.IGNORECASE)
# the tokenizer matches its special tokens in raw text; typed [CLS], [SEP], [PAD], [UNK] are text ("[", "sep", "]"),
# only the [MASK] marker is special: spaces inside the brackets give the pieces the text has without them
_TYPED_SPECIAL_RE = re.compile(r"\[(CLS|SEP|PAD|UNK)\]")


def _as_text(s: str) -> str:
    """User text with [MASK] (any case) as the mask token and every other special token as plain text."""
    return _MASK_RE.sub("[MASK]", _TYPED_SPECIAL_RE.sub(r"[ \1 ]", s))


# ---------------------------------------------------------------------------------------------------------
# results: plain Python values that also say what the probe did to the input

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


class AttentionTokens(list):
    """The WordPieces of an attention probe, with `type_ids`, `special` (1 for [CLS]/[SEP]), `truncated`, `notes`."""

    def __init__(self, tokens, type_ids=(), special=(), truncated=False, notes=()):
        super().__init__(tokens)
        self.type_ids = list(type_ids)
        self.special = list(special)
        self.truncated = bool(truncated)
        self.notes = list(notes)


# ---------------------------------------------------------------------------------------------------------
# helpers

def model_name(bundle) -> str:
    """A short human name: "MiniLM", "<run>/step-N" or the folder name."""
    if bundle.info.get("source") == "minilm":
        return "MiniLM"
    if bundle.info.get("hub_id"):
        return bundle.info["hub_id"]  # its folder in the hub cache is named by a commit hash
    p = Path(bundle.path or "model")
    if p.parent.name == "checkpoints":
        return f"{p.parent.parent.name}/{p.name}"
    return p.name or str(p)


def heads(bundle) -> tuple:
    """The pre-training heads `bundle` can use: a subset of ("mlm", "nsp"), in that order."""
    missing = bundle.info.get("missing_heads") or []
    out = []
    if MLM_HEAD not in missing and bundle.config.has_mlm_head and getattr(bundle.model, "mlm", None) is not None:
        out.append(MLM_HEAD)
    if NSP_HEAD not in missing and bundle.config.has_nsp_head and getattr(bundle.model, "nsp", None) is not None:
        out.append(NSP_HEAD)
    return tuple(out)


def heads_on_disk(path) -> tuple:
    """The heads a saved model has, from its weight names alone (the safetensors header: nothing is loaded):
    ("mlm", "nsp"), a part of it, () for MiniLM; None when that cannot be told cheaply (a legacy
    pytorch_model.bin, a Hub id, an unreadable folder). Another encoder (engine.encoders): ("mlm",) or ()."""
    if str(path) == "minilm":
        return ()
    from engine.checkpoint import resolve_checkpoint_dir
    from engine.hub import is_hub_id
    if is_hub_id(str(path)):
        return None
    from engine import encoders
    try:
        d = resolve_checkpoint_dir(path)
        st_path = d / "model.safetensors"
        if not st_path.is_file():
            return None
        from safetensors import safe_open
        with safe_open(str(st_path), framework="pt") as f:
            names = set(f.keys())
        kind = encoders.model_type(d)
    except Exception:  # a broken folder: the page says so when it is loaded
        return None
    if kind in encoders.ENCODERS:  # another encoder: its own MLM head's names, never an NSP head
        return (MLM_HEAD,) if encoders.mlm_head_in(kind, names) else ()
    found = [h for h, key in ((MLM_HEAD, "cls.predictions.transform.dense.weight"), (NSP_HEAD, "cls.seq_relationship.weight"))
             if key in names]
    return tuple(found)


def require_head(bundle, head: str) -> None:
    """EngineError naming the fix when `bundle` lacks its "mlm" or "nsp" head."""
    absent = head not in heads(bundle)
    if not absent:
        return
    name = model_name(bundle)
    if getattr(bundle, "kind", "bert") == "auto":  # another encoder (engine.encoders): its own words
        from engine.encoders import missing_head
        raise EngineError(missing_head(bundle, head, name))
    if head == MLM_HEAD:
        raise EngineError(f"{name} has no MLM head: it was saved as an encoder only, so it cannot predict masked words; "
                          "use a checkpoint pre-trained with mlm or mlm+nsp")
    raise EngineError(f"{name} has no NSP head: it cannot score whether B follows A; "
                      "use a checkpoint pre-trained with mlm+nsp (No NSP and LTR runs have none)")


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
def _forward_ids(bundle, ids, tt, am, mlm_positions=None):
    model = bundle.model
    was_training = model.training
    model.eval()
    try:
        dev = next(model.parameters()).device
        return model(ids.to(dev), token_type_ids=tt.to(dev), attention_mask=am.to(dev),
                     mlm_positions=None if mlm_positions is None else mlm_positions.to(dev))
    finally:
        model.train(was_training)


def _causal_note(bundle) -> list:
    if getattr(bundle.config, "causal", False):
        return ["this is a left-to-right (LTR) model: each position sees only the words to its left, and a [MASK] is "
                "predicted from the position before it (the next-word prediction it was trained for)"]
    return []


# ---------------------------------------------------------------------------------------------------------
# the probes

def fill_mask(bundle, text: str, top_k: int = 5, text_pair: str = None) -> MaskPredictions:
    """Top-k (token, probability) for each [MASK] in `text` (and `text_pair`), in order of appearance."""
    require_head(bundle, MLM_HEAD)
    top_k = int(top_k)
    if top_k < 1:
        raise EngineError(f"top_k must be at least 1 (got {top_k})")
    if not isinstance(text, str) or not text.strip():
        raise EngineError("the text is empty; type a sentence with [MASK] where a word should be predicted")
    if not _MASK_RE.search(text) and not _MASK_RE.search(text_pair or ""):
        raise EngineError("the text has no [MASK]; write [MASK] where a word should be predicted, e.g. 'the man went to the [MASK] .'")
    enc, truncated, notes = encode_input(bundle, text, text_pair)
    mask_id = bundle.tokenizer.mask_id
    positions = [i for i, t in enumerate(enc.ids) if t == mask_id]
    n_typed = len(_MASK_RE.findall(text or "")) + len(_MASK_RE.findall(text_pair or ""))
    if len(positions) < n_typed:
        notes.append(f"{n_typed - len(positions)} [MASK] fell beyond the model's positions and was dropped")
    if not positions:
        raise EngineError("every [MASK] was cut off by truncation; move the [MASK] earlier or shorten the text")
    notes += _causal_note(bundle)
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
    tokens = AttentionTokens(enc.tokens, enc.type_ids, enc.special_tokens_mask, truncated, notes + _causal_note(bundle))
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


# ---------------------------------------------------------------------------------------------------------
# the built-in probe set (its sentences and pairs: engine.probe_set)

def probe_set_accuracy(bundle, probe_set: dict = None, top_k: int = 5) -> dict:
    """Score the built-in probe set: cloze top-1 / top-k accuracy (an item counts when an acceptable answer is
    the best / among the best k predictions; items whose answers are not single WordPieces in this vocabulary
    are skipped) and NSP accuracy (IsNext when P(IsNext) > 0.5). A part is None when the model lacks its head.
    Returns {"cloze_top1", "cloze_topk", "cloze_n", "nsp_acc", "nsp_n", "top_k", "by_section" ({section: {"n",
    "top1", "topk"}} for the cloze sections scored), "items" (each with its "section"), "notes"}."""
    ps = probe_set or PROBE_SET
    has_mlm, has_nsp = MLM_HEAD in heads(bundle), NSP_HEAD in heads(bundle)
    if not has_mlm and not has_nsp:
        raise EngineError(f"{model_name(bundle)} has no MLM head and no NSP head, so the probe set cannot be scored; "
                          "use a checkpoint pre-trained with mlm or mlm+nsp")
    tok = bundle.tokenizer
    items, notes = [], []
    res = {"cloze_top1": None, "cloze_topk": None, "cloze_n": 0, "nsp_acc": None, "nsp_n": 0, "top_k": top_k,
           "by_section": {}}
    limit = int(bundle.config.max_position_embeddings)
    if has_mlm:
        hit1 = hitk = 0
        kept, skipped = [], 0
        for sentence, answers in ps.get("cloze", []):
            norm = [x.lower() if tok.lowercase else x for x in answers]
            if any(tok.token_to_id(x) is not None for x in norm) and _MASK_RE.search(sentence):
                kept.append((_MASK_RE.sub("[MASK]", sentence), answers, norm))
            else:
                skipped += 1
        if kept:
            encs = tok.encode_batch([s for s, _, _ in kept], max_length=limit)
            ids, tt, am = pad_batch([(e.ids, e.type_ids) for e in encs], tok.pad_id)  # (B, T) each
            is_mask = ids == tok.mask_id  # (B, T)
            first = is_mask & (is_mask.cumsum(dim=1) == 1)  # the first [MASK] of each row
            keep_rows = first.any(dim=1)
            if bundle.config.causal:
                first = first.roll(-1, dims=1)  # LTR: read position p-1, which predicts token p
            out = _forward_ids(bundle, ids, tt, am, mlm_positions=first)
            probs = out.mlm_logits.float().softmax(dim=-1)  # (N, V), one row per sentence that kept its [MASK]
            top_p, top_i = probs.topk(min(top_k, probs.shape[-1]), dim=-1)  # (N, k)
            r = 0
            for (sentence, answers, norm), has in zip(kept, keep_rows.tolist()):
                if not has:
                    skipped += 1
                    continue
                words = [tok.id_to_token(int(i)) for i in top_i[r]]
                h1, hk = words[0] in norm, any(w in norm for w in words)
                hit1, hitk = hit1 + h1, hitk + hk
                items.append({"kind": "cloze", "section": CLOZE_SECTION_OF.get(sentence, "custom"), "input": sentence,
                              "expected": "/".join(answers), "predicted": words[0],
                              "prob": float(top_p[r, 0]), "correct": bool(h1), f"in_top{top_k}": bool(hk)})
                r += 1
        n = sum(1 for it in items if it["kind"] == "cloze")
        if skipped:
            notes.append(f"{skipped} cloze item(s) skipped: their answers are not whole words in this vocabulary")
        res.update(cloze_n=n, cloze_top1=hit1 / n if n else None, cloze_topk=hitk / n if n else None)
        for it in items:
            sec = res["by_section"].setdefault(it["section"], {"n": 0, "top1": 0.0, "topk": 0.0})
            sec["n"] += 1
            sec["top1"] += float(it["correct"])
            sec["topk"] += float(it[f"in_top{top_k}"])
        for sec in res["by_section"].values():
            sec["top1"], sec["topk"] = sec["top1"] / sec["n"], sec["topk"] / sec["n"]
    else:
        notes.append(f"{model_name(bundle)} has no MLM head: cloze items not scored")
    if has_nsp:
        pairs = ps.get("nsp", [])
        correct = 0
        if pairs:
            encs = tok.encode_batch([(a, b) for a, b, _ in pairs], max_length=limit)
            ids, tt, am = pad_batch([(e.ids, e.type_ids) for e in encs], tok.pad_id)  # (B, T) each
            p_next = _forward_ids(bundle, ids, tt, am).nsp_logits.float().softmax(dim=-1)[:, 0].tolist()  # (B,) P(IsNext)
            for (a, b, is_next), p in zip(pairs, p_next):
                ok = (p > 0.5) == bool(is_next)
                correct += ok
                items.append({"kind": "nsp", "section": "next sentence", "input": f"{a} ||| {b}", "expected": "IsNext" if is_next else "NotNext",
                              "predicted": "IsNext" if p > 0.5 else "NotNext", "prob": p, "correct": bool(ok)})
        res.update(nsp_n=len(pairs), nsp_acc=correct / len(pairs) if pairs else None)
    else:
        notes.append(f"{model_name(bundle)} has no NSP head: next-sentence pairs not scored")
    res["items"], res["notes"] = items, notes
    return res


def compare_probe_set(bundles, top_k: int = 5, probe_set: dict = None) -> dict:
    """The probe set scored on several models side by side (the Probe page's comparison).

    `bundles`: a list of loaded models, or of (name, bundle) pairs. Returns {"names", "summary" (one row per
    model: cloze top-1/top-k and n, each section's top-1, next-sentence accuracy and n; None where the model
    cannot answer), "cloze" (one row per cloze item: section, sentence, answers, then each model's best word
    with a check mark when it is acceptable; "-" where the model skipped the item), "nsp" (one row per pair:
    A, B, the truth, each model's P(IsNext)), "notes" ({name: [notes or the error that model gave]})}.
    Two models with different vocabularies may skip different cloze items: compare their n as well."""
    pairs = [b if isinstance(b, (tuple, list)) else (model_name(b), b) for b in bundles]
    if not pairs:
        raise EngineError("pick at least one model to score on the probe set")
    names, seen = [], {}
    for name, _ in pairs:  # two checkpoints may share a short name
        seen[name] = seen.get(name, 0) + 1
        names.append(name if seen[name] == 1 else f"{name} ({seen[name]})")
    ps = probe_set or PROBE_SET
    results, notes = {}, {}
    for name, (_, bundle) in zip(names, pairs):
        try:
            results[name] = probe_set_accuracy(bundle, probe_set=ps, top_k=top_k)
            notes[name] = list(results[name]["notes"])
        except EngineError as e:
            results[name], notes[name] = None, [str(e)]
    sections = list(dict.fromkeys([CLOZE_SECTION_OF.get(s, "custom") for s, _ in ps.get("cloze", [])]))
    summary = []
    for name in names:
        r = results[name] or {}
        row = {"model": name, "cloze top-1": r.get("cloze_top1"), f"cloze top-{top_k}": r.get("cloze_topk"),
               "cloze items": r.get("cloze_n", 0)}
        for sec in sections:
            row[f"{sec} top-1"] = ((r.get("by_section") or {}).get(sec) or {}).get("top1")
        row["next sentence"], row["pairs"] = r.get("nsp_acc"), r.get("nsp_n", 0)
        summary.append(row)
    by_input = {name: {(it["kind"], it["input"]): it for it in (results[name] or {}).get("items", [])} for name in names}
    cloze = []
    for sentence, answers in ps.get("cloze", []):
        row = {"section": CLOZE_SECTION_OF.get(sentence, "custom"), "sentence": sentence, "answers": " / ".join(answers)}
        for name in names:
            it = by_input[name].get(("cloze", _MASK_RE.sub("[MASK]", sentence)))
            row[name] = "-" if it is None else f"{it['predicted']} {'✓' if it['correct'] else '✗'}"
        cloze.append(row)
    nsp = []
    for a, b, is_next in ps.get("nsp", []):
        row = {"A": a, "B": b, "truth": "IsNext" if is_next else "NotNext"}
        for name in names:
            it = by_input[name].get(("nsp", f"{a} ||| {b}"))
            row[name] = None if it is None else round(it["prob"], 3)
        nsp.append(row)
    return {"names": names, "summary": summary, "cloze": cloze, "nsp": nsp, "notes": notes}


# ---------------------------------------------------------------------------------------------------------
# across checkpoints of one run

def checkpoint_steps(run_dir) -> list:
    """[(step, checkpoint path)] of a run's complete checkpoints, by step."""
    from engine.runs import checkpoint_step, list_checkpoints
    p = Path(run_dir)
    if not p.is_dir():
        raise EngineError(f"run folder {quoted(run_dir)} does not exist; pick a run under the runs folder")
    return [(checkpoint_step(c), c) for c in list_checkpoints(p)]


def probe_checkpoints(checkpoints, text: str = None, pair=None, top_k: int = 5, probe_set: bool = False,
                      loader=None) -> list:
    """Run the probes on each checkpoint: `checkpoints` is a run folder or a list of checkpoint paths (or
    (step, path) pairs). `text` with [MASK] -> fill_mask; `pair` (a, b) -> P(IsNext); `probe_set` -> accuracy.
    A probe the checkpoint cannot answer (no head) gives None and an entry in "errors".
    Returns one dict per checkpoint: {"step", "path", "fill", "p_isnext", "probe_set", "errors"}."""
    if isinstance(checkpoints, (str, Path)):
        checkpoints = checkpoint_steps(checkpoints)
        if not checkpoints:
            raise EngineError("that run has no complete checkpoint yet; wait for its first save")
    if loader is None:
        from engine.checkpoint import load as loader
    from engine.runs import checkpoint_step
    rows = []
    for item in checkpoints:
        step, path = item if isinstance(item, (tuple, list)) else (checkpoint_step(item), item)
        bundle = loader(str(path))
        row = {"step": step, "path": str(path), "fill": None, "p_isnext": None, "probe_set": None, "errors": []}
        if text:
            try:
                row["fill"] = fill_mask(bundle, text, top_k=top_k)
            except EngineError as e:
                row["errors"].append(str(e))
        if pair and pair[0] and pair[1]:
            try:
                row["p_isnext"] = float(next_sentence(bundle, pair[0], pair[1]))
            except EngineError as e:
                row["errors"].append(str(e))
        if probe_set:
            try:
                row["probe_set"] = probe_set_accuracy(bundle, top_k=top_k)
            except EngineError as e:
                row["errors"].append(str(e))
        rows.append(row)
    return rows


def mask_probs_over_steps(rows: list, mask_index: int = 0, max_tokens: int = 8) -> dict:
    """{token: [prob at each row]} for the tokens that reach any checkpoint's top-k at mask `mask_index`
    (the most probable at the last step first), read from each step's full distribution."""
    usable = [r for r in rows if r.get("fill") is not None and len(r["fill"]) > mask_index]
    if not usable:
        return {}
    best = {}
    for r in usable:
        for tok, p in r["fill"][mask_index]:
            best[tok] = max(best.get(tok, 0.0), p)
    last = {t: p for t, p in usable[-1]["fill"][mask_index]}
    chosen = sorted(best, key=lambda t: (-last.get(t, 0.0), -best[t]))[:max_tokens]
    out = {}
    for tok in chosen:
        series = []
        for r in rows:
            f = r.get("fill")
            if f is None or len(f) <= mask_index:
                series.append(None)
                continue
            tid = f.token_to_id(tok) if f.token_to_id else None
            series.append(float(f.probs[mask_index, tid]) if tid is not None else None)
        out[tok] = series
    return out


# ---------------------------------------------------------------------------------------------------------
# CLI

def _notes_text(notes) -> str:
    return "".join(f"\nnote: {n}" for n in notes)


def _cli_fill(bundle, a) -> tuple:
    """(JSON object, text) of `--fill`."""
    preds = fill_mask(bundle, a.fill, top_k=a.top_k, text_pair=a.pair)
    obj = {"model": model_name(bundle), "tokens": preds.tokens, "masks": [[{"token": t, "prob": round(p, 6)} for t, p in m] for m in preds],
           "truncated": preds.truncated, "notes": preds.notes}
    lines = [f"{model_name(bundle)}: {' '.join(preds.tokens)}"]
    for i, m in enumerate(preds):
        lines.append(f"[MASK] {i + 1}: " + "  ".join(f"{t} {p:.3f}" for t, p in m))
    return obj, "\n".join(lines) + _notes_text(preds.notes)


def _cli_nsp(bundle, a) -> tuple:
    """(JSON object, text) of `--nsp A B`."""
    p = next_sentence(bundle, a.nsp[0], a.nsp[1])
    return ({"model": model_name(bundle), "p_isnext": float(p), "tokens": p.tokens, "truncated": p.truncated, "notes": p.notes},
            f"{model_name(bundle)}: P(IsNext) = {float(p):.4f} ({'IsNext' if p > 0.5 else 'NotNext'})" + _notes_text(p.notes))


def _cli_attention(bundle, a) -> tuple:
    """(JSON object, text) of `--attention A [B]`, or with `--compare MODEL2` the per-head difference."""
    from engine.checkpoint import load
    sa, sb = a.attention[0], (a.attention[1] if len(a.attention) > 1 else None)
    if a.compare:
        r = compare_attention(bundle, load(a.compare), sa, sb, max_length=a.max_length)
        obj = {"models": list(r["names"]), "metric": r["metric"], "tokens": list(r["tokens"]),
               "diff": np.round(r["diff"], 5).tolist(), "top": [{"layer": l, "head": h, "value": round(v, 5)} for l, h, v in r["top"]],
               "truncated": r["truncated"], "notes": r["notes"]}
        lines = [f"{r['names'][0]} vs {r['names'][1]}: per-head Jensen-Shannon divergence (bits), mean over tokens"
                 if r["metric"] == "jsd" else f"{r['names'][0]} vs {r['names'][1]}: per-head mean |delta attention|"]
        lines += [f"layer {l} head {h}: {v:.4f}" for l, h, v in r["top"]]
        return obj, "\n".join(lines) + _notes_text(r["notes"])
    tokens, att = attention(bundle, sa, sb, max_length=a.max_length)
    obj = {"model": model_name(bundle), "tokens": list(tokens), "shape": list(att.shape),
           "attention": np.round(att, 4).tolist(), "truncated": tokens.truncated, "notes": tokens.notes}
    L, A, T, _ = att.shape
    lines = [f"{model_name(bundle)}: {T} tokens, {L} layers x {A} heads; attention shape {att.shape}", " ".join(tokens)]
    for l in range(L):
        for h in range(A):
            most = att[l, h].argmax(axis=-1)  # (T,) the key each query attends to most
            pairs = ", ".join(f"{tokens[i]}->{tokens[j]}" for i, j in enumerate(most[:12]))
            lines.append(f"layer {l + 1} head {h + 1}: {pairs}{' ...' if T > 12 else ''}")
    return obj, "\n".join(lines) + _notes_text(tokens.notes)


def _cli_probe_set(bundle, a) -> tuple:
    """(JSON object, text) of `--probe-set`."""
    r = probe_set_accuracy(bundle, top_k=a.top_k)

    def pct(x):
        return "n/a" if x is None else f"{100 * x:.1f}%"

    return ({k: v for k, v in r.items()},
            f"{model_name(bundle)}: cloze top-1 {pct(r['cloze_top1'])}, top-{r['top_k']} {pct(r['cloze_topk'])} "
            f"({r['cloze_n']} items); next sentence {pct(r['nsp_acc'])} ({r['nsp_n']} pairs)" + _notes_text(r["notes"]))


def _cli_parser():
    import argparse

    ap = argparse.ArgumentParser(prog="python -m engine probe",
                                 description="Masked-token predictions, next-sentence probability, attention maps, the built-in probe set.")
    ap.add_argument("--model", default="minilm", help="a run folder, checkpoint folder, Hugging Face BERT folder, minilm, "
                    "or a Hugging Face Hub id (google-bert/bert-base-uncased); a RoBERTa, DistilBERT, ALBERT, ELECTRA, "
                    "DeBERTa-v2/v3 or ModernBERT folder or Hub id too (no --nsp: they have no NSP head)")
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--fill", metavar="TEXT", help="a sentence with one or more [MASK]")
    g.add_argument("--nsp", nargs=2, metavar=("A", "B"), help="P(IsNext) that B follows A")
    g.add_argument("--attention", nargs="+", metavar="TEXT", help="one sentence or a pair (A B): attention per layer/head")
    g.add_argument("--probe-set", action="store_true", help="score the built-in cloze and next-sentence probe set")
    ap.add_argument("--pair", help="with --fill: a second segment (B)")
    ap.add_argument("--top-k", type=int, default=5)
    ap.add_argument("--max-length", type=int, default=None, help="with --attention: truncate to this many WordPieces")
    ap.add_argument("--compare", metavar="MODEL2", help="with --attention: per-head difference against a second model")
    ap.add_argument("--json", action="store_true", help="print JSON instead of text")
    return ap


def main(argv) -> int:
    """`python -m engine probe --model M --fill "..." | --nsp A B | --attention A [B] | --probe-set`"""
    a = _cli_parser().parse_args(argv)
    if a.attention and len(a.attention) > 2:
        raise EngineError("--attention takes one sentence or two (A B); quote each sentence")
    for text in [a.fill, a.pair, *(a.nsp or []), *(a.attention or [])]:
        try:
            (text or "").encode("utf-8")
        except UnicodeEncodeError:  # bytes the locale could not decode reach Python as lone surrogates
            raise EngineError(f"the probe text {text.encode('utf-8', 'backslashreplace').decode()!r} is not valid UTF-8; "
                              f"type it in a UTF-8 terminal (or pass the bytes as UTF-8)") from None
    from engine.checkpoint import load
    bundle = load(a.model)
    report = _cli_fill if a.fill is not None else _cli_nsp if a.nsp is not None else _cli_attention if a.attention is not None else _cli_probe_set
    obj, text = report(bundle, a)
    print(json.dumps(obj, indent=1) if a.json else text)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
