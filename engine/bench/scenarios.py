"""The benchmark's scenarios (engine.bench's docstring describes each): their batches, the two sides' models and
steps, and `run_bench`, which runs one and returns its report."""
import contextlib
import os
import random
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from engine.config import PRESETS, BertConfig
from engine.errors import EngineError
from engine.flops import model_flops
from engine.device import amp, default_precision, resolve_device
from engine.model import BertForPreTraining, BertModel
from engine.optim import param_groups
from engine.objectives import MLM_NSP, OBJECTIVES
from engine.pretraining.config import PACKING_DEFAULT
from engine.pretraining.loss import forward_loss
from engine.pretraining.masking import mask_batch
from engine.pretraining.step_inputs import add_prediction_slots, max_predictions, pack_batch
from engine.tasks.batching import pad_batch
from engine.bench.machine import machine_info, measure_matmul_peak, p90, peak_step_memory_mb, time_sides


@dataclass(frozen=True)
class Scenario:
    """One --scenario, named once (engine.bench's docstring describes each); the code asks which one it is
    (`scenario_of(bc.scenario) is PRETRAINING`) instead of comparing names."""
    name: str  # --scenario, a report's "scenario"
    step: str  # what one timed step is, as the report's table names it ({batch_size}: --batch-size)


PRETRAINING = Scenario("pretrain", "pre-training step")  # BertForPreTraining, masked instances, MLM + NSP loss
INFERENCE = Scenario("infer", "forward, batch {batch_size}")  # the encoder's forward, then at batch size 1
FINETUNING = Scenario("finetune", "fine-tuning step")  # a classifier on full-length rows
VARLEN = Scenario("varlen", "fine-tuning step")  # a classifier on rows of real lengths; the encoder's forward too
PIPELINE = Scenario("pipeline", "input pipeline")  # no model: tokens/s of the pre-training input pipeline alone
SCENARIOS = {s.name: s for s in (PRETRAINING, INFERENCE, FINETUNING, VARLEN, PIPELINE)}


def scenario_of(name: str) -> Scenario:
    """The Scenario called `name` (EngineError naming the choices when there is none)."""
    if not isinstance(name, str) or name not in SCENARIOS:
        raise EngineError(f"unknown scenario '{name}'; choose one of {', '.join(SCENARIOS)}")
    return SCENARIOS[name]

UNITS = ("sentence", "pair", "document")
CLS_ID, SEP_ID, MASK_ID, PAD_ID = 2, 3, 4, 0  # engine tokenizer order: [PAD] [UNK] [CLS] [SEP] [MASK]
N_BATCHES = 4  # distinct batches, cycled


@dataclass
class BenchConfig:
    scenario: str = "pretrain"  # pretrain | infer | finetune | varlen | pipeline
    preset: str = "mini"  # tiny | mini | small | medium | base | large
    seq_len: int = 128  # T (varlen: the cap on the drawn lengths)
    batch_size: int = 32  # B
    precision: str = "fp32"  # fp32, or bf16 autocast, on both sides
    engine_precision: str = "same"  # "same" as --precision, "auto" (the engine's default on this device), fp32, bf16
    device: str = "auto"  # auto | cpu | cuda
    steps: int = 10  # timed steps per side (per measurement)
    warmup: int = 2  # untimed steps per side first
    threads: int = 0  # torch intra-op threads on CPU; 0 leaves torch's default
    compile: bool = False  # torch.compile the engine's model (the first steps' extra time is reported as compile_s)
    vocab_size: int = 30522  # BERT's uncased WordPiece vocabulary
    num_labels: int = 2  # finetune / varlen classifier
    unit: str = "sentence"  # varlen: what one row holds (sentence | pair | document)
    padding: str = "longest"  # varlen: pad to each batch's longest row, or to seq_len (max_length)
    unpad: bool = True  # varlen: the engine's unpad path (False: padded like transformers)
    mask_rate: float = 0.15  # pretrain: fraction of positions predicted
    lr: float = 1e-4
    seed: int = 0
    memory: bool = True  # measure peak memory (one extra step per side)
    data: str = ""  # pipeline, pretrain: a prepared data folder (python -m engine prepare) or a pre-training cache folder
    packing: bool = PACKING_DEFAULT  # pretrain: the engine side packs each batch's sequences, as `pretrain --packing`
    prefetch: int = 4  # pipeline: batches made ahead in the background thread (0: none)


def _pretrain_batches(cfg: BenchConfig, device):
    """Pre-training batches, masked as pre-training masks them (exactly round(rate * n) positions, 80/10/10), with
    NSP labels: full-length synthetic [CLS] A [SEP] B [SEP] rows, or with --data the first instances of a prepared
    corpus (its real lengths: google-research/bert's short sequences and document ends leave padding). Each batch
    also carries what the engine's step reads (`engine_inputs`)."""
    if cfg.data:
        return [_engine_side(b, cfg, device) for b in _data_batches(cfg)]
    g = torch.Generator().manual_seed(cfg.seed)
    B, T, V = cfg.batch_size, cfg.seq_len, cfg.vocab_size
    out = []
    for _ in range(N_BATCHES):
        ids = torch.randint(5, V, (B, T), generator=g)
        cut = T // 2
        ids[:, 0], ids[:, cut], ids[:, T - 1] = CLS_ID, SEP_ID, SEP_ID
        tt = torch.zeros(B, T, dtype=torch.long)
        tt[:, cut + 1:] = 1
        special = (ids == CLS_ID) | (ids == SEP_ID)
        batch = {"input_ids": ids, "token_type_ids": tt, "attention_mask": torch.ones(B, T, dtype=torch.long),
                 "special_tokens_mask": special, "next_sentence_label": torch.randint(0, 2, (B,), generator=g),
                 "index": torch.arange(B)}
        out.append(_engine_side(mask_batch(batch, V, MASK_ID, [PAD_ID, 1, CLS_ID, SEP_ID], rate=cfg.mask_rate,
                                           generator=g), cfg, device))
    return out


def _data_batches(cfg: BenchConfig) -> list:
    """N_BATCHES masked batches of --batch-size instances from --data, in its first epoch's order."""
    cache = _data_cache(cfg)
    if OBJECTIVES.get(str(cache.config["objective"])) is not MLM_NSP:
        raise EngineError(f"--data {cfg.data} was prepared for {cache.config['objective']}; the pretrain scenario "
                          "times MLM + NSP: prepare it with --objective mlm+nsp")
    if cache.vocab_size > cfg.vocab_size:
        raise EngineError(f"--data {cfg.data} has a vocabulary of {cache.vocab_size}; give --vocab-size {cache.vocab_size}")
    g = torch.Generator().manual_seed(cfg.seed)
    out = []
    for batch in cache.train.batches(cfg.batch_size):
        out.append(mask_batch(batch, cache.vocab_size, cache.mask_id, cache.special_ids, rate=cfg.mask_rate, generator=g))
        if len(out) == N_BATCHES:
            return out
    raise EngineError(f"--data {cfg.data} has fewer than {N_BATCHES} batches of {cfg.batch_size}; lower --batch-size")


def _data_cache(cfg: BenchConfig):
    """--data as pre-training data: a built-in corpus name (its pre-training data at --seq-len with the BERT uncased
    vocabulary, MiniLM's; prepared once into the data cache, as `pretrain --corpus NAME --tokenizer minilm` prepares
    it), a data folder of the in-memory builder's earlier layout, or a prepared folder (python -m engine prepare)."""
    from engine.corpora import BUILTIN
    from engine.pretraining.cache import open_pretraining_data
    from engine.pretraining.prepare import build_pretraining_data, open_prepared
    if cfg.data in BUILTIN:
        from engine.checkpoint import minilm_path
        from engine.corpora import load_corpus
        from engine.tokenizer import Tokenizer
        return build_pretraining_data(load_corpus(cfg.data), Tokenizer.from_file(minilm_path()), seq_len=cfg.seq_len,
                                      corpus_name=cfg.data)
    path = Path(cfg.data).expanduser()
    if not path.exists():
        raise EngineError(f"--data {cfg.data} is neither a built-in corpus ({', '.join(BUILTIN)}) nor a folder; give one")
    return open_pretraining_data(path) if (path / "config.json").is_file() else open_prepared(path)


def _engine_side(batch: dict, cfg: BenchConfig, device) -> dict:
    """The padded batch transformers reads (input_ids, token_type_ids, attention_mask, labels (B, T),
    next_sentence_label) on `device`, plus `engine_inputs`: the same instances as the engine's pre-training step
    reads them (fixed prediction slots; packed unless --no-packing)."""
    width = batch["input_ids"].shape[1]
    eng = add_prediction_slots(batch, max_predictions(max(cfg.seq_len, width), cfg.mask_rate))
    if cfg.packing:
        eng = pack_batch(eng)
    eng = {k: (v.to(device) if hasattr(v, "to") else v) for k, v in eng.items()}  # packing too (PackedBatch.to)
    keep = ("input_ids", "token_type_ids", "attention_mask", "labels", "next_sentence_label")
    out = {k: batch[k].to(device) for k in keep}
    out["engine_inputs"] = eng
    out["engine_rows"] = eng["input_ids"].shape[0]
    return out


def _full_batches(cfg: BenchConfig, device, B=None):
    """Full-length single-segment rows with classification labels (finetune, infer)."""
    g = torch.Generator().manual_seed(cfg.seed + 1)
    B, T, V = B or cfg.batch_size, cfg.seq_len, cfg.vocab_size
    out = []
    for _ in range(N_BATCHES):
        ids = torch.randint(5, V, (B, T), generator=g)
        ids[:, 0], ids[:, T - 1] = CLS_ID, SEP_ID
        out.append({"input_ids": ids, "token_type_ids": torch.zeros(B, T, dtype=torch.long),
                    "attention_mask": torch.ones(B, T, dtype=torch.long),
                    "labels": torch.randint(0, cfg.num_labels, (B,), generator=g)})
    return [{k: v.to(device) for k, v in b.items()} for b in out]


def corpus_rows(unit: str, n: int, max_len: int, seed: int = 0):
    """`n` rows of real BBC text tokenised with the BERT uncased vocabulary (MiniLM's vocab.txt): a list of
    (ids, type_ids), each at most `max_len` long with [CLS]/[SEP], truncated as the tokenizer does."""
    from engine.checkpoint import minilm_path
    from engine.corpora import load_corpus
    from engine.tokenizer import Tokenizer
    tok = Tokenizer.from_file(minilm_path())
    docs = [d for d in load_corpus("bbc") if len(d) >= 2]
    rng = random.Random(seed)
    items = []
    for _ in range(n):
        d = docs[rng.randrange(len(docs))]
        if unit == "document":
            items.append(" ".join(d))
        else:
            i = rng.randrange(len(d) - 1)
            items.append(d[i] if unit == "sentence" else (d[i], d[i + 1]))
    return [(e.ids, e.type_ids) for e in tok.encode_batch(items, max_length=max_len)]


def _varlen_batches(cfg: BenchConfig, device):
    rows = corpus_rows(cfg.unit, cfg.batch_size * N_BATCHES, cfg.seq_len, cfg.seed)
    g = torch.Generator().manual_seed(cfg.seed + 2)
    out = []
    for i in range(N_BATCHES):
        part = rows[i * cfg.batch_size:(i + 1) * cfg.batch_size]
        T = cfg.seq_len if cfg.padding == "max_length" else max(len(r[0]) for r in part)
        ids, tt, am = pad_batch([([x % cfg.vocab_size for x in r], t) for r, t in part], PAD_ID, length=T)  # (B, T)
        out.append({"input_ids": ids, "token_type_ids": tt, "attention_mask": am,
                    "labels": torch.randint(0, cfg.num_labels, (len(part),), generator=g)})
    return [{k: v.to(device) for k, v in b.items()} for b in out]


class EngineClassifier(nn.Module):
    """The engine's encoder + dropout + linear on C, laid out as transformers' BertForSequenceClassification."""

    def __init__(self, bert: BertModel, num_labels: int):
        super().__init__()
        self.bert = bert
        self.dropout = nn.Dropout(bert.config.hidden_dropout)
        self.classifier = nn.Linear(bert.config.hidden_size, num_labels)

    def forward(self, input_ids, token_type_ids=None, attention_mask=None, unpad=False):
        c = self.bert(input_ids, token_type_ids, attention_mask, unpad=unpad).pooled_output  # (B, H)
        return self.classifier(self.dropout(c))  # (B, K)


def _hf_config(cfg: BertConfig, **extra):
    import transformers
    d = {k: v for k, v in cfg.to_hf_dict().items() if k not in ("architectures", "model_type", "bert_studio_causal")}
    return transformers.BertConfig(**d, attn_implementation="sdpa", **extra)


def build_models(bc: BenchConfig, mcfg: BertConfig, device):
    """(engine model, transformers model) with the same weights."""
    import transformers
    from engine.checkpoint import to_hf_state_dict
    torch.manual_seed(bc.seed)
    eng = BertForPreTraining(mcfg)
    sd = to_hf_state_dict(eng)
    if scenario_of(bc.scenario) is PRETRAINING:
        hf = transformers.BertForPreTraining(_hf_config(mcfg))
        res = hf.load_state_dict(sd, strict=False)
        allowed = {"cls.predictions.decoder.weight", "cls.predictions.decoder.bias"}  # tied to what was loaded
    elif scenario_of(bc.scenario) is INFERENCE:
        eng = eng.bert
        hf = transformers.BertModel(_hf_config(mcfg))
        res = hf.load_state_dict({k[len("bert."):]: v for k, v in sd.items() if k.startswith("bert.")}, strict=False)
        allowed = set()
    else:
        eng = EngineClassifier(eng.bert, bc.num_labels)
        nn.init.normal_(eng.classifier.weight, 0.0, mcfg.initializer_range)
        nn.init.zeros_(eng.classifier.bias)
        hf = transformers.BertForSequenceClassification(_hf_config(mcfg, num_labels=bc.num_labels))
        sd = {k: v for k, v in sd.items() if k.startswith("bert.")}
        sd["classifier.weight"] = eng.classifier.weight.detach().clone()
        sd["classifier.bias"] = eng.classifier.bias.detach().clone()
        res = hf.load_state_dict(sd, strict=False)
        allowed = set()
    bad = (set(res.missing_keys) - allowed) | set(res.unexpected_keys)
    if bad:
        raise EngineError(f"copying the engine's weights into transformers left {sorted(bad)[:4]}; the checkpoint key mapping is out of date")
    return eng.to(device), hf.to(device)


def make_optimizer(model, lr: float, device) -> torch.optim.Optimizer:
    """AdamW as both sides use it: fused where this torch supports it on the device (Trainer's default)."""
    kw = dict(lr=lr, betas=(0.9, 0.999), eps=1e-6)
    try:
        return torch.optim.AdamW(param_groups(model, 0.01), fused=True, **kw)
    except (RuntimeError, TypeError, ValueError):
        return torch.optim.AdamW(param_groups(model, 0.01), **kw)


def _engine_loss(bc, model, batch):
    if scenario_of(bc.scenario) is PRETRAINING:  # the loss as pre-training computes it (engine.pretraining.loss.forward_loss)
        loss, _ = forward_loss(model, batch["engine_inputs"], MLM_NSP, batch["input_ids"].device,
                               contextlib.nullcontext())
        return loss
    logits = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"],
                   unpad=scenario_of(bc.scenario) is VARLEN and bc.unpad)
    return F.cross_entropy(logits.float(), batch["labels"])


def _hf_loss(bc, model, batch):
    if scenario_of(bc.scenario) is PRETRAINING:
        return model(input_ids=batch["input_ids"], token_type_ids=batch["token_type_ids"], attention_mask=batch["attention_mask"],
                     labels=batch["labels"], next_sentence_label=batch["next_sentence_label"]).loss
    return model(input_ids=batch["input_ids"], token_type_ids=batch["token_type_ids"], attention_mask=batch["attention_mask"],
                 labels=batch["labels"]).loss


def _train_step_fn(bc, model, loss_fn, opt, precision, device):
    params = [p for p in model.parameters() if p.requires_grad]

    def step(batch):
        with amp(device, precision):
            loss = loss_fn(bc, model, batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss
    return step


def _forward_fn(model, precision, device, engine_side: bool, unpad: bool):
    def fwd(batch):
        with torch.inference_mode(), amp(device, precision):
            if engine_side:
                return model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"],
                             output_hidden_states=True, unpad=unpad).last_hidden_state
            return model(input_ids=batch["input_ids"], token_type_ids=batch["token_type_ids"],
                         attention_mask=batch["attention_mask"], output_hidden_states=True).last_hidden_state
    return fwd


def _side_report(times, warm, batches, steps_cycle, flops_per_batch, device, peak_tflops, precision, mem_mb, train):
    med = statistics.median(times)
    first = warm[0] if warm else times[0]
    n_seq = [b["input_ids"].shape[0] for b in batches]
    n_tok = [int(b["attention_mask"].sum()) for b in batches]
    # per-step averages over the batch cycle the timed steps went through
    idx = [i % len(batches) for i in steps_cycle]
    seqs = sum(n_seq[i] for i in idx) / len(idx)
    toks = sum(n_tok[i] for i in idx) / len(idx)
    flops = sum(flops_per_batch[i] for i in idx) / len(idx)
    rep = {"precision": precision, "sequences_per_s": seqs / med, "tokens_per_s": toks / med,
           "step_ms_median": 1e3 * med, "step_ms_p90": 1e3 * p90(times), "first_step_ms": 1e3 * first,
           "peak_mem_mb": mem_mb, "model_tflops": flops / med / 1e12, "timed_steps": len(times), "train": train}
    if peak_tflops:
        rep["mfu"] = flops / med / 1e12 / peak_tflops
    return rep


def _ratios(e, h):
    r = {"throughput": e["sequences_per_s"] / h["sequences_per_s"],
         "step_time": e["step_ms_median"] / h["step_ms_median"]}
    if e.get("peak_mem_mb") and h.get("peak_mem_mb"):
        r["memory"] = e["peak_mem_mb"] / h["peak_mem_mb"]
    if "mfu" in e and "mfu" in h:
        r["mfu"] = e["mfu"] / h["mfu"]
    return r


def _measure(bc, device, fns, batches, flops, peak, precisions, train):
    res = time_sides(fns, batches, bc.steps, bc.warmup, device)
    cycle = list(range(bc.warmup, bc.warmup + bc.steps))
    out = {}
    for name, fn in fns.items():
        mem = peak_step_memory_mb(lambda: fn(batches[0]), device) if bc.memory else None
        times, warm = res[name]
        out[name] = _side_report(times, warm, batches, cycle, flops, device, peak, precisions[name], mem, train)
        if name == "engine" and bc.compile:  # what the warm-up steps took beyond steady-state steps
            med = statistics.median(times)
            out[name]["compile_s"] = max(0.0, sum(warm) - len(warm) * med) if warm else max(0.0, times[0] - med)
    out["ratios"] = _ratios(out["engine"], out["transformers"])
    out["ratio"] = out["ratios"]["throughput"]
    return out


def _check(bc: BenchConfig):
    scenario_of(bc.scenario)  # EngineError for an unknown one
    if bc.preset not in PRESETS:
        raise EngineError(f"unknown preset '{bc.preset}'; choose one of {', '.join(PRESETS)}")
    if not 8 <= bc.seq_len <= 512:
        raise EngineError(f"--seq-len {bc.seq_len} is out of range; BERT takes 8 to 512 tokens")
    if bc.batch_size < 1 or bc.steps < 1 or bc.warmup < 0:
        raise EngineError("--batch-size and --steps must be at least 1 and --warmup at least 0")
    for name, v, ok in (("--precision", bc.precision, ("fp32", "bf16")), ("--engine-precision", bc.engine_precision, ("same", "auto", "fp32", "bf16")),
                        ("--unit", bc.unit, UNITS), ("--padding", bc.padding, ("longest", "max_length"))):
        if v not in ok:
            raise EngineError(f"unknown {name} '{v}'; choose one of {', '.join(ok)}")
    if bc.vocab_size < 16 or bc.num_labels < 2 or not 0 < bc.mask_rate < 1:
        raise EngineError("--vocab-size must be at least 16, --num-labels at least 2 and --mask-rate in (0, 1)")


def _same_start(bc: BenchConfig, eng, hf, batch: dict, device) -> dict:
    """Both sides from the same starting point, in eval mode and fp32: the first batch's loss, or for inference
    its last hidden state."""
    eng.eval()
    hf.eval()
    with torch.no_grad():
        if scenario_of(bc.scenario) is INFERENCE:
            he = _forward_fn(eng, "fp32", device, True, False)(batch).float()
            hh = _forward_fn(hf, "fp32", device, False, False)(batch).float()
            diff = float((he - hh).abs().max())
            return {"metric": "max |engine - transformers| of the last hidden state (fp32)", "value": diff, "same": diff <= 1e-4}
        le = float(_engine_loss(bc, eng, batch))
        lh = float(_hf_loss(bc, hf, batch))
        tol = 1e-4 * max(1.0, abs(lh))
        return {"metric": "loss of the first batch (eval mode, fp32)", "engine": le, "transformers": lh, "same": abs(le - lh) <= tol}


def _bench_inference(bc: BenchConfig, eng, hf, batches, mcfg, device, peak, precisions) -> dict:
    """Forward passes of both sides on the batches, then at batch size 1 (latency)."""
    eng.eval()
    hf.eval()
    lengths = lambda b: [b["input_ids"].shape[1]] * b["input_ids"].shape[0]
    fns = {"engine": _forward_fn(eng, precisions["engine"], device, True, False),
           "transformers": _forward_fn(hf, bc.precision, device, False, False)}
    out = _measure(bc, device, fns, batches, [model_flops(mcfg, lengths(b), train=False) for b in batches], peak, precisions, train=False)
    lat_batches = [{k: v[:1] for k, v in b.items()} for b in batches]
    lat = _measure(bc, device, fns, lat_batches, [model_flops(mcfg, lengths(b), train=False) for b in lat_batches],
                   peak, precisions, train=False)
    out["latency"] = {"batch_size": 1, "engine": lat["engine"], "transformers": lat["transformers"],
                      "ratio": lat["ratio"], "ratios": lat["ratios"]}
    return out


def _bench_training(bc: BenchConfig, eng, hf, batches, mcfg, device, peak, precisions) -> dict:
    """Training steps of both sides (pretrain, finetune, varlen); varlen also times the encoder's forward."""
    eng.train()
    hf.train()
    fns = {"engine": _train_step_fn(bc, eng, _engine_loss, make_optimizer(eng, bc.lr, device), precisions["engine"], device),
           "transformers": _train_step_fn(bc, hf, _hf_loss, make_optimizer(hf, bc.lr, device), bc.precision, device)}
    if scenario_of(bc.scenario) is PRETRAINING:
        flops = [model_flops(mcfg, [int(n) for n in b["attention_mask"].sum(1)], n_mlm=int((b["labels"] != -100).sum()), n_cls=2)
                 for b in batches]
    else:
        flops = [model_flops(mcfg, [int(n) for n in b["attention_mask"].sum(1)], n_cls=bc.num_labels) for b in batches]
    out = _measure(bc, device, fns, batches, flops, peak, precisions, train=True)
    real = sum(int(b["attention_mask"].sum()) for b in batches)
    cells = sum(b["attention_mask"].numel() for b in batches)
    out["padding_fraction"] = 1 - real / cells  # of the padded batches (what transformers computes)
    out["mean_length"] = real / sum(b["input_ids"].shape[0] for b in batches)
    if scenario_of(bc.scenario) is PRETRAINING:  # rows the engine computed: fewer than the instances when packed
        out["engine_rows_per_batch"] = sum(b["engine_rows"] for b in batches) / len(batches)
    if scenario_of(bc.scenario) is VARLEN:
        eng.eval()
        hf.eval()
        ffns = {"engine": _forward_fn(eng.bert if not bc.compile else eng._orig_mod.bert, precisions["engine"], device, True, bc.unpad),
                "transformers": _forward_fn(hf.bert, bc.precision, device, False, False)}
        fflops = [model_flops(mcfg, [int(n) for n in b["attention_mask"].sum(1)], train=False) for b in batches]
        f = _measure(bc, device, ffns, batches, fflops, peak, precisions, train=False)
        out["forward"] = {"engine": f["engine"], "transformers": f["transformers"], "ratio": f["ratio"], "ratios": f["ratios"]}
    return out


def run_bench(bc: BenchConfig) -> dict:
    """Run one scenario; returns the report dict (what `--json` prints)."""
    _check(bc)
    try:
        import transformers  # noqa: F401
    except ImportError:
        raise EngineError("the benchmark compares against transformers, which is not installed; run `pip install transformers`")
    device = resolve_device(bc.device)
    if bc.threads > 0:
        torch.set_num_threads(bc.threads)
    eprec = {"same": bc.precision, "auto": default_precision(device)}.get(bc.engine_precision, bc.engine_precision)
    precisions = {"engine": eprec, "transformers": bc.precision}
    mcfg = BertConfig.preset(bc.preset, vocab_size=bc.vocab_size)
    info = machine_info(device)
    # the dense matrix-multiply peak MFU is read against: bf16 on CUDA (8192^3); on a CPU the units that do the
    # engine's work: bf16's where the CPU has bf16 units (default_precision), else fp32's. Without them a bf16 product
    # runs emulated (0.9-1.1 GFLOP/s on the AVX2 EPYC, 2 threads: minutes for 2048^3) and a bf16 step beats that rate
    cpu_dtype = torch.bfloat16 if eprec == "bf16" and default_precision(device) == "bf16" else torch.float32
    peak = (measure_matmul_peak(device) if device.type == "cuda" else
            measure_matmul_peak(device, cpu_dtype, n=2048, iters=5))

    eng, hf = build_models(bc, mcfg, device)
    make_batches = {PRETRAINING: _pretrain_batches, VARLEN: _varlen_batches}.get(scenario_of(bc.scenario), _full_batches)
    batches = make_batches(bc, device)
    start = _same_start(bc, eng, hf, batches[0], device)
    report = {"scenario": bc.scenario, "config": asdict(bc), "model": {"preset": bc.preset, "layers": mcfg.num_layers,
              "hidden": mcfg.hidden_size, "heads": mcfg.num_heads, "vocab": mcfg.vocab_size,
              "parameters": mcfg.num_parameters()}, "device": str(device), "machine": info,
              "same_start_loss": bool(start["same"]), "start": start}
    if peak:
        report["machine"]["bf16_matmul_peak_tflops" if device.type == "cuda" else "cpu_matmul_peak_tflops"] = peak
    if bc.compile:
        eng = torch.compile(eng)
    bench = _bench_inference if scenario_of(bc.scenario) is INFERENCE else _bench_training
    report.update(bench(bc, eng, hf, batches, mcfg, device, peak, precisions))
    if hasattr(os, "getloadavg"):
        report["machine"]["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    return report


def run_pipeline(bc: BenchConfig) -> dict:
    """The `pipeline` scenario: tokens/s of the input pipeline alone (see the module docstring)."""
    from engine.pretraining.prepare import open_prepared
    from engine.pretraining.config import PretrainConfig
    from engine.pretraining.loop import pipeline_throughput

    if not bc.data:
        raise EngineError("--scenario pipeline needs --data, a folder made by python -m engine prepare")
    if bc.threads:
        torch.set_num_threads(bc.threads)
    cache = open_prepared(bc.data)
    pc = PretrainConfig(objective=cache.config["objective"], seq_len=cache.config["seq_len"], mask_rate=bc.mask_rate,
                        seed=bc.seed, prefetch=bc.prefetch)
    got = pipeline_throughput(cache, pc, bc.batch_size, batches=bc.steps, warmup=bc.warmup)
    return {"scenario": PIPELINE.name, "config": asdict(bc), "data": cache.config["prepared"], **got,
            "machine": machine_info(torch.device("cpu"))}
