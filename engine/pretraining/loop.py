"""The pre-training loop: the model and optimizer (fresh or restored from a checkpoint), then the steps.

Per optimizer step: `grad_accum` micro-batches (masked here at batch time, with a generator seeded from
(seed, step, micro-batch, rank), so masking needs no saved state), the loss of the objective, gradient clipping,
AdamW. Every `log_every` steps a training record (means over the window since the last one), every
`eval_every` steps a held-out record, every `save_every` steps a checkpoint; SIGTERM / Ctrl-C / `stop_after`
checkpoint and stop at the end of the step; `max_minutes` (a time budget) evaluates, checkpoints and finishes there.

The micro-batches (read from the shards, collated, masked, given their fixed prediction slots, packed with
--packing, pinned on CUDA: engine/pretraining/step_inputs.py) are made by `training_batches`, by
default `cfg.prefetch` batches ahead in a background thread (`Prefetcher`), so the step does not wait for the
host. Each batch depends only on (data position, seed, step, micro-batch, rank), never on when it is made, so
prefetching changes no number and resume stays exact: the position saved in a checkpoint is the one of the
last micro-batch the step consumed, not of the ones made ahead.
"""
import contextlib
import queue
import sys
import threading
import time
from pathlib import Path

import torch

from engine import runs
from engine.checkpoint import load as load_checkpoint
from engine.commands import PRETRAIN
from engine.device import amp, resolve_compile, resolve_precision
from engine.electra import ElectraPreTraining, load_pair
from engine.replace_mlm import GeneratorMLMPreTraining
from engine.span_boundary import SpanBoundaryPreTraining, add_boundary_slots, load_head
from engine.distributed import Dist, all_reduce_
from engine.errors import EngineError, as_engine_error
from engine.model import BertForPreTraining
from engine.progress import Progress
from engine.objectives import SUMS, Objective, objective
from engine.optim import adamw, lr_at
from engine.pretraining.config import TRAINING_VERSION, PretrainConfig, config_dict, model_config
from engine.pretraining.init import init_model, init_record, load_init, model_config_from_init
from engine.pretraining.run_folder import RunFolder, StopFlag, load_training_state, set_rng_state
from engine.pretraining.masking import mask_batch
from engine.pretraining.step_inputs import add_prediction_slots, max_predictions, pack_batch
from engine.status import CANCELLED, FAILED, FINISHED, RUNNING
from engine.trackers import open_trackers
from engine.tokenizer import Tokenizer
from engine.pretraining.evaluation import eval_batches, evaluate
from engine.pretraining.loss import forward_loss, ltr_labels, sums_of



def log(msg: str, cfg: PretrainConfig, dist: Dist) -> None:
    if dist.main and not cfg.quiet:
        print(msg, file=sys.stderr, flush=True)


def mix_seed(*parts) -> int:
    """A 63-bit seed from integers (seed, step, rank, ...): one independent generator per place."""
    h = 0x9E3779B97F4A7C15
    for p in parts:
        h = (h ^ (int(p) + 0x9E3779B97F4A7C15 + (h << 6) + (h >> 2))) & 0x7FFFFFFFFFFFFFFF
    return h


# ================================================================ model and optimizer
def build_model(cfg: PretrainConfig, tok: Tokenizer, ckpt, device):
    """(model on `device`, its BertConfig, training state, saved training blob or None, what run.json records
    of the init or None): fresh from the seed, started from `cfg.init`, or the weights and training state of
    checkpoint `ckpt`."""
    init_info = None
    if cfg.init:  # continued pre-training: the init's shape and weights (engine/pretraining/init.py)
        init_bundle = load_init(cfg.init)
        mcfg = model_config_from_init(cfg, init_bundle.config)
        init_info = init_record(cfg, init_bundle, mcfg)
        if ckpt is None:
            model, _ = init_model(cfg, mcfg, init_bundle)
        else:
            model = BertForPreTraining(mcfg)  # the checkpoint's weights replace these below
        del init_bundle
    else:
        mcfg = model_config(cfg, tok.vocab_size)
        torch.manual_seed(cfg.seed)
        obj = objective(cfg.objective)
        model = (ElectraPreTraining(mcfg, cfg.generator_size) if obj.rtd else  # the discriminator and its generator
                 GeneratorMLMPreTraining(mcfg, cfg.generator_size, obj.all_tokens) if obj.fills else  # ELECTRA's ablations
                 SpanBoundaryPreTraining(mcfg) if cfg.span_boundary else BertForPreTraining(mcfg))  # SpanBERT's SBO
    state = {"step": 0, "phase": 1, "position": None, "tokens": 0, "elapsed": 0.0}
    blob = None
    if ckpt is not None:
        bundle = load_checkpoint(ckpt, tokenizer=tok)
        if bundle.config.to_dict() != mcfg.to_dict():
            raise EngineError(f"checkpoint {ckpt} holds a different model than the run's settings; resume with the run's own settings")
        if objective(cfg.objective).rtd:  # the root holds the discriminator's encoder; its head and the generator beside
            model.bert.pooler.load_state_dict(bundle.model.bert.pooler.state_dict())
            load_pair(model, ckpt)
        elif objective(cfg.objective).fills:  # the root holds the model (a BERT); the generator beside it
            missing, unexpected = model.load_state_dict(bundle.model.state_dict(), strict=False)
            if unexpected or any(not k.startswith("generator.") for k in missing):
                raise EngineError(f"checkpoint {ckpt} does not hold this run's model; resume with the run's own settings")
            load_pair(model, ckpt)
        else:
            model.load_state_dict(bundle.model.state_dict(), strict=not cfg.span_boundary)
            if cfg.span_boundary:  # the span boundary head, in its own file beside (engine/span_boundary.py)
                load_head(model, ckpt)
        blob = load_training_state(ckpt)
        state.update(blob["state"])
    if not mcfg.has_nsp_head:  # without NSP nothing trains the pooler: freeze it (DDP then sees no unused parameter)
        for p in model.bert.pooler.parameters():
            p.requires_grad_(False)
    model.to(device).train()
    return model, mcfg, state, blob, init_info


def encoder_parameters(model) -> list:
    """The parameters a heads-first start freezes: the embeddings and the Transformer layers (the heads, the
    pooler that NSP reads and the MLM transform train; the MLM decoder is the word embeddings, so only its bias).
    Not in the paper, which trains every weight from the first step: it is for continuing a model whose heads are
    new (the probe-ready recipe, engine/pretraining/config.py)."""
    return [p for module in (model.bert.embeddings, model.bert.layers) for p in module.parameters()]


def set_encoder_frozen(model, frozen: bool) -> None:
    """Freeze (or unfreeze) `encoder_parameters`: frozen, they get no gradient, so AdamW skips them (no update, no
    weight decay, no moments) and backward stops at the heads (the step costs the encoder's forward only)."""
    for p in encoder_parameters(model):
        p.requires_grad_(not frozen)


def wrap_model(model, cfg: PretrainConfig, dist: Dist, device):
    """The model the steps call: compiled (--compile; auto: on CUDA) and/or wrapped in DistributedDataParallel."""
    if resolve_compile(cfg.compile, device):
        model = torch.compile(model)
    if dist.enabled:
        from torch.nn.parallel import DistributedDataParallel as DDP
        model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    return model


# ================================================================ the micro-batches, made ahead
def training_batches(cache, cfg: PretrainConfig, obj: Objective, step: int, position, rank: int, world_size: int,
                     micro: int, pin: bool = False):
    """Labelled micro-batches from optimizer step `step` on, in order (grad_accum per step): the next tokens (a
    causal objective) or a masking drawn from (seed, step, micro-batch, rank), with --static-masking from (seed,
    instance) alone. Each dict keeps its "position"."""
    m = 0
    slots = max_predictions(int(cache.config["seq_len"]), cfg.mask_rate, obj.causal)
    for batch in cache.train.batches(micro, start_position=position, rank=rank, world_size=world_size):
        if obj.causal:
            batch["labels"] = ltr_labels(batch["input_ids"], batch["attention_mask"])
        else:
            g = torch.Generator().manual_seed(mix_seed(cfg.seed, step, m, rank, 2))
            batch = mask_batch(batch, cache.vocab_size, cache.mask_id, cache.special_ids, rate=cfg.mask_rate,
                               ratios=obj.mask_ratios or cfg.mask_ratios, generator=g, whole_word=cfg.whole_word_mask,
                               spans=cfg.span_mask, static_seed=cfg.seed if cfg.static_masking else None)
        batch = add_prediction_slots(batch, slots)
        if cfg.span_boundary:  # SpanBERT's SBO: each slot's span boundaries (engine/span_boundary.py)
            batch = add_boundary_slots(batch)
        if cfg.packing:
            batch = pack_batch(batch)
        if pin:
            batch = {k: (v.pin_memory() if hasattr(v, "pin_memory") else v) for k, v in batch.items()}  # PackedBatch too
        yield batch
        m += 1
        if m == cfg.grad_accum:
            step, m = step + 1, 0


class Prefetcher:
    """Iterate `items` in a daemon thread, at most `depth` items ahead (a bounded queue); an exception there is
    raised here, at the item where it happened. `close()` stops the thread (the items made ahead are dropped)."""
    _END = object()

    def __init__(self, items, depth: int):
        self._q = queue.Queue(maxsize=max(1, depth))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._fill, args=(items,), daemon=True, name="batch-prefetch")
        self._thread.start()

    def _fill(self, items) -> None:
        try:
            for item in items:
                while not self._stop.is_set():
                    try:
                        self._q.put(("item", item), timeout=0.1)
                        break
                    except queue.Full:
                        pass
                if self._stop.is_set():
                    return
            self._q.put(("end", self._END))
        except BaseException as e:  # noqa: BLE001 (handed to the consumer)
            self._q.put(("error", e))

    def __iter__(self):
        return self

    def __next__(self):
        kind, item = self._q.get()
        if kind == "error":
            raise item
        if kind == "end":
            raise StopIteration
        return item

    def close(self) -> None:
        self._stop.set()
        while self._thread.is_alive():
            try:
                self._q.get(timeout=0.1)
            except queue.Empty:
                pass
        self._thread.join()


def pipeline_throughput(cache, cfg: PretrainConfig, micro: int, batches: int, warmup: int = 5) -> dict:
    """The input pipeline alone, as training runs it (read shards, collate, mask, in the prefetch thread when
    cfg.prefetch > 0), no model: real tokens/s and sequences/s over `batches` micro-batches after `warmup`."""
    items = training_batches(cache, cfg, objective(cfg.objective), 0, None, 0, 1, micro)
    it = Prefetcher(items, cfg.prefetch) if cfg.prefetch > 0 else items
    try:
        for _ in range(warmup):
            next(it)
        tokens = seqs = 0
        t0 = time.perf_counter()
        for _ in range(batches):
            b = next(it)
            tokens += b["real_tokens"]
            seqs += len(b["index"])
        dt = time.perf_counter() - t0
    finally:
        if isinstance(it, Prefetcher):
            it.close()
    return {"batches": batches, "sequences": seqs, "tokens": tokens, "seconds": round(dt, 4),
            "tokens_per_s": tokens / max(dt, 1e-9), "sequences_per_s": seqs / max(dt, 1e-9)}


# ================================================================ the steps
class Loop:
    """What one process carries from step to step: model, optimizer, data iterator, training state (step,
    phase, data position, tokens, elapsed: saved in checkpoints) and the open metrics window."""

    def __init__(self, cfg: PretrainConfig, dist: Dist, device, folder: RunFolder, tok, caches: list, micro: int,
                 raw_model, model, optimizer, state: dict, window: torch.Tensor, precision: str, trackers=None):
        self.cfg, self.dist, self.device, self.tok = cfg, dist, device, tok
        self.folder, self.run_dir = folder, folder.path  # the run folder owns the checkpoints
        self.trackers = trackers  # engine.trackers.Trackers (--report-to) on rank 0: each record goes there too
        self.caches, self.micro = caches, micro
        self.raw_model, self.model, self.optimizer = raw_model, model, optimizer
        self.state, self.window, self.precision = state, window, precision
        self.obj = objective(cfg.objective)
        self.step = int(state["step"])
        self.phase2_steps = cfg.phase2_steps()
        self.phase1_end = cfg.steps - self.phase2_steps
        self.stop_at = min(cfg.steps, cfg.stop_after) if cfg.stop_after else cfg.steps
        self.time_up = False  # --max-minutes reached: the run is finished at this step
        self.eval_batches, self.eval_phase = [], None  # the held-out batches of the phase being trained (_open_data)
        self.last_train, self.last_eval = {}, {}
        self.window_time, self.tokens_window_start = 0.0, state["tokens"]  # training time only (no eval / saving)
        self.pbar = None
        self.heads_first = cfg.heads_first_steps()  # the first steps that train the heads on a frozen encoder
        self.frozen = False  # the encoder's state now (build_model leaves it trainable)

    def amp_ctx(self):
        return amp(self.device, self.precision)

    def _open_data(self, phase: int, position) -> None:
        """The phase's training batches from `position` on, and its held-out batches: evaluation is at the length
        being trained, so a two-phase run's last evaluations (and its final one) score text of the final length,
        the length downstream tasks read, while the first phase's curve scores the length it learns from."""
        self._close_data()
        self.cache = self.caches[0] if phase == 1 else self.caches[-1]
        if self.dist.main and self.eval_phase != phase:
            self.eval_batches, self.eval_phase = eval_batches(self.cache, self.cfg, self.micro), phase
        items = training_batches(self.cache, self.cfg, self.obj, self.step, position, self.dist.rank,
                                 self.dist.world_size, self.micro, pin=self.device.type == "cuda")
        self.it = Prefetcher(items, self.cfg.prefetch) if self.cfg.prefetch > 0 else items

    def _close_data(self) -> None:
        if isinstance(getattr(self, "it", None), Prefetcher):
            self.it.close()
        self.it = None

    def _phase2_due(self) -> bool:
        return self.state["phase"] == 1 and self.step >= self.phase1_end and bool(self.phase2_steps)

    def run(self, stop: StopFlag) -> str:
        """Train until `stop_at` or a stop request; returns why it stopped: '' (reached stop_at) or the
        error that run.json records for a cancelled run."""
        cfg = self.cfg
        if self._phase2_due():
            self.state["phase"], self.state["position"] = 2, None
        self._open_data(self.state["phase"], self.state["position"])
        self.pbar = Progress(cfg.steps, "pretrain", "step", initial=self.step, enabled=self.dist.main and not cfg.quiet)
        try:
            while self.step < self.stop_at and not self.time_up:
                if self._one_step(stop):
                    return f"cancelled by {stop.name()} at step {self.step}; continue with --resume"
            return ""
        finally:
            self._close_data()
            self.pbar.close()

    def _one_step(self, stop: StopFlag) -> bool:
        """One optimizer step and what follows it (metrics, evaluation, checkpoint); True when asked to stop."""
        cfg = self.cfg
        t_step = time.time()
        if self._phase2_due():
            self.state["phase"], self.state["position"] = 2, None
            self._open_data(2, None)
            log(f"step {self.step}: phase 2 at sequence length {cfg.phase2_seq_len}", cfg, self.dist)
        self._freeze_for_step()
        lr, grad_norm = self._optimizer_step()
        at_log = self.step % cfg.log_every == 0 or self.step == self.stop_at
        if self.device.type == "cuda" and at_log:
            torch.cuda.synchronize()
        dt = time.time() - t_step
        self.state["elapsed"] = float(self.state["elapsed"]) + dt
        self.window_time += dt
        self.time_up = self._time_up(at_log)
        save_due = (cfg.save_every and self.step % cfg.save_every == 0) or self.step == self.stop_at or self.time_up
        if (at_log or save_due) and not bool(torch.isfinite(self.window).all()):
            # diverged: stop before the NaN reaches a checkpoint (the last one saved stays the last finite one)
            raise EngineError(f"loss became NaN or inf at step {self.step} (lr {lr:.3g}); lower --lr or raise --warmup, "
                              f"then start again or --resume from the last checkpoint")
        if at_log or self.time_up:  # all ranks reduce at the same steps (time_up is agreed at log steps under DDP)
            self._log_window(lr, grad_norm)
        if self.pbar is not None:  # (None before `run` opens it)
            self.pbar.update(1)
        stop_now = self._stop_requested(stop, at_log)
        if (cfg.eval_every and self.step % cfg.eval_every == 0) or self.step == cfg.steps or self.time_up:
            self._evaluate()
        if save_due or stop_now:
            self.folder.save(self.raw_model, self.tok, self.optimizer, self.state, self.window, cfg, self.dist)
        return stop_now

    def _freeze_for_step(self) -> None:
        """The encoder frozen during the heads-first steps, trainable after them (decided by the step alone, so a
        resume inside or after them freezes as the straight run did). DistributedDataParallel registers the
        parameters that need a gradient when it wraps the model, so the model is wrapped again at each change."""
        frozen = self.step < self.heads_first
        if frozen == self.frozen:
            return
        set_encoder_frozen(self.raw_model, frozen)
        self.frozen = frozen
        if self.dist.enabled:
            self.model = wrap_model(self.raw_model, self.cfg, self.dist, self.device)
        if frozen:
            log(f"steps {self.step + 1}-{self.heads_first}: the heads only, on the frozen encoder (--heads-first)", self.cfg, self.dist)
        elif self.step:
            log(f"step {self.step + 1}: the whole model trains", self.cfg, self.dist)

    def _optimizer_step(self):
        """grad_accum micro-batches, clipping, AdamW; returns (lr, grad norm before clipping)."""
        cfg, dist = self.cfg, self.dist
        lr = lr_at(self.step, cfg)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        torch.manual_seed(mix_seed(cfg.seed, self.step, dist.rank, 1))  # dropout: reproducible on resume
        for m in range(cfg.grad_accum):
            sync = self.model.no_sync() if dist.enabled and m < cfg.grad_accum - 1 else contextlib.nullcontext()
            with sync:  # gradients are all-reduced on the last micro-batch only
                loss, sums = forward_loss(self.model, self._micro_batch(), self.obj, self.device, self.amp_ctx())
                (loss / cfg.grad_accum).backward()
            self.window += sums
        if cfg.max_grad_norm > 0:
            grad_norm = torch.nn.utils.clip_grad_norm_(self.raw_model.parameters(), cfg.max_grad_norm)
        else:
            grad_norm = torch.zeros(())
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        self.state["step"] = self.step
        return lr, grad_norm

    def _micro_batch(self) -> dict:
        """The next micro-batch with its labels (`training_batches`); its position is the data position now."""
        batch = next(self.it)
        self.state["position"] = batch["position"]
        return batch

    def _log_window(self, lr: float, grad_norm) -> None:
        """Append the training record of the window since the last one (means over its steps) and reset it."""
        cfg, state = self.cfg, self.state
        all_reduce_(self.dist, self.window)
        sums = sums_of(self.window)
        state["tokens"] = int(state["tokens"]) + int(sums["tokens"])
        rec = {"step": self.step, "split": "train", "tokens": state["tokens"], **self.obj.record(sums),
               "lr": lr, "grad_norm": float(grad_norm), "phase": state["phase"],
               "tokens_per_s": (state["tokens"] - self.tokens_window_start) / max(self.window_time, 1e-9),
               "elapsed": round(state["elapsed"], 3)}
        self.window.zero_()
        self.window_time, self.tokens_window_start = 0.0, state["tokens"]
        self.last_train = rec
        if self.dist.main:
            self._record(rec)
            if self.pbar is not None:
                key = f"{self.obj.token}_loss"
                self.pbar.note(loss=f"{rec['loss']:.3f}", **{key: f"{rec[key]:.3f}"})

    def _time_up(self, at_log: bool) -> bool:
        """--max-minutes: has the training time reached the budget? (rank 0's clock decides, at log steps under DDP,
        so every rank stops at the same step)"""
        if not self.cfg.max_minutes:
            return False
        up = float(self.state["elapsed"]) >= 60.0 * self.cfg.max_minutes
        if not self.dist.enabled:
            return up
        if not at_log:
            return False
        flag = torch.tensor([1.0 if up else 0.0], device=self.device)
        torch.distributed.broadcast(flag, 0)
        return bool(flag.item())

    def _stop_requested(self, stop: StopFlag, at_log: bool) -> bool:
        """A signal on any rank (every rank must agree; the all-reduce syncs the GPU, so only at log steps)."""
        stop_now = stop.signal is not None
        if not self.dist.enabled:
            return stop_now
        if not at_log:
            return False
        flag = torch.tensor([1.0 if stop_now else 0.0], device=self.device)
        all_reduce_(self.dist, flag, op=torch.distributed.ReduceOp.MAX)
        return bool(flag.item())

    def _evaluate(self) -> None:
        """Held-out evaluation on rank 0, on the unwrapped model."""
        if self.dist.main and self.eval_batches:
            self.last_eval = {"step": self.step, "split": "eval",
                              **evaluate(self.raw_model, self.eval_batches, self.obj, self.device, self.amp_ctx),
                              "eval_seq_len": int(self.cache.config["seq_len"]), "tokens": self.state["tokens"]}
            self._record(self.last_eval)
        self.dist.barrier()

    def _record(self, rec: dict) -> None:
        """Append a record to metrics.jsonl (rank 0) and hand it to the trackers (--report-to; they never raise)."""
        runs.append_metrics(self.run_dir, rec)
        if self.trackers is not None:
            self.trackers.log_metrics(rec)


# ================================================================ one process's training
def summary(run_dir, status, step, cfg, last_train, last_ev) -> dict:
    return {"run_dir": run_dir, "status": status, "step": step, "steps": cfg.steps,
            "train": {k: v for k, v in last_train.items() if k not in ("split",)},
            "eval": {k: v for k, v in last_ev.items() if k not in ("split",)}}


def failure(e: BaseException) -> tuple:
    """(status, error) that run.json records for an exception that ends the training (the Status: engine.status)."""
    if isinstance(e, KeyboardInterrupt):
        return CANCELLED, "cancelled by the user (interrupted while saving?); continue with --resume"
    if as_engine_error(e) is not None:  # a user error, out of memory, a full disk: its one line
        return FAILED, str(as_engine_error(e))
    return FAILED, f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"


def train(plan, dist: Dist, device) -> dict:
    """Build (or restore) the model and optimizer, record the start in run.json, run the steps, record the end.
    `plan`: engine.pretraining.plan.Plan, what the run trains and where it starts, resolved before anything was written."""
    cfg, run_dir, ckpt, restart, tok, caches, micro = (plan.cfg, plan.run_dir, plan.checkpoint, plan.restart, plan.tokenizer,
                                                       plan.data, plan.micro)
    raw_model, mcfg, state, blob, init_info = build_model(cfg, tok, ckpt, device)
    optimizer = adamw(raw_model, cfg, device)
    window = torch.zeros(len(SUMS), dtype=torch.float64, device=device)  # the open metrics window (named SUMS)
    if blob is not None:
        optimizer.load_state_dict(blob["optimizer"])
        set_rng_state(blob["rng"])
        if dist.main:
            saved = blob["metrics_window"].to(device)  # a window saved before SUMS grew is its first entries
            window[:len(saved)] += saved
    model = wrap_model(raw_model, cfg, dist, device)
    precision = resolve_precision(cfg.precision, device)
    trackers = open_trackers(cfg.report_to if dist.main else None, run_dir, config_dict(cfg), {"kind": PRETRAIN.name})
    loop = Loop(cfg, dist, device, plan.run, tok, caches, micro, raw_model, model, optimizer, state, window, precision,
                trackers)
    if dist.main:
        before = runs.read_run_json(run_dir).get("training_version") if ckpt else TRAINING_VERSION
        runs.start_run(run_dir, PRETRAIN.name, config=config_dict(cfg), total_steps=int(cfg.steps),
                       training_version=TRAINING_VERSION if before == TRAINING_VERSION else "mixed",
                       tokenizer=str(run_dir / "tokenizer"), objective=cfg.objective, world_size=dist.world_size,
                       device=str(device), bf16=precision == "bf16", model=mcfg.to_dict(), parameters=raw_model.num_parameters(),
                       resumed_from=str(ckpt) if ckpt else None, init=init_info, corpus_fingerprint=plan.fingerprint)
    status, error = RUNNING, None
    stop = StopFlag().install()
    try:
        if dist.main and (ckpt is not None or restart):
            plan.run.rewind(loop.step)  # drop what was logged after the checkpoint (restart: all), partial saves
        if dist.main and loop.step >= cfg.steps:
            status = FINISHED
            log(f"run {run_dir} already finished at step {loop.step}; pass a larger --steps to train on", cfg, dist)
            return summary(run_dir, FINISHED.name, loop.step, cfg, {}, plan.run.last_eval())
        error = loop.run(stop) or None
        if error:
            status = CANCELLED
        elif loop.step >= cfg.steps or loop.time_up:
            status = FINISHED
            if loop.time_up and loop.step < cfg.steps:
                log(f"time budget of {cfg.max_minutes:g} minutes reached at step {loop.step} (--max-minutes)", cfg, dist)
        else:
            status, error = CANCELLED, f"stopped after step {loop.step} as asked (--stop-after); continue with --resume"
    except (KeyboardInterrupt, Exception) as e:
        status, error = failure(e)
        raise
    finally:
        stop.restore()
        trackers.close((FAILED if status is RUNNING else status).name)
        if dist.main and status is not RUNNING:
            try:
                runs.set_status(run_dir, status.name, error=error)
            except Exception:
                pass  # the disk may be full; the lock release below still tells the studio the process is gone
    return summary(run_dir, status.name, loop.step, cfg, loop.last_train, loop.last_eval)
