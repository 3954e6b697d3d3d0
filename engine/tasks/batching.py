"""What every task kind hands the fine-tuning loop (`Prepared`), and the batching both share: index batches,
prediction in length order, and `pad_batch`, the one helper that pads token rows into a batch (tasks, features,
probes and the benchmark use it).

Training batches are length-sorted only inside small random windows, drawn afresh each epoch (`length_batches`
says why); evaluation runs in length order, so each evaluation batch pads little.
"""
from dataclasses import dataclass, field
from typing import Callable

import torch

CHARS_PER_TOKEN = 32  # cut_text keeps this many characters per token the model can read


def cut_text(text, max_tokens: int):
    """`text` cut to `max_tokens * CHARS_PER_TOKEN` characters before it is tokenized (None and short texts as
    they are). The model reads at most `max_tokens` pieces of a text (--max-seq-len), so the rest is never used,
    but the tokenizer would still take memory for all of it: about 230 bytes per character (a 10 MB line peaked at
    2.3 GB, a 50 MB one aborted the process). 32 characters per piece is generous: a WordPiece piece of English
    is 4 to 5 characters on average and a word longer than 100 characters is one [UNK], so a cut text still holds
    more pieces than the model reads, and gives the same tokens, unless it is mostly whitespace or symbols the
    tokenizer drops."""
    limit = max(1, int(max_tokens)) * CHARS_PER_TOKEN
    return text[:limit] if isinstance(text, str) and len(text) > limit else text


def pad_batch(rows, pad_id: int, length: int = None) -> tuple:
    """Right-pad token rows into (B, T) long tensors: input_ids (pad_id after each row), token_type_ids (0 after
    each row) and attention_mask (1 on real tokens). `rows`: (ids, type_ids) pairs; T is the longest row, or
    `length` when given."""
    B = len(rows)
    T = length or max(len(ids) for ids, _ in rows)
    input_ids = torch.full((B, T), pad_id, dtype=torch.long)  # (B, T)
    token_type_ids = torch.zeros((B, T), dtype=torch.long)  # (B, T)
    attention_mask = torch.zeros((B, T), dtype=torch.long)  # (B, T)
    for b, (ids, types) in enumerate(rows):
        n = len(ids)
        input_ids[b, :n] = torch.tensor(ids)
        token_type_ids[b, :n] = torch.tensor(types)
        attention_mask[b, :n] = 1
    return input_ids, token_type_ids, attention_mask


@dataclass
class Prepared:
    """A task made ready for the loop: items, their lengths, a collate function and a dev evaluator."""
    task: object
    kind: str  # the head kind of engine.heads.TaskModel: a name of engine.tasks.kinds.HEAD_KINDS
    num_labels: int
    metric: str  # the selection metric (a key of evaluate()'s dict)
    train: list  # training items (examples; SQuAD: passage windows)
    train_lengths: list  # one length per item (evaluation batches in length order; training batches ignore it)
    dev: list
    dev_lengths: list
    collate: Callable  # list of items -> dict of tensors
    evaluate: Callable = None  # (model, device, batch_size) -> metrics dict
    info: dict = field(default_factory=dict)


WINDOW_BATCHES = 4  # training: examples are length-sorted only inside windows of this many batches


def length_batches(lengths: list, batch_size: int, generator: torch.Generator = None) -> list:
    """Batches of indices. With a generator (training): a fresh random permutation, cut into windows of
    `WINDOW_BATCHES` batches; inside a window the examples are sorted by length and cut into batches, and the
    batches of the whole epoch are then shuffled. Without (evaluation): every index in ascending length order, so
    each batch pads little.

    Why windows, and why small ones. Sorting inside chunks of 50 batches (an earlier version) made every
    batch of a small data set one length band of the whole epoch (2,000 examples at batch 32 are 63 batches, all
    in one chunk), so the same examples met in the same batch epoch after epoch: on 2,000 RTE pairs, 32% of the
    pairs that shared a batch in epoch 1 shared one again in epoch 2 (1.4% with random batches). With that
    bucketing MiniLM on 2,000 sentence pairs scored 0.68-0.69 where a plain transformers loop scored 0.71-0.72
    (docs/lab-notes/finetune-parity.md); fed identical batches (dropout off), the engine's model and optimizer give that loop's losses to
    1e-6, so the batching was what differed. Fully random batches removed the gap but cost 27% of the wall time
    on RTE (padding: the encoder's `unpad` keeps it off the linear layers, not off the attention). A window of
    4 batches is drawn afresh each epoch from the whole permutation, so batch mates are random neighbours in
    length among 4 x batch_size random examples: on those 2,000 RTE pairs 5% of the pairs that shared a batch in
    epoch 1 share one again in epoch 2 (tests/engine/test_finetune.py bounds it), and the parity table in
    BENCHMARKS.md is measured with it."""
    n = len(lengths)
    if generator is None:
        order = sorted(range(n), key=lambda i: lengths[i])
        return [order[i:i + batch_size] for i in range(0, n, batch_size)]
    perm = torch.randperm(n, generator=generator).tolist()
    window = batch_size * WINDOW_BATCHES
    batches = []
    for w in range(0, n, window):
        chunk = sorted(perm[w:w + window], key=lambda i: lengths[i])  # stable: ties keep the random order
        batches += [chunk[i:i + batch_size] for i in range(0, len(chunk), batch_size)]
    order = torch.randperm(len(batches), generator=generator).tolist()
    return [batches[i] for i in order]


@torch.no_grad()
def predict(model, items: list, lengths: list, collate: Callable, batch_size: int, device,
            per_batch: Callable = None) -> list:
    """Run the model over `items` in length order, batched; returns one output per item in the items' order:
    the logits row by default, or what `per_batch(batch, logits)` returns per item (a list of B). Runs in the
    caller's precision: wrap the call in `engine.device.amp(device, "bf16")` for bf16 autocast."""
    model.eval()
    out = [None] * len(items)
    for idx in length_batches(lengths, batch_size):
        chunk = [items[i] for i in idx]
        batch = collate(chunk)
        logits = model(batch["input_ids"].to(device), batch["token_type_ids"].to(device), batch["attention_mask"].to(device))
        logits = logits.float().cpu()
        if per_batch is not None:
            batch["_items"] = chunk
            rows = per_batch(batch, logits)
        else:
            rows = list(logits)
        for i, r in zip(idx, rows):
            out[i] = r
    return out
