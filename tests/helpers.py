"""Plain helpers several test modules share (fixtures live in tests/conftest.py): `wait_for`, `one_line`, and
`FakeQueue`, the job queue's interface as engine.classroom uses it, in memory; `tiny_bert_in_hub_cache`, a tiny BERT
laid out in a Hugging Face hub cache as a download of it is."""
import time

from engine.errors import EngineError
from engine.status import CANCELLED, QUEUED, status_of


def wait_for(pred, timeout: float = 30.0, step: float = 0.05):
    """`pred()`'s first true value, asked every `step` seconds; AssertionError after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(step)
    raise AssertionError("timed out waiting")


def one_line(e) -> str:
    """The message of a raised error (a pytest ExceptionInfo), checked to be one non-empty line."""
    msg = str(e.value)
    assert msg and "\n" not in msg
    return msg


class FakeQueue:
    """The job queue's interface as engine.classroom uses it (submit, list_jobs, cancel), in memory; `cancelled`
    records (job id, its status when cancelled)."""

    def __init__(self):
        self.jobs, self.cancelled = [], []

    def submit(self, argv, name=None, run_dir=None):
        for j in self.jobs:
            if j["run_dir"] == str(run_dir) and status_of(j["status"]).active:
                raise EngineError(f"run folder {run_dir} already has job {j['id']} {j['status']}; wait for it")
        job = {"id": f"j{len(self.jobs)}", "argv": list(argv), "name": name, "run_dir": str(run_dir),
               "status": QUEUED.name}
        self.jobs.append(job)
        return dict(job)

    def list_jobs(self):
        return [dict(j) for j in reversed(self.jobs)]

    def cancel(self, job_id):
        job = next(j for j in self.jobs if j["id"] == job_id)
        self.cancelled.append((job_id, job["status"]))
        job["status"] = CANCELLED.name
        return dict(job)


TINY_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat", "dog", "ran", "a", "man",
              "went", "to", "store", ".", ",", "he", "bought", "milk", "she", "read", "book", "##s", "big", "red"]


def tiny_bert_in_hub_cache(cache, repo_id: str, tmp_path) -> str:
    """A tiny random transformers BertForPreTraining (config, model.safetensors, vocab.txt) laid out in the hub cache
    `cache` as huggingface_hub caches a download of `repo_id` (blobs named by content, snapshot symlinks, refs/main);
    returns the snapshot's commit."""
    import json

    import torch
    import transformers
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=len(TINY_VOCAB), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=64, max_position_embeddings=64)
    saved = tmp_path / f"saved-{repo_id.replace('/', '--')}"
    transformers.BertForPreTraining(cfg).save_pretrained(saved)  # its MLM and NSP heads and pooler, as bert-base-uncased
    files = {"config.json": (saved / "config.json").read_bytes(), "model.safetensors": (saved / "model.safetensors").read_bytes(),
             "vocab.txt": "\n".join(TINY_VOCAB).encode(), "tokenizer_config.json": json.dumps({"do_lower_case": True}).encode()}
    return put_in_cache(cache, repo_id, files)


def put_in_cache(cache, repo_id: str, files: dict) -> str:
    """`files` {name: bytes} in the hub cache `cache` as huggingface_hub caches a download of `repo_id`: blobs named
    by content, snapshot symlinks, refs/main; returns the snapshot's commit."""
    import hashlib
    import os
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    commit = hashlib.sha1(repo_id.encode()).hexdigest()
    snap = repo / "snapshots" / commit
    for d in (repo / "blobs", snap, repo / "refs"):
        d.mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    for name, data in files.items():
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        (snap / name).symlink_to(os.path.relpath(blob, snap))
    return commit


def forward(bundle, a: str, b: str = None):
    """(encoding, model output with attentions) of the text pair through `bundle`'s own tokenizer and model, no engine
    probe in between: what the probes' results are checked against."""
    import torch
    enc = bundle.tokenizer.encode(a, b)
    with torch.no_grad():
        out = bundle.model(torch.tensor([enc.ids]), token_type_ids=torch.tensor([enc.type_ids]), output_attentions=True)
    return enc, out


def batch_indices(it, n: int) -> tuple:
    """([instance indices of each of the next `n` batches of the iterator `it`], the position after the last)."""
    out, pos = [], None
    for _ in range(n):
        b = next(it)
        out.append(b["index"].tolist())
        pos = b["position"]
    return out, pos


MASK_ID = 4  # the [MASK] id of masked_batch's made-up vocabulary


def masked_batch(g, B=4, T=16, vocab=300):
    """(masked ids, original ids, rows, cols, targets, valid): 3 positions of each row masked with [MASK], plus one
    unused slot per row (target IGNORE_INDEX at column 0, as engine.pretraining.step_inputs lays them out)."""
    import torch

    from engine.vocab_loss import IGNORE_INDEX
    orig = torch.randint(10, vocab, (B, T), generator=g)
    orig[:, 0] = 2
    cols = torch.stack([torch.randperm(T - 1, generator=g)[:3] + 1 for _ in range(B)])  # (B, 3), never [CLS]
    rows = torch.arange(B)[:, None].expand(B, 3)
    rows, cols = torch.cat([rows, torch.arange(B)[:, None]], 1).reshape(-1), torch.cat([cols, torch.zeros(B, 1, dtype=torch.long)], 1).reshape(-1)
    valid = cols != 0
    targets = torch.where(valid, orig[rows, cols], torch.full_like(cols, IGNORE_INDEX))
    masked = orig.index_put((rows[valid], cols[valid]), torch.full((int(valid.sum()),), MASK_ID))
    return masked, orig, rows, cols, targets, valid


def stopped_and_resumed(cfg, tmp_path) -> tuple:
    """(the training records of `cfg`'s finished run, those of the same run stopped at step 20 and resumed): a
    pre-training that resumes exactly gives the same records."""
    from dataclasses import replace

    from engine import runs
    from engine.pretraining.run import pretrain
    half = replace(cfg, out=str(tmp_path / "half"), stop_after=20)
    pretrain(half)
    pretrain(replace(half, stop_after=None, resume=True))
    return tuple([r for r in runs.read_metrics(d) if r["split"] == "train"] for d in (cfg.out, half.out))
