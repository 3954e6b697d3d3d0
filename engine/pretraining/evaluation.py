"""Pre-training's held-out evaluation: the fixed held-out batches (masked once with the paper's standard masking, so
every run is scored on the same positions: `eval_batches`), the model's held-out record (`evaluate`), the accuracy
where the input is [MASK] beside the most frequent token's share there (`mask_position_accuracy`), and the best
no-model rule on the pair task (`nsp_baseline`); a pair model's accuracy on the other pair task
(engine.pretraining.pair_tasks: eval_cross_sop_acc of an NSP run, eval_cross_nsp_acc of an SOP run). An objective that fixes its masking shares (ELECTRA's all [MASK])
is scored on its own shares at the paper's rate, and its discriminator on samples drawn from a fixed seed."""
import contextlib

import numpy as np
import torch

from engine.objectives import SUMS, Objective, objective
from engine.pretraining.config import PretrainConfig
from engine.pretraining.masking import EVAL_MASK_SEED, IGNORE_INDEX, PAPER_RATE, PAPER_RATIOS, fixed_eval_masking, held_out_sample
from engine.pretraining.loss import forward_loss, ltr_labels, sums_of
from engine.pretraining.pair_tasks import other_task_accuracy
from engine.pretraining.step_inputs import add_prediction_slots, max_predictions


def eval_batches(cache, cfg: PretrainConfig, batch_size: int) -> list:
    """The fixed held-out batches (a list, reused at every evaluation); [] when there is no held-out data."""
    if cache.eval is None or cache.eval.num_instances == 0:
        return []
    n = min(cache.eval.num_instances, cfg.eval_max_instances)
    if objective(cfg.objective).causal:
        out, sample = [], held_out_sample(cache.eval.num_instances, n)
        for s in range(0, n, batch_size):
            b = cache.eval.collate(sample[s:s + batch_size])
            b["labels"] = ltr_labels(b["input_ids"], b["attention_mask"])
            out.append(add_prediction_slots(b, b["input_ids"].shape[1]))
        return out
    masked = fixed_eval_masking(cache.eval, cache.vocab_size, cache.mask_id, cache.special_ids, rate=PAPER_RATE,
                                ratios=objective(cfg.objective).mask_ratios or PAPER_RATIOS, seed=EVAL_MASK_SEED, limit=n)
    out = []
    for b in masked.batches(batch_size):
        b["mask_input"] = b["input_ids"] == cache.mask_id  # (B, T): where the input is [MASK] (no copying there)
        out.append(add_prediction_slots(b, max_predictions(b["input_ids"].shape[1], PAPER_RATE)))
    return out


def nsp_baseline(batches: list) -> float:
    """The held-out NSP accuracy of the best trivial rule, no model: always one class, or a threshold on a
    segment's length ("NotNext when B has at most t tokens", or at least; on A, on B, on the shorter of the two),
    the rule and threshold fitted on these same pairs (so an upper bound for such a rule). A corpus whose
    documents are lone headings or one-sentence snippets lets such a rule score high (one such corpus: 0.86 against the
    model's 0.82); the model's eval_nsp_acc means something only above it. NaN without NSP labels."""
    la, lb, y = [], [], []
    for b in batches:
        lab = b.get("next_sentence_label")
        if lab is None:
            continue
        real = b["attention_mask"].bool()
        seg_b = b["token_type_ids"].bool() & real
        la.append((real & ~seg_b).sum(1) - 2)  # [CLS] A [SEP]: A's tokens
        lb.append(seg_b.sum(1) - 1)  # B [SEP]
        y.append(lab)
    if not y:
        return float("nan")
    la, lb, y = torch.cat(la).numpy(), torch.cat(lb).numpy(), torch.cat(y).numpy()
    keep = y >= 0
    la, lb, y = la[keep], lb[keep], y[keep]
    if not len(y):
        return float("nan")
    best = max((y == 0).mean(), (y == 1).mean())
    for feat in (la, lb, np.minimum(la, lb)):
        order = np.argsort(feat, kind="stable")
        f, not_next = feat[order], (y[order] == 1).astype(np.float64)
        # predicting NotNext for the first k (shortest) and IsNext for the rest, at every cut between lengths
        cuts = np.flatnonzero(np.r_[f[1:] != f[:-1], True]) + 1
        nn_first = np.r_[0.0, np.cumsum(not_next)][cuts]  # NotNext among the first k
        is_rest = (len(y) - cuts) - (not_next.sum() - nn_first)  # IsNext among the rest
        acc = (nn_first + is_rest) / len(y)
        best = max(best, acc.max(), (1.0 - acc).max())  # and the reverse rule (NotNext when longer)
    return float(best)


@torch.no_grad()
def evaluate(model, batches: list, obj: Objective, device, amp_ctx_fn=contextlib.nullcontext) -> dict:
    """Held-out metrics (eval_* keys) of `model` on fixed batches."""
    was_training = model.training
    model.eval()
    total = torch.zeros(len(SUMS), dtype=torch.float64, device=device)
    n_inst, preds = 0, []
    # a generator's samples (ELECTRA, Replace MLM, All-Tokens MLM): from a fixed seed here, so every evaluation scores
    # the same draws' way (and the training's random state is left as it was)
    with torch.random.fork_rng(devices=[device] if torch.device(device).type == "cuda" else [], enabled=obj.generator):
        if obj.generator:
            torch.manual_seed(EVAL_MASK_SEED)
        for b in batches:
            _, sums = forward_loss(model, b, obj, device, amp_ctx_fn(), predictions=preds)
            total += sums
            n_inst += len(b["input_ids"])
    # the other pair task on pairs rebuilt from these (an NSP model on sentence order, an SOP model on NSP: ALBERT's
    # cross-task figures, engine.pretraining.pair_tasks), in eval mode
    other = other_task_accuracy(model, batches, obj.pair, device, amp_ctx_fn) if obj.nsp else {}
    model.train(was_training)
    rec = obj.eval_record(sums_of(total), n_inst)
    rec.update(other)
    if obj.nsp:
        rec[f"eval_{obj.pair}_baseline"] = nsp_baseline(batches)  # the best no-model rule, beside the model's accuracy
    if not obj.causal and batches and "mask_input" in batches[0]:
        rec.update(mask_position_accuracy(batches, [p.cpu() for p in preds]))
    return rec


def mask_position_accuracy(batches: list, predictions: list) -> dict:
    """MLM accuracy where the held-out input is [MASK] (80% of the selected positions), beside the share of the
    most frequent token there. Of the other 20% half keep their token, which a model can copy without reading any
    context: a tiny model that has learned only the unigram distribution and copying scores about
    0.8 x 0.045 + 0.1 = 0.135 on eval_mlm_acc and the bare most-frequent-token share here (BENCHMARKS.md,
    "Classroom pre-training recipe"). eval_mlm_mask_acc above eval_mlm_mask_baseline is what context has taught."""
    hits, targets = 0, []
    for b, pred in zip(batches, predictions):  # pred (N,): at the labelled positions, in row-major order
        sel = b["labels"] != IGNORE_INDEX  # (B, T)
        at_mask = b["mask_input"][sel]  # (N,) the labelled positions whose input is [MASK]
        target = b["labels"][sel][at_mask]
        hits += int((pred[at_mask] == target).sum())
        targets.append(target)
    targets = torch.cat(targets) if targets else torch.zeros(0, dtype=torch.long)
    if not len(targets):
        return {}
    top = int(torch.bincount(targets).max())
    return {"eval_mlm_mask_acc": hits / len(targets), "eval_mlm_mask_baseline": top / len(targets)}
