"""Shared helper for the probe / page / browser / example tests (no tests of its own).

`make_tiny_run(root, docs, tok)` writes a run folder with three complete checkpoints (steps 3, 6, 12) of a
tiny BERT (2 layers, hidden 64, 2 heads, 64 positions) trained for a few MLM+NSP steps on BBC sentences, so
checkpoints differ and predictions are not uniform. Built once per pytest session (cached on disk).
"""
import random
from pathlib import Path

import torch
import torch.nn.functional as F

STEPS = (3, 6, 12)
MAX_POS = 64


def _batches(docs, tok, rng: random.Random, batch_size=8, max_len=MAX_POS):
    docs = [d for d in docs if len(d) >= 2]
    while True:
        pairs, labels = [], []
        for _ in range(batch_size):
            d = rng.choice(docs)
            i = rng.randrange(len(d) - 1)
            if rng.random() < 0.5:
                pairs.append((d[i], d[i + 1]))
                labels.append(0)  # IsNext
            else:
                pairs.append((d[i], rng.choice(rng.choice(docs))))
                labels.append(1)  # NotNext
        encs = tok.encode_batch(pairs, max_length=max_len)
        T = max(len(e.ids) for e in encs)
        ids = torch.full((len(encs), T), tok.pad_id, dtype=torch.long)
        tt = torch.zeros((len(encs), T), dtype=torch.long)
        am = torch.zeros((len(encs), T), dtype=torch.long)
        special = torch.ones((len(encs), T), dtype=torch.bool)
        for r, e in enumerate(encs):
            n = len(e.ids)
            ids[r, :n] = torch.tensor(e.ids)
            tt[r, :n] = torch.tensor(e.type_ids)
            am[r, :n] = 1
            special[r, :n] = torch.tensor(e.special_tokens_mask, dtype=torch.bool)
        yield ids, tt, am, special, torch.tensor(labels)


def make_tiny_run(root, docs, tok, name="tiny-run", steps=STEPS, seed=0) -> Path:
    import engine
    from engine.runs import list_checkpoints, mark_complete, write_run_json

    run = Path(root) / name
    if len(list_checkpoints(run)) == len(steps):
        return run
    torch.manual_seed(seed)
    cfg = engine.BertConfig.preset("tiny", vocab_size=tok.vocab_size, hidden_size=64, num_heads=2,
                                   max_position_embeddings=MAX_POS)
    model = engine.BertForPreTraining(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    g = torch.Generator().manual_seed(seed)
    data = _batches(list(docs), tok, random.Random(seed))
    write_run_json(run, kind="pretrain", status="running", config={"objective": "mlm+nsp", "preset": "tiny"})
    model.train()
    for step in range(1, max(steps) + 1):
        ids, tt, am, special, nsp_labels = next(data)
        sel = (torch.rand(ids.shape, generator=g) < 0.15) & ~special & (am == 1)  # (B, T)
        sel[0, 1] = True  # at least one position
        inputs = ids.masked_fill(sel, tok.mask_id)
        out = model(inputs, token_type_ids=tt, attention_mask=am, mlm_positions=sel)
        loss = F.cross_entropy(out.mlm_logits, ids[sel]) + F.cross_entropy(out.nsp_logits, nsp_labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step in steps:
            model.eval()
            ck = engine.save(model, run / "checkpoints" / f"step-{step}", tokenizer=tok)
            mark_complete(ck, step=step)
            model.train()
    write_run_json(run, status="finished")
    return run
