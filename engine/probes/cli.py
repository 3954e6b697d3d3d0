"""`python -m engine probe --model M --fill "..." | --nsp A B | --attention A [B] [--compare M2] | --probe-set`:
the command's flags, each probe's report as text or JSON, and main."""
import json
import sys

import numpy as np

from engine.errors import EngineError
from engine.probes.attention_maps import attention, compare_attention
from engine.probes.model_info import model_name
from engine.probes.predictions import fill_mask, next_sentence
from engine.probes.scoring import probe_set_accuracy


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
