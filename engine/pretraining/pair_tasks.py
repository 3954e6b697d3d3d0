"""The other pair task on a run's held-out pairs: how a model pre-trained with NSP scores on sentence-order pairs,
and one pre-trained with SOP on next-sentence pairs (ALBERT, Lan et al. 2020, section 4.6 and Table 5: an
NSP-trained model scores 52.0% on SOP, chance, while an SOP-trained one scores 78.9% on NSP).

Both tasks' pairs are rebuilt from the run's own fixed held-out batches (engine.pretraining.evaluation.eval_batches:
[CLS] A [SEP] B [SEP] rows, masked once with the paper's masking), so no second held-out set is prepared:
- SOP pairs from an NSP run (`order_pairs`): its IsNext pairs (label 0: B is A's continuation in one document),
  every other one kept in order (label 0, "in order") and the rest swapped to (B, A) (label 1, "swapped"), as ALBERT
  makes SOP pairs.
- NSP pairs from an SOP run (`next_pairs`): each pair put back in order; every other one kept (label 0, IsNext) and
  the rest given the B of the pair half the held-out set away (label 1, NotNext). The held-out instances are stored
  document by document and spread over the split (masking.held_out_sample), so that B is from another document
  unless one document holds half of the held-out pairs.
Class 0 means "coherent" in both (IsNext, in order), so the pair head's argmax is read as each task's label: what
ALBERT's cross-task figures read. `other_task_accuracy` returns it under its own key, eval_cross_sop_acc for an NSP
run and eval_cross_nsp_acc for an SOP run (not eval_sop_acc / eval_nsp_acc, which name a run's own task and which
the pages read as such); a study table shows cross_nsp_acc under the same header as nsp_acc (and sop's likewise,
engine.ablations.study.PRETRAIN_COLUMN_NAMES), so its two pair columns are the 2x2 table of NSP against SOP. Departures from ALBERT: its cross-task sets are built from text; ours from held-out
pairs already made, masked as the run's own pair accuracy is.
"""
import torch

from engine.device import to_device

ORDER, NEXT = "sop", "nsp"  # the pair-task keys of a record (engine.objectives.Objective.pair)
CROSS = "cross_"  # what the other task's accuracy key begins with (after eval_): eval_cross_sop_acc, eval_cross_nsp_acc


def split_rows(batch: dict) -> list:
    """[(cls id, A ids, sep id, B ids, label)] of a held-out batch's rows: A between [CLS] and the first [SEP], B up
    to the last real token ([SEP])."""
    out = []
    ids, types, mask = batch["input_ids"], batch["token_type_ids"], batch["attention_mask"]
    labels = batch["next_sentence_label"]
    for r in range(ids.shape[0]):
        n = int(mask[r].sum())
        b_start = int(types[r, :n].nonzero()[0]) if types[r, :n].any() else n
        row = ids[r, :n].tolist()
        out.append((row[0], row[1:b_start - 1], row[b_start - 1], row[b_start:n - 1], int(labels[r])))
    return out


def order_pairs(rows: list) -> list:
    """SOP pairs (A, B, label) from NSP rows: the IsNext ones, every other kept in order (0), the rest swapped (1)."""
    kept = [(a, b) for _, a, _, b, label in rows if label == 0]
    return [(a, b, 0) if i % 2 == 0 else (b, a, 1) for i, (a, b) in enumerate(kept)]


def next_pairs(rows: list) -> list:
    """NSP pairs (A, B, label) from SOP rows: in order again; every other kept (0), the rest given the B of the pair
    half the list away (1)."""
    ordered = [(a, b) if label == 0 else (b, a) for _, a, _, b, label in rows]
    half = max(1, len(ordered) // 2)
    return [(a, b, 0) if i % 2 == 0 else (a, ordered[(i + half) % len(ordered)][1], 1)
            for i, (a, b) in enumerate(ordered)]


def truncate_pair(a: list, b: list, max_len: int) -> tuple:
    """(A, B) cut to at most `max_len` tokens with [CLS] and two [SEP]s, the longer segment losing its last token
    first (google-research/bert's truncation from the end): a NotNext B from another pair can be longer than the B
    it replaces, and the model has no positions beyond the held-out rows' longest."""
    a, b = list(a), list(b)
    while len(a) + len(b) + 3 > max_len and (a or b):
        (a if len(a) > len(b) else b).pop()
    return a, b


def collate_pairs(pairs: list, cls_id: int, sep_id: int, pad_id: int = 0) -> dict:
    """[CLS] A [SEP] B [SEP] rows of `pairs` (A ids, B ids, label), padded: input_ids, token_type_ids,
    attention_mask (B, T) and next_sentence_label (B,)."""
    rows = [([cls_id] + a + [sep_id], b + [sep_id]) for a, b, _ in pairs]
    T = max(len(x) + len(y) for x, y in rows)
    ids = torch.full((len(rows), T), pad_id, dtype=torch.long)
    types = torch.zeros((len(rows), T), dtype=torch.long)
    mask = torch.zeros((len(rows), T), dtype=torch.long)
    for r, (x, y) in enumerate(rows):
        ids[r, :len(x) + len(y)] = torch.tensor(x + y)
        types[r, len(x):len(x) + len(y)] = 1
        mask[r, :len(x) + len(y)] = 1
    return {"input_ids": ids, "token_type_ids": types, "attention_mask": mask,
            "next_sentence_label": torch.tensor([label for _, _, label in pairs], dtype=torch.long)}


def other_task(pair: str) -> str:
    """The other pair task's key: "sop" for an NSP run, "nsp" for an SOP run."""
    return ORDER if pair == NEXT else NEXT


@torch.no_grad()
def other_task_accuracy(model, batches: list, pair: str, device, amp_ctx_fn, batch_size: int = 64) -> dict:
    """{eval_cross_<other task>_acc: accuracy} of `model`'s pair head on the other task's pairs rebuilt from `batches`
    (a run's held-out batches of task `pair`), or {} when they hold no pairs to rebuild."""
    rows = [r for b in batches if "next_sentence_label" in b for r in split_rows(b)]
    pairs = order_pairs(rows) if pair == NEXT else next_pairs(rows)
    if not pairs:
        return {}
    cls_id, sep_id = rows[0][0], rows[0][2]
    longest = max(len(a) + len(b) + 3 for _, a, _, b, _ in rows)
    pairs = [(*truncate_pair(a, b, longest), label) for a, b, label in pairs]
    correct = 0
    for s in range(0, len(pairs), batch_size):
        b = collate_pairs(pairs[s:s + batch_size], cls_id, sep_id)
        none = (torch.zeros(0, dtype=torch.long, device=device),) * 2  # no MLM positions: the pair head alone
        with amp_ctx_fn():
            out = model(to_device(b["input_ids"], device), to_device(b["token_type_ids"], device),
                        to_device(b["attention_mask"], device), mlm_positions=none)
        correct += int((out.nsp_logits.float().argmax(-1).cpu() == b["next_sentence_label"]).sum())
    return {f"eval_{CROSS}{other_task(pair)}_acc": correct / len(pairs)}
