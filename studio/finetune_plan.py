"""The Fine-tune page's grid before Launch: how many trials it makes, how many optimizer steps they take, and their
training time on this machine from one step timed here on a click (nothing measured: the page says so; never a
guessed figure).

- `grid(name)`: a fine-tuning recipe's grid (engine/recipes.py): the page's default is the classroom one.
- `n_trials(...)`, `train_steps(...)`: the grid as engine.finetune runs it.
- `time_step(bundle, batch_size, seq_len, precision)`: seconds of one fine-tuning step of that model, here.
- `estimate(steps_by_batch, step_seconds)`: seconds of the grid's training steps from those timings.
"""
import copy
import math
import statistics
import time



def grid(name: str) -> dict:
    """The grid of the fine-tuning recipe `name` (engine/recipes.py; "paper": FinetuneConfig's defaults), in the page's
    form: {"lr": "5e-5,3e-5", "batch_size": [32], "epochs": [3], "restarts": 1}."""
    from engine import cli, recipes
    from engine.finetune import FinetuneConfig
    c = recipes.config(FinetuneConfig, name)
    return {"lr": cli.text(c.lr), "batch_size": list(c.batch_size), "epochs": list(c.epochs), "restarts": c.restarts}


def n_trials(lrs, batch_sizes, epochs, restarts: int) -> int:
    """Trials of the grid: one per learning rate x batch size x epoch count x restart."""
    return len(lrs) * len(batch_sizes) * len(epochs) * int(restarts)


def train_steps(n_train: int, lrs, batch_sizes, epochs, restarts: int) -> dict:
    """{batch size: optimizer steps of all its trials} as engine.finetune counts them (ceil(n / batch) x epochs per
    trial), for `n_train` training examples."""
    return {int(bs): len(lrs) * int(restarts) * sum(math.ceil(n_train / bs) * int(ep) for ep in epochs)
            for bs in batch_sizes}


def time_step(bundle, batch_size: int, seq_len: int, precision: str = "auto", steps: int = 2) -> dict:
    """One fine-tuning step of `bundle`'s encoder with a classification head, timed here: forward, backward and
    AdamW on `batch_size` inputs of `seq_len` tokens (real batches are mostly shorter, so an upper bound), on the
    device and precision a fine-tuning job would use. The median of `steps` after one warm-up step. Returns
    {"seconds", "device", "precision", "batch_size", "seq_len"}. The loaded model is not changed (a copy trains)."""
    import torch

    from engine.device import amp, resolve_device, resolve_precision
    from engine.heads import TaskModel
    device = resolve_device("auto")
    precision = resolve_precision(precision, device)
    seq_len = min(int(seq_len), bundle.config.max_position_embeddings)
    model = TaskModel(copy.deepcopy(bundle.model.bert), "classification", 2).to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, bundle.config.vocab_size, (batch_size, seq_len), generator=g).to(device)
    tt, am = torch.zeros_like(ids), torch.ones_like(ids)
    labels = torch.randint(0, 2, (batch_size,), generator=g).to(device)
    times = []
    for _ in range(steps + 1):
        t0 = time.perf_counter()
        with amp(device, precision):
            logits = model(ids, tt, am)
        loss = torch.nn.functional.cross_entropy(logits.float(), labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return {"seconds": statistics.median(times[1:]), "device": str(device), "precision": precision,
            "batch_size": int(batch_size), "seq_len": seq_len}


def estimate(steps_by_batch: dict, step_seconds: dict) -> float:
    """Seconds of the grid's training steps: each batch size's steps x its timed step; None when a batch size of
    the grid has not been timed."""
    if any(bs not in step_seconds for bs in steps_by_batch):
        return None
    return sum(n * step_seconds[bs] for bs, n in steps_by_batch.items())


def minutes_text(seconds: float) -> str:
    minutes = seconds / 60
    if minutes < 1:
        return "under a minute"
    if minutes < 90:
        return f"about {minutes:.0f} min"
    return f"about {int(minutes // 60)} h {int(round(minutes % 60)):02d} min"
