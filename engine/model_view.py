"""What the Model page shows of a loaded model: its WordPieces, ids and segments for an input (`tokenize_table`),
the shape of every output of one forward pass (`output_shapes`) and its configuration and parameter counts
(`model_summary`: with, for an encoder other than BERT, the line that says what it is). The encoding and the
forward pass are the probes' own (engine.probes.inputs)."""
from engine.probes.inputs import encode_input, forward_encoded
from engine.probes.model_info import model_name


def tokenize_table(bundle, a: str, b: str = None) -> dict:
    """{"rows": [{"position", "token", "id", "segment", "special"}], "truncated", "notes"}; another encoder's rows
    (engine.encoders) also say each piece as the checkpoint spells it ("piece": RoBERTa's "<s>", "Ġcat")."""
    enc, truncated, notes = encode_input(bundle, a, b)
    rows = [{"position": i, "token": t, "id": int(x), "segment": int(s), "special": bool(m)}
            for i, (t, x, s, m) in enumerate(zip(enc.tokens, enc.ids, enc.type_ids, enc.special_tokens_mask))]
    for row, piece in zip(rows, getattr(enc, "pieces", None) or []):
        row["piece"] = piece
    return {"rows": rows, "truncated": truncated, "notes": notes}


def output_shapes(bundle, a: str, b: str = None) -> list:
    """[(output, shape or "no head")] for one forward pass on the input, e.g. ("hidden_states", "7 x (1, 12, 384)")."""
    enc, _, _ = encode_input(bundle, a, b)
    out = forward_encoded(bundle, enc, output_attentions=True, output_hidden_states=True)

    def shape(t):
        return "(" + ", ".join(str(d) for d in t.shape) + ")"

    rows = [("input_ids", f"(1, {len(enc.ids)})"),
            ("last_hidden_state", shape(out.last_hidden_state)),
            ("pooled_output", shape(out.pooled_output) if out.pooled_output is not None else "none")]
    rows.append(("hidden_states", f"{len(out.hidden_states)} x {shape(out.hidden_states[0])}"))
    rows.append(("attentions", f"{len(out.attentions)} x {shape(out.attentions[0])}"))
    rows.append(("mlm_logits", shape(out.mlm_logits) if out.mlm_logits is not None else "no MLM head"))
    rows.append(("nsp_logits", shape(out.nsp_logits) if out.nsp_logits is not None else "no NSP head"))
    return rows


def model_summary(bundle) -> dict:
    """The configuration and parameter counts shown on the Model page."""
    cfg = bundle.config
    d = {f: getattr(cfg, f) for f in cfg.__dataclass_fields__}
    n = sum(p.numel() for p in bundle.model.parameters())
    heads = [h for h, ok in (("MLM", cfg.has_mlm_head), ("NSP", cfg.has_nsp_head)) if ok]
    return {"name": model_name(bundle), "path": bundle.path, "config": d, "parameters": int(n),
            "about": bundle.info.get("about"),
            "heads": heads, "missing_heads": list(bundle.info.get("missing_heads") or []),
            "tokenizer_vocab": bundle.tokenizer.vocab_size, "lowercase": bundle.tokenizer.lowercase}
