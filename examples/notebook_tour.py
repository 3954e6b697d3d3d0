"""A tour of BERT Studio from Python: the same probes the studio's pages show, as notebook code.

    python examples/notebook_tour.py --model minilm
    python examples/notebook_tour.py --model runs/bert-tiny --compare runs/bert-tiny-nonsp --out tour-output

1. load a checkpoint (a run folder, a checkpoint folder, a Hugging Face BERT folder, or "minilm")
2. fill_mask: the MLM head's top-k words at each [MASK]
3. next_sentence: the NSP head's P(IsNext)
4. attention: every layer's attention maps as numpy (L, A, T, T), then `bertviz.head_view` on those tensors,
   saved as HTML (bertviz's page loads require.js, d3 and jQuery from a CDN, so it needs internet to view;
   the studio's Attention page draws its own head view offline)
5. an ablation comparison: two checkpoints (e.g. BERT vs No NSP, or an early vs a late step) on the built-in
   probe set, and the attention heads that differ most between them.
6. attention analysis (engine/analysis.py): rollout, per-head statistics, value-weighted attention, head
   importance (models with an MLM head), and the studio's own head view saved as an HTML file that works offline.
The probes are also exported as `engine.fill_mask`, `engine.next_sentence` and `engine.attention`.
"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import torch  # noqa: E402

import engine  # noqa: E402
from engine.fileio import atomic_write_text  # noqa: E402
from engine.probes import attention, compare_attention, fill_mask, model_name, next_sentence, probe_set_accuracy  # noqa: E402


def pct(x):
    return "n/a" if x is None else f"{100 * x:.1f}%"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="minilm", help="run folder, checkpoint folder, Hugging Face BERT folder, or minilm")
    ap.add_argument("--compare", help="a second checkpoint for the ablation comparison (same vocabulary)")
    ap.add_argument("--out", default="tour-output", help="folder for head_view.html")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    # 1. load
    bundle = engine.load(args.model)
    cfg = bundle.config
    print(f"== {model_name(bundle)}: {cfg.num_layers} layers, hidden {cfg.hidden_size}, {cfg.num_heads} heads, "
          f"{bundle.model.num_parameters():,} parameters, missing heads: {bundle.info.get('missing_heads') or 'none'}")

    # 2. fill the mask (a model without an MLM head, such as MiniLM, raises EngineError saying so)
    try:
        preds = fill_mask(bundle, "the government said it would cut [MASK] next year .", top_k=5)
        for i, m in enumerate(preds):
            print(f"fill_mask [MASK] {i + 1}: " + ", ".join(f"{t} {p:.3f}" for t, p in m))
    except engine.EngineError as e:
        print(f"fill_mask: {e}")

    # 3. next sentence
    try:
        p = next_sentence(bundle, "the man went to the store .", "he bought a gallon of milk .")
        print(f"next_sentence P(IsNext) = {float(p):.3f}")
    except engine.EngineError as e:
        print(f"next_sentence: {e}")

    # 4. attention as numpy, then bertviz's head view on the same tensors
    tokens, att = attention(bundle, "the cat sat on the mat .", "it was very happy .")
    print(f"attention: {len(tokens)} tokens, array shape {att.shape}, rows sum to {att.sum(-1).mean():.3f}")
    from bertviz import head_view
    per_layer = tuple(torch.from_numpy(att[l])[None] for l in range(att.shape[0]))  # L x (1, A, T, T)
    html = head_view(attention=per_layer, tokens=list(tokens), html_action="return")
    path = out / "head_view.html"
    # bertviz loads its scripts from a CDN: open this file on a machine with internet access
    atomic_write_text(path, "<!doctype html><html><body>" + html.data + "</body></html>")
    print(f"bertviz head view written to {path} (needs internet to view)")

    # 5. ablation comparison: probe-set accuracy and the heads that changed most
    if args.compare:
        other = engine.load(args.compare)
        print(f"== ablation comparison: {model_name(bundle)} vs {model_name(other)}")
        print(f"{'model':<32} {'cloze top-1':>12} {'cloze top-5':>12} {'next sentence':>14}")
        for b in (bundle, other):
            try:
                r = probe_set_accuracy(b)
                print(f"{model_name(b):<32} {pct(r['cloze_top1']):>12} {pct(r['cloze_topk']):>12} {pct(r['nsp_acc']):>14}")
            except engine.EngineError as e:
                print(f"{model_name(b):<32} {e}")
        diff = compare_attention(bundle, other, "the cat sat on the mat .", "it was very happy .")
        print("heads that changed most (Jensen-Shannon, bits): "
              + ", ".join(f"L{l}H{h} {v:.4f}" for l, h, v in diff["top"][:5]))

    # 6. attention analysis: where information flows, what each head does, which heads matter
    sa, sb = "the cat sat on the mat .", "it was very happy ."
    roll = engine.attention_rollout(bundle, sa, sb)  # (T, T), rows sum to 1
    top = roll[0].argsort()[::-1][:3]
    print("rollout: [CLS] traces back to " + ", ".join(f"{tokens[j]} {roll[0, j]:.3f}" for j in top))
    stats = engine.head_statistics(bundle, [(sa, sb), "shares fell sharply on monday ."])
    best = stats.loc[stats["prev"].idxmax()]
    print(f"head statistics: layer {best['layer']} head {best['head']} attends most to the previous token "
          f"({best['prev']:.3f}); mean entropy {stats['entropy'].mean():.3f} nats")
    _, vw, _ = engine.value_weighted_attention(bundle, sa, sb)
    special = [j for j, t in enumerate(tokens) if t in ("[CLS]", "[SEP]")]
    share_w = float(att[..., special].sum(-1).mean())
    share_v = float((vw[..., special].sum(-1) / vw.sum(-1)).mean())
    print(f"value-weighted: [CLS]/[SEP] get {share_w:.3f} of the weights but {share_v:.3f} of the value-weighted norms")
    try:
        imp = engine.head_importance(bundle, [sa, "shares fell sharply on monday ."])
        l, h = divmod(int(imp.argmax()), imp.shape[1])
        print(f"head importance: masking layer {l + 1} head {h + 1} raises the MLM loss most (+{imp.max():.4f} over {imp.base_loss:.4f})")
    except engine.EngineError as e:
        print(f"head_importance: {e}")
    from studio.attention_view import head_view_html  # the studio's head view: inline, no CDN
    path = out / "head_view_offline.html"
    atomic_write_text(path, head_view_html(list(tokens), att, range(att.shape[0]), range(att.shape[1]))[0])
    print(f"offline head view written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
