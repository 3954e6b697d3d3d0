"""Does a pre-trained model copy from its context? The skill a cloze-to-span task (bbc-cloze) rewards is finding
another occurrence of what is asked; this measures the simplest form of it on each model given.

    python examples/copy_probe.py RUN [RUN ...]        # run folders or checkpoint folders with an MLM head

Input: real sentences (the last 25 State of the Union addresses, which pre-training on `bbc` never reads) of 12-40
WordPieces, each twice in one sequence, [CLS] s s [SEP], or followed by another sentence cut to its length,
[CLS] s t [SEP].
- A left-to-right model (`causal`): next-token accuracy inside the first copy and inside the second. A model
  that copies ("induction": what followed this token last time follows it again) is far more accurate on the
  second copy.
- A masked-LM model: accuracy where the input is [MASK], for 15% of the second half's positions, when the
  second half repeats the first and when it does not. A model that copies fills the repeated positions from the
  first copy.
One row per model: the two accuracies and how many positions each is over. Deterministic (fixed sentences,
fixed masks); a few seconds per model on a CPU.
"""
import argparse
import random
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from engine.checkpoint import load  # noqa: E402
from engine.corpora import load_sotu  # noqa: E402


def probe_sentences(n: int, seed: int = 0) -> list:
    """`n` sentences from the last 25 State of the Union addresses, shuffled with `seed` (strings)."""
    sents = [s for doc in load_sotu()[-25:] for s in doc]
    random.Random(seed).shuffle(sents)
    return sents[:n * 4]  # enough left after the length filter


def copy_probe(bundle, sentences: list, n: int = 400, min_len: int = 12, max_len: int = 40, seed: int = 0) -> dict:
    """{"causal", "repeated", "not_repeated", "positions"}: the model's accuracy on the second copy (LTR: next
    token; MLM: at [MASK]) and on the first copy (LTR) or an unrepeated second half (MLM)."""
    model, tok = bundle.model.eval(), bundle.tokenizer
    if model.mlm is None:
        raise SystemExit(f"{bundle.path}: no MLM head to read predictions from (a pre-training run or checkpoint is needed)")
    causal = bundle.config.causal
    limit = min(max_len, (bundle.config.max_position_embeddings - 2) // 2)
    ids = [x for x in (tok.encode(s, add_special_tokens=False).ids for s in sentences) if min_len <= len(x) <= limit][:n]
    if len(ids) < 2:
        raise SystemExit(f"only {len(ids)} probe sentences fit {min_len}-{limit} WordPieces; give more sentences")
    g = torch.Generator().manual_seed(seed)
    hits = {"repeated": [0, 0], "not_repeated": [0, 0]}
    with torch.no_grad():
        for i, s in enumerate(ids):
            L = len(s)
            other = ids[(i + 1) % len(ids)][:L]
            other = other + s[len(other):]  # the same length as s
            rep = torch.tensor([[tok.cls_id] + s + s + [tok.sep_id]])  # (1, 2L+2)
            if causal:
                pred = model(rep).mlm_logits.argmax(-1)[0]  # (2L+2,): position t predicts token t+1
                for lo, key in ((1, "not_repeated"), (L + 1, "repeated")):  # inside the first / second copy
                    hi = lo + L - 1
                    hits[key][0] += int((pred[lo:hi] == rep[0, lo + 1:hi + 1]).sum())
                    hits[key][1] += hi - lo
            else:
                pos = torch.zeros(rep.shape, dtype=torch.bool)  # (1, 2L+2): the masked positions of the second half
                r = torch.rand(L, generator=g) < 0.15
                if not r.any():
                    r[L // 2] = True  # at least one position per sentence
                pos[0, L + 1:2 * L + 1] = r
                norep = torch.tensor([[tok.cls_id] + s + other + [tok.sep_id]])
                for seq, key in ((rep, "repeated"), (norep, "not_repeated")):
                    pred = model(seq.masked_fill(pos, tok.mask_id)).mlm_logits.argmax(-1)  # (1, T)
                    hits[key][0] += int((pred[pos] == seq[pos]).sum())
                    hits[key][1] += int(pos.sum())
    return {"causal": causal, "repeated": hits["repeated"][0] / hits["repeated"][1],
            "not_repeated": hits["not_repeated"][0] / hits["not_repeated"][1],
            "positions": (hits["repeated"][1], hits["not_repeated"][1])}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("models", nargs="+", help="run folders or checkpoint folders (with an MLM head)")
    p.add_argument("--sentences", type=int, default=400, help="probe sentences per model (default 400)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    sents = probe_sentences(a.sentences)
    print(f"{'model':40s} {'objective':9s} {'repeated':>9s} {'not repeated':>13s}  (positions)")
    for m in a.models:
        r = copy_probe(load(m), sents, n=a.sentences)
        what = "LTR next" if r["causal"] else "MLM@mask"
        print(f"{Path(m).name[:40]:40s} {what:9s} {r['repeated']:9.3f} {r['not_repeated']:13.3f}  {r['positions']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
