"""Fine-tuning parity: the engine against a plain transformers loop on the same data, seeds and hyper-parameters.

    python examples/finetune_parity.py --task both --seeds 0,1,2 --out runs/parity     # ../shared/data: CoLA and RTE

For each task and seed it fine-tunes twice and scores the dev set after the last epoch (no best-epoch selection,
so the two are compared like for like):
- engine: `engine.finetune` with one grid point (lr, batch size, epochs) and `seed`;
- plain: `transformers.BertForSequenceClassification` from the same checkpoint, its own WordPiece tokenizer
  (`BertTokenizerFast` on the checkpoint's vocab.txt), a shuffled `DataLoader` (a torch.Generator seeded with
  `seed`), AdamW with the engine's settings (weight decay 0.01 except biases and LayerNorm, eps 1e-6), linear
  warmup over 10% of the steps then linear decay, gradient clipping at 1.0, dropout 0.1, the same precision.
Both score with engine.tasks.metrics. It prints per seed the two dev scores and final-epoch training losses,
then mean and standard deviation (ddof 1) per side and the difference of the means next to the seeds' spread,
and writes everything to <out>/parity.json.

Tasks (rows are fixed samples, `random.Random(0)`, the same for both sides):
- single: CoLA (single sentences, Matthews correlation): 2,000 of ../shared/data/cola/train.tsv, 1,000 of dev.tsv;
- pair: RTE (sentence pairs, accuracy): 2,000 of ../shared/data/rte/train.tsv, dev = dev.tsv + val.tsv (640
  pairs; GLUE's RTE dev alone has 277);
- or your own files: --train FILE --dev FILE (a TSV with a header: sentence or sentence1/sentence2, and label).
"""
import argparse
import json
import math
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import numpy as np  # noqa: E402
import torch  # noqa: E402

from engine.fileio import atomic_write_json, atomic_write_text  # noqa: E402

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
TASKS = {  # name: (train files, dev files, text columns, metric)
    "single": ([SHARED / "cola" / "train.tsv"], [SHARED / "cola" / "dev.tsv"], "cola", "mcc"),
    "pair": ([SHARED / "rte" / "train.tsv"], [SHARED / "rte" / "dev.tsv", SHARED / "rte" / "val.tsv"], "rte", "accuracy"),
}


# ------------------------------------------------------------------ data: one set of rows for both sides
def _rows(path: Path, layout: str) -> list:
    """(text_a, text_b or None, label) rows of a GLUE file: CoLA's headerless layout, RTE's (headerless val.tsv
    too), or a TSV whose header names sentence / sentence1, sentence2 and label."""
    lines = [l.rstrip("\n").split("\t") for l in path.read_text(encoding="utf-8").splitlines() if l.strip()]
    if layout == "cola":
        return [(c[3], None, c[1]) for c in lines]
    if layout == "rte":
        return [(c[1], c[2], c[3]) for c in lines if c[0] != "index"]
    head = [h.strip().lower() for h in lines[0]]
    a = head.index("sentence1") if "sentence1" in head else head.index("sentence")
    b = head.index("sentence2") if "sentence2" in head else None
    y = head.index("label")
    return [(c[a], c[b] if b is not None else None, c[y]) for c in lines[1:]]


def sample(rows: list, n: int) -> list:
    if n is None or n >= len(rows):
        return list(rows)
    return [rows[i] for i in sorted(random.Random(0).sample(range(len(rows)), n))]


def write_tsv(path: Path, rows: list) -> Path:
    pair = rows[0][1] is not None
    head = "sentence1\tsentence2\tlabel" if pair else "sentence\tlabel"
    body = "".join((f"{a}\t{b}\t{y}\n" if pair else f"{a}\t{y}\n") for a, b, y in rows)
    atomic_write_text(path, head + "\n" + body)
    return path


# ------------------------------------------------------------------ the two sides
def run_engine(model: str, train: Path, dev: Path, metric: str, seed: int, a, out: Path) -> dict:
    from engine import FinetuneConfig, finetune
    cfg = FinetuneConfig(model=model, task="glue", train=str(train), dev=str(dev), metric=metric, lr=(a.lr,),
                         batch_size=(a.batch_size,), epochs=(a.epochs,), seed=seed, max_seq_len=a.max_seq_len,
                         precision=a.precision, device=a.device, out=str(out))
    res = finetune(cfg)
    last = res["trials"][0]["epochs_log"][-1]
    return {"score": last["score"], "train_loss": last["train_loss"], "seconds": res["trials"][0]["seconds"]}


def check_same_tokens(tok, model: str, rows: list) -> None:
    """Both sides must see the same WordPieces: the plain loop's ids equal the engine tokenizer's on `rows`."""
    from engine.checkpoint import load
    etok = load(model).tokenizer
    for a_, b_, _ in rows:
        if tok(a_, b_)["input_ids"] != etok.encode(a_, b_).ids:
            raise SystemExit(f"error: the plain loop's tokenizer and the engine's disagree on {a_[:60]!r}; fix the plain side")


def run_plain(model: str, train_rows: list, dev_rows: list, metric: str, seed: int, a) -> dict:
    """A plain transformers fine-tuning loop (see the module docstring)."""
    import transformers

    from engine.checkpoint import minilm_path, resolve_checkpoint_dir
    from engine.tasks import metrics as M
    folder = minilm_path() if model == "minilm" else resolve_checkpoint_dir(model)
    device = torch.device("cuda" if a.device == "cuda" or (a.device == "auto" and torch.cuda.is_available()) else "cpu")
    # from_pretrained on the folder: transformers 5's BertTokenizerFast(vocab_file=...) ignores the file and maps
    # every word to [UNK] (a vocabulary of 5), which made this loop learn nothing but the label prior
    tok = transformers.BertTokenizerFast.from_pretrained(str(folder), do_lower_case=not a.cased)
    check_same_tokens(tok, model, train_rows[:50])
    labels = sorted({y for _, _, y in train_rows})
    lab = {y: i for i, y in enumerate(labels)}
    torch.manual_seed(seed)
    net = transformers.BertForSequenceClassification.from_pretrained(
        str(folder), num_labels=len(labels), hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1).to(device)

    def encode(rows):
        a_, b_ = [r[0] for r in rows], [r[1] for r in rows]
        enc = tok(a_, b_ if b_[0] is not None else None, truncation=True, max_length=a.max_seq_len, padding=True,
                  return_tensors="pt")
        enc["labels"] = torch.tensor([lab[r[2]] for r in rows])
        return enc
    g = torch.Generator().manual_seed(seed)
    loader = torch.utils.data.DataLoader(train_rows, batch_size=a.batch_size, shuffle=True, generator=g, collate_fn=encode)
    decay = [p for n, p in net.named_parameters() if not (p.ndim < 2 or "LayerNorm" in n)]
    no_decay = [p for n, p in net.named_parameters() if p.ndim < 2 or "LayerNorm" in n]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.999), eps=1e-6)
    total = len(loader) * a.epochs
    sched = transformers.get_linear_schedule_with_warmup(opt, int(0.1 * total), total)
    bf16 = a.precision == "bf16"
    t0 = time.time()
    for _ in range(a.epochs):
        net.train()
        losses = []
        for batch in loader:
            batch = {k: v.to(device) for k, v in batch.items()}
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
                logits = net(**{k: v for k, v in batch.items() if k != "labels"}).logits
            loss = torch.nn.functional.cross_entropy(logits.float(), batch["labels"])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
            opt.step()
            sched.step()
            losses.append(loss.item())
    net.eval()
    preds = []
    with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
        for s in range(0, len(dev_rows), 64):
            batch = {k: v.to(device) for k, v in encode(dev_rows[s:s + 64]).items() if k != "labels"}
            preds += net(**batch).logits.argmax(-1).tolist()
    gold = [lab[r[2]] for r in dev_rows]
    score = M.compute((metric,), preds, gold, positive=lab.get("1", 1))[metric]
    return {"score": score, "train_loss": float(np.mean(losses)), "seconds": round(time.time() - t0, 2)}


def spread(xs: list) -> tuple:
    a = np.asarray(xs, dtype=np.float64)
    return float(a.mean()), float(a.std(ddof=1)) if len(a) > 1 else 0.0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="both", choices=("single", "pair", "both"), help="CoLA, RTE or both (../shared/data)")
    ap.add_argument("--train", help="your own train TSV instead (header: sentence or sentence1/sentence2, label)")
    ap.add_argument("--dev", help="your own dev TSV (with --train)")
    ap.add_argument("--metric", default="accuracy", help="with --train/--dev: accuracy | f1 | f1_macro | mcc")
    ap.add_argument("--model", default="minilm", help="minilm, a run folder or a checkpoint folder")
    ap.add_argument("--train-n", type=int, default=2000, help="training rows sampled (default 2000)")
    ap.add_argument("--dev-n", type=int, default=1000, help="dev rows sampled (default 1000)")
    ap.add_argument("--lr", type=float, default=5e-5)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--max-seq-len", type=int, default=128)
    ap.add_argument("--precision", default="fp32", choices=("fp32", "bf16"), help="both sides (default fp32)")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--cased", action="store_true", help="the checkpoint's vocabulary is cased (MiniLM's is not)")
    ap.add_argument("--sides", default="engine,plain", help="which loops to run (default both)")
    ap.add_argument("--out", default="runs/parity")
    a = ap.parse_args(argv)
    out = Path(a.out)
    seeds = [int(s) for s in a.seeds.split(",") if s.strip()]
    sides = [s.strip() for s in a.sides.split(",") if s.strip()]
    if a.train:
        tasks = {"own": ([Path(a.train)], [Path(a.dev)], "header", a.metric)}
    else:
        tasks = {k: v for k, v in TASKS.items() if a.task in (k, "both")}
    report = {"settings": vars(a), "tasks": {}}
    for name, (trs, dvs, layout, metric) in tasks.items():
        train_rows = sample([r for f in trs for r in _rows(f, layout)], a.train_n)
        dev_rows = sample([r for f in dvs for r in _rows(f, layout)], a.dev_n)
        train_f, dev_f = write_tsv(out / name / "train.tsv", train_rows), write_tsv(out / name / "dev.tsv", dev_rows)
        rows = []
        for seed in seeds:
            row = {"seed": seed}
            if "engine" in sides:
                row["engine"] = run_engine(a.model, train_f, dev_f, metric, seed, a, out / name / f"engine-seed{seed}")
            if "plain" in sides:
                row["plain"] = run_plain(a.model, train_rows, dev_rows, metric, seed, a)
            rows.append(row)
            print(f"{name} seed {seed}: " + "  ".join(f"{s} {metric} {row[s]['score']:.4f} (train loss {row[s]['train_loss']:.4f})"
                                                      for s in sides), flush=True)
        summary = {s: dict(zip(("mean", "std"), spread([r[s]["score"] for r in rows])),
                           train_loss=spread([r[s]["train_loss"] for r in rows])[0]) for s in sides}
        report["tasks"][name] = {"metric": metric, "train": len(train_rows), "dev": len(dev_rows), "runs": rows, "summary": summary}
        print(f"{name} ({metric}, {len(train_rows)} train / {len(dev_rows)} dev, seeds {a.seeds}):")
        for s in sides:
            print(f"  {s:6s} {summary[s]['mean']:.4f} ± {summary[s]['std']:.4f}  (final-epoch train loss {summary[s]['train_loss']:.4f})")
        if len(sides) == 2:
            d = summary["engine"]["mean"] - summary["plain"]["mean"]
            noise = math.sqrt(summary["engine"]["std"] ** 2 + summary["plain"]["std"] ** 2)
            print(f"  engine - plain = {d:+.4f}; seed spread (both sides' std combined) {noise:.4f}")
    atomic_write_json(out / "parity.json", report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
