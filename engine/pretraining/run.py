"""Pre-training loop: MLM + NSP (BERT), MLM only (No NSP) and LTR (left-to-right LM), paper 3.1, A.2, 5.1.

`pretrain(PretrainConfig(...)) -> run_dir` and `python -m engine pretrain ...` (same settings as flags).

This module is the entry point: checks, the run lock, tokenizer and data, then the loop. The package
engine/pretraining/, by the paper's concepts: config.py (the settings, their defaults and checks: PretrainConfig),
instances.py (segment pairs, IsNext/NotNext, short sequences, the held-out documents), masking.py (80/10/10,
whole-word masking, the fixed held-out masking), cache.py (the memory-mapped store of instances and its key),
prepare.py (`python -m engine prepare`: a corpus of any size, streamed into shards), loop.py (model, optimizer,
steps, metrics, held-out evaluation), run_folder.py (run-folder checks, checkpoints, RNG state, signals), init.py
(`--init`: continued pre-training from a run, a checkpoint, a Hugging Face BERT folder or MiniLM, with its
architecture, vocabulary and weights; its defaults are CONTINUED_PRETRAINING in config.py). Beside it:
engine/optim.py (AdamW and the LR schedule), engine/distributed.py (torchrun ranks and devices).

What it does, per optimizer step:
- `grad_accum` micro-batches from `engine.pretraining.cache` (instances stored unmasked, masked at batch
  time with `engine.pretraining.masking.mask_batch`; the masking generator is seeded from (seed, step, micro-batch, rank), so it needs
  no saved state); the MLM head is evaluated only at the selected positions (`mlm_positions`);
  loss = mean MLM cross-entropy + mean NSP cross-entropy (`mlm+nsp`), MLM only (`mlm`), or, for `ltr`, a causal
  model (`config.causal=True`) predicting the next token at every real position (labels = inputs shifted left,
  no masking, no NSP head).
- AdamW (beta 0.9/0.999, eps 1e-6 as google-research/bert, weight decay 0.01 except LayerNorm weights and
  biases; fused on CUDA), gradient clipping, linear warmup then linear decay to 0, dropout (`--dropout`, the
  PretrainConfig default; the paper's is 0.1).
- Optionally a second phase at a longer sequence length for the last `phase2_fraction` of the steps (paper:
  90% of steps at 128, the last 10% at 512, to learn the position embeddings), on data built at that length.
- `--device auto`: CUDA when present, else CPU. `--precision auto`: bf16 autocast (weights and optimizer stay
  fp32) on CUDA and on CPUs with native bf16 units, where it is faster; fp32 on other CPUs. Under `torchrun` (env RANK,
  WORLD_SIZE, LOCAL_RANK) DistributedDataParallel (gloo on CPU, NCCL on GPU), each rank its own slice of every
  global batch; gradients are all-reduced once per optimizer step (`no_sync` on the other micro-batches);
  rank 0 writes run.json, metrics and checkpoints, with barriers around saves.

The run folder (see engine/runs.py):
- `run.json`: kind "pretrain", the full config, status, pid, times, versions, total_steps, tokenizer, error.
- `metrics.jsonl`: training records every `log_every` steps, `"split": "train"`: step, tokens (real tokens seen,
  all ranks), loss, mlm_loss, mlm_acc (for `ltr`: lm_loss, lm_acc, next-token), nsp_loss, nsp_acc (mlm+nsp
  only), lr, grad_norm, tokens_per_s, elapsed (seconds of training, summed over restarts); every window's
  numbers are means over the steps since the previous record. Held-out records every `eval_every` steps and at
  the end, `"split": "eval"` with keys prefixed `eval_`: eval_mlm_loss, eval_mlm_acc, eval_mlm_ppl,
  eval_mlm_mask_acc and eval_mlm_mask_baseline (the accuracy where the input is [MASK], so no copying, beside
  the most frequent token's share there: `engine.pretraining.evaluation.mask_position_accuracy`),
  eval_nsp_loss, eval_nsp_acc, eval_nsp_baseline (the best no-model rule on the same pairs,
  `evaluation.nsp_baseline`) (ltr: eval_lm_loss, eval_lm_acc, eval_lm_ppl), eval_loss, eval_instances,
  eval_seq_len. The held-out documents are chosen by a fixed seed and masked once with a fixed seed using the
  standard BERT masking (15%, 80/10/10) whatever the run's own masking, so every run is scored on the same
  positions; at the length being trained (eval_seq_len: a two-phase run switches to the second length with
  its training data, so its final evaluation scores text of the length downstream tasks read).
- `tokenizer/`: the WordPiece vocabulary (trained on the corpus unless `--tokenizer` is given), reused on resume.
- `checkpoints/step-N/`: Hugging Face layout (config.json, model.safetensors, vocab.txt) + training_state.json
  (step, phase, data position, tokens, elapsed) + training_state.pt (optimizer, scheduler, RNG states, the
  open metrics window), read back with `torch.load(weights_only=True)`. Written into a temporary folder and
  published with a COMPLETE marker, every `save_every` steps, at the end, and on SIGTERM / Ctrl-C.
`resume=True` continues from the last complete checkpoint: same weights, optimizer, data order and RNG, so N
straight steps and N/2 + resume + N/2 end in the same weights and the same metrics (metrics.jsonl is cut back to
the checkpoint's step first).
Under `torchrun --max-restarts N` (one node, or `--nnodes` with a c10d rendezvous) a worker that dies makes torchrun
start the group again; the restart runs the same command, sees TORCHELASTIC_RESTART_COUNT > 0 and continues the run
from its last complete checkpoint by itself (`run_folder.elastic_restart`), so no `--resume` is typed and no step is
logged twice. `--report-to tensorboard,mlflow` also sends every record and the settings to those trackers
(engine/trackers.py).

Departures from the paper, on purpose (PretrainConfig's defaults are the paper's; the recipes that depart from them,
and why, are in engine/recipes.py):
- The classroom recipe, what the command trains when no recipe is named, scales the paper's schedule down for a tiny
  BERT on a CPU: a larger learning rate, short sequences then longer ones, more of the tokens masked, no dropout,
  a smaller vocabulary. Warmup is given in steps (>= 1) or as a fraction of the steps (< 1).
- The vocabulary is trained on the corpus (paper: on BooksCorpus + Wikipedia), on all of its documents, held-out
  ones included.
- Masking is dynamic (a new draw per batch), as RoBERTa, instead of the released code's static dupe-factor
  copies; `dupe_factor` still controls how many segmentations of each document are built.
- For `mlm` and `ltr` the model has no NSP head (the paper's No-NSP models were not trained with one), so
  their checkpoints load in `transformers` with a freshly initialised `cls.seq_relationship`; their pooler,
  which nothing trains without NSP, is frozen at its initialisation.
- `batch_size` is the global batch (sequences per optimizer step over all ranks and accumulation steps), so
  the same command means the same training under torchrun; it must divide by world size x grad_accum.
"""
import json
import shutil
import time
from dataclasses import fields
from pathlib import Path

from engine import cli, recipes, runs
from engine.device import resolve_device
from engine.distributed import Dist, dist_from_env, group_restart_count, setup, teardown, broadcast
from engine.errors import EngineError, quoted
from engine.objectives import OBJECTIVES, objective
from engine.status import CANCELLED, FINISHED, status_of
from engine.pretraining.config import PretrainConfig
from engine.pretraining.init import ARCH_FIELDS, conflict, init_tokenizer, read_init_settings
from engine.pretraining.loop import log, train
from engine.pretraining.plan import PREPARED_FIELDS, Plan, resolve, with_prepared_data  # noqa: F401 (re-exported)
from engine.pretraining.run_folder import RunFolder, elastic_restart, resolve_out
from engine.pretraining.cache import token_info
from engine.pretraining.prepare import build_pretraining_data, documents_key, documents_settings, prepared_key
from engine.tokenizer import Tokenizer, corpus_fingerprint, train_tokenizer_cached

EVAL_SPLIT_SEED = 0  # which documents are held out
PREPARED = "prepared-"  # run.json's corpus_fingerprint of a run's data: PREPARED + the key of its data folder


def data_settings(cfg: PretrainConfig, seq_len: int) -> dict:
    """The instance settings of the run's data at one length (`build_pretraining_data`'s, less where it is kept,
    the corpus's name and the model's positions)."""
    return dict(seq_len=seq_len, objective=cfg.objective, seed=cfg.seed, short_seq_prob=cfg.short_seq_prob,
                dupe_factor=cfg.dupe_factor, eval_fraction=cfg.eval_fraction, eval_seed=EVAL_SPLIT_SEED,
                input_format=cfg.input_format)


def tokenizer_and_data(cfg: PretrainConfig, docs, run_dir: Path, dist: Dist, resuming: bool):
    """The run's tokenizer (saved to run_dir/tokenizer) and its data: (tokenizer, [a PretrainingCache per phase]).
    `--data`: the prepared folder; `--corpus`: the documents `docs` prepared in one block per phase's length
    (`build_pretraining_data`, into the data cache), rank 0 preparing, the others opening what it wrote after a
    barrier (the class preparation prepares it ahead, engine/classroom.py)."""
    tok_dir = run_dir / "tokenizer"
    if resuming:
        if not (tok_dir / "vocab.txt").is_file():
            raise EngineError(f"{tok_dir} is missing, so the run cannot continue with its own vocabulary; restore it or start a new run")
    elif dist.main:  # rank 0 makes the run's tokenizer (under the run lock), the other ranks read it
        if cfg.data:
            from engine.pretraining.prepare import prepared_tokenizer_dir
            tok = Tokenizer.from_file(prepared_tokenizer_dir(cfg.data))  # the vocabulary the shards are made with
        elif cfg.init:
            tok = init_tokenizer(cfg.init)
        elif cfg.tokenizer:
            tok = Tokenizer.from_file(cfg.tokenizer)
        else:
            log(f"training a {cfg.vocab_size}-token WordPiece vocabulary on {len(docs)} documents ...", cfg, dist)
            # cached by corpus and settings: the pieces' ids are sorted (tokenizer.canonical_order), but on a small
            # corpus the trainer's ties can still change which pieces it learns (huggingface/tokenizers#1794), and runs
            # with the same settings should share one vocabulary
            tok_cache = Path(cfg.cache_dir).expanduser() / "tokenizers" if cfg.cache_dir else None
            tok = train_tokenizer_cached(docs, vocab_size=cfg.vocab_size, lowercase=not cfg.cased, cache_dir=tok_cache)
        if tok_dir.exists():
            shutil.rmtree(tok_dir)  # left by a start that died before run.json (see pretrain_run.run_entries)
        tok.save(tok_dir)
    dist.barrier()
    if resuming or not dist.main:
        tok = Tokenizer.from_file(tok_dir)
    if cfg.data:
        from engine.pretraining.prepare import open_prepared
        cache = open_prepared(cfg.data)
        if cache.config["vocab_sha256"] != token_info(tok)["vocab_sha256"]:
            raise EngineError(f"the run's tokenizer ({tok_dir}) is not the vocabulary {cfg.data} was prepared with; resume with the run's own data")
        return tok, [cache]
    caches = []
    lengths = [cfg.seq_len] + ([cfg.phase2_seq_len] if cfg.phase2_seq_len else [])
    for T in lengths:
        kw = dict(data_settings(cfg, T), cache_dir=cfg.cache_dir, max_positions=cfg.max_positions, corpus_name=str(cfg.corpus))
        if dist.main:
            c = build_pretraining_data(docs, tok, **kw)
            if not c.from_cache:
                log(f"prepared pre-training data at length {T}: {c.train.num_instances} training, "
                     f"{c.eval.num_instances if c.eval else 0} held-out instances ({c.path})", cfg, dist)
        dist.barrier()
        if not dist.main:
            c = build_pretraining_data(docs, tok, **kw)  # opens the folder rank 0 wrote
        caches.append(c)
    return tok, caches


def pretrain(cfg: PretrainConfig) -> Path:
    """Pre-train into `cfg.out` (see the module docstring); returns the run folder."""
    return _pretrain(cfg)["run_dir"]


def _pretrain(cfg: PretrainConfig) -> dict:
    """Check, join the process group (under torchrun), then `_pretrain_in_group`; returns the summary `main` prints."""
    cfg = resolve(cfg)  # once, before anything is written (engine/pretraining/plan.py)
    dist = dist_from_env()
    run_dir = resolve_out(cfg)
    device = resolve_device(cfg.device, dist.local_rank if dist.enabled else None)  # a rank takes its local GPU
    setup(dist, device, cfg.num_threads)  # first: whether torchrun restarted the group is known only to all ranks
    try:
        return _pretrain_in_group(cfg, dist, device, run_dir)
    finally:
        teardown(dist)


def _pretrain_in_group(cfg: PretrainConfig, dist: Dist, device, run_dir: Path) -> dict:
    """Lock the run folder (a restart under torchrun --max-restarts continues its run), prepare tokenizer and data, train."""
    from engine.corpora import load_corpus

    restarts = group_restart_count(dist, device)
    ckpt, restart, lock = None, False, None
    if dist.main:
        cfg = elastic_restart(cfg, run_dir, restarts)  # torchrun --max-restarts: a restart continues the run it restarts
        ckpt, restart = RunFolder(run_dir).start(cfg)  # read-only checks: collisions, resume
    docs = load_corpus(cfg.corpus) if not cfg.data else []  # EngineError when missing or empty
    for w in getattr(docs, "info", {}).get("warnings", []):
        log(f"warning: {w}", cfg, dist)
    if dist.main and (ckpt is not None or restart):
        check_same_corpus(run_dir, cfg, docs, ckpt is not None)
    if not cfg.data and len(docs) < objective(cfg.objective).min_documents:
        raise EngineError(f"corpus {quoted(cfg.corpus)} has a single document; {cfg.objective} needs at least 2 (NotNext takes B from another document): add documents (blank lines separate them in a .txt) or use --objective mlm")
    created_dir = not run_dir.exists()
    if dist.main:
        lock = runs.RunLock(run_dir).acquire()  # refuses a second live writer
    fresh = ckpt is None and not restart
    try:
        if dist.main and fresh and RunFolder(run_dir).entries():  # another start slipped in before our lock
            raise EngineError(f"run folder {run_dir} already holds a run; continue it with --resume, or choose another --out")
        obj = broadcast(dist, [str(ckpt) if ckpt else None, restart])  # every rank learns whether rank 0 resumes
        ckpt, restart = (Path(obj[0]) if obj[0] else None), bool(obj[1])
        fresh = ckpt is None and not restart
        micro = _micro_batch_size(cfg, dist)
        if restart:
            log(f"{run_dir} has no complete checkpoint yet: starting it again from step 0 with its own settings", cfg, dist)
        reuse_tok = ckpt is not None or (restart and (run_dir / "tokenizer" / "vocab.txt").is_file())
        tok, caches = tokenizer_and_data(cfg, docs, run_dir, dist, resuming=reuse_tok)
        for c in caches:
            if c.train.num_instances < micro * dist.world_size:
                raise EngineError(f"the corpus gives only {c.train.num_instances} training instances, fewer than one batch of {micro * dist.world_size}; lower --batch-size or use a larger corpus")
        plan = Plan(cfg, RunFolder(run_dir), ckpt, restart, micro, tok, caches, fingerprint=PREPARED + caches[0].key)
        return train(plan, dist, device)
    except BaseException:
        # a new run that failed before it wrote run.json leaves nothing behind
        if dist.main and fresh and not (run_dir / runs.RUN_JSON).exists():
            if lock is not None:
                lock.release()
            shutil.rmtree(run_dir if created_dir else run_dir / "tokenizer", ignore_errors=True)
        raise
    finally:
        if lock is not None:
            lock.release()


def _micro_batch_size(cfg: PretrainConfig, dist: Dist) -> int:
    """Sequences per forward pass on one rank: the global batch over ranks and accumulation steps."""
    micro = cfg.batch_size // (dist.world_size * cfg.grad_accum)
    if micro * dist.world_size * cfg.grad_accum != cfg.batch_size:
        raise EngineError(f"--batch-size {cfg.batch_size} does not divide into {dist.world_size} process(es) x {cfg.grad_accum} accumulation steps; use a multiple of {dist.world_size * cfg.grad_accum}")
    return micro


# ================================================================ CLI
def build_parser():
    """The flags of `python -m engine pretrain`: PretrainConfig's settings (engine/cli.py), --recipe and --classroom."""
    from engine.measured import fact
    bf16, fp32 = fact("classroom_run.minutes_bf16"), fact("classroom_run.minutes_fp32")
    classroom = PretrainConfig.classroom()
    ap = cli.parser(PretrainConfig,
                    "Pre-train BERT (" + ", ".join(o.label for o in OBJECTIVES.values()) + ") into a run folder. The "
                    "defaults shown are the paper's; a named recipe (--recipe) lays its settings over them and every "
                    "flag given lays over the recipe. Without --recipe: the classroom recipe (a tiny BERT on "
                    f"{classroom.corpus} that learns to read context: {bf16.text()} on a 2-core CPU with bf16, "
                    f"{fp32.text()} in fp32, measured), or with --init the continued pre-training. --resume continues a "
                    "run with its own saved settings.")
    ap.add_argument("--recipe", choices=recipes.names(), help="lay a named recipe over the defaults (engine/recipes.py): "
                    + recipes.help_text())
    ap.add_argument("--classroom", action="store_true", help=f"the same as --recipe {recipes.CLASSROOM.name}")
    overlay = recipes.settings(recipes.CLASSROOM.name)
    for action in ap._actions:  # what the classroom recipe gives, beside the paper's default
        if action.dest in overlay and action.help:
            action.help = action.help.replace("(default ", f"(without --recipe {cli.text(overlay[action.dest] or 0)}; paper ")
    return ap


def data_fingerprint(saved: str, cfg: PretrainConfig, corpus_fp, tok_dir: Path):
    """What a run.json corpus_fingerprint `saved` must be for `cfg`'s data as read now: PREPARED + the key of the
    first phase's data folder (`--data`: `prepared_key`; `--corpus`: `documents_key` of the corpus's fingerprint
    `corpus_fp`, the vocabulary in `tok_dir` and the settings), without preparing anything. None when it cannot be
    known: a --corpus run whose vocabulary is gone (a restart from step 0 then trains one afresh).
    Compatibility: a run started before the one data builder, from --corpus, recorded `corpus_fingerprint` of its
    documents itself (no PREPARED prefix): that is what it is checked against (its data are prepared again in one
    block, the same instances as then)."""
    if cfg.data:
        return PREPARED + prepared_key(cfg.data)
    if not str(saved).startswith(PREPARED):  # the old --corpus fingerprint (engine.tokenizer.corpus_fingerprint)
        return corpus_fp
    if not (Path(tok_dir) / "vocab.txt").is_file():
        return None
    settings = documents_settings(Tokenizer.from_file(tok_dir), **data_settings(cfg, cfg.seq_len))
    return PREPARED + documents_key(settings, corpus_fp)


def check_same_corpus(run_dir: Path, cfg: PretrainConfig, docs, has_checkpoint: bool) -> None:
    """A resume trains on the data the run started with: run.json's corpus_fingerprint must be that of the data as
    read now (`data_fingerprint`: a file overwritten in place, an upload of the same name, data prepared again from
    other text). A run that recorded none cannot be checked: refused when there is a checkpoint to continue (a
    restart from step 0 records the fingerprint afresh)."""
    saved = runs.read_run_json(run_dir).get("corpus_fingerprint")
    if saved is None and has_checkpoint:
        raise EngineError(f"cannot resume: {run_dir}/{runs.RUN_JSON} records no corpus fingerprint, so it cannot be checked "
                          f"that {cfg.corpus} is the text the run was trained on; start a new run")
    fingerprint = None if saved is None else data_fingerprint(saved, cfg, None if cfg.data else corpus_fingerprint(docs),
                                                              run_dir / "tokenizer")
    if fingerprint is not None and saved != fingerprint:
        raise EngineError(f"cannot resume: the corpus {cfg.corpus} changed since the run started (fingerprint {fingerprint}, "
                          f"the run's {saved}); restore the original text, or start a new run on the new one")


def config_from_args(given: dict) -> PretrainConfig:
    """A PretrainConfig from the flags actually given, laid over: with --resume, the run's run.json; otherwise the
    named recipe (`--recipe`, engine/recipes.py; none named: `recipes.default_recipe`, the classroom run, or with
    --init the continued pre-training). A recipe's value never changes the meaning of a flag given beside it."""
    given = dict(given)
    name = recipe_named(given)
    if given.get("resume"):
        if name:
            raise EngineError(f"--recipe {name} with --resume: a resumed run keeps its own settings; drop --recipe")
        base = resumed_settings(given)
    else:
        name = name or recipes.default_recipe(given.get("init"))
        recipes.check_init(name, given.get("init"))
        base = recipes.settings(name)
        if given.get("init"):
            check_init_flags(given, base)
        if given.get("data") and "phase2_seq_len" not in given:
            base["phase2_seq_len"] = None  # prepared data has one length, its own: the recipe's second phase does not apply
    cfg = with_prepared_data(PretrainConfig(**{**base, **given}), tuple(given) if not given.get("resume") else ())
    # (a queued job's command line names every setting: --eval-every at its default is not a request)
    if given.get("eval_every") and given["eval_every"] != base.get("eval_every", PretrainConfig.eval_every) \
            and cfg.eval_fraction == 0:
        raise EngineError(f"--eval-every {given['eval_every']} asks for held-out evaluation, but --eval-fraction 0 holds out "
                          f"no documents, so evaluation is off; drop --eval-every or hold some out (e.g. --eval-fraction 0.05)")
    return cfg


def recipe_named(given: dict):
    """The recipe the flags name (`--recipe NAME`, or `--classroom`, the same as `--recipe classroom`), popped from
    `given`; None when none is named."""
    name, classroom = given.pop("recipe", None), given.pop("classroom", None)
    if classroom:
        if name and name != recipes.CLASSROOM.name:
            raise EngineError(f"--classroom is --recipe {recipes.CLASSROOM.name}, and --recipe {name} names another; give one")
        name = recipes.CLASSROOM.name
    if name is not None:
        recipes.recipe(name)  # EngineError naming the recipes
    return name


def check_init_flags(given: dict, base: dict) -> None:
    """With --init the model decides its size and vocabulary: a flag that says otherwise is refused."""
    init = given["init"]
    if "preset" in given and given["preset"] != base.get("preset", PretrainConfig.preset):
        raise EngineError(f"--preset conflicts with --init {init}: the init decides the model's size; drop --preset")
    if given.get("tokenizer"):
        raise EngineError(f"--tokenizer conflicts with --init {init}: the init brings its own vocabulary; drop --tokenizer")
    own = read_init_settings(init)
    for name in ARCH_FIELDS:  # any given flag that differs, even one equal to a recipe's value
        if name in given and given[name] != own[name]:
            raise EngineError(conflict(name, given[name], own[name], init))


def resumed_settings(given: dict) -> dict:
    """The settings of the run --resume continues (runtime ones too: checkpoint cadence, cache, device...), as its
    run.json saved them; with no run to read (preflight refuses it) the classroom recipe's."""
    known = {f.name for f in fields(PretrainConfig)}
    probe = PretrainConfig(**{k: v for k, v in given.items() if k in ("out", "name")})
    run_dir = resolve_out(probe)
    saved = (runs.read_run_json(run_dir).get("config") or {}) if run_dir.is_dir() else {}
    if not saved:
        return recipes.settings(recipes.CLASSROOM.name)
    base = {k: v for k, v in saved.items() if k in known and k not in ("out", "name", "resume", "stop_after")}
    if "mask_ratios" in base:
        base["mask_ratios"] = tuple(base["mask_ratios"])
    if isinstance(base.get("compile"), bool):  # saved before --compile took auto / on / off
        base["compile"] = "on" if base["compile"] else "off"
    return base


def main(argv) -> int:
    args = cli.given(PretrainConfig, build_parser(), argv)
    cfg = config_from_args(args)
    t0 = time.time()
    result = _pretrain(cfg)
    if dist_from_env().main:
        out = dict(result, run_dir=str(result["run_dir"]), seconds=round(time.time() - t0, 1))
        print(json.dumps(out, default=float), flush=True)
    ended = status_of(result["status"])
    return 0 if ended is FINISHED or (ended is CANCELLED and cfg.stop_after) else 130
